"""``odf-chain init``: create a dataset (its Seed block), with a schema if one is given."""

from __future__ import annotations

import argparse

from odf_chain.cli.common import EXIT_OK, SINGLE_WRITER_HELP, UsageError, examples
from odf_chain.errors import SchemaError
from odf_chain.format.algorithms import BLAKE3, SHA3_256


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "init",
        help="create a dataset (writes the Seed block)",
        description="Create a dataset: its directory (or object-store prefix) and its first "
        "block, the Seed that names it for its whole life; with --schema, its data schema "
        "declared up front from an Avro, DataMine or Parquet file.",
        epilog=examples(
            "odf-chain init warehouse/sensors",
            "odf-chain init warehouse/sensors --hash sha3-256 --schema reading.avsc",
            "odf-chain init s3://bucket/sensors",
        ),
    )
    parser.add_argument("dir", help="dataset directory or pyarrow.fs URI to create")
    parser.add_argument(
        "--hash",
        choices=[BLAKE3, SHA3_256],
        default=BLAKE3,
        help="hash for blocks and slices (sha3-256 for ODF interoperability)",
    )
    parser.add_argument(
        "--schema",
        metavar="FILE",
        help="declare the data schema up front: .avsc (Avro), .json (DataMine) or .parquet",
    )
    parser.add_argument("--table", help="which table of a DataMine document")
    parser.add_argument(
        "--key-file",
        metavar="FILE",
        help="keep the dataset id's private key in FILE (new, outside the dataset, mode 0600) "
        "to sign receipts",
    )
    parser.add_argument("--single-writer", action="store_true", help=SINGLE_WRITER_HELP)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from odf_chain.dataset import Dataset
    from odf_chain.schema_files import load_schema_file
    from odf_chain.slices import with_system_fields
    from odf_chain.state import Vocabulary

    if args.table and not args.schema:
        raise UsageError("--table needs --schema")
    schema = load_schema_file(args.schema, table=args.table) if args.schema else None
    if schema is not None:
        # Refuse a schema the dataset cannot take (a reserved column name, no columns, a type
        # Parquet cannot store) before anything is created: no half-made dataset is left behind.
        try:
            with_system_fields(schema, Vocabulary())
        except SchemaError as exc:
            raise SchemaError(f"{args.schema}: {exc}") from None
    dataset = Dataset.create(
        args.dir, hash=args.hash, key_file=args.key_file, single_writer=args.single_writer
    )
    if schema is not None:
        dataset.set_schema(schema)
    state = dataset.state
    print(f"created {dataset.path}")
    print(f"dataset id  {state.dataset_id}")
    print(f"hash        {state.hash_algorithm}")
    if args.key_file is not None:
        print(f"key file    {args.key_file} (mode 0600; signs receipts; keep it safe and apart)")
    if schema is not None:
        print(f"schema      {len(state.schema)} fields, declared at block {state.sequence_number}")
    print(f"head        {state.head}")
    return EXIT_OK
