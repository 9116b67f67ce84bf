"""Memory per rank, device and step, from ``profile_memory``'s ``[memory]`` events, and the ops live at the peak.

Each event carries the allocator's running ``Total Allocated`` and ``Total Reserved`` on its device after the
allocation (``Bytes`` > 0) or free (``Bytes`` < 0) at ``Addr``. A step starts at the last reading before it or,
with none (the first step), at its first event's reading less that event's ``Bytes``: the level before it, so a
single step's growth is known (0 where its allocations are all freed). Peaks are the readings' (and the level
carried in from the reading before the step). A step's peak is the largest Total Allocated among
its events, or the level it started at if higher; the largest Total Allocated in the raw events is the run's peak.
At a device's peak, each allocation not yet freed is attributed to the innermost host op around it on its thread.
Without memory events the tables are empty and the data-quality notes say ``profile_memory`` was off.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.opschema import MEMORY_COLUMNS, MEMORY_TOP_COLUMNS

_DEVICE_TYPES = {0: "cpu", 1: "cuda"}


def device_label(device_type: int, device_id: int) -> str:
    if device_type == 0:
        return "cpu"
    return f"{_DEVICE_TYPES.get(device_type, f'type{device_type}')}:{device_id}"


def memory_table(memory: pd.DataFrame, steps: pd.DataFrame, device_memory: tuple[float, ...]) -> pd.DataFrame:
    """One row per device and step (``MEMORY_COLUMNS``); ``steps``: the rank's step table (step, start_ns,
    end_ns); ``device_memory``: totalGlobalMem of each listed device, by index."""
    if memory.empty:
        return pd.DataFrame(columns=list(MEMORY_COLUMNS))
    rows = []
    spans = [(int(s), int(a), int(b)) for s, a, b in steps[["step", "start_ns", "end_ns"]].itertuples(index=False)]
    spans = spans or [(-1, int(memory["ts_ns"].min()), int(memory["ts_ns"].max()) + 1)]
    for (dtype, did), dev in memory.groupby(["device_type", "device_id"], sort=True):
        ts = dev["ts_ns"].to_numpy()
        alloc, reserved = dev["total_allocated"].to_numpy(), dev["total_reserved"].to_numpy()
        # The level before an event: its own reading less the bytes it allocated (a free's are negative).
        level_before = alloc - dev["bytes"].to_numpy(dtype=float)
        for step, lo, hi in spans:
            inside = (ts >= lo) & (ts < hi)
            before = np.flatnonzero(ts < lo)
            start_alloc = alloc[before[-1]] if len(before) else np.nan  # a reading: what the peak may be
            start_reserved = reserved[before[-1]] if len(before) else np.nan
            if not inside.any() and not len(before):
                continue
            end_alloc = alloc[inside][-1] if inside.any() else start_alloc
            start = start_alloc if len(before) else level_before[np.argmax(inside)] if inside.any() else np.nan
            rows.append({"rank": int(dev["rank"].iloc[0]), "device_type": int(dtype), "device_id": int(did),
                         "device": device_label(int(dtype), int(did)), "step": step,
                         "peak_allocated_bytes": _known_max(np.append(alloc[inside], start_alloc)),
                         "peak_reserved_bytes": _known_max(np.append(reserved[inside], start_reserved)),
                         "start_allocated_bytes": start, "end_allocated_bytes": end_alloc,
                         "growth_bytes": end_alloc - start,
                         "device_memory_bytes": (device_memory[int(did)] if dtype != 0 and 0 <= did < len(device_memory)
                                                 else np.nan)})
    return pd.DataFrame(rows, columns=list(MEMORY_COLUMNS))


def _known_max(values: np.ndarray) -> float:
    """The largest known value; NaN when none is known (no event of the step carried the total)."""
    known = values[~np.isnan(values)]
    return float(known.max()) if len(known) else np.nan


def top_allocators(memory: pd.DataFrame, ops: pd.DataFrame, table: pd.DataFrame, top: int = 10) -> pd.DataFrame:
    """Per device, the ops whose allocations were still live at the device's peak (``MEMORY_TOP_COLUMNS``)."""
    out = []
    for (dtype, did), dev in memory.groupby(["device_type", "device_id"], sort=True):
        dev = dev.reset_index(drop=True)
        at = int(np.nanargmax(dev["total_allocated"].to_numpy())) if dev["total_allocated"].notna().any() else None
        if at is None:
            continue
        t_peak = dev["ts_ns"].iloc[at]
        upto = dev.iloc[:at + 1]
        # An allocation is live at the peak when no later free (up to the peak) names its address.
        freed = upto[upto["bytes"] < 0].groupby("addr")["ts_ns"].max()
        allocs = upto[upto["bytes"] > 0]
        last_free = freed.reindex(allocs["addr"]).to_numpy()
        live = allocs[~(last_free >= allocs["ts_ns"].to_numpy())]
        names = _innermost_op(live, ops)
        label = device_label(int(dtype), int(did))
        rows = (live.assign(op=names).groupby("op")["bytes"].agg(live_bytes="sum", allocations="size")
                .reset_index().sort_values("live_bytes", ascending=False).head(top))
        steps = table[(table["device"] == label) & table["peak_allocated_bytes"].notna()]  # NaN: a step's unknown
        step = steps.loc[steps["peak_allocated_bytes"].idxmax(), "step"] if len(steps) else -1
        out.append(rows.assign(rank=int(dev["rank"].iloc[0]), device=label, step=step))
    if not out:
        return pd.DataFrame(columns=list(MEMORY_TOP_COLUMNS))
    return pd.concat(out, ignore_index=True)[list(MEMORY_TOP_COLUMNS)]


def _innermost_op(events: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    from tracekit.nesting import innermost

    valid = ops[ops["dur_ns"] >= 0]
    hit = innermost(events["tid"], events["ts_ns"].to_numpy(), valid["tid"], valid["ts_ns"].to_numpy(),
                    (valid["ts_ns"] + valid["dur_ns"]).to_numpy())
    names = np.append(valid["name"].astype(str).to_numpy(), "(no op)")  # hit -1 (no op holds it): the last
    return names[hit]


def memory_timeline(memory: pd.DataFrame, points: int = 1000) -> pd.DataFrame:
    """Total Allocated and Reserved over time per device, at most ``points`` rows each (``MEMORY_TIMELINE_COLUMNS``):
    the events binned in time, each bin keeping its largest values, so no peak is lost in the drawing."""
    out = []
    for (dtype, did), dev in memory.groupby(["device_type", "device_id"], sort=True):
        ts = dev["ts_ns"].to_numpy()
        edges = np.linspace(ts.min(), ts.max() + 1, min(points, len(dev)) + 1)
        binned = dev.assign(bin=np.searchsorted(edges, ts, side="right") - 1).groupby("bin")
        frame = pd.DataFrame({"start_ns": binned["ts_ns"].min(), "allocated_bytes": binned["total_allocated"].max(),
                              "reserved_bytes": binned["total_reserved"].max()}).reset_index(drop=True)
        out.append(frame.assign(rank=int(dev["rank"].iloc[0]), device=device_label(int(dtype), int(did))))
    if not out:
        return pd.DataFrame(columns=["rank", "device", "start_ns", "allocated_bytes", "reserved_bytes"])
    return pd.concat(out, ignore_index=True)[["rank", "device", "start_ns", "allocated_bytes", "reserved_bytes"]]
