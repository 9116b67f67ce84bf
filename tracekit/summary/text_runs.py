"""The text report's "what ran" part: the top kernels and ops, MFU per rank and the memory peaks. Reads a Summary
only; the numbers are its tables', in the report's units (ms, MB, TFLOPS/s, %)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracekit.fmt import figure, gflop, mb, mfu, ms, pct, tflops

if TYPE_CHECKING:  # read only
    from tracekit.summary.model import Summary

TOP = 8
_NAME_WIDTH = 60


def what_ran_lines(summary: Summary) -> list[str]:
    """Top kernels, top ops, MFU and memory, each section only when its table has rows."""
    lines: list[str] = []
    if len(summary.kernels):
        lines += [f"Top kernels in the window, all ranks together (of {summary.kernels['name'].nunique():,} names)",
                  _kernels(summary.kernels), ""]
    if len(summary.ops):
        lines += ["Top ops, all ranks together (host and device ms over the whole trace; FLOPs from shapes)",
                  _ops(summary.ops), ""]
    if "mfu_pct" in summary.ranks and summary.ranks["matmul_flops_per_step"].notna().any():
        lines += ["Matmul FLOPs and MFU per rank (window steps; MFU against the device's dense datasheet peak)",
                  _mfu(summary.ranks, summary.steps, summary.data_quality), ""]
    if len(summary.memory):
        lines += ["Memory per rank and device (profile_memory), MB", _memory(summary.memory), ""]
    return lines


def _short(name: str) -> str:
    return name if len(name) <= _NAME_WIDTH else name[:_NAME_WIDTH - 3] + "..."


def _kernels(kernels: pd.DataFrame) -> str:
    grouped = kernels.groupby(["name", "kind"], observed=True)
    table = pd.DataFrame({"calls": grouped["calls"].sum(), "total_us": grouped["total_us"].sum()}).reset_index()
    kind_total = table.groupby("kind")["total_us"].transform("sum")
    table = table.sort_values("total_us", ascending=False).head(TOP)
    shown = pd.DataFrame({"kernel": table["name"].map(_short), "kind": table["kind"], "calls": table["calls"],
                          "total ms": table["total_us"].map(ms),
                          "mean us": [figure(t / c if c else float("nan")) for t, c in zip(table["total_us"],
                                                                                          table["calls"])],
                          "% of kind": [pct(t / k * 100 if k else float("nan")) for t, k in
                                        zip(table["total_us"], kind_total.loc[table.index])]})
    return _indent(shown.to_string(index=False))


def _ops(ops: pd.DataFrame) -> str:
    grouped = ops.groupby("name", observed=True)
    device = grouped["device_us"].agg(lambda v: v.sum(skipna=False))
    table = pd.DataFrame({"calls": grouped["calls"].sum(), "host_self_us": grouped["host_self_us"].sum(),
                          "host_total_us": grouped["host_total_us"].sum(), "device_us": device,
                          "flops": grouped["flops"].agg(lambda v: v.sum(skipna=False))}).reset_index()
    # Leaves first: an op's own time says where it goes; by device time where there is a device.
    key = "device_us" if table["device_us"].notna().any() else "host_self_us"
    table = table.sort_values(key, ascending=False).head(TOP)
    shown = pd.DataFrame({"op": table["name"].map(_short), "calls": table["calls"],
                          "host self ms": table["host_self_us"].map(ms), "host ms": table["host_total_us"].map(ms),
                          "device ms": table["device_us"].map(ms),
                          "GFLOP": table["flops"].map(gflop)})
    return _indent(shown.to_string(index=False))


def _mfu(ranks: pd.DataFrame, steps: pd.DataFrame, quality: pd.DataFrame) -> str:
    # Achieved FLOP/s over the steps' time on the device's clock, as MFU is: the window's mean device step.
    window = steps[steps["in_window"].astype(bool)] if len(steps) and "device_step_us" in steps else steps.iloc[:0]
    device_us = window.groupby("rank")["device_step_us"].mean().reindex(ranks["rank"]).to_numpy() if len(window) else (
        np.full(len(ranks), np.nan))  # a Summary made before device_step_us (or by hand without it): unknown
    # Where MFU is unknown though the peak is known (it would pass 100: the peak assumed is wrong), so is the rate.
    at_peak = (window.groupby("rank")["matmul_at_peak_us"].sum(min_count=1).reindex(ranks["rank"]).to_numpy()
               if len(window) and "matmul_at_peak_us" in window else np.full(len(ranks), np.nan))
    device_us = np.where(np.isnan(ranks["mfu_pct"].to_numpy(dtype=float)) & (at_peak > 0), np.nan, device_us)
    shown = pd.DataFrame({"rank": ranks["rank"], "device": ranks["device"],
                          "GFLOP/step": ranks["matmul_flops_per_step"].map(gflop),
                          "TFLOPS/s": [tflops(f, s) for f, s in zip(ranks["matmul_flops_per_step"], device_us)],
                          "MFU %": [mfu(m, p) for m, p in zip(ranks["mfu_pct"], _peaks(ranks, quality))]})
    return _indent(shown.to_string(index=False))


def _peaks(ranks: pd.DataFrame, quality: pd.DataFrame) -> list:
    """Each rank's ``device_peaks`` entry (None where the data quality has no row for it: an unknown peak)."""
    if "device_peaks" not in quality:
        return [None] * len(ranks)
    return list(quality.set_index("rank")["device_peaks"].reindex(ranks["rank"]).to_numpy())


def _memory(memory: pd.DataFrame) -> str:
    grouped = memory.groupby(["rank", "device"], observed=True, sort=True)
    table = grouped.agg(peak=("peak_allocated_bytes", "max"), reserved=("peak_reserved_bytes", "max"),
                        capacity=("device_memory_bytes", "first")).reset_index()
    growth = grouped["growth_bytes"].agg(lambda v: v.dropna().mean() if v.notna().any() else float("nan"))
    shown = pd.DataFrame({"rank": table["rank"], "device": table["device"], "peak allocated": table["peak"].map(mb),
                          "peak reserved": table["reserved"].map(mb), "device memory": table["capacity"].map(mb),
                          "growth/step": growth.to_numpy() if len(growth) else [],
                          })
    shown["growth/step"] = shown["growth/step"].map(mb)
    return _indent(shown.to_string(index=False))


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
