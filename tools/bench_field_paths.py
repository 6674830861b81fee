#!/usr/bin/env python3
"""Benchmark: Avro -> DataHub v2 field paths, odf_chain against DataHub's own converter.

    python tools/bench_field_paths.py [--repeat 7] [--fields 10000] [--levels 100]

Side by side in one process, on the same JSON text: ``avro_field_paths`` (and ``avro_fields``,
which also builds the per-field facts) against acryl-datahub's ``avro_schema_to_mce_fields``,
which parses with avro-python and builds DataHub's SchemaField objects. Both start from the text,
so both pay for parsing and validation. Two schemas: (a) one record with N fields of mixed
types (primitives, optional unions, logical types, arrays, maps, enums, docs, defaults), and
(b) N records nested in each other, each level with a few fields of its own. The outputs are
checked to be equal before timing. Reports medians over the repetitions and the ratio
(DataHub time / ours).

acryl-datahub is a test-only dependency; the script says so and stops if it is missing.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

from odf_chain.schema.avro_paths import avro_field_paths, avro_fields

_KINDS: list[Any] = [
    "string",
    "long",
    ["null", "string"],
    "double",
    ["null", "long"],
    {"type": "int", "logicalType": "date"},
    "boolean",
    {"type": "long", "logicalType": "timestamp-millis"},
    {"type": "array", "items": "string"},
    {"type": "map", "values": "double"},
    "Color",  # the enum defined by the first field
    ["null", "int", "string"],
]


def wide_record(n: int) -> dict:
    fields: list[dict] = [
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["R", "G", "B"]}}
    ]
    for i in range(1, n):
        field: dict[str, Any] = {"name": f"f{i}", "type": _KINDS[i % len(_KINDS)]}
        if i % 3 == 0:
            field["doc"] = f"field number {i}"
        if i % 7 == 0 and field["type"] == "long":
            field["default"] = 0
        fields.append(field)
    return {"type": "record", "name": "Wide", "namespace": "bench", "fields": fields}


def nested_record(levels: int) -> dict:
    schema: dict = {"type": "record", "name": "L0", "fields": [{"name": "leaf", "type": "int"}]}
    for i in range(1, levels):
        schema = {
            "type": "record",
            "name": f"L{i}",
            "doc": f"level {i}",
            "fields": [
                {"name": "id", "type": "long"},
                {"name": "label", "type": ["null", "string"]},
                {"name": "child", "type": schema},
            ],
        }
    return schema


def median_seconds(fns: list[Callable[[], Any]], repeat: int) -> list[float]:
    """Median run time of each function; runs are interleaved, so that load from anything else
    on the machine falls on all of them alike."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, spent in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
    return [statistics.median(spent) for spent in times]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--fields", type=int, default=10_000)
    parser.add_argument("--levels", type=int, default=100)
    args = parser.parse_args(argv)

    try:
        from datahub.ingestion.extractor.schema_util import avro_schema_to_mce_fields
    except ImportError:
        print("acryl-datahub is not installed (it is a test-only dependency)", file=sys.stderr)
        return 2
    logging.getLogger("datahub").setLevel(logging.CRITICAL)
    warnings.simplefilter("ignore")
    # DataHub's import leaves a very large object graph behind; every full garbage collection
    # would walk it, in both contestants' runs. Keep it out of the measurement for both.
    gc.collect()
    gc.freeze()

    def datahub(text: str) -> list:
        return avro_schema_to_mce_fields(text, swallow_exceptions=False)

    cases = [
        (f"(a) record with {args.fields} fields", json.dumps(wide_record(args.fields))),
        (f"(b) {args.levels} nested records", json.dumps(nested_record(args.levels))),
    ]
    print(
        f"median of {args.repeat} interleaved runs, same JSON text for both; ratio = DataHub / ours"
    )
    header = f"{'':18} {'paths':>7} {'DataHub':>10} {'ours':>10} {'ratio':>7}"
    worst = float("inf")
    for title, text in cases:
        reference = datahub(text)
        ours = avro_field_paths(text)
        if ours != [f.fieldPath for f in reference]:
            print(f"{title}: paths differ from DataHub's", file=sys.stderr)
            return 1
        del reference
        theirs_s, paths_s, fields_s = median_seconds(
            [
                lambda t=text: datahub(t),
                lambda t=text: avro_field_paths(t),
                lambda t=text: avro_fields(t),
            ],
            args.repeat,
        )
        print()
        print(title)
        print(header)
        for label, ours_s in (("avro_field_paths", paths_s), ("avro_fields", fields_s)):
            ratio = theirs_s / ours_s
            worst = min(worst, ratio)
            print(
                f"{label:18} {len(ours):>7} {theirs_s * 1e3:>8.1f}ms"
                f" {ours_s * 1e3:>8.1f}ms {ratio:>6.1f}x"
            )
    print()
    print(f"slowest ratio: {worst:.1f}x (aim: at least 5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
