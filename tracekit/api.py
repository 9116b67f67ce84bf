"""``summarize``: the front door. Files -> events table -> metric functions -> a frozen Summary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tracekit import metrics
from tracekit.classify import classify, step_table
from tracekit.collectives import collective_table
from tracekit.config import Config
from tracekit.reader import DEVICE_CATEGORIES, TraceSet, read_traces
from tracekit.schema import RANK_COLUMNS
from tracekit.summary import Summary


def summarize(trace_dir: str | Path, *, window: str = "drop_last") -> Summary:
    """Summarize one run: a folder of per-rank traces (``*.json``/``*.json.gz``) or one trace file.

    Args:
      trace_dir: folder or file. Non-trace JSON files in a folder (a workload's ``run.json``) are skipped and
        listed in ``summary.run["skipped"]``.
      window: see ``tracekit.Config``.

    Example:
      >>> s = summarize("sample_traces/resnet-gloo-2rank")          # doctest: +SKIP
      >>> s.ranks[["rank", "overlap_pct", "idle_pct"]]              # doctest: +SKIP
    """
    config = Config(window=window)
    return summarize_traces(read_traces(trace_dir), config, source=str(trace_dir))


def summarize_traces(traces: TraceSet, config: Config, source: str = "") -> Summary:
    """The metric pipeline over an already-read TraceSet."""
    events = classify(traces.events, traces.comm_args)
    valid = events["dur_ns"] >= 0
    origin_ns = int(events.loc[valid, "ts_ns"].min()) if valid.any() else 0
    steps = step_table(events)
    kept = metrics.window_steps(steps, config.window)
    dev = metrics.device_view(events, steps, config.window)
    dev_all = metrics.device_view(events, steps, "trace")

    collectives = collective_table(events, traces.comm_args, _pg_sizes(traces), origin_ns)
    in_window = pd.MultiIndex.from_arrays([collectives["rank"], collectives["step"]]).isin(
        pd.MultiIndex.from_arrays([kept["rank"], kept["step"]]))
    no_steps = ~collectives["rank"].isin(steps["rank"]).to_numpy()
    collectives["in_window"] = in_window | no_steps if config.window != "trace" else True
    collectives = collectives.drop(columns=["row"])

    step_rows = metrics.step_breakdown(dev_all, steps, origin_ns)
    step_rows["in_window"] = pd.MultiIndex.from_arrays([step_rows["rank"], step_rows["step"]]).isin(
        pd.MultiIndex.from_arrays([kept["rank"], kept["step"]])) if len(step_rows) else []

    ranks = _rank_table(traces, events, dev, step_rows, collectives[collectives["in_window"]])
    gaps = metrics.gap_table(dev, origin_ns)
    return Summary(ranks=ranks, steps=step_rows, collectives=collectives, gaps=gaps,
                   run=_run_facts(traces, config, source, origin_ns))


def _rank_table(traces, events, dev, step_rows, collectives) -> pd.DataFrame:
    gpu_ranks = set(events.loc[events["cat"].isin(DEVICE_CATEGORIES), "rank"].unique().tolist())
    base = pd.DataFrame({
        "rank": [m.rank for m in traces.ranks],
        "device": [_device_name(m, gpu_ranks) for m in traces.ranks],
    })
    window_steps = step_rows[step_rows["in_window"]] if len(step_rows) else step_rows
    per_step = window_steps.groupby("rank").agg(steps=("step", "size"), step_time_us=("step_us", "mean")).reset_index()
    table = (base.merge(per_step, on="rank", how="left")
             .merge(metrics.rank_breakdown(dev), on="rank", how="left")
             .merge(metrics.allreduce_totals(collectives), on="rank", how="left"))
    table["steps"] = table["steps"].fillna(0).astype(int)
    table["allreduce_count"] = table["allreduce_count"].fillna(0).astype(int)
    # No all_reduce at all: zero calls, zero time, zero bytes are all known.
    none = table["allreduce_count"] == 0
    table.loc[none, "allreduce_us"] = 0.0
    table.loc[none, "allreduce_bytes"] = 0.0
    return table[list(RANK_COLUMNS)]


def _device_name(meta, gpu_ranks: set) -> str:
    if meta.rank not in gpu_ranks:
        return "cpu"
    names = sorted({n for n in meta.device_names if n})
    return " / ".join(names) if names else "gpu"


def _pg_sizes(traces: TraceSet) -> dict:
    sizes = {}
    for meta in traces.ranks:
        configs = [c for c in meta.pg_config if isinstance(c, dict)]
        for c in configs:
            if "pg_name" in c and "pg_size" in c:
                sizes[(meta.rank, str(c["pg_name"]))] = float(c["pg_size"])
        if len(configs) == 1 and "pg_size" in configs[0]:
            sizes[(meta.rank, None)] = float(configs[0]["pg_size"])
    return sizes


def _run_facts(traces: TraceSet, config: Config, source: str, origin_ns: int) -> dict:
    metas = traces.ranks
    world = {m.world_size for m in metas if m.world_size is not None}
    backends = {m.backend for m in metas if m.backend}
    return {
        "source": source,
        "world_size": world.pop() if len(world) == 1 else (None if not world else sorted(world)),
        "ranks_read": len(metas),
        "backend": backends.pop() if len(backends) == 1 else (None if not backends else sorted(backends)),
        "nccl_version": next((m.nccl_version for m in metas if m.nccl_version), None),
        "device_names": sorted({n for m in metas for n in m.device_names if n}),
        "files": [{"rank": m.rank, "path": m.path, "dropped_events": m.dropped_events} for m in metas],
        "skipped": [{"path": p, "reason": r} for p, r in traces.skipped],
        "window": config.window,
        "origin_us": origin_ns / 1e3,
    }
