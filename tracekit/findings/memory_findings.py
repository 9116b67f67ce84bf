"""Findings read off ``summary.memory`` (profile_memory's [memory] events): a device near its memory, and memory
that grows step over step (a leak suspect). None without memory events.

- ``memory_near_capacity``: the largest of a device's peak allocated and reserved bytes over its memory
  (deviceProperties totalGlobalMem): medium from ``NEAR_CAPACITY[0]``, high from ``NEAR_CAPACITY[1]``. Unknown
  capacity (CPU memory, no deviceProperties): not judged.
- ``memory_growth``: allocated bytes at the end of every window step after the first exceed the step before's,
  by ``GROWTH_SHARE`` of the peak in all: medium.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit import fmt
from tracekit.findings.finding import Finding, by_severity, severity

NEAR_CAPACITY = (0.85, 0.95)
GROWTH_SHARE = 0.02


def merged(findings: tuple, memory: pd.DataFrame, steps: pd.DataFrame, training: bool = True) -> tuple[Finding, ...]:
    """``findings`` and the memory findings together, most severe first. ``training``: whether the run trains
    (``ranks.training``); False words the advice for a forward-only run."""
    return by_severity(list(findings) + list(find(memory, steps, training)))


def find(memory: pd.DataFrame, steps: pd.DataFrame, training: bool = True) -> tuple[Finding, ...]:
    if memory is None or memory.empty:
        return ()
    return tuple(_near_capacity(memory, steps, training)) + tuple(_growth(memory, steps, training))


def _near_capacity(memory: pd.DataFrame, steps: pd.DataFrame, training: bool = True) -> list[Finding]:
    peak = memory[["peak_allocated_bytes", "peak_reserved_bytes"]].max(axis=1)
    use = (peak / memory["device_memory_bytes"]).where(memory["device_memory_bytes"] > 0)
    frame = memory.assign(use=use).dropna(subset=["use"])
    if frame.empty:
        return []
    worst = frame.loc[frame.groupby(["rank", "device"])["use"].idxmax()]
    level = severity(float(worst["use"].max()), NEAR_CAPACITY)
    if level is None:
        return []
    hit = worst[worst["use"] >= NEAR_CAPACITY[0]]
    top = hit.loc[hit["use"].idxmax()]
    return [Finding(
        "memory_near_capacity", level, tuple(sorted(int(r) for r in hit["rank"].unique())),
        f"Device memory peaks at {top['use']:.0%} of {fmt.mb(top['device_memory_bytes'], unit=True)} "
        f"({top['device']}, {fmt.ranks(hit['rank'].unique())}): one larger batch or sequence runs out of memory.",
        "Cut activation memory: activation checkpointing (torch.utils.checkpoint), a smaller micro-batch with "
        "gradient accumulation, mixed precision, or sharding (FSDP) of parameters, gradients and optimizer state."
        if training else  # forward only: no gradients, no optimizer state
        "Cut memory: a smaller batch or KV cache, weights in bf16 or quantized (fp8/int8), or the model split "
        "across devices (tensor parallel).",
        {"share": float(top["use"]), "peak_bytes": float(max(top["peak_allocated_bytes"], top["peak_reserved_bytes"])),
         "device_memory_bytes": float(top["device_memory_bytes"])})]


def _growth(memory: pd.DataFrame, steps: pd.DataFrame, training: bool = True) -> list[Finding]:
    window = steps.loc[steps["in_window"].astype(bool), ["rank", "step"]] if len(steps) else steps
    rows = memory.merge(window, on=["rank", "step"]) if len(window) else memory.iloc[0:0]
    found = []
    for (rank, device), dev in rows.groupby(["rank", "device"]):
        ends = dev.sort_values("step")["end_allocated_bytes"].to_numpy(dtype=float)
        if len(ends) < 2 or not np.isfinite(ends).all():
            continue
        peak = float(dev["peak_allocated_bytes"].max())
        grew = float(ends[-1] - ends[0])
        if (np.diff(ends) > 0).all() and peak > 0 and grew >= GROWTH_SHARE * peak:
            found.append((int(rank), device, grew, peak, len(ends)))
    if not found:
        return []
    rank, device, grew, peak, n = max(found, key=lambda f: f[2] / f[3])
    return [Finding(
        "memory_growth", "medium", tuple(sorted({f[0] for f in found})),
        f"Allocated memory grows every step: +{fmt.mb(grew, unit=True)} over {n} steps ({device}, rank {rank}), "
        f"{grew / peak:.0%} of its peak: tensors kept alive across steps"
        + ("." if training else " (in a forward-only run, a KV cache that grows with each generated token does this "
                                "by design)."),
        "Look for tensors kept across steps: losses or outputs stored without .detach() / .item(), growing lists "
        "of tensors, caches keyed by step; torch.cuda.memory._record_memory_history shows who holds them."
        if training else  # forward only: no losses; a growing KV cache is expected, a static one keeps memory flat
        "If it is not a KV cache growing with the sequence: look for outputs kept across steps (appended to a list "
        "without .cpu() or .item()) and caches keyed by step; a preallocated (static) KV cache keeps memory flat; "
        "torch.cuda.memory._record_memory_history shows who holds them.",
        {"share": grew / peak, "growth_bytes": grew, "steps": n})]
