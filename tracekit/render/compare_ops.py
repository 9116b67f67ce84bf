"""compare's per-op and per-kernel tables: what each run calls per optimizer step, and which names moved most.

One row per op name (``summary.op_steps``) or device event name (``summary.kernels``), with, for each run, the
calls per step and the time per step in ms: per rank, the window steps' calls and time summed and divided by the
rank's window steps (``summary.ranks["steps"]``), then the mean over the ranks that have window steps (a rank that
never calls the name counts 0 there). An op's time is its self time: device self time where the run has a device,
host self time where it has none (``op_time``). A kernel's is its window total. ``change_ms`` is b - a and
``ratio`` b / a (n/a where a is 0); ``status`` says whether the name runs in both windows or only in one ("added":
only in b, "removed": only in a), and a name a run never calls counts 0 calls and 0 ms there. The rows are sorted by
the size of the change, largest first. ``ProfilerStep#<n>`` annotations are one name, ``ProfilerStep#*``, so runs
whose windows hold different step numbers still line up.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracekit.fmt import figure, is_unknown, num, ratio

if TYPE_CHECKING:  # read only
    from tracekit.summary.model import Summary

COLUMNS = ("name", "status", "calls_per_step_a", "calls_per_step_b", "ms_per_step_a", "ms_per_step_b", "change_ms",
           "ratio")
TOP = 10
NAME_WIDTH = 60
_PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")


def op_time(s: Summary) -> str:
    """``device`` when the run's op table has device times (a rank with a device), else ``host``."""
    return "device" if s.op_steps["device_self_us"].notna().any() else "host"


def op_table(sa: Summary, sb: Summary) -> pd.DataFrame:
    """Ops per window step in both runs: self time (``op_time``) and calls, one row per op name."""
    return _table(*(_op_rates(s) for s in (sa, sb)))


def kernel_table(sa: Summary, sb: Summary) -> pd.DataFrame:
    """Device events per window step in both runs: their window calls and total time, one row per name."""
    return _table(*(_kernel_rates(s) for s in (sa, sb)))


def _op_rates(s: Summary) -> pd.DataFrame:
    o = s.op_steps
    names = o["name"].astype(str).str.replace(_PROFILER_STEP, "ProfilerStep#*", regex=True)
    time = o["device_self_us" if op_time(s) == "device" else "host_self_us"]
    return _per_step(s, pd.DataFrame({"rank": o["rank"].to_numpy(), "name": names.to_numpy(),
                                      "calls": o["calls"].to_numpy(), "us": time.to_numpy()}))


def _kernel_rates(s: Summary) -> pd.DataFrame:
    k = s.kernels[s.kernels["calls"] > 0]  # run only before or after the window: not in it
    return _per_step(s, pd.DataFrame({"rank": k["rank"].to_numpy(), "name": k["name"].astype(str).to_numpy(),
                                      "calls": k["calls"].to_numpy(), "us": k["total_us"].to_numpy()}))


def _per_step(s: Summary, rows: pd.DataFrame) -> pd.DataFrame:
    """Index name; columns calls and ms: per rank the window's sums / the rank's window steps, mean over ranks."""
    steps = s.ranks.set_index("rank")["steps"].astype(float)
    steps = steps[steps > 0]
    rows = rows[rows["rank"].isin(steps.index)]
    if not len(rows):
        return pd.DataFrame({"calls": pd.Series(dtype=float), "ms": pd.Series(dtype=float)}).rename_axis("name")
    sums = rows.groupby(["name", "rank"])[["calls", "us"]].sum()
    per_step = {col: (sums[col].unstack("rank").reindex(columns=steps.index).fillna(0.0) / steps).mean(axis=1)
                for col in ("calls", "us")}  # a rank that never calls it: 0 there
    return pd.DataFrame({"calls": per_step["calls"], "ms": per_step["us"] / 1e3}).rename_axis("name")


def _table(ra: pd.DataFrame, rb: pd.DataFrame) -> pd.DataFrame:
    names = sorted(set(ra.index) | set(rb.index))
    a, b = ra.reindex(names).fillna(0.0), rb.reindex(names).fillna(0.0)  # not called in a run: 0 there
    in_a, in_b = np.isin(names, ra.index), np.isin(names, rb.index)
    table = pd.DataFrame({
        "name": names,
        "status": np.where(in_a & in_b, "both", np.where(in_b, "added", "removed")),
        "calls_per_step_a": a["calls"].to_numpy(float), "calls_per_step_b": b["calls"].to_numpy(float),
        "ms_per_step_a": a["ms"].to_numpy(float), "ms_per_step_b": b["ms"].to_numpy(float),
    })
    table["change_ms"] = table["ms_per_step_b"] - table["ms_per_step_a"]
    with np.errstate(divide="ignore", invalid="ignore"):
        table["ratio"] = np.where(table["ms_per_step_a"] != 0, table["ms_per_step_b"] / table["ms_per_step_a"],
                                  np.nan)
    order = np.lexsort((table["name"].to_numpy(), -table["change_ms"].abs().fillna(-1.0).to_numpy()))
    return table.iloc[order].reset_index(drop=True)[list(COLUMNS)]


def records(table: pd.DataFrame) -> list[dict]:
    """The table's rows as plain values, NaN as None."""
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in table.to_dict("records")]


def text(ops: pd.DataFrame, kernels: pd.DataFrame, times: tuple[str, str], had_ops: bool, had_kernels: bool) -> str:
    """The "By op" and "By kernel" sections of ``str(comparison)``."""
    lines = []
    basis = f"{times[0]} self time" if times[0] == times[1] else f"self time: {times[0]} in a, {times[1]} in b"
    if not had_ops:
        lines.append("By op: neither run has ops (no cpu_op events in the traces, or an older trace)")
    elif not len(ops):
        lines.append("By op: neither run has ops in its window steps")
    else:
        lines += [f"By op (top {TOP} by change; {basis}; per window step, mean over ranks)", _shown(ops, "op")]
    lines.append("")
    if not had_kernels:
        lines.append("By kernel: neither run has device kernels (CPU-only runs)")
    elif not len(kernels):
        lines.append("By kernel: neither run has device kernels in its window steps")
    else:
        lines += [f"By kernel (top {TOP} by change; window time per step, mean over ranks)",
                  _shown(kernels, "kernel")]
    return "\n".join(lines) + "\n"


def short(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else name[:NAME_WIDTH - 3] + "..."


def _calls(value) -> str:
    return num(value, 0) if float(value).is_integer() else figure(value)


def _shown(table: pd.DataFrame, label: str) -> str:
    top = table.head(TOP)
    shown = pd.DataFrame({
        label: top["name"].map(short), "status": top["status"],
        "calls/step a": top["calls_per_step_a"].map(_calls), "calls/step b": top["calls_per_step_b"].map(_calls),
        "ms/step a": top["ms_per_step_a"].map(figure),
        "ms/step b": top["ms_per_step_b"].map(figure),
        "change ms": top["change_ms"].map(lambda v: figure(v) if is_unknown(v) or v <= 0 else "+" + figure(v)),
        "ratio": top["ratio"].map(ratio),
    })
    more = f"\n  ({len(table) - TOP:,} more)" if len(table) > TOP else ""
    return "\n".join("  " + line for line in shown.to_string(index=False).splitlines()) + more
