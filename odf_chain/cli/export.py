"""``odf-chain export datahub|openlineage``: the schema and field lineage for DataHub or
OpenLineage. Each target's writer is imported when it is asked for."""

from __future__ import annotations

import argparse
import sys

from odf_chain.cli.common import DIR_HELP, EXIT_OK, REF_HELP, examples

TARGETS = (
    ("datahub", "a DataHub metadata file (MCP JSON: schemaMetadata, upstreamLineage)"),
    ("openlineage", "OpenLineage run events (JSON lines, columnLineage 1-2-0)"),
)

INDIRECT_HELP = {
    "datahub": "leave INDIRECT inputs (join keys, filters, group-by, sort) out of the field "
    "lineage; upstreams still name their datasets",
    "openlineage": "list INDIRECT inputs (join keys, filters, group-by, sort) in the "
    "columnLineage facet's dataset-level list, not under each field",
}


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "export",
        help="write the schema and field lineage for DataHub or OpenLineage",
        description="The dataset's schema and field lineage as of a block, in the form DataHub "
        "or OpenLineage reads: to stdout, or to a file given with -o (written whole or not at "
        "all).",
        epilog=examples(
            "odf-chain export datahub DIR -o metadata.json",
            "odf-chain export openlineage DIR --at 5 | jq .eventType",
        ),
    )
    targets = parser.add_subparsers(dest="target", required=True, metavar="TARGET")
    for target, what in TARGETS:
        sub = targets.add_parser(
            target,
            help=what,
            description=f"Write {what} of the dataset as of --at (default: head).",
            epilog=examples(
                f"odf-chain export {target} DIR -o {target}.json",
                f"odf-chain export {target} DIR --at 2026-11-24T10:00:00Z > {target}.json",
            ),
        )
        sub.add_argument("dir", help=DIR_HELP)
        sub.add_argument(
            "-o",
            "--output",
            metavar="FILE",
            help="write to FILE (replaced all at once), not stdout ('-': stdout)",
        )
        sub.add_argument(
            "--at", default="head", metavar="REF", help=f"block to export as of: {REF_HELP}"
        )
        sub.add_argument(
            "--no-indirect",
            dest="indirect",
            action="store_false",
            help=INDIRECT_HELP[target],
        )
        if target == "datahub":
            sub.add_argument("--platform", default="odf", help="DataHub platform (default odf)")
            sub.add_argument("--env", default="PROD", help="DataHub environment (default PROD)")
        else:
            sub.add_argument("--namespace", default=None, help="OpenLineage job namespace")
        sub.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from odf_chain.dataset import Dataset

    dataset = Dataset.open(args.dir)
    if args.target == "datahub":
        from odf_chain.export.datahub import datahub_text

        text, count = datahub_text(
            dataset, at=args.at, platform=args.platform, env=args.env, indirect=args.indirect
        )
        what = "metadata change proposals"
    else:
        from odf_chain.export.openlineage import openlineage_text

        text, count = openlineage_text(
            dataset, at=args.at, namespace=args.namespace, indirect=args.indirect
        )
        what = "OpenLineage run events"
    if args.output in (None, "-"):
        sys.stdout.write(text)
        return EXIT_OK
    from odf_chain.export.chain_view import write_text

    write_text(args.output, text)
    print(f"wrote {count} {what} to {args.output}")
    return EXIT_OK
