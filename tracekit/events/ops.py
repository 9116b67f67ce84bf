"""The operator table of one rank: per op name and input shapes, its calls, host and device times, FLOPs and bytes.

In: the reader's ops table (every ``cpu_op`` and ``user_annotation``, ``tracekit.read.opcolumns``), the classified
events (for the kernels each op launched), the rank's steps, and the device's peaks (``tracekit.devices``).

- host_total_us: the op's duration; host_self_us: minus its children's (the ops it encloses on its thread), as
  ``torch.profiler``'s ``key_averages()`` has them (self CPU time).
- device_self_us: the durations of the device events it launched itself (a kernel's ``External id``, else its
  launch call's, names the op); device_us: its own and its descendants' (the TensorBoard plugin's device total).
- flops, bytes: per call from the recorded shapes (``tracekit.events.flops``), summed; ``counted_flops`` only for
  the innermost matmul-class op of a call tree (a linear's addmm, not the linear too), which is what the run's
  FLOPs and MFU add up. A step no op started in has 0 FLOPs; a rank whose ops table holds annotations only (no
  ``cpu_op``), or operators none of which has a usable duration (``usable``), has unknown (NaN) FLOPs in every
  step: no operator is left to count.
- achieved_tflops, achieved_gbps: from the op's device time on a device rank, its host time on a CPU-only rank.
- roofline_us = max(flops / peak at its math key, bytes / memory bandwidth); pct_of_roofline = roofline / measured
  time x 100 (TraceLens' "Pct Roofline"). NaN for an unknown device, dtype or shape. The math key is the dtype's,
  TF32 where an fp32 op ran tensor-op kernels; host <-> device copies are judged against the host link; no rate
  exceeds its bound (``tracekit.events.bounds``).
Times cover the whole trace (as ``key_averages()`` and HolisticTraceAnalysis do); ``window_counted_flops`` the window's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit import devices
from tracekit.events.unknownflops import unknown_flops_text
from tracekit.events import bounds
from tracekit.events.flops import MATMUL_CLASS
from tracekit.events.grouping import Groups
from tracekit.events.opcosts import op_costs
from tracekit.events.optree import has_marked_descendant, op_tree, subtree_sums
from tracekit.opschema import OP_COLUMNS, OP_SHAPE_COLUMNS, OP_STEP_COLUMNS, STEP_FLOP_COLUMNS

_KEY = ["name", "input_dims", "input_type"]
_STEP_ANNOTATION = r"ProfilerStep#\d+$"  # 2021-era traces file it under Operator (cpu_op): a step, not an op


def has_operators(ops: pd.DataFrame) -> bool:
    """Whether the ops table holds an operator: a ``cpu_op`` row that is not a ``ProfilerStep#N`` annotation."""
    if "cpu_op" not in ops or not bool(ops["cpu_op"].any()):
        return False
    names = ops["name"].astype("category")
    codes = names.cat.codes.to_numpy()
    step = np.append(names.cat.categories.astype(str).str.match(_STEP_ANNOTATION), False)[codes]  # code -1: no name
    return bool((ops["cpu_op"].to_numpy() & ~step).any())


def op_tables(ops: pd.DataFrame, events: pd.DataFrame, steps: pd.DataFrame, window: pd.DataFrame,
              peaks: devices.DevicePeaks | None, device_rank: bool, launched=None) -> tuple[pd.DataFrame, ...]:
    """(ops by name and shapes, ops by name, FLOPs per step, ops per window step, the ops that leave steps' FLOPs
    unknown: ``unknownflops.unknown_flops_text``) of one rank. ``steps``: its step table (step, start_ns, end_ns);
    ``window``: the steps its metrics cover; ``launched``: ``launches(ops, events)`` when known."""
    ops = usable(ops)
    if ops.empty:
        return (pd.DataFrame(columns=list(OP_SHAPE_COLUMNS)), pd.DataFrame(columns=list(OP_COLUMNS)),
                pd.DataFrame(columns=list(STEP_FLOP_COLUMNS)), pd.DataFrame(columns=list(OP_STEP_COLUMNS)), "")
    step = _step_of(ops["ts_ns"].to_numpy(), steps)
    in_window = np.isin(step, window["step"].to_numpy()) if len(steps) else np.ones(len(ops), dtype=bool)
    stepped = in_window & (step >= 0)
    groups = {"shape": Groups(ops[["rank", *_KEY]], sort=False, dropna=False),
              "name": Groups(ops[["rank", "name"]], sort=False, dropna=False)}
    per_step = Groups(pd.DataFrame({"rank": ops["rank"].to_numpy()[stepped], "step": step[stepped],
                                    "name": ops["name"].array[stepped]}), sort=True, dropna=True)
    # FLOPs per step: every step's, in the window or not; all ops in steps: no copy of each column to reduce it.
    in_step = slice(None) if (step >= 0).all() else step >= 0
    flop_groups = Groups(pd.DataFrame({"rank": ops["rank"].to_numpy()[in_step], "step": step[in_step]}),
                         sort=True, dropna=True)
    sums = {k: {} for k in groups}
    step_sums, flop_sums, unknown_flops = {}, {}, ""
    # Each per-call column is made, reduced for every table that reads it, and let go before the next one.
    for column, values in _per_call(ops, events, in_window, peaks, device_rank, launched):
        for key, g in groups.items():
            sums[key].update(_reduced(g, column, values))
        if column in ("calls", "host_self_us"):
            step_sums[column] = per_step.sum(values[stepped])
        elif column == "device_self_us":
            step_sums[column] = per_step.strict_sum(values[stepped])
        elif column in ("matmul_flops", "matmul_at_peak_us"):  # one unknown makes the step's sum unknown
            flop_sums[column] = flop_groups.strict_sum(values[in_step])
            if column == "matmul_flops":
                unknown_flops = unknown_flops_text(ops["name"].array[in_step], step[in_step], values[in_step])
    by_shape = _grouped(groups["shape"].keys, sums["shape"], peaks, device_rank)
    by_name = _grouped(groups["name"].keys, sums["name"], peaks, device_rank)  # the shape columns are not summed
    flop_steps = _every_step(flop_groups.keys.assign(**flop_sums), steps, int(ops["rank"].iloc[0]), has_operators(ops), peaks is not None)
    op_steps = per_step.keys.assign(**step_sums)
    return (by_shape[list(OP_SHAPE_COLUMNS)], by_name[list(OP_COLUMNS)], flop_steps[list(STEP_FLOP_COLUMNS)],
            op_steps[list(OP_STEP_COLUMNS)], unknown_flops)


_SUMMED = ("calls", "host_self_us", "host_total_us", "device_self_us", "device_us", "flops", "bytes", "counted_flops",
           "window_counted_flops", "flops_arg", "host_link_bytes")


def _reduced(groups: Groups, column: str, values: np.ndarray) -> dict[str, np.ndarray]:
    """What the op tables keep of one per-call column, per group."""
    if column == "kind":
        return {"kind": groups.first(values)}
    if column in ("dtype", "math"):  # one dtype: the first call's (missing included); calls of several: "mixed"
        return {column: np.where(groups.at_most_one_value(values), groups.first(values, skipna=False), "mixed")}
    if column not in _SUMMED:
        return {}
    out = {column: groups.sum(values, min_count=1)}
    if column in ("flops", "bytes", "host_link_bytes"):  # a sum over calls is known only when every call's is
        out[column] = np.where(groups.all(np.isfinite(values)), out[column], np.nan)
    return out


def _per_call(ops: pd.DataFrame, events: pd.DataFrame, in_window: np.ndarray,
              peaks: devices.DevicePeaks | None, device_rank: bool, launched):
    """The per-call columns of ``op_tables``, one (name, array) at a time: times, FLOPs and bytes of each call,
    the matmul FLOPs and time at peak that each call adds to its step (NaN: unknown), and last its kind and dtype.
    Each working array is let go once used: a large trace has millions of ops, each array 8 bytes an op."""
    start = ops["ts_ns"].to_numpy()
    dur = ops["dur_ns"].to_numpy()
    yield "calls", np.ones(len(ops), dtype=np.int64)
    yield "host_total_us", dur / 1e3
    yield "flops_arg", ops["flops_arg"].to_numpy()
    row_type = np.int32 if len(ops) < 2**31 else np.int64  # 4 bytes an op where that numbers them
    parent, depth, covered = op_tree(ops["tid"].cat.codes.to_numpy(), start, start + dur)
    parent, depth = parent.astype(row_type), depth.astype(row_type)
    yield "host_self_us", (dur - covered) / 1e3  # the time no child covers: never below 0
    del covered
    launched = (launched or launches(ops, events)) if device_rank else None
    device_self = _device_self(ops, launched) if device_rank else np.full(len(ops), np.nan)
    yield "device_us", subtree_sums(device_self, parent, depth) / 1e3
    device_self /= 1e3  # in place: its sums over subtrees are made
    yield "device_self_us", device_self
    del device_self
    # Kernels that show the math mode (TF32) or a host <-> device copy, anywhere below each op (tracekit.events.bounds)
    tf32, host_copy = ((subtree_sums(f, parent, depth) > 0 for f in bounds.launch_flags(
        launched[0]["name"], launched[1], len(ops))) if launched is not None else (np.zeros(len(ops), bool),) * 2)
    cost, inverse = op_costs(ops, peaks)
    math = bounds.math_keys(cost["dtype"], inverse, tf32)
    flops = cost["flops"][inverse]
    yield "flops", flops
    matmul_name = ops["name"].isin(MATMUL_CLASS).to_numpy()
    matmul = matmul_name & np.isfinite(flops)
    innermost = ~has_marked_descendant(matmul, parent, depth)
    del parent, depth
    counted = np.where(matmul & innermost, flops, 0.0)
    # A matmul-class op with unknown FLOPs and none known below it: its step's FLOPs are unknown, not smaller.
    unknown = matmul_name & ~np.isfinite(flops) & innermost
    del matmul_name, matmul, innermost, flops
    yield "counted_flops", counted
    yield "window_counted_flops", np.where(in_window, counted, 0.0)
    peak = np.where(math == "tf32", devices.peak_tflops(peaks, "tf32") * 1e12, cost["peak_flops"][inverse])
    # Time at peak: unknown for every op of a rank whose device's peaks are unknown (a CPU rank, an unnamed device),
    # even one with no FLOPs, so that its MFU is unknown, not 0.
    at_peak = np.where(counted > 0, counted / peak * 1e6, 0.0 if peaks is not None else np.nan)
    del peak
    counted[unknown] = np.nan  # in place: the counted FLOPs are reduced already
    yield "matmul_flops", counted
    del counted
    at_peak[unknown] = np.nan
    yield "matmul_at_peak_us", at_peak
    del at_peak, unknown
    # A host <-> device copy moves one buffer over the host link: copy_'s read + write, halved.
    moved = cost["bytes"][inverse] / np.where(host_copy & (ops["name"] == "aten::copy_").to_numpy(), 2, 1)
    yield "bytes", moved
    yield "host_link_bytes", np.where(host_copy, moved, 0.0)
    del moved, host_copy
    # Last, when the call tree's arrays are gone: the object columns' reductions (distinct dtypes) take the most.
    yield "math", math
    for column in ("kind", "dtype"):
        yield column, cost[column][inverse]


def precision_facts(ops_by_shape: pd.DataFrame) -> dict:
    """Device time of the matmul-class ops with a recorded dtype, and the part in bf16/fp16/fp8: the dtype an op
    ran in is its Input type, which kernel names often hide (hipBLASLt's Cijk_* kernels). NaN without such ops."""
    typed = ops_by_shape[ops_by_shape["name"].isin(MATMUL_CLASS).to_numpy() & ops_by_shape["dtype"].notna().to_numpy()
                         & (ops_by_shape["dtype"] != "mixed").to_numpy()]
    time = typed["device_self_us"].to_numpy(dtype=float)
    if not len(typed) or not np.isfinite(time).all() or time.sum() <= 0:
        return {"matmul_device_us": np.nan, "matmul_reduced_us": np.nan}
    reduced = _per_value(typed["dtype"], lambda d: devices.dtype_key(d) in ("bf16", "fp16", "fp8")).astype(bool)
    return {"matmul_device_us": float(time.sum()), "matmul_reduced_us": float(time[reduced].sum())}


def usable(ops: pd.DataFrame) -> pd.DataFrame:
    """The ops with a usable duration, numbered from 0: the rows ``launches`` and the op tables count. A table that
    is already so is returned as it is (each stage asks again; no copy of every op each time)."""
    keep = ops["dur_ns"].to_numpy() >= 0
    if keep.all() and ops.index.equals(pd.RangeIndex(len(ops))):
        return ops
    return ops[keep].reset_index(drop=True)


def launches(ops: pd.DataFrame, events: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """(device events, the row in ``usable(ops)`` of the op that launched each, -1 when unknown).

    Where the launch call is known (its correlation), the launching op is the innermost op around that call on its
    thread: what the profiler's own tree says, in every Kineto era (older ones give launch calls an External id that
    is their correlation id, which names unrelated ops). Without a known launch, the op whose External id is the
    device event's own."""
    from tracekit.nesting import innermost

    ops = usable(ops)
    is_dev = events["kind"].notna().to_numpy() & (events["dur_ns"].to_numpy() >= 0)
    dev = events.loc[is_dev, ["rank", "name", "dur_ns"]]  # what the op tables read of a device event
    launch_row = events["launch_row"].to_numpy()[is_dev] if "launch_row" in events else np.full(len(dev), -1)
    launched = launch_row >= 0
    rows = np.full(len(dev), -1, dtype=np.int64)
    if launched.any():
        calls = launch_row[launched]  # the launch calls' rows: their thread and start, not a copy of every column
        rows[launched] = innermost(events["tid"].iloc[calls], events["ts_ns"].to_numpy()[calls], ops["tid"],
                                   ops["ts_ns"].to_numpy(), (ops["ts_ns"] + ops["dur_ns"]).to_numpy())
    return dev, np.where(launched, rows, _last_row_with_id(ops["external_id"].to_numpy(),
                                                           events["external_id"].to_numpy()[is_dev]))


def _last_row_with_id(own: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Per wanted id, the last row of ``own`` holding it, -1 where none does (or the id is none: negative). A stable
    sort keeps the rows of one id in order, so the last of them is where a binary search from the right lands."""
    rows = np.flatnonzero(own >= 0)
    order = np.argsort(own[rows], kind="stable")
    rows = rows[order]
    del order
    ids = own[rows]
    at = np.maximum(np.searchsorted(ids, wanted, side="right") - 1, 0)
    found = (ids[at] == wanted) & (wanted >= 0) if len(ids) else np.zeros(len(wanted), dtype=bool)
    return np.where(found, rows[at] if len(ids) else -1, -1).astype(np.int64)


def _device_self(ops: pd.DataFrame, launched: tuple[pd.DataFrame, np.ndarray]) -> np.ndarray:
    """Per op: the total duration (ns) of the device events it launched (``launched``: ``launches``)."""
    dev, row = launched
    out = np.zeros(len(ops))
    known = row >= 0
    np.add.at(out, row[known], dev["dur_ns"].to_numpy(dtype=np.float64)[known])
    return out


def kernel_ops(ops: pd.DataFrame, events: pd.DataFrame, launched=None) -> pd.DataFrame:
    """Per device event name of a rank, the op that launched most of its time (rank, kernel, op); ``launched``:
    ``launches(ops, events)`` when known."""
    ops = usable(ops)
    if ops.empty:
        return pd.DataFrame(columns=["rank", "kernel", "op"])
    dev, row = launched or launches(ops, events)
    known = row >= 0
    kernel, op = dev["name"].astype("category"), ops["name"].astype("category")
    # Summed by the names' codes (no string per event), then named and put in the names' text order.
    frame = pd.DataFrame({"rank": dev["rank"].to_numpy()[known], "kernel": kernel.cat.codes.to_numpy()[known],
                          "op": op.cat.codes.to_numpy()[row[known]], "ns": dev["dur_ns"].to_numpy()[known]})
    totals = frame[(frame["kernel"] >= 0).to_numpy() & (frame["op"] >= 0).to_numpy()].groupby(
        ["rank", "kernel", "op"], as_index=False)["ns"].sum()
    for col, names in (("kernel", kernel), ("op", op)):
        totals[col] = np.asarray(names.cat.categories.astype(str), dtype=object)[totals[col].to_numpy()]
    totals = totals.sort_values(["rank", "kernel", "op"], kind="stable", ignore_index=True)
    return totals.sort_values("ns", ascending=False).drop_duplicates(["rank", "kernel"])[["rank", "kernel", "op"]]


def _every_step(flop_steps: pd.DataFrame, steps: pd.DataFrame, rank: int, operators: bool,
                peaks_known: bool) -> pd.DataFrame:
    """FLOPs per step for every step of the rank. With operators (``cpu_op`` rows) recorded, a step none started in
    has a known 0 FLOPs (and 0 us at peak where the device's peaks are known, else unknown); with annotations only
    (``ProfilerStep#N``, ``record_function``) or with no operator of a usable duration left, nothing can be
    counted, so every step's FLOPs are unknown (NaN), not 0."""
    every = np.asarray(pd.unique(steps["step"]) if len(steps) else [], dtype=np.int64)
    mine = flop_steps["rank"].to_numpy(dtype=np.int64) == rank
    at = pd.Index(flop_steps["step"].to_numpy(dtype=np.int64)[mine]).get_indexer(every)  # -1: no op started in it
    out = pd.DataFrame({"rank": np.full(len(every), rank, dtype=np.int64), "step": every})
    for column, none_started in (("matmul_flops", 0.0), ("matmul_at_peak_us", 0.0 if peaks_known else np.nan)):
        known = np.append(flop_steps[column].to_numpy(dtype=float)[mine], np.nan)  # at -1: the NaN appended
        out[column] = np.where(at >= 0, known[at], none_started) if operators else np.nan
    return out


def _step_of(start: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """The step whose ProfilerStep span holds each op's start, -1 outside every step."""
    if steps.empty:
        return np.full(len(start), -1, dtype=np.int64)
    ordered = steps.sort_values("start_ns")
    lo, hi = ordered["start_ns"].to_numpy(), ordered["end_ns"].to_numpy()
    at = np.searchsorted(lo, start, side="right") - 1
    inside = (at >= 0) & (start < hi[np.maximum(at, 0)])
    return np.where(inside, ordered["step"].to_numpy()[np.maximum(at, 0)], -1)


def _grouped(keys: pd.DataFrame, sums: dict[str, np.ndarray], peaks, device_rank: bool) -> pd.DataFrame:
    """One op table from its groups' keys and per-group sums (``_reduced``), with the achieved and roofline columns."""
    out = keys.assign(**{c: sums[c] for c in _SUMMED})
    out["calls"] = out["calls"].astype(np.int64)
    out["kind"], out["dtype"], out["math"] = sums["kind"], sums["dtype"], sums["math"]
    measured_us = out["device_us"].to_numpy() if device_rank else out["host_total_us"].to_numpy()
    out = bounds.rooflines(out, peaks, measured_us)
    return out.sort_values(["rank", "host_total_us"], ascending=[True, False], ignore_index=True)


def _per_value(values: pd.Series, compute) -> np.ndarray:
    """``compute(v)`` for each value, as floats, computed once per distinct value (NaN and None included)."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return np.array([compute(u) for u in uniques], dtype=np.float64)[codes] if len(codes) else np.empty(0)
