"""The field lineage a write appends with its data: captured from the DataFrame's plan, or given
by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pyarrow as pa

from odf_chain.events import AddFieldLineage, LineageRun
from odf_chain.lineage.recorder import LineageRecorder
from odf_chain.replay import settle_lineage
from odf_chain.state import Vocabulary


def _plan_lineage(df, schema: pa.Schema, vocab: Vocabulary):
    """The inputs and field operations of ``df`` written as ``schema``, from its plan (None
    under Spark Connect)."""
    from odf_chain.spark.plan_lineage import lineage_from_plan

    return lineage_from_plan(df, schema, system_columns=set(vocab.system_columns))


def _lineage_event(
    df,
    lineage: LineageRecorder | bool,
    schema: pa.Schema,
    *,
    run: LineageRun,
    vocab: Vocabulary,
    captured: Callable[[], Any] | None = None,
) -> AddFieldLineage | None:
    """The lineage to append for this write (see :func:`write`), settled on ``schema``: plain
    names turned into v2 paths, input fields checked against the datasets they pin.
    ``captured`` gives what :func:`_plan_lineage` found (read while the job ran); without it,
    the plan is read now."""
    if lineage is False:
        return None
    if isinstance(lineage, LineageRecorder):
        event = lineage.event(started_at=run.started_at, ended_at=run.ended_at, offsets=run.offsets)
        event = replace(event, run=replace(run, job_name=lineage.job_name, run_id=lineage.run_id))
    else:
        parts = captured() if captured is not None else _plan_lineage(df, schema, vocab)
        if parts is None:  # Spark Connect: lineage_from_plan has warned
            return None
        inputs, operations = parts
        if not operations:
            return None
        event = AddFieldLineage(run=run, inputs=tuple(inputs), operations=tuple(operations))
    return settle_lineage(event, schema)
