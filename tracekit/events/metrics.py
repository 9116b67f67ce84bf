"""Pure metric functions: classified events -> per-rank, per-step and per-gap tables. Nothing here reads or prints.

Per-rank numbers follow HolisticTraceAnalysis where the names match (span, idle, compute, overlap %);
per-step numbers follow the retired TensorBoard profiler plugin's distributed view.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit import intervals as iv

WINDOWS = ("drop_last", "all_steps", "trace")


def window_steps(steps: pd.DataFrame, window: str) -> pd.DataFrame:
    """The steps each rank's metrics cover: all but the last (default, as HTA), all of them, or none for the whole trace."""
    if window == "trace":
        return steps.iloc[0:0]
    if window == "all_steps":
        return steps
    last = steps.groupby("rank")["step"].transform("max")
    count = steps.groupby("rank")["step"].transform("size")
    return steps[(steps["step"] < last) | (count == 1)]


def all_device_events(events: pd.DataFrame) -> pd.DataFrame:
    """Every device event with a usable duration: rank, kind, start_ns, end_ns, step, launch_ns, launch_row (the
    events-table row of the call that launched it, -1 if unknown), name."""
    keep = (events["kind"].notna() & (events["dur_ns"] >= 0)).to_numpy()
    start = events["ts_ns"].to_numpy()[keep]
    return pd.DataFrame({  # the eight columns picked one by one: no copy of every column of the device rows
        "rank": events["rank"].to_numpy()[keep],
        "kind": events["kind"].array[keep],
        "start_ns": start,
        "end_ns": start + events["dur_ns"].to_numpy()[keep],
        "step": events["step"].to_numpy()[keep],
        "launch_ns": events["launch_ns"].to_numpy()[keep],
        "launch_row": events["launch_row"].to_numpy()[keep],
        "name": events["name"].array[keep],
    }, copy=False)


def in_window(dev: pd.DataFrame, steps: pd.DataFrame, window: str) -> pd.DataFrame:
    """The rows of a device view that the window keeps; a rank with no ProfilerStep is analysed whole."""
    if window == "trace":
        return dev
    kept = window_steps(steps, window)
    key = _rank_step_key(dev["rank"], dev["step"])
    keep = np.isin(key, _rank_step_key(kept["rank"], kept["step"])) | ~dev["rank"].isin(steps["rank"]).to_numpy()
    return dev[keep].reset_index(drop=True)


def _rank_step_key(rank: pd.Series, step: pd.Series) -> np.ndarray:
    return rank.to_numpy().astype(np.int64) * (1 << 40) + step.to_numpy().astype(np.int64)


def _sets(dev: pd.DataFrame) -> dict[str, iv.Intervals]:
    sets = {k: iv.merge(*_pick(dev, dev["kind"] == k)) for k in ("compute", "comm", "memory")}
    sets["all"] = iv.merge(dev["start_ns"].to_numpy(), dev["end_ns"].to_numpy())
    sets["overlap"] = iv.intersect(sets["comm"], sets["compute"])
    return sets


def _pick(dev, mask):
    return dev.loc[mask, "start_ns"].to_numpy(), dev.loc[mask, "end_ns"].to_numpy()


def rank_breakdown(dev: pd.DataFrame) -> pd.DataFrame:
    """Per rank: span, busy, compute, comm, overlap, exposed comm, memory and idle time (us), and the two percentages."""
    rows = []
    for rank, group in dev.groupby("rank", sort=True):
        sets = _sets(group)
        span_ns = int(group["end_ns"].max() - group["start_ns"].min())
        busy, comm, overlap = iv.total(*sets["all"]), iv.total(*sets["comm"]), iv.total(*sets["overlap"])
        rows.append({
            "rank": rank, "span_us": span_ns / 1e3, "busy_us": busy / 1e3,
            "compute_us": iv.total(*sets["compute"]) / 1e3, "comm_us": comm / 1e3, "overlap_us": overlap / 1e3,
            "exposed_comm_us": (comm - overlap) / 1e3, "memory_us": iv.total(*sets["memory"]) / 1e3,
            "idle_us": (span_ns - busy) / 1e3,
        })
    times = ["span_us", "busy_us", "compute_us", "comm_us", "overlap_us", "exposed_comm_us", "memory_us", "idle_us"]
    # Typed even with no rows: a rank's row of unknowns (NaN) must not make the run's column Python objects.
    out = pd.DataFrame(rows, columns=["rank", *times]).astype({c: np.float64 for c in times})
    with np.errstate(divide="ignore", invalid="ignore"):
        out["overlap_pct"] = np.where(out["comm_us"] > 0, out["overlap_us"] / out["comm_us"] * 100, np.nan)
        out["idle_pct"] = np.where(out["span_us"] > 0, out["idle_us"] / out["span_us"] * 100, np.nan)
    return out


def step_breakdown(events_dev_all: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank and ProfilerStep, the plugin's split: compute and comm not overlapped, overlap, and other (us).

    Steps tile each rank's timeline (the next starts where this one ends), so the window's steps add up to the time
    it took and ``step_us`` is the period the user waits for. A step ends where the next step's annotation begins
    or, when the device work launched in it and in earlier steps (their events' ``step``) ends later, where that
    work ends: a host that runs ahead of a saturated device (a queue of launches, or spin-waiting on device
    counters, which records no event) begins its next annotation before this step's work is done. ``ended_by``
    says which clock ended the step: ``host`` (the annotation) or ``device`` (its work). The last step, and one
    whose successor (N + 1) the trace lacks, ends at its annotation's end or where that device work ends, if later
    (never past the next step's start): steps are matched by number, not position.

    ``device_step_us`` is the step on the device's clock, where MFU is measured: it begins when the device has
    finished the compute launched in earlier steps (or at the step's annotation, if later) and ends the same way
    for the next step, so these steps tile the device's timeline too. Where compute keeps up it is ``step_us``;
    where the host runs ahead (100 us steps launching 1.2 ms kernels) it is the device's 1.2 ms, not the host's
    100 us. Compute only: a collective that runs on into the next step overlaps that step's compute; it does not
    delay it (``step_us`` counts all device work: copies and collectives too).
    """
    parts = []
    none = np.iinfo(np.int64).min  # no device work in the step (not -1: times may be negative)
    for rank, group in steps.groupby("rank", sort=True):
        annotated, numbers = group["start_ns"].to_numpy(), group["step"].to_numpy()
        mine = events_dev_all[events_dev_all["rank"] == rank]
        work = mine.groupby("step")["end_ns"].max().reindex(numbers).fillna(none).to_numpy(dtype=np.int64)
        drained = np.maximum.accumulate(work)  # all device work of this step and the earlier ones
        annotation_end = group["end_ns"].to_numpy()
        follows = np.append(numbers[1:] == numbers[:-1] + 1, False)
        starts = np.maximum(annotated, np.append(none, drained[:-1]))
        next_start = np.append(starts[1:], [np.iinfo(np.int64).max])
        ends = np.where(follows, next_start, np.minimum(np.maximum(annotation_end, drained), next_start))
        # The host's clock: where the step would end by its annotations alone.
        next_annotated = np.append(annotated[1:], [np.iinfo(np.int64).max])
        by_device = ends > np.where(follows, next_annotated, np.minimum(annotation_end, next_annotated))
        host_ends = np.where(follows, next_annotated, np.minimum(np.maximum(annotation_end, work), next_annotated))
        compute = mine[(mine["kind"] == "compute").to_numpy()].groupby("step")["end_ns"].max()
        done = np.maximum.accumulate(compute.reindex(numbers).fillna(none).to_numpy(dtype=np.int64))
        device_ns = np.maximum(host_ends, done) - np.maximum(annotated, np.append(none, done[:-1]))  # done: to here
        sets = _sets(mine)
        comp = iv.covered_within(sets["compute"], starts, ends)
        comm = iv.covered_within(sets["comm"], starts, ends)
        both = iv.covered_within(sets["overlap"], starts, ends)
        step_ns = ends - starts
        parts.append(pd.DataFrame({
            "rank": rank, "step": group["step"].to_numpy(), "start_ns": starts,
            "ended_by": np.where(by_device, "device", "host"), "step_us": step_ns / 1e3,
            "device_step_us": device_ns / 1e3, "compute_us": (comp - both) / 1e3, "overlap_us": both / 1e3,
            "exposed_comm_us": (comm - both) / 1e3, "other_us": (step_ns - comp - comm + both) / 1e3,
            "comm_us": comm / 1e3,
        }))
    if parts:
        return pd.concat(parts, ignore_index=True)
    times = ["step_us", "device_step_us", "compute_us", "overlap_us", "exposed_comm_us", "other_us", "comm_us"]
    return pd.DataFrame({**{c: pd.Series(dtype=np.int64) for c in ("rank", "step", "start_ns")},
                         "ended_by": pd.Series(dtype=object),
                         **{c: pd.Series(dtype=np.float64) for c in times}})


def gap_table(dev: pd.DataFrame) -> pd.DataFrame:
    """Every maximal interval inside a rank's window span where no device event runs."""
    parts = []
    for rank, group in dev.groupby("rank", sort=True):
        busy = iv.merge(group["start_ns"].to_numpy(), group["end_ns"].to_numpy())
        lo, hi = int(group["start_ns"].min()), int(group["end_ns"].max())
        gs, ge = iv.complement(busy, lo, hi)
        parts.append(pd.DataFrame({"rank": rank, "start_ns": gs, "dur_us": (ge - gs) / 1e3}))
    if not parts:
        return pd.DataFrame({"rank": pd.Series(dtype="int32"), "start_ns": pd.Series(dtype="int64"),
                             "dur_us": pd.Series(dtype=float)})
    return pd.concat(parts, ignore_index=True)


def allreduce_totals(collectives: pd.DataFrame) -> pd.DataFrame:
    """Per rank: all_reduce count, summed duration (us) and bytes; bytes NaN when any call's size is unknown."""
    ar = collectives[collectives["op"] == "all_reduce"]
    grouped = ar.groupby("rank", observed=True)
    unknown = ar["bytes"].isna().groupby(ar["rank"]).any()
    return pd.DataFrame({
        "allreduce_count": grouped.size(),
        "allreduce_us": grouped["dur_us"].sum(),
        "allreduce_bytes": grouped["bytes"].sum().where(~unknown),
    }).rename_axis("rank").reset_index()
