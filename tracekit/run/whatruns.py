"""What ran, across ranks: every rank's kernel, operator and memory tables joined, the kernels' spread across ranks,
and each step's matmul FLOPs and MFU (model FLOPs utilisation).

MFU of a step = the time its counted matmul-class FLOPs take at the device's dense peak for the dtype each op ran
in, over the step's time: with one dtype, FLOPs / step time / peak. NaN where the device or a FLOP count is unknown,
where the device computed nothing (a step of copies only: no utilisation to speak of, as on a CPU rank), and where
it would exceed 100 (the peak assumed is wrong: a math mode the trace does not show).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.events.kernels import rank_spread
from tracekit.opschema import (KERNEL_COLUMNS, MEMORY_COLUMNS, MEMORY_TIMELINE_COLUMNS, MEMORY_TOP_COLUMNS,
                               OP_COLUMNS, OP_SHAPE_COLUMNS, OP_STEP_COLUMNS, STEP_FLOP_COLUMNS)

TABLES = {"kernels": KERNEL_COLUMNS, "ops": OP_COLUMNS, "ops_by_shape": OP_SHAPE_COLUMNS, "op_steps": OP_STEP_COLUMNS,
          "memory": MEMORY_COLUMNS, "memory_top": MEMORY_TOP_COLUMNS, "memory_timeline": MEMORY_TIMELINE_COLUMNS}


def joined_tables(results, on_run_clock) -> dict[str, pd.DataFrame]:
    """The run's kernels, ops, ops_by_shape, op_steps, memory, memory_top and memory_timeline: the ranks' rows in
    rank order; ``on_run_clock`` puts a table's absolute ``start_ns`` on the run's clock as ``start_us``."""
    out = {}
    for name, columns in TABLES.items():
        parts = [getattr(r, name) for r in results if len(getattr(r, name))]
        out[name] = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(columns))
    timeline = out["memory_timeline"]
    out["memory_timeline"] = on_run_clock(timeline) if "start_ns" in timeline else timeline
    out["kernels"] = rank_spread(out["kernels"]) if len(out["kernels"]) else pd.DataFrame(
        columns=list(KERNEL_COLUMNS))
    return out


def with_step_flops(steps: pd.DataFrame, results) -> pd.DataFrame:
    """The steps table with ``matmul_flops``, ``matmul_at_peak_us`` and ``mfu_pct`` (NaN where unknown)."""
    parts = [r.step_flops for r in results if len(r.step_flops)]
    flops = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(STEP_FLOP_COLUMNS))
    flops = flops.astype({"rank": np.int64, "step": np.int64, "matmul_flops": float, "matmul_at_peak_us": float})
    # Each rank's step_flops has every step it knows (a known 0 where no op ran; NaN on a rank with annotations but
    # no operator, or none of a usable duration, ``tracekit.events.ops``); a step it lacks (a rank without ops) is
    # unknown.
    out = steps.astype({"rank": np.int64, "step": np.int64}).merge(flops, on=["rank", "step"], how="left")
    out["mfu_pct"] = _pct(out["matmul_at_peak_us"], out["device_step_us"], _compute_us(out))
    return out.astype({"rank": steps["rank"].dtype, "step": steps["step"].dtype}) if len(steps) else out


def rank_flops(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank over its window steps: mean matmul FLOPs per step and MFU (sum of at-peak time / sum of the steps'
    time on the device's clock)."""
    window = steps[steps["in_window"].astype(bool)] if len(steps) else steps
    grouped = window.groupby("rank")
    at_peak = grouped["matmul_at_peak_us"].agg(lambda v: v.sum(skipna=False))
    compute = _compute_us(window).groupby(window["rank"]).sum(min_count=1)
    return pd.DataFrame({"matmul_flops_per_step": grouped["matmul_flops"].agg(lambda v: v.mean(skipna=False)),
                         "mfu_pct": _pct(at_peak, grouped["device_step_us"].sum(), compute)}).reset_index()


def _compute_us(steps: pd.DataFrame) -> pd.Series:
    """Per step, the device's computation (alone or under communication); NaN where the table lacks it."""
    if "compute_us" not in steps or "overlap_us" not in steps:
        return pd.Series(np.nan, index=steps.index)
    return steps["compute_us"].astype(float) + steps["overlap_us"].astype(float)


def _pct(at_peak: pd.Series, step_us: pd.Series, compute_us: pd.Series) -> pd.Series:
    """at_peak / step_us in %, as floats; NaN where no step time passed (a step of 0 us has no utilisation), where
    nothing was computed (copies only) and above 100 (beyond the bound: the peak assumed is wrong)."""
    step_us = step_us.astype(float)
    pct = (at_peak.astype(float) / step_us.where(step_us > 0)) * 100
    return pct.where(~(compute_us.astype(float) <= 0) & ~(pct > 100))
