"""``odf-chain lineage`` over datasets with lineage recorded by hand, run by the CLI's ``main`` in
this process as a subprocess would run it (tests/cli_run.py).

The chain (see :func:`build_chain`): ``customers`` is loaded from an external CSV with the email
hashed (masked); ``orders`` is loaded from another CSV in two runs, each dropping ``note``;
``spend`` joins the two, sums ``amount`` per customer (an aggregation grouped by
``customer_id``), copies the hashed email and drops ``order_id``. The datasets pin each other
by relative locations and the CLI runs in their parent directory, so every name in the
expected outputs below is short and written out by hand.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from odf_chain.dataset import Dataset
from odf_chain.events import TransformationSubtype as Sub
from odf_chain.lineage import LineageRecorder
from odf_chain.state import lineage_of
from tests.cli_run import run_main

HAVE_DOT = shutil.which("dot") is not None


# -- the chain --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chain:
    root: Path
    ids: dict[str, str]  # dataset name -> did
    heads: dict[str, str]  # dataset name -> head block hash
    orders_block_2: str  # orders after its first run


def build_chain(root: Path) -> Chain:
    with contextlib.chdir(root):
        customers = Dataset.create("customers")
        rec = LineageRecorder("load-customers", run_id="c-1")
        raw = rec.external_input("customers_csv", "file:///src/customers.csv")
        read = rec.read("read", raw, ["id", "email", "name"])
        hashed = rec.transform("hash email", [read["email"]], ["email_hash"], masking=True)
        rec.write(
            "write", {"id": read["id"], "email_hash": hashed["email_hash"], "name": read["name"]}
        )
        customers.write(
            pa.table(
                {
                    "id": pa.array([1, 2], pa.int64()),
                    "email_hash": ["h1", "h2"],
                    "name": ["Ada", "Alan"],
                }
            ),
            lineage=rec,
        )

        orders = Dataset.create("orders")
        for run_id, rows in (("o-1", 2), ("o-2", 3)):
            rec = LineageRecorder("load-orders", run_id=run_id)
            raw = rec.external_input("orders_csv", "file:///src/orders.csv")
            read = rec.read("read", raw, ["order_id", "customer_id", "amount", "note"])
            rec.drop("drop note", [read["note"]])
            rec.write(
                "write",
                {
                    "order_id": read["order_id"],
                    "customer_id": read["customer_id"],
                    "amount": read["amount"],
                },
            )
            orders.write(
                pa.table(
                    {
                        "order_id": pa.array(range(rows), pa.int64()),
                        "customer_id": pa.array([1] * rows, pa.int64()),
                        "amount": pa.array([1.5] * rows, pa.float64()),
                    }
                ),
                lineage=rec,
            )

        spend = Dataset.create("spend")
        rec = LineageRecorder("rollup", run_id="s-1")
        c_state, o_state = customers.state, orders.state
        c = rec.dataset_input(
            "customers", c_state.dataset_id, c_state.head, uri="customers",
            fields=c_state.field_paths,
        )  # fmt: skip
        o = rec.dataset_input(
            "orders", o_state.dataset_id, o_state.head, uri="orders", fields=o_state.field_paths
        )
        joined = rec.transform("join", [c["id"], o["customer_id"]], ["matched"], subtype=Sub.JOIN)
        groups = rec.transform("group", [o["customer_id"]], ["groups"], subtype=Sub.GROUP_BY)
        rec.transform(
            "sum", [o["amount"], groups["groups"]], ["total"], subtype=Sub.AGGREGATION, writes=True
        )
        rec.transform(
            "pick name", [c["name"], joined["matched"]], ["name"], subtype=Sub.IDENTITY, writes=True
        )
        rec.drop("drop order id", [o["order_id"]])
        rec.write("write", {"customer_id": o["customer_id"], "contact": c["email_hash"]})
        spend.write(
            pa.table(
                {
                    "customer_id": pa.array([1, 2], pa.int64()),
                    "name": ["Ada", "Alan"],
                    "contact": ["h1", "h2"],
                    "total": pa.array([4.5, 0.0], pa.float64()),
                }
            ),
            lineage=rec,
        )
        assert spend.verify().ok and orders.verify().ok and customers.verify().ok
        datasets = {"customers": customers, "orders": orders, "spend": spend}
        return Chain(
            root,
            {name: ds.state.dataset_id.to_did() for name, ds in datasets.items()},
            {name: str(ds.state.head) for name, ds in datasets.items()},
            str(orders.blocks()[2].hash),
        )


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Chain:
    return build_chain(tmp_path_factory.mktemp("lineage"))


def run(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_main(["lineage", *args], cwd=cwd, env=env)


def ok(p: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert p.stderr == ""
    return p.stdout


def expected(text: str, chain: Chain) -> str:
    """A hand-written expected output: strip the indentation of the literal, fill in ids and
    hashes (random per run)."""
    lines = text.splitlines()
    while not lines[0].strip():
        lines.pop(0)
    while not lines[-1].strip():
        lines.pop()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    body = "\n".join(line[indent:] for line in lines) + "\n"
    for name, did in chain.ids.items():
        body = body.replace(f"<{name} id>", did)
    for name, head in chain.heads.items():
        body = body.replace(f"<{name} head>", head)
    return body.replace("<orders block 2>", chain.orders_block_2)


# -- text ---------------------------------------------------------------------------------------


def test_whole_graph_text(chain: Chain) -> None:
    out = ok(run("spend", cwd=chain.root))
    assert out == expected(
        """
        field lineage of spend at block 2 <spend head>
        dataset spend (<spend id>)
          inputs: customers = customers, orders = orders
          runs: rollup/s-1 (block 2, offsets 0..1)
          contact
            <- customers  email_hash   DIRECT/IDENTITY     via write            rollup/s-1
          customer_id
            <- orders     customer_id  DIRECT/IDENTITY     via write            rollup/s-1
          name
            <- customers  id           INDIRECT/JOIN       via join, pick name  rollup/s-1
            <- customers  name         DIRECT/IDENTITY     via pick name        rollup/s-1
            <- orders     customer_id  INDIRECT/JOIN       via join, pick name  rollup/s-1
          total
            <- orders     amount       DIRECT/AGGREGATION  via sum              rollup/s-1
            <- orders     customer_id  INDIRECT/GROUP_BY   via group, sum       rollup/s-1
          drops
            orders  order_id  by drop order id  rollup/s-1
        dataset customers (<customers id>)
          inputs: customers_csv = file:///src/customers.csv
          runs: load-customers/c-1 (block 2, offsets 0..1)
          email_hash
            <- customers_csv  email  DIRECT/TRANSFORMATION masked  via read, hash email, write  load-customers/c-1
          id
            <- customers_csv  id     DIRECT/IDENTITY               via read, write              load-customers/c-1
          name
            <- customers_csv  name   DIRECT/IDENTITY               via read, write              load-customers/c-1
        dataset orders (<orders id>)
          inputs: orders_csv = file:///src/orders.csv
          runs: load-orders/o-1 (block 2, offsets 0..1), load-orders/o-2 (block 3, offsets 2..4)
          amount
            <- orders_csv  amount       DIRECT/IDENTITY  via read, write  load-orders/o-1, load-orders/o-2
          customer_id
            <- orders_csv  customer_id  DIRECT/IDENTITY  via read, write  load-orders/o-1, load-orders/o-2
          order_id
            <- orders_csv  order_id     DIRECT/IDENTITY  via read, write  load-orders/o-1, load-orders/o-2
          drops
            orders_csv  note  by drop note  load-orders/o-1, load-orders/o-2
        """,  # noqa: E501
        chain,
    )


def test_whole_graph_at_an_older_block(chain: Chain) -> None:
    # block 2 of orders: after its first run only
    out = ok(run("orders", "--at", "2", cwd=chain.root))
    assert out == expected(
        """
        field lineage of orders at block 2 <orders block 2>
        dataset orders (<orders id>)
          inputs: orders_csv = file:///src/orders.csv
          runs: load-orders/o-1 (block 2, offsets 0..1)
          amount
            <- orders_csv  amount       DIRECT/IDENTITY  via read, write  load-orders/o-1
          customer_id
            <- orders_csv  customer_id  DIRECT/IDENTITY  via read, write  load-orders/o-1
          order_id
            <- orders_csv  order_id     DIRECT/IDENTITY  via read, write  load-orders/o-1
          drops
            orders_csv  note  by drop note  load-orders/o-1
        """,
        chain,
    )


def test_summaries_of_a_derived_field(chain: Chain) -> None:
    out = ok(run("spend", "total", cwd=chain.root))
    assert out == expected(
        """
        field lineage of spend at block 2 <spend head>
        total in spend
          path [version=2.0].[type=double].total
        incoming: where its values come from
          origins
            file:///src/orders.csv  amount
            file:///src/orders.csv  customer_id
          operations, nearest run first
            rollup/s-1       spend   block 2  group, sum
            load-orders/o-1  orders  block 2  read, write
            load-orders/o-2  orders  block 3  read, write
        outgoing: where its values go
          destinations
            (none recorded: the datasets that read this one are not in its chain; run lineage on them with --dataset)
        """,  # noqa: E501
        chain,
    )


def test_summaries_of_an_input_field_with_a_drop(chain: Chain) -> None:
    out = ok(run("spend", "order_id", "--dataset", "orders", cwd=chain.root))
    assert out == expected(
        """
        field lineage of spend at block 2 <spend head>
        order_id in orders
          path [version=2.0].[type=long].order_id
        incoming: where its values come from
          origins
            file:///src/orders.csv  order_id
          operations, nearest run first
            load-orders/o-1  orders  block 2  read, write
            load-orders/o-2  orders  block 3  read, write
        outgoing: where its values go
          destinations
            (none recorded)
          drops
            orders  order_id  by drop order id  rollup/s-1
          operations, nearest run first
            rollup/s-1  spend  block 2  drop order id
        """,
        chain,
    )


def test_outgoing_summary_across_datasets(chain: Chain) -> None:
    out = ok(run("spend", "customer_id", "--dataset", "orders", cwd=chain.root))
    assert out.split("outgoing: where its values go\n")[1] == (
        "  destinations\n"
        "    spend  customer_id\n"
        "    spend  name\n"
        "    spend  total\n"
        "  operations, nearest run first\n"
        "    rollup/s-1  spend  block 2  join, group, sum, pick name, write\n"
    )


def test_upstream_one_step_by_default(chain: Chain) -> None:
    out = ok(run("spend", "name", "--upstream", cwd=chain.root))
    assert out == expected(
        """
        field lineage of spend at block 2 <spend head>
        upstream of name in spend, 1 step
          1  customers  id           INDIRECT/JOIN    rollup/s-1
          1  customers  name         DIRECT/IDENTITY  rollup/s-1
          1  orders     customer_id  INDIRECT/JOIN    rollup/s-1
        """,
        chain,
    )


@pytest.mark.parametrize("depth", ["all", "0", "ALL"])
def test_upstream_all_the_way(chain: Chain, depth: str) -> None:
    out = ok(run("spend", "name", "--upstream", "--depth", depth, cwd=chain.root))
    assert out == expected(
        """
        field lineage of spend at block 2 <spend head>
        upstream of name in spend, all the way
          1  customers                  id           INDIRECT/JOIN    rollup/s-1
          1  customers                  name         DIRECT/IDENTITY  rollup/s-1
          1  orders                     customer_id  INDIRECT/JOIN    rollup/s-1
          2  file:///src/customers.csv  id           DIRECT/IDENTITY  load-customers/c-1
          2  file:///src/customers.csv  name         DIRECT/IDENTITY  load-customers/c-1
          2  file:///src/orders.csv     customer_id  DIRECT/IDENTITY  load-orders/o-1, load-orders/o-2
        """,  # noqa: E501
        chain,
    )


def test_upstream_two_steps_and_a_v2_path(chain: Chain) -> None:
    by_name = ok(run("spend", "total", "--upstream", "--depth", "2", cwd=chain.root))
    by_path = ok(
        run("spend", "[version=2.0].[type=double].total", "--upstream", "--depth", "2",
            cwd=chain.root)
    )  # fmt: skip
    assert (
        by_name
        == by_path
        == expected(
            """
        field lineage of spend at block 2 <spend head>
        upstream of total in spend, 2 steps
          1  orders                  amount       DIRECT/AGGREGATION  rollup/s-1
          1  orders                  customer_id  INDIRECT/GROUP_BY   rollup/s-1
          2  file:///src/orders.csv  amount       DIRECT/IDENTITY     load-orders/o-1, load-orders/o-2
          2  file:///src/orders.csv  customer_id  DIRECT/IDENTITY     load-orders/o-1, load-orders/o-2
        """,  # noqa: E501
            chain,
        )
    )


@pytest.mark.parametrize("name", ["customers_csv", "file:///src/customers.csv"])
def test_downstream_of_an_external_field_through_a_masking_step(chain: Chain, name: str) -> None:
    out = ok(run("spend", "email", "--dataset", name, "--downstream", "--depth", "all",
                 cwd=chain.root))  # fmt: skip
    assert out == expected(
        """
        field lineage of spend at block 2 <spend head>
        downstream of email in file:///src/customers.csv, all the way
          1  customers  email_hash  DIRECT/TRANSFORMATION masked  load-customers/c-1
          2  spend      contact     DIRECT/IDENTITY               rollup/s-1
        """,
        chain,
    )


def test_downstream_one_step_naming_the_input_by_its_id(chain: Chain) -> None:
    out = ok(run("spend", "id", "--dataset", chain.ids["customers"], "--downstream",
                 cwd=chain.root))  # fmt: skip
    assert out == expected(
        """
        field lineage of spend at block 2 <spend head>
        downstream of id in customers, 1 step
          1  spend  name  INDIRECT/JOIN  rollup/s-1
        """,
        chain,
    )


def test_offset(chain: Chain) -> None:
    runs = {
        lineage.run.run_id: lineage.run
        for e in Dataset.open(chain.root / "orders").blocks()
        if (lineage := lineage_of(e.block.event)) is not None
    }
    second = runs["o-2"]
    out = ok(run("orders", "--offset", "3", cwd=chain.root))
    blocks = Dataset.open(chain.root / "orders").blocks()
    assert out == (
        "offset 3 of orders was written by run o-2 of job load-orders\n"
        f"  started  {second.started_at.isoformat()}\n"
        f"  ended    {second.ended_at.isoformat()}\n"
        "  offsets  2..4\n"
        f"  lineage  block 3 {blocks[3].hash}\n"
    )
    first = ok(run("orders", "--offset", "1", cwd=chain.root))
    assert first.startswith("offset 1 of orders was written by run o-1 of job load-orders\n")
    assert f"  lineage  block 2 {blocks[2].hash}\n" in first
    doc = json.loads(ok(run("orders", "--offset", "4", "--json", cwd=chain.root)))
    assert doc["offset"] == 4
    assert doc["run"]["run_id"] == "o-2" and doc["run"]["job_name"] == "load-orders"
    assert doc["run"]["offsets"] == {"start": 2, "end": 4}
    assert doc["run"]["block"] == {"sequence_number": 3, "hash": str(blocks[3].hash)}
    assert doc["run"]["started_at"] == second.started_at.isoformat()


# -- JSON ---------------------------------------------------------------------------------------


def _field(dataset_id: str, name: str, path: str, dataset_name: str) -> dict[str, str]:
    return {"dataset": dataset_id, "dataset_name": dataset_name, "name": name, "path": path}


def test_whole_graph_json(chain: Chain) -> None:
    doc = json.loads(ok(run("spend", "--json", cwd=chain.root)))
    ids = chain.ids
    assert doc["dataset"] == {"id": ids["spend"], "name": "spend"}
    assert doc["block"] == {"sequence_number": 2, "hash": chain.heads["spend"]}
    assert doc["query"] == {"mode": "graph", "field": None, "depth": None}
    assert doc["unreachable"] == []
    assert {(d["key"], d["name"], d["is_dataset"]) for d in doc["datasets"]} == {
        (ids["spend"], "spend", True),
        (ids["customers"], "customers", True),
        (ids["orders"], "orders", True),
        ("file:///src/customers.csv", "file:///src/customers.csv", False),
        ("file:///src/orders.csv", "file:///src/orders.csv", False),
    }
    assert [s["name"] for s in doc["graph"]] == ["spend", "customers", "orders"]
    spend, customers, orders = doc["graph"]
    assert spend["dataset"] == ids["spend"]
    assert spend["inputs"] == [
        {"input": "customers", "dataset": ids["customers"], "dataset_name": "customers"},
        {"input": "orders", "dataset": ids["orders"], "dataset_name": "orders"},
    ]
    assert [f["field"]["path"] for f in spend["fields"]] == [
        "[version=2.0].[type=string].contact",
        "[version=2.0].[type=long].customer_id",
        "[version=2.0].[type=string].name",
        "[version=2.0].[type=double].total",
    ]
    total = spend["fields"][3]
    assert total["field"] == _field(ids["spend"], "total", "[version=2.0].[type=double].total",
                                    "spend")  # fmt: skip
    group_by = total["sources"][1]
    assert group_by["field"] == _field(
        ids["orders"], "customer_id", "[version=2.0].[type=long].customer_id", "orders"
    )
    assert group_by["input"] == "orders"
    assert group_by["transformation"] == {
        "type": "INDIRECT",
        "subtype": "GROUP_BY",
        "masking": False,
        "opaque": False,
    }
    assert group_by["operations"] == ["group", "sum"]
    assert [(r["job_name"], r["run_id"], r["block"]["sequence_number"]) for r in
            group_by["runs"]] == [("rollup", "s-1", 2)]  # fmt: skip
    assert spend["drops"] == [
        {
            "field": _field(ids["orders"], "order_id", "[version=2.0].[type=long].order_id",
                            "orders"),
            "input": "orders",
            "operation": "drop order id",
            "operations": ["drop order id"],
            "transformation": {"type": "DIRECT", "subtype": "IDENTITY", "masking": False,
                               "opaque": False},
            "only_dropped": True,
            "runs": spend["runs"],
        }
    ]  # fmt: skip
    masked = customers["fields"][0]["sources"][0]
    assert masked["field"] == _field("file:///src/customers.csv", "email", "email",
                                     "file:///src/customers.csv")  # fmt: skip
    assert masked["transformation"]["masking"] is True
    assert masked["transformation"]["subtype"] == "TRANSFORMATION"
    assert [r["run_id"] for r in orders["runs"]] == ["o-1", "o-2"]
    assert [r["offsets"] for r in orders["runs"]] == [
        {"start": 0, "end": 1},
        {"start": 2, "end": 4},
    ]
    assert [r["run_id"] for r in orders["drops"][0]["runs"]] == ["o-1", "o-2"]
    assert orders["drops"][0]["field"]["path"] == "note"


def test_summary_and_reached_json(chain: Chain) -> None:
    doc = json.loads(ok(run("spend", "total", "--format", "json", cwd=chain.root)))
    assert doc["query"]["mode"] == "summary"
    assert doc["query"]["field"]["path"] == "[version=2.0].[type=double].total"
    assert [(f["dataset"], f["path"]) for f in doc["incoming"]["origins"]] == [
        ("file:///src/orders.csv", "amount"),
        ("file:///src/orders.csv", "customer_id"),
    ]
    assert [(r["run"]["run_id"], r["operations"]) for r in doc["incoming"]["runs"]] == [
        ("s-1", ["group", "sum"]),
        ("o-1", ["read", "write"]),
        ("o-2", ["read", "write"]),
    ]
    assert doc["outgoing"] == {"destinations": [], "drops": [], "unused": [], "runs": []}

    doc = json.loads(ok(run("spend", "name", "--upstream", "--json", cwd=chain.root)))
    assert doc["query"]["mode"] == "upstream" and doc["query"]["depth"] == 1
    reached = doc["reached"]
    assert [(r["distance"], r["field"]["dataset"], r["field"]["path"]) for r in reached] == [
        (1, chain.ids["customers"], "[version=2.0].[type=long].id"),
        (1, chain.ids["customers"], "[version=2.0].[type=string].name"),
        (1, chain.ids["orders"], "[version=2.0].[type=long].customer_id"),
    ]
    (edge,) = reached[0]["edges"]
    assert edge["target"]["path"] == "[version=2.0].[type=string].name"
    assert edge["input"] == "customers"
    assert edge["operations"] == ["join", "pick name"]
    assert edge["transformation"]["type"] == "INDIRECT"
    assert edge["run"]["run_id"] == "s-1"

    doc = json.loads(ok(run("spend", "name", "--upstream", "--depth", "all", "--json",
                            cwd=chain.root)))  # fmt: skip
    assert doc["query"]["depth"] is None
    assert len(doc["reached"]) == 6


def test_output_file(chain: Chain, tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    p = run("spend", "total", "--json", "-o", target, cwd=chain.root)
    assert ok(p) == ""
    assert json.loads(target.read_text())["query"]["field"]["name"] == "total"
    text = tmp_path / "out.txt"
    assert ok(run("spend", "-o", text, cwd=chain.root)) == ""
    assert text.read_text() == ok(run("spend", cwd=chain.root))


# -- unreachable inputs -------------------------------------------------------------------------


def test_an_unreachable_input_is_a_warning(tmp_path: Path) -> None:
    chain = build_chain(tmp_path)
    (tmp_path / "customers").rename(tmp_path / "customers-moved")
    out = ok(run("spend", cwd=tmp_path))
    warning = (
        f"warning: input customers ({chain.ids['customers']}) could not be followed, its "
        f"lineage is missing: not a dataset: {tmp_path / 'customers'} (no blocks/ directory)"
    )
    lines = out.splitlines()
    assert lines[-1] == warning
    assert "dataset customers (" not in out  # its own lineage is gone
    assert (
        "    <- customers  email_hash   DIRECT/IDENTITY     via write            rollup/s-1"
        in lines
    )
    assert "dataset orders (" in out  # the other input is still followed

    doc = json.loads(ok(run("spend", "--json", cwd=tmp_path)))
    assert doc["unreachable"] == [
        {
            "dataset_id": chain.ids["customers"],
            "uri": str(tmp_path / "customers"),  # relative pins are stored absolute
            "reason": f"not a dataset: {tmp_path / 'customers'} (no blocks/ directory)",
        }
    ]
    summary = ok(run("spend", "contact", cwd=tmp_path))
    assert summary.splitlines()[-1] == warning
    assert "    customers  email_hash\n" in summary  # the origin as far as it is known

    p = run("spend", "--format", "dot", cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("digraph")
    assert p.stderr == f"odf-chain: {warning}\n"


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["spend", "totl"], "spend has no field 'totl'"),
        (["spend", "tot"], "similar: [version=2.0].[type=double].total"),
        (["spend", "note", "--dataset", "orders"], "orders has no field 'note'"),
        (["spend", "id", "--dataset", "nowhere"], "no dataset 'nowhere' in the lineage of spend"),
        (["spend", "--at", "yesterday-ish"], "unrecognised ref 'yesterday-ish'"),
        (["spend", "--at", "99"], "no block with sequence number 99"),
        (["not-a-dataset"], "not a dataset: not-a-dataset"),
        (["spend", "--offset", "2"], "no run with recorded lineage wrote offset 2 of spend"),
        (["spend", "--upstream"], "--upstream needs a FIELD"),
        (["spend", "--depth", "2"], "--depth needs a FIELD"),
        (["spend", "total", "--depth", "2"], "--depth needs --upstream or --downstream"),
        (["spend", "total", "--upstream", "--depth", "-1"], "--depth takes a number of steps"),
        (["spend", "total", "--upstream", "--depth", "two"], "not 'two'"),
        (["spend", "total", "--upstream", "--downstream"], "choose one"),
        (["spend", "total", "--upstream", "--offset", "1"], "no --upstream or --downstream"),
        (["spend", "--offset", "1", "--format", "svg"], "--offset has no picture"),
        (["spend", "--json", "--format", "dot"], "--json and --format dot"),
    ],
)
def test_errors_are_one_line(chain: Chain, args: list[str], fragment: str) -> None:
    p = run(*args, cwd=chain.root)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == ""
    (line,) = p.stderr.splitlines()
    assert line.startswith("odf-chain: error: ")
    assert fragment in line, line


# -- DOT, parsed by a small independent reader ----------------------------------------------------

_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:\\.|[^"\\])*")|(?P<arrow>->)|(?P<id>[A-Za-z_][A-Za-z0-9_]*|-?\d+)'
    r"|(?P<punct>[{}\[\];,=]))",
    re.S,
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out, at = [], 0
    while at < len(text):
        if text[at:].strip() == "":
            break
        m = _TOKEN.match(text, at)
        assert m is not None, f"cannot read DOT at {text[at : at + 40]!r}"
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        at = m.end()
    return out


def _value(token: tuple[str, str]) -> str:
    """A DOT value as Graphviz shows it: quotes removed, escString escapes and character
    references resolved."""
    kind, text = token
    if kind != "str":
        return text
    body = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), text[1:-1])
    return html.unescape(body)


@dataclass
class Dot:
    clusters: dict[str, dict[str, str]]  # cluster id -> attributes
    nodes: dict[str, dict[str, str]]  # node id -> attributes (plus "cluster")
    edges: list[tuple[str, str, dict[str, str]]]


def parse_dot(text: str) -> Dot:
    """The subset of DOT the command writes: one digraph, clusters, node and edge statements
    with attribute lists, ``name=value;`` assignments. Fails on anything else, on unbalanced
    braces and on edges between undeclared nodes."""
    tokens = _tokens(text)
    pos = 0

    def take(kind: str | None = None, value: str | None = None) -> tuple[str, str]:
        nonlocal pos
        assert pos < len(tokens), "DOT ends too early"
        token = tokens[pos]
        assert kind is None or token[0] == kind, (token, kind)
        assert value is None or token[1] == value, (token, value)
        pos += 1
        return token

    def peek() -> tuple[str, str] | None:
        return tokens[pos] if pos < len(tokens) else None

    def attrs() -> dict[str, str]:
        out: dict[str, str] = {}
        take("punct", "[")
        while peek() != ("punct", "]"):
            name = take("id")[1]
            take("punct", "=")
            out[name] = _value(take())
            if peek() == ("punct", ","):
                take()
        take("punct", "]")
        return out

    dot = Dot({}, {}, [])

    def statements(cluster: str | None) -> None:
        take("punct", "{")
        while peek() != ("punct", "}"):
            first = take()
            if first == ("id", "subgraph"):
                name = take("id")[1]
                assert cluster is None and name.startswith("cluster_")
                dot.clusters[name] = {}
                statements(name)
                continue
            if first[1] in ("graph", "node", "edge") and peek() == ("punct", "["):
                attrs()
            elif peek() == ("punct", "="):
                take()
                assert cluster is not None
                dot.clusters[cluster][first[1]] = _value(take())
            elif peek() == ("arrow", "->"):
                take()
                target = take("id")[1]
                dot.edges.append((first[1], target, attrs()))
            else:
                assert first[0] == "id", first
                assert first[1] not in dot.nodes, f"node {first[1]} declared twice"
                dot.nodes[first[1]] = {**attrs(), "cluster": cluster or ""}
            take("punct", ";")
        take("punct", "}")

    take("id", "digraph")
    take("id")
    statements(None)
    assert pos == len(tokens), "text after the graph"
    for source, target, _ in dot.edges:
        assert source in dot.nodes and target in dot.nodes, (source, target)
    return dot


def _named_edges(dot: Dot) -> dict[tuple[str, str, str, str], dict[str, str]]:
    """Edges keyed by (source cluster label, source label, target cluster label, target
    label)."""

    def where(node: str) -> tuple[str, str]:
        attrs = dot.nodes[node]
        return dot.clusters[attrs["cluster"]]["label"], attrs["label"]

    named = {}
    for source, target, attrs in dot.edges:
        key = (*where(source), *where(target))
        assert key not in named, f"edge drawn twice: {key}"
        named[key] = attrs
    return named


def _svg(data: str | bytes) -> ET.Element:
    root = ET.fromstring(data)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    return root


def _svg_groups(root: ET.Element, kind: str) -> list[ET.Element]:
    return [g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == kind]


def test_whole_graph_dot(chain: Chain) -> None:
    text = ok(run("spend", "--format", "dot", cwd=chain.root))
    dot = parse_dot(text)
    labels = {c["label"] for c in dot.clusters.values()}
    assert labels == {
        "spend", "customers", "orders", "file:///src/customers.csv", "file:///src/orders.csv"
    }  # fmt: skip
    tooltips = {c["label"]: c["tooltip"] for c in dot.clusters.values()}
    assert tooltips["orders"] == chain.ids["orders"]
    styles = {c["label"]: c["style"] for c in dot.clusters.values()}
    assert styles["file:///src/orders.csv"] == "dashed" and styles["orders"] == "rounded"
    fields = {
        (dot.clusters[n["cluster"]]["label"], n["label"], n["tooltip"])
        for n in dot.nodes.values()
        if n.get("shape") != "octagon"
    }
    assert fields == {
        ("spend", "contact", "[version=2.0].[type=string].contact"),
        ("spend", "customer_id", "[version=2.0].[type=long].customer_id"),
        ("spend", "name", "[version=2.0].[type=string].name"),
        ("spend", "total", "[version=2.0].[type=double].total"),
        ("customers", "email_hash", "[version=2.0].[type=string].email_hash"),
        ("customers", "id", "[version=2.0].[type=long].id"),
        ("customers", "name", "[version=2.0].[type=string].name"),
        ("orders", "amount", "[version=2.0].[type=double].amount"),
        ("orders", "customer_id", "[version=2.0].[type=long].customer_id"),
        ("orders", "order_id", "[version=2.0].[type=long].order_id"),
        ("file:///src/customers.csv", "email", "email"),
        ("file:///src/customers.csv", "id", "id"),
        ("file:///src/customers.csv", "name", "name"),
        ("file:///src/orders.csv", "amount", "amount"),
        ("file:///src/orders.csv", "customer_id", "customer_id"),
        ("file:///src/orders.csv", "note", "note"),
        ("file:///src/orders.csv", "order_id", "order_id"),
    }
    drops = {(dot.clusters[n["cluster"]]["label"], n["label"]) for n in dot.nodes.values()
             if n.get("shape") == "octagon"}  # fmt: skip
    assert drops == {("spend", "drop order id"), ("orders", "drop note")}

    edges = _named_edges(dot)
    summary = {
        key: (a["label"], a.get("style", ""), a.get("color", "")) for key, a in edges.items()
    }
    csv_c, csv_o = "file:///src/customers.csv", "file:///src/orders.csv"
    assert summary == {
        ("customers", "email_hash", "spend", "contact"): ("DIRECT/IDENTITY", "", ""),
        ("orders", "customer_id", "spend", "customer_id"): ("DIRECT/IDENTITY", "", ""),
        ("customers", "name", "spend", "name"): ("DIRECT/IDENTITY", "", ""),
        ("customers", "id", "spend", "name"): ("INDIRECT/JOIN", "dashed", ""),
        ("orders", "customer_id", "spend", "name"): ("INDIRECT/JOIN", "dashed", ""),
        ("orders", "amount", "spend", "total"): ("DIRECT/AGGREGATION", "", ""),
        ("orders", "customer_id", "spend", "total"): ("INDIRECT/GROUP_BY", "dashed", ""),
        (csv_c, "email", "customers", "email_hash"): ("DIRECT/TRANSFORMATION masked", "", "red"),
        (csv_c, "id", "customers", "id"): ("DIRECT/IDENTITY", "", ""),
        (csv_c, "name", "customers", "name"): ("DIRECT/IDENTITY", "", ""),
        # one edge for the two runs that wrote it
        (csv_o, "amount", "orders", "amount"): ("DIRECT/IDENTITY", "", ""),
        (csv_o, "customer_id", "orders", "customer_id"): ("DIRECT/IDENTITY", "", ""),
        (csv_o, "order_id", "orders", "order_id"): ("DIRECT/IDENTITY", "", ""),
        (csv_o, "note", "orders", "drop note"): ("drop", "dotted", "gray50"),
        ("orders", "order_id", "spend", "drop order id"): ("drop", "dotted", "gray50"),
    }
    assert edges[(csv_o, "amount", "orders", "amount")]["tooltip"] == (
        "via read, write in load-orders/o-1, load-orders/o-2"
    )
    if HAVE_DOT:
        svg = _svg(subprocess.run(["dot", "-Tsvg"], input=text, capture_output=True, text=True,
                                  check=True).stdout)  # fmt: skip
        assert len(_svg_groups(svg, "cluster")) == 5
        assert len(_svg_groups(svg, "node")) == 17 + 2
        assert len(_svg_groups(svg, "edge")) == 15


def test_neighbourhood_dot(chain: Chain) -> None:
    dot = parse_dot(ok(run("spend", "total", "--format", "dot", cwd=chain.root)))
    highlighted = [n for n in dot.nodes.values() if "fillcolor" in n]
    assert [(dot.clusters[n["cluster"]]["label"], n["label"]) for n in highlighted] == [
        ("spend", "total")
    ]
    assert set(_named_edges(dot)) == {
        ("orders", "amount", "spend", "total"),
        ("orders", "customer_id", "spend", "total"),
        ("file:///src/orders.csv", "amount", "orders", "amount"),
        ("file:///src/orders.csv", "customer_id", "orders", "customer_id"),
    }
    assert len(dot.nodes) == 5
    # one step downstream of an input field, with the drop it ends in
    dot = parse_dot(
        ok(run("spend", "order_id", "--dataset", "orders", "--downstream", "--format", "dot",
               cwd=chain.root))
    )  # fmt: skip
    assert set(_named_edges(dot)) == {("orders", "order_id", "spend", "drop order id")}


def test_quoting_of_awkward_names(tmp_path: Path) -> None:
    """Field names with quotes, a trailing backslash, brackets and dots survive into DOT (and
    through Graphviz) as they are."""
    with contextlib.chdir(tmp_path):
        ds = Dataset.create("odd")
        rec = LineageRecorder("odd-job", run_id="q-1")
        src = rec.external_input("x", 'file:///src/x[0] "q".csv')
        rec.write("write", {'sa"y \\': src["items[0].price"], "addr.city": src['we"ird\\']})
        rec.transform("constant", [], ["const"], writes=True)
        ds.write(
            pa.table(
                {
                    'sa"y \\': [1.0],
                    "addr": pa.array([{"city": "P"}], pa.struct([("city", pa.string())])),
                    "const": [7],
                }
            ),
            lineage=rec,
        )
    listing = ok(run("odd", cwd=tmp_path)).splitlines()
    assert listing[4:] == [
        "  addr.city",
        '    <- x  we"ird\\         DIRECT/IDENTITY  via write  odd-job/q-1',
        "  const",
        "    (no recorded source)",
        '  sa"y \\',
        "    <- x  items[0].price  DIRECT/IDENTITY  via write  odd-job/q-1",
    ]
    text = ok(run("odd", "--format", "dot", cwd=tmp_path))
    dot = parse_dot(text)
    assert {(n["label"], n["tooltip"]) for n in dot.nodes.values()} == {
        ('sa"y \\', '[version=2.0].[type=double].sa"y \\'),
        ("addr.city", "[version=2.0].[type=struct].[type=struct].addr.[type=string].city"),
        ("items[0].price", "items[0].price"),
        ('we"ird\\', 'we"ird\\'),
        ("const", "[version=2.0].[type=long].const"),
    }
    assert {c["label"] for c in dot.clusters.values()} == {"odd", 'file:///src/x[0] "q".csv'}
    assert set(_named_edges(dot)) == {
        ('file:///src/x[0] "q".csv', "items[0].price", "odd", 'sa"y \\'),
        ('file:///src/x[0] "q".csv', 'we"ird\\', "odd", "addr.city"),
    }
    if HAVE_DOT:
        svg = _svg(subprocess.run(["dot", "-Tsvg"], input=text, capture_output=True, text=True,
                                  check=True).stdout)  # fmt: skip
        shown = {t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")}
        assert {'sa"y \\', 'we"ird\\', "items[0].price", "addr.city"} <= shown


# -- SVG ----------------------------------------------------------------------------------------


@pytest.mark.skipif(not HAVE_DOT, reason="Graphviz is not installed (apt install graphviz)")
def test_svg_with_graphviz(chain: Chain, tmp_path: Path) -> None:
    target = tmp_path / "graph.svg"
    assert ok(run("spend", "--format", "svg", "-o", target, cwd=chain.root)) == ""
    svg = _svg(target.read_bytes())
    assert len(_svg_groups(svg, "cluster")) == 5
    assert len(_svg_groups(svg, "node")) == 19
    assert len(_svg_groups(svg, "edge")) == 15
    shown = {t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")}
    assert {"DIRECT/TRANSFORMATION masked", "INDIRECT/GROUP_BY", "file:///src/orders.csv"} <= shown
    # to stdout, the neighbourhood of one field
    svg = _svg(ok(run("spend", "total", "--format", "svg", cwd=chain.root)))
    assert len(_svg_groups(svg, "node")) == 5


def test_svg_without_graphviz_gives_the_dot_text_and_fails(chain: Chain, tmp_path: Path) -> None:
    """Asked for SVG without Graphviz: the DOT text, never under the SVG's name, a line saying
    what happened and how to install Graphviz, and exit code 1 (a script must notice)."""
    no_tools = tmp_path / "bin"
    no_tools.mkdir()
    env = {**os.environ, "PATH": str(no_tools)}
    dot = ok(run("spend", "--format", "dot", cwd=chain.root))
    target = tmp_path / "graph.svg"
    p = run("spend", "--format", "svg", "-o", target, cwd=chain.root, env=env)
    assert p.returncode == 1 and p.stdout == "", p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith("odf-chain: Graphviz is not installed (no 'dot' on PATH), so wrote")
    assert f"the DOT text to {tmp_path / 'graph.dot'} instead of SVG to {target}" in line
    for hint in ("apt install graphviz", "brew install graphviz", "conda install graphviz"):
        assert hint in line
    assert not target.exists()  # DOT text is not passed off as an SVG file
    assert (tmp_path / "graph.dot").read_text() == dot
    p = run("spend", "--format", "svg", cwd=chain.root, env=env)  # to stdout: the DOT text
    assert p.returncode == 1 and p.stdout == dot
    assert "this is the DOT text instead of SVG" in p.stderr


@pytest.mark.parametrize("how", ["absolute", "dot-relative"])
def test_an_input_named_by_the_path_one_would_type(chain: Chain, how: str) -> None:
    """--dataset takes the path of an upstream dataset as typed, not only its shown name."""
    typed = str(chain.root / "customers") if how == "absolute" else "./customers"
    by_path = ok(run("spend", "id", "--dataset", typed, "--downstream", cwd=chain.root))
    by_name = ok(run("spend", "id", "--dataset", "customers", "--downstream", cwd=chain.root))
    assert by_path == by_name and "downstream of id in customers" in by_name


# -- a field read and then used by nothing ---------------------------------------------------------


def test_a_field_read_and_used_by_nothing_stays_in_the_graph_with_its_read(tmp_path: Path) -> None:
    """CDAP keeps a field that a run read but no later operation used, with its read: the graph
    lists it under the run's dataset, its summary names the read, the picture draws it."""
    with contextlib.chdir(tmp_path):
        people = Dataset.create("people")
        rec = LineageRecorder("load-people", run_id="p-1")
        raw = rec.external_input("people_csv", "file:///src/people.csv")
        read = rec.read("read", raw, ["id", "nickname", "ssn"])
        rec.write("write", {"id": read["id"]})
        people.write(pa.table({"id": pa.array([1], pa.int64())}), lineage=rec)

    text = ok(run("people", cwd=tmp_path))
    assert "  read, then used by nothing\n" in text
    lines = text.splitlines()
    start = lines.index("  read, then used by nothing")
    assert [line.split() for line in lines[start + 1 :]] == [
        ["people_csv", "nickname", "by", "read", "load-people/p-1"],
        ["people_csv", "ssn", "by", "read", "load-people/p-1"],
    ]

    doc = json.loads(ok(run("people", "--json", cwd=tmp_path)))
    (section,) = doc["graph"]
    assert [
        (u["input"], u["field"]["path"], u["operation"], u["only_unused"])
        for u in section["unused"]
    ] == [
        ("people_csv", "nickname", "read", True),
        ("people_csv", "ssn", "read", True),
    ]
    assert section["inputs"] == [
        {
            "input": "people_csv",
            "dataset": "file:///src/people.csv",
            "dataset_name": "file:///src/people.csv",
        }
    ]

    doc = json.loads(ok(run("people", "ssn", "--dataset", "people_csv", "--json", cwd=tmp_path)))
    outgoing = doc["outgoing"]
    assert outgoing["destinations"] == [] and outgoing["drops"] == []
    assert [(u["field"]["path"], u["operation"]) for u in outgoing["unused"]] == [("ssn", "read")]
    assert [(r["run"]["run_id"], r["operations"]) for r in outgoing["runs"]] == [("p-1", ["read"])]
    text = ok(run("people", "ssn", "--dataset", "people_csv", cwd=tmp_path))
    assert "  read, then used by nothing\n" in text

    dot = ok(run("people", "--format", "dot", cwd=tmp_path))
    assert 'shape="note"' in dot and 'label="unused"' in dot
    assert dot.count('label="unused"') == 2  # nickname and ssn, into the one note of "read"
