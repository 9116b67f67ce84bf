"""Two runs side by side (a DataParallel run against DDP, fp32 against AMP, ``--accum 1`` against ``--accum 2``).

Times are per optimizer step, averaged over ranks: busy times are window totals divided by the steps; idle is the
step time not busy, split by the rank's idle causes. So runs with different step counts compare fairly.
``ratio`` is b / a: below 1 means run b spends less (or, for throughput and bandwidth, reaches less).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tracekit.summary import Summary

_PER_STEP = (
    ("compute_ms", "compute_us"),
    ("overlapped_comm_ms", "overlap_us"),
    ("exposed_comm_ms", "exposed_comm_us"),
    ("memory_ms", "memory_us"),
    ("idle_ms", "idle_us"),
    ("idle_host_ms", "idle_host_us"),
    ("idle_sync_ms", "idle_sync_us"),
    ("idle_data_ms", "idle_data_us"),
    ("idle_comm_wait_ms", "idle_comm_wait_us"),
    ("idle_other_ms", "idle_other_us"),
)


@dataclass(frozen=True)
class Comparison:
    """``table``: one row per metric with columns metric, unit, a, b, ratio (b / a)."""

    a: str
    b: str
    table: pd.DataFrame

    def to_dict(self) -> dict:
        """Plain values: the two sources and one record per metric (NaN as None)."""
        rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                for r in self.table.to_dict("records")]
        return {"a": self.a, "b": self.b, "metrics": rows}

    def __str__(self) -> str:
        shown = self.table.assign(
            a=self.table["a"].map(_fmt), b=self.table["b"].map(_fmt),
            ratio=self.table["ratio"].map(lambda r: "n/a" if math.isnan(r) else f"{r:.2f}x"))
        header = f"a: {self.a}\nb: {self.b}\n(ratio = b / a; times per optimizer step, mean over ranks)\n"
        return header + shown.to_string(index=False) + "\n"


def compare(a: Summary | str | Path, b: Summary | str | Path) -> Comparison:
    """Compare two runs, given as Summaries or as folders to summarize."""
    from tracekit.api import summarize

    sa = a if isinstance(a, Summary) else summarize(a)
    sb = b if isinstance(b, Summary) else summarize(b)
    rows = _metrics(sa)
    other = _metrics(sb)
    names = list(dict.fromkeys([m for m, _ in rows] + [m for m, _ in other]))
    va, vb = dict(rows), dict(other)
    table = pd.DataFrame({
        "metric": names,
        "unit": [_unit(n) for n in names],
        "a": [va.get(n, math.nan) for n in names],
        "b": [vb.get(n, math.nan) for n in names],
    })
    with np.errstate(divide="ignore", invalid="ignore"):
        table["ratio"] = np.where(table["a"] != 0, table["b"] / table["a"], np.nan)
    return Comparison(a=str(sa.run.get("source", "a")), b=str(sb.run.get("source", "b")), table=table)


def _metrics(s: Summary) -> list[tuple[str, float]]:
    r = s.ranks
    steps = r["steps"].where(r["steps"] > 0)
    out = [("step_time_ms", float(r["step_time_us"].mean()) / 1e3)]
    workload = s.run.get("workload_run") or {}
    out.append(("throughput_samples_per_s", _throughput(workload)))
    # Busy times are whole inside the window, so total / steps is their time per step. Idle per step is the rest of
    # the step (step time - busy per step); the rank's idle-by-cause split is applied to it, because gaps are only
    # counted inside the device span and the span misses the window's edges, whatever the number of steps.
    busy_per_step = r["busy_us"] / steps
    idle_per_step = (r["step_time_us"] - busy_per_step).clip(lower=0)
    for name, column in _PER_STEP:
        if column not in r:
            per_step = pd.Series(math.nan, index=r.index)
        elif column == "idle_us":
            per_step = idle_per_step
        elif column.startswith("idle_"):
            per_step = r[column] / r["idle_us"].where(r["idle_us"] > 0) * idle_per_step
        else:
            per_step = r[column] / steps
        out.append((name, float(per_step.mean()) / 1e3))
    calls = s.collectives[s.collectives["in_window"].astype(bool)]
    n_steps = float(steps.mean()) if steps.notna().any() else math.nan
    n_ranks = max(int(r["rank"].nunique()), 1)
    for op, c in calls.groupby("op", observed=True):
        unknown = c["bytes"].isna().any()
        out.append((f"{op}_MB_per_step", math.nan if unknown else float(c["bytes"].sum()) / n_ranks / n_steps / 1e6))
        out.append((f"{op}_calls_per_step", len(c) / n_ranks / n_steps))
        out.append((f"{op}_median_busbw_gbps", float(c["busbw_gbps"].median())))
    return out


def _throughput(workload: dict) -> float:
    value = workload.get("throughput_samples_per_s")
    if isinstance(value, dict):
        value = value.get("unprofiled", value.get("profiled"))
    return float(value) if isinstance(value, (int, float)) else math.nan


def _unit(name: str) -> str:
    for suffix, unit in (("_ms", "ms/step"), ("_per_s", "samples/s"), ("_gbps", "GB/s"), ("_MB_per_step", "MB/step"),
                         ("_calls_per_step", "calls/step")):
        if name.endswith(suffix):
            return unit
    return ""


def _fmt(v: float) -> str:
    return "unknown" if math.isnan(v) else f"{v:,.3f}"
