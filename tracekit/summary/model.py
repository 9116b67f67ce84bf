"""The frozen result of an analysis: numbers and tables only. Renderers read it; nothing changes it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from tracekit import schema
from tracekit.summary.facts import RunFacts



def _table(columns):
    """A field whose default is an empty table with these columns."""
    return field(default_factory=lambda: pd.DataFrame(columns=list(columns)))


@dataclass(frozen=True)
class Summary:
    """Where the step time of each rank goes.

    Tables (pandas DataFrames; columns documented in ``tracekit.schema``):
      ranks        one row per rank
      steps        one row per rank and ProfilerStep
      collectives  one row per collective call per rank
      gaps         one row per device idle interval, with its cause
      stragglers   ranks that arrive last at collectives far more often than chance
      imbalance    per step: slowest and median step time across ranks
      mismatches   collectives that do not line up across ranks
      data_quality one row per rank: what its numbers rest on (events launched before the trace, dropped
                   events, unknown categories, where the rank came from, shapes recorded, device events absent)
      critical_path         per step: time on the chain of events that ends it, by rank and category
      critical_path_events  that chain's events (``tracekit.predict.critical_path``)
      graph        the run's dependency graph, one row per node (``tracekit.rank.graph``): what ``tracekit.whatif`` replays
      fsdp         one row per rank x step x FSDP unit x phase (``tracekit.events.fsdp``); empty without FSDP
    ``findings`` lists what to change, most severe first.
    ``run`` holds facts about the run (``tracekit.summary.facts.RunFacts``): world size, backend, devices, files read and
    skipped, the window, clock offsets, and the workload's run.json.
    Every field is always there: a table the run does not fill is empty, with its columns.
    """

    ranks: pd.DataFrame
    steps: pd.DataFrame
    collectives: pd.DataFrame
    gaps: pd.DataFrame
    run: RunFacts = field(default_factory=RunFacts)
    stragglers: pd.DataFrame = _table(schema.STRAGGLER_COLUMNS)
    imbalance: pd.DataFrame = _table(schema.IMBALANCE_COLUMNS)
    mismatches: pd.DataFrame = _table(schema.MISMATCH_COLUMNS)
    findings: tuple = ()
    critical_path: pd.DataFrame = _table(schema.CRITICAL_PATH_COLUMNS)
    critical_path_events: pd.DataFrame = _table(schema.CRITICAL_PATH_EVENT_COLUMNS)
    graph: pd.DataFrame = _table(schema.GRAPH_COLUMNS)
    data_quality: pd.DataFrame = _table(schema.DATA_QUALITY_COLUMNS)
    fsdp: pd.DataFrame = _table(schema.FSDP_COLUMNS)

    def clock_shift_ns(self, rank: int) -> int:
        """Nanoseconds subtracted from this rank's trace times to put them on the run's clock (0 unless corrected).

        With ``run.origin_ns``: a raw event time ``ts_ns`` is at ``(ts_ns - shift - origin_ns) / 1e3`` us in the tables.
        """
        o = self.run.clock_offsets
        hit = o.loc[(o["rank"] == rank) & o["corrected"].astype(bool), "offset_us"]
        return int(round(float(hit.iloc[0]) * 1e3)) if len(hit) else 0

    def step_times(self) -> pd.DataFrame:
        """Rank x step table of step times (us)."""
        return self.steps.pivot(index="rank", columns="step", values="step_us")

    def fsdp_totals(self) -> pd.DataFrame:
        """Per rank over the window: exposed all-gather and reduction (us) and their % of step time (``tracekit.events.fsdp``)."""
        from tracekit.events.fsdp import rank_totals

        return rank_totals(self.fsdp, self.steps)

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values: tables as lists of records, NaN as None."""
        return {
            "run": _plain(self.run.to_dict()),
            "ranks": _records(self.ranks),
            "steps": _records(self.steps),
            "collectives": _records(self.collectives),
            "gaps": _records(self.gaps),
            "stragglers": _records(self.stragglers),
            "imbalance": _records(self.imbalance),
            "mismatches": _records(self.mismatches),
            "findings": [_plain(f.to_dict()) for f in self.findings],
            "critical_path": _records(self.critical_path),
            "critical_path_events": _records(self.critical_path_events),
            "data_quality": _records(self.data_quality),
            "fsdp": _records(self.fsdp),
        }

    def to_json(self) -> str:
        """``to_dict()`` as JSON text (NaN becomes null)."""
        return msgspec.json.encode(self.to_dict()).decode()

    def __str__(self) -> str:
        from tracekit.summary.text import text_report

        return text_report(self)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    columns = {c: _plain_column(frame[c]) for c in frame.columns}
    return [dict(zip(columns, values)) for values in zip(*columns.values())] if len(frame) else []


def _plain_column(col: pd.Series) -> list:
    values = col.astype(object).tolist()
    return [_plain(v) for v in values]


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if value is pd.NA or value is pd.NaT:
        return None
    return value
