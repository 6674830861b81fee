"""``odf-chain export datahub|openlineage``: the schema and field lineage for DataHub or
OpenLineage. Each target's writer is imported when it is asked for."""

from __future__ import annotations

import argparse

from odf_chain.cli.common import DIR_HELP, EXIT_OK, REF_HELP

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
        "export", help="write the schema and field lineage for DataHub or OpenLineage"
    )
    targets = parser.add_subparsers(dest="target", required=True, metavar="TARGET")
    for target, what in TARGETS:
        sub = targets.add_parser(target, help=what)
        sub.add_argument("dir", help=DIR_HELP)
        sub.add_argument("-o", "--output", required=True, metavar="FILE", help="file to write")
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
        from odf_chain.export.datahub import write_datahub_file

        count = write_datahub_file(
            dataset,
            args.output,
            at=args.at,
            platform=args.platform,
            env=args.env,
            indirect=args.indirect,
        )
        print(f"wrote {count} metadata change proposals to {args.output}")
    else:
        from odf_chain.export.openlineage import write_openlineage_file

        count = write_openlineage_file(
            dataset, args.output, at=args.at, namespace=args.namespace, indirect=args.indirect
        )
        print(f"wrote {count} OpenLineage run events to {args.output}")
    return EXIT_OK
