"""The frozen result of an analysis: numbers and tables only. Renderers read it; nothing changes it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Iterable

import msgspec
import numpy as np
import pandas as pd

from tracekit import opschema, schema
from tracekit.run import pipeschema
from tracekit.run.commdims import COMM_BY_DIM_COLUMNS
from tracekit.run.p2p import P2P_COLUMNS
from tracekit.summary.facts import RunFacts
from tracekit.summary.mapped import MappedTable


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
      gaps         one row per device idle interval, its time split by cause (idle_<cause>_us) and its largest
      stragglers   ranks that arrive last at collectives far more often than chance
      imbalance    per step: slowest and median step time across ranks
      mismatches   collectives that do not line up across ranks, and P2P calls without their other half
      p2p          one row per send/recv pair (or lone call): transfer and waits (``tracekit.run.p2p``)
      comm_by_dim  per rank and parallelism dimension: communication, exposed, bytes (``tracekit.run.commdims``)
      data_quality one row per rank: what its numbers rest on (events launched before the trace, dropped
                   events, unknown categories, where the rank came from, shapes recorded, device events absent)
      critical_path         per step: time on the chain of events that ends it, by rank and category
      critical_path_events  that chain's events (``tracekit.predict.critical_path``)
      graph        the run's dependency graph, one row per node (``tracekit.rank.graph``): what ``tracekit.whatif`` replays
      fsdp         one row per rank x step x FSDP unit x phase (``tracekit.events.fsdp``); empty without FSDP
      kernels      one row per rank x device event name: calls, durations, kind, share (``tracekit.events.kernels``)
      ops          one row per rank x op name: calls, host and device self/total times, FLOPs, bytes, roofline
                   (``tracekit.events.ops``); ``ops_by_shape`` the same per name and input shapes
      memory       one row per rank x device x step from ``[memory]`` events: peaks, start, end, growth
                   (``tracekit.events.memory``); ``memory_top`` the ops live at each device's peak,
                   ``memory_timeline`` allocated and reserved over time; ``op_steps`` each op's time per window step
      optimization where optimisation pays: ops' critical-path time and the replayed saving at their roofline
                   (``tracekit.predict.optimize``)
      pipeline     one row per pipeline stage x step: compute, bubble (fill, wait, drain) and the schedule's theory
                   (``tracekit.run.pipeline``); ``pipeline_blocks`` the schedule that ran, one row per stage x
                   microbatch x phase; both empty without pipeline parallelism
    ``findings`` lists what to change, largest gain first (``tracekit.findings.order``; ``findings_table()``: the same
    as one table).
    ``run`` holds facts about the run (``tracekit.summary.facts.RunFacts``): world size, backend, devices, files read and
    skipped, the window, clock offsets, and the workload's run.json.
    Every field is always there: a table the run does not fill is empty, with its columns.

    The tables cannot change behind the Summary's back: it keeps a shallow copy of each table it is given, and
    every read of a table field returns a fresh shallow copy, so under pandas' Copy-on-Write an in-place change
    (``s.ranks.loc[0, "span_us"] = 1``, ``s.ranks["x"] = 0``) changes only that copy, never what the Summary, its
    report or a later ``s.ranks`` show. ``repr(s)`` is a short overview, ``print(s)`` the full report.

    ``tracekit.summarize`` keeps the tables that grow with the trace (``EVENT_TABLES``) off the Python heap
    (``tracekit.summary.offheap``): each is an Arrow IPC file under the cache folder (``<cache_dir>/tables/<key>/``),
    or with ``cache=False`` in a temporary folder removed with the Summary, memory-mapped when the Summary is made
    and read into its DataFrame the first time it is read; a read is the same DataFrame either way. The mapping
    holds the data, so a Summary keeps working after ``tracekit cache clear`` (or a trim) removes its folder (on
    Linux and other POSIX systems). A Summary made from DataFrames (``Summary(ranks=..., ...)``) holds them in
    memory. Pickling (and ``copy``) carries every table's data, so a pickle needs no folder.
    """

    ranks: pd.DataFrame
    steps: pd.DataFrame
    collectives: pd.DataFrame
    gaps: pd.DataFrame
    run: RunFacts = field(default_factory=RunFacts)
    stragglers: pd.DataFrame = _table(schema.STRAGGLER_COLUMNS)
    imbalance: pd.DataFrame = _table(schema.IMBALANCE_COLUMNS)
    mismatches: pd.DataFrame = _table(schema.MISMATCH_COLUMNS)
    p2p: pd.DataFrame = _table(P2P_COLUMNS)
    comm_by_dim: pd.DataFrame = _table(COMM_BY_DIM_COLUMNS)
    findings: tuple = ()
    critical_path: pd.DataFrame = _table(schema.CRITICAL_PATH_COLUMNS)
    critical_path_events: pd.DataFrame = _table(schema.CRITICAL_PATH_EVENT_COLUMNS)
    graph: pd.DataFrame = _table(schema.GRAPH_COLUMNS)
    data_quality: pd.DataFrame = _table(schema.DATA_QUALITY_COLUMNS)
    fsdp: pd.DataFrame = _table(schema.FSDP_COLUMNS)
    kernels: pd.DataFrame = _table(opschema.KERNEL_COLUMNS)
    ops: pd.DataFrame = _table(opschema.OP_COLUMNS)
    ops_by_shape: pd.DataFrame = _table(opschema.OP_SHAPE_COLUMNS)
    memory: pd.DataFrame = _table(opschema.MEMORY_COLUMNS)
    memory_top: pd.DataFrame = _table(opschema.MEMORY_TOP_COLUMNS)
    memory_timeline: pd.DataFrame = _table(opschema.MEMORY_TIMELINE_COLUMNS)
    op_steps: pd.DataFrame = _table(opschema.OP_STEP_COLUMNS)
    optimization: pd.DataFrame = _table(opschema.OPTIMIZATION_COLUMNS)
    pipeline: pd.DataFrame = _table(pipeschema.PIPELINE_COLUMNS)
    pipeline_blocks: pd.DataFrame = _table(pipeschema.PIPELINE_BLOCK_COLUMNS)

    def __post_init__(self):
        # Hold a shallow copy of each table given: a later in-place change to the caller's frame copies its data
        # (Copy-on-Write) and leaves the Summary's as it was.
        for name in _FRAMES:
            value = object.__getattribute__(self, name)
            if isinstance(value, pd.DataFrame):
                object.__setattr__(self, name, _detached(value))

    def __getattribute__(self, name: str):
        # Every read of a table is a fresh shallow copy (no data copied): a change made through it stays in it.
        value = object.__getattribute__(self, name)
        if name in _FRAMES:
            if isinstance(value, MappedTable):
                value = value.frame()  # read from its file the first time
            if isinstance(value, pd.DataFrame):
                return _detached(value)
        return value

    def __reduce__(self):
        # The pickle holds the tables themselves, not the files an off-heap table is mapped from.
        return _unpickled, ({f.name: getattr(self, f.name) for f in fields(self)},)

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
        """Per rank, mean per window step: exposed all-gather and reduction (us) and their % of step time (``tracekit.events.fsdp``)."""
        from tracekit.events.fsdp import rank_totals

        return rank_totals(self.fsdp, self.steps)

    def findings_table(self) -> pd.DataFrame:
        """The findings, one row each in their order: kind, severity, ranks (text: ``"0, 1"``), message,
        recommendation, predicted_saving_us (the replay's saving per step, NaN without one) and scenario (the
        replayed scenario, None without one). ``findings`` stays the tuple of ``Finding`` objects."""
        from tracekit.summary.overview import findings_table

        return findings_table(self.findings)

    def to_dict(self, tables: str | Iterable[str] | None = None) -> dict[str, Any]:
        """Plain Python values: tables as lists of records, NaN as None.

        ``tables``: None for the default set, every table but those that grow with the trace's events or shapes
        (``EVENT_TABLES``: gaps, critical_path_events, ops_by_shape, op_steps, memory_timeline, graph), which
        are listed under ``tables_left_out``;
        names of event tables to put in as well; or ``"all"``.
        """
        wanted = wanted_tables(tables)
        out: dict[str, Any] = {"run": _plain(self.run.to_dict())}
        for name in TABLES:
            if name == "findings":
                out["findings"] = [_plain(f.to_dict()) for f in self.findings]
            elif name in wanted:
                out[name] = _records(getattr(self, name))
        left_out = [name for name in EVENT_TABLES if name not in wanted]
        if left_out:
            out["tables_left_out"] = left_out
        return out

    def to_json(self, tables: str | Iterable[str] | None = None) -> str:
        """``to_dict(tables)`` as JSON text (NaN becomes null)."""
        return msgspec.json.encode(self.to_dict(tables)).decode()

    def __str__(self) -> str:
        from tracekit.summary.text import text_report

        return text_report(self)

    def __repr__(self) -> str:
        """A short overview: source, ranks, backend, devices, window, steps, mean step time, the span's shares,
        MFU when known and the findings by severity. ``str()`` (``print``) is the full report."""
        from tracekit.summary.overview import overview_text

        return overview_text(self)

    def _repr_html_(self) -> str:
        """The notebook view: the overview's numbers as cards and the most severe findings (plain HTML)."""
        from tracekit.summary.overview import overview_html

        return overview_html(self)


def replace(summary: Summary, **changes) -> Summary:
    """``dataclasses.replace(summary, **changes)`` without a copy of each table ``summary`` keeps: those are its own,
    never changed in place (each read of one is a copy), so the new Summary holds them as they are. A table in
    ``changes`` is held as a given one is (a shallow copy; an off-heap ``MappedTable`` as it is)."""
    unknown = set(changes) - {f.name for f in fields(Summary)}
    if unknown:
        raise TypeError(f"Summary has no field {', '.join(sorted(unknown))}")
    out = object.__new__(Summary)
    for f in fields(Summary):
        if f.name in changes:
            value = changes[f.name]
            object.__setattr__(out, f.name, _detached(value) if isinstance(value, pd.DataFrame) else value)
        else:
            object.__setattr__(out, f.name, object.__getattribute__(summary, f.name))
    return out


def _unpickled(values: dict[str, Any]) -> Summary:
    return Summary(**values)


# The table fields: each read returns a shallow copy (Summary.__getattribute__).
_FRAMES = frozenset(f.name for f in fields(Summary) if f.type in ("pd.DataFrame", pd.DataFrame))
_COPY_ON_WRITE = int(pd.__version__.split(".")[0]) >= 3


def _detached(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` no in-place change reaches back from: shallow (no data copied) under Copy-on-Write,
    always on from pandas 3; a deep copy on an older pandas without it."""
    shallow = _COPY_ON_WRITE or pd.get_option("mode.copy_on_write") is True
    return frame.copy(deep=not shallow)


# The JSON's tables in order (and where the findings go); those that grow with the trace's events are left out
# unless asked for: on a real run they are over 90% of the JSON.
TABLES = ("ranks", "steps", "collectives", "gaps", "stragglers", "imbalance", "mismatches", "p2p", "comm_by_dim",
          "findings", "critical_path",
          "critical_path_events", "data_quality", "fsdp", "kernels", "ops", "ops_by_shape", "op_steps", "memory",
          "memory_top", "memory_timeline", "optimization", "graph", "pipeline", "pipeline_blocks")
EVENT_TABLES = ("gaps", "critical_path_events", "ops_by_shape", "op_steps", "memory_timeline", "graph")


def wanted_tables(tables: str | Iterable[str] | None) -> set[str]:
    """The tables ``to_dict(tables)`` writes; a ValueError names an unknown one."""
    if tables == "all":
        return set(TABLES)
    extra = [] if tables is None else [tables] if isinstance(tables, str) else list(tables)
    unknown = sorted(set(extra) - set(TABLES))
    if unknown:
        raise ValueError(f"no such table: {', '.join(unknown)}; tables: {', '.join(t for t in TABLES if t != 'findings')}")
    return (set(TABLES) - set(EVENT_TABLES)) | set(extra)


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
