"""One rank, start to finish: read its file, classify its events, and reduce them to small per-rank tables.

This is the unit of parallel work: only a ``RankResult`` (a handful of rows per step and per collective)
leaves the worker, so memory in the parent does not grow with trace size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tracekit import causes, metrics
from tracekit.classify import COMM_ANNOTATION, STEP_NAME, classify, step_table
from tracekit.collectives import collective_table
from tracekit.config import Config
from tracekit.reader import DEVICE_CATEGORIES, RankMeta, read_rank

# The host ops that the analysis of a GPU rank reads, by name. The reader leaves every other CPU op of a GPU trace
# out of the table (about half its events); a CPU-only trace keeps all, since its ops are the device work.
_HOST_OPS_READ = (STEP_NAME, COMM_ANNOTATION, causes.HOST_COMM, causes.SYNC_CALL, causes.DATA_LOADER)


def reads_host_op(name: str) -> bool:
    """Whether ``reduce_rank`` looks at a host op of this name on a GPU rank."""
    return name == causes.DATA_PARALLEL_OP or any(p.search(name) for p in _HOST_OPS_READ)


@dataclass(frozen=True)
class RankResult:
    """Everything the run-level summary needs from one rank. Times are absolute ns (``*_ns``) until combined."""

    meta: RankMeta
    device: str
    origin_ns: int              # the rank's earliest event
    breakdown: pd.DataFrame     # one row: metrics.rank_breakdown over the window
    steps: pd.DataFrame         # metrics.step_breakdown, with in_window
    collectives: pd.DataFrame   # collectives.collective_table, with in_window
    gaps: pd.DataFrame          # metrics.gap_table over the window


def analyze_rank(path: str | Path, config: Config, default_rank: int | None = None) -> RankResult:
    """Read and reduce one trace file."""
    meta, events, comm_args = read_rank(path, default_rank=default_rank, host_ops=reads_host_op)
    return reduce_rank(meta, events, comm_args, config)


def reduce_rank(meta: RankMeta, events: pd.DataFrame, comm_args: pd.DataFrame, config: Config) -> RankResult:
    """The metric pipeline of one rank's events table."""
    for col in ("cat", "name", "pid", "tid"):
        if not isinstance(events[col].dtype, pd.CategoricalDtype):
            events = events.assign(**{col: events[col].astype("category")})
    events = classify(events, comm_args)
    valid = events["dur_ns"] >= 0
    # The earliest usable event, counting host ops the reader left out; from the table when the meta has none.
    origin_ns = meta.first_ts_ns
    if origin_ns is None:
        origin_ns = int(events.loc[valid, "ts_ns"].min()) if valid.any() else 0
    steps = step_table(events)
    kept = metrics.window_steps(steps, config.window)
    dev_all = metrics.all_device_events(events)
    dev = metrics.in_window(dev_all, steps, config.window)

    collectives = collective_table(events, comm_args, _pg_sizes(meta)).drop(columns=["row"])
    collectives["in_window"] = _in_window(collectives["step"], steps, kept, config)
    step_rows = metrics.step_breakdown(dev_all, steps)
    step_rows["in_window"] = _in_window(step_rows["step"], steps, kept, config) if len(step_rows) else []
    on_gpu = bool(events["cat"].isin(DEVICE_CATEGORIES).any())
    names = sorted({n for n in meta.device_names if n})
    device = ("gpu" if not names else " / ".join(names)) if on_gpu else "cpu"

    gaps = metrics.gap_table(dev)
    gaps["cause"] = causes.gap_causes(gaps, dev, events, on_gpu)
    # A rank with no device event in its window still gets its row: times unknown (NaN), host facts real.
    breakdown = metrics.rank_breakdown(dev)
    if breakdown.empty:
        breakdown = breakdown.reindex([0]).assign(rank=meta.rank)
    whole = config.window == "trace" or steps.empty
    extras = {**causes.idle_by_cause(gaps), **causes.host_facts(events, dev, None if whole else kept),
              "compute_major": float("nan") if meta.compute_major is None else float(meta.compute_major)}
    breakdown = breakdown.assign(**{k: [v] * len(breakdown) for k, v in extras.items()})
    return RankResult(meta=meta, device=device, origin_ns=origin_ns, breakdown=breakdown,
                      steps=step_rows, collectives=collectives, gaps=gaps)


def _in_window(step: pd.Series, steps: pd.DataFrame, kept: pd.DataFrame, config: Config) -> np.ndarray:
    if config.window == "trace" or steps.empty:
        return np.ones(len(step), dtype=bool)  # no ProfilerStep: the whole trace is the window
    return step.isin(kept["step"]).to_numpy()


def _pg_sizes(meta: RankMeta) -> dict:
    """(rank, pg name) -> size from distributedInfo.pg_config; (rank, None) -> the size to assume for a call that
    names no group, known only when every group listed has the same size."""
    configs = [c for c in meta.pg_config if isinstance(c, dict) and "pg_size" in c]
    sizes = {(meta.rank, str(c["pg_name"])): float(c["pg_size"]) for c in configs if "pg_name" in c}
    if configs and len({float(c["pg_size"]) for c in configs}) == 1:
        sizes[(meta.rank, None)] = float(configs[0]["pg_size"])
    return sizes
