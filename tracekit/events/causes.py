"""Why a device sits idle: one cause per gap, read from what the host was doing at the time.

Causes, first match wins:
  sync       a host call that blocks until the device drains was running during the gap: a synchronize, a
             blocking copy, or a free/pinned allocation (cudaFree/hipFree, cudaHostAlloc; see SYNC_CALL)
  data       a DataLoader ``__next__`` was running
  comm_wait  a host-side collective call or wait was running, or the work that ends the gap is a collective
  host       the launch of the work that ends the gap began after the gap started (the host was late)
  other      none of these (e.g. a cross-stream dependency)
On CPU-only ranks the training thread plays the device: a gap is time with no op running on it, and it is
``host`` (Python between ops) unless one of the first three explains it.

A ``host`` gap has a kind (``host_kinds``): ``graph launch`` when the work that ends it was issued by a graph launch
(``cudaGraphLaunch``/``hipGraphLaunch``: ``tracekit.events.graphs``), ``kernel launch`` when by any other call.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit import intervals as iv
from tracekit.events.graphs import GRAPH_LAUNCH, runtime_calls
from tracekit.read.categories import DEVICE_CATEGORIES, RUNTIME_CATEGORIES
from tracekit.read.coded import distinct
from tracekit.commnames import HOST_COMM_PREFIXES

# The one order of the causes: the Summary's idle_<cause>_us columns, the charts' stacks and compare's rows follow it.
CAUSES = ("sync", "data", "comm_wait", "host", "other")
# Host calls that block until the device drains: every *Synchronize, blocking (not *Async) copies and memsets, frees
# (the async stream-ordered cudaFreeAsync excepted) and pinned host allocations, and ops that read a device value.
SYNC_CALL = re.compile(r"(?i)synchronize$|^(cuda|hip)memcpy(2d|3d|dtoh|htod|dtod|withstream)?$|^(cuda|hip)memset$"
                       r"|^(cuda|hip)(free|freehost|hostfree|freearray|hostalloc|mallochost|hostmalloc)$"
                       r"|^cumem(free|freehost|allochost)(_v2)?$|^aten::(item|_local_scalar_dense)$")
DATA_LOADER = re.compile(r"^enumerate\(DataLoader\)#.*__next__$")
# A host op that hands work to a communication backend, or waits for one (a name that ends in ``::wait``).
HOST_COMM = re.compile("^(?:" + "|".join(map(re.escape, HOST_COMM_PREFIXES)) + r")|::wait$")
DATA_PARALLEL_OP = "DataParallel.forward"  # torch.nn.DataParallel's forward: seen only when DataParallel runs
# DistributedDataParallel's forward and its gradient reducer: seen only when DDP runs (and so communicates).
DDP_OP = re.compile(r"^DistributedDataParallel\.forward$|^torch\.distributed\.ddp\.reducer::")
REDUCED_PRECISION = re.compile(r"(?i)bf16|fp16|f16|half|bfloat16|h884|h1688|h16816|hmma|fp8|e4m3|e5m2")


def _host_set(events: pd.DataFrame, pattern: re.Pattern) -> iv.Intervals:
    names = events["name"].cat.categories
    wanted = names[[pattern.search(n) is not None for n in names]]
    rows = events[events["name"].isin(wanted) & (events["dur_ns"] >= 0) & events["kind"].isna()
                  & ~events["cat"].isin(DEVICE_CATEGORIES)]  # host events (not device work launched pre-trace)
    return iv.merge(rows["ts_ns"].to_numpy(), (rows["ts_ns"] + rows["dur_ns"]).to_numpy())


def gap_causes(gaps: pd.DataFrame, dev: pd.DataFrame, events: pd.DataFrame, on_gpu: bool) -> np.ndarray:
    """A cause per gap (gaps: start_ns, dur_us; dev: the window's device events with start_ns, kind, launch_ns)."""
    if gaps.empty:
        return np.array([], dtype=object)
    gs = gaps["start_ns"].to_numpy()
    ge = gs + np.rint(gaps["dur_us"].to_numpy() * 1e3).astype(np.int64)
    during = {name: iv.covered_within(_host_set(events, pattern), gs, ge) > 0
              for name, pattern in (("sync", SYNC_CALL), ("data", DATA_LOADER), ("comm", HOST_COMM))}
    # The device event that ends each gap.
    order = np.argsort(dev["start_ns"].to_numpy(), kind="stable")
    starts = dev["start_ns"].to_numpy()[order]
    nxt = order[np.minimum(np.searchsorted(starts, ge, side="left"), len(order) - 1)]
    next_is_comm = dev["kind"].to_numpy()[nxt] == "comm"
    launch = dev["launch_ns"].to_numpy()[nxt]
    late_launch = (launch >= 0) & (launch > gs) if on_gpu else np.ones(len(gs), dtype=bool)
    return np.select(
        [during["sync"], during["data"], during["comm"] | (next_is_comm & on_gpu), late_launch],
        ["sync", "data", "comm_wait", "host"], default="other").astype(object)


def host_kinds(gaps: pd.DataFrame, dev: pd.DataFrame, events: pd.DataFrame) -> np.ndarray:
    """Per gap (with its ``cause``): ``graph launch`` for a ``host`` gap whose ending work a graph launch issued
    (its ``launch_ns`` is a graph-launch call's start on the rank), ``kernel launch`` for another ``host`` gap,
    ``''`` for the other causes."""
    if gaps.empty:
        return np.array([], dtype=object)
    graph = runtime_calls(events, GRAPH_LAUNCH)
    graph_ts = np.unique(events["ts_ns"].to_numpy()[graph])
    ge = gaps["start_ns"].to_numpy() + np.rint(gaps["dur_us"].to_numpy() * 1e3).astype(np.int64)
    order = np.argsort(dev["start_ns"].to_numpy(), kind="stable")
    nxt = order[np.minimum(np.searchsorted(dev["start_ns"].to_numpy()[order], ge, side="left"), len(order) - 1)]
    by_graph = np.isin(dev["launch_ns"].to_numpy()[nxt], graph_ts)
    host = gaps["cause"].to_numpy() == "host"
    return np.where(host, np.where(by_graph, "graph launch", "kernel launch"), "").astype(object)


def idle_by_cause(gaps: pd.DataFrame) -> dict[str, float]:
    """Idle time (us) per cause; the five add up to the rank's idle time. ``idle_graph_launch_us``: the part of
    ``idle_host_us`` of kind ``graph launch`` (``host_kinds``)."""
    totals = gaps.groupby("cause")["dur_us"].sum() if len(gaps) else pd.Series(dtype=float)
    out = {f"idle_{c}_us": float(totals.get(c, 0.0)) for c in CAUSES}
    graph = gaps["host_kind"] == "graph launch" if "host_kind" in gaps else np.zeros(len(gaps), dtype=bool)
    return {**out, "idle_graph_launch_us": float(gaps.loc[graph, "dur_us"].sum()) if len(gaps) else 0.0}


def host_facts(events: pd.DataFrame, dev: pd.DataFrame, steps_in_window: pd.DataFrame | None) -> dict:
    """Facts the findings need: sync calls and graph launches inside the window's steps (``None``: the whole trace),
    DataParallel, DistributedDataParallel, the GPU runtime (``cuda``/``hip``), reduced-precision compute time."""
    names = events["name"].cat.categories
    sync_names = names[[SYNC_CALL.search(n) is not None for n in names]]
    sync = events[events["name"].isin(sync_names)]
    if steps_in_window is not None:
        sync = sync[sync["step"].isin(steps_in_window["step"])]
    runtime = sync["cat"].isin(RUNTIME_CATEGORIES)
    sync = sync[runtime] if runtime.any() else sync.iloc[0:0]
    compute = dev[dev["kind"] == "compute"]
    names = compute["name"]
    reduced = names.isin([n for n in distinct(names) if REDUCED_PRECISION.search(str(n)) is not None])
    compute_sets = iv.merge(compute["start_ns"].to_numpy(), compute["end_ns"].to_numpy())
    reduced_sets = iv.merge(compute.loc[reduced.astype(bool), "start_ns"].to_numpy(),
                            compute.loc[reduced.astype(bool), "end_ns"].to_numpy())
    return {
        "sync_calls": int(len(sync)),
        "sync_top_call": _top_call(sync),
        "graph_launches": _graph_launches(events, steps_in_window),
        "data_parallel": bool(events["name"].isin([DATA_PARALLEL_OP]).any()),
        "ddp": _seen(events, DDP_OP),
        "gpu_runtime": _runtime(events),
        "reduced_precision_us": iv.total(*reduced_sets) / 1e3,
        "compute_kernel_us": iv.total(*compute_sets) / 1e3,
    }


def _graph_launches(events: pd.DataFrame, steps_in_window: pd.DataFrame | None) -> int:
    """Graph-launch calls (``graphs.GRAPH_LAUNCH``) inside the window's steps (``None``: the whole trace)."""
    graph = runtime_calls(events, GRAPH_LAUNCH)
    if steps_in_window is not None:
        graph = graph & events["step"].isin(steps_in_window["step"]).to_numpy()
    return int(graph.sum())


def _top_call(calls: pd.DataFrame) -> str | None:
    """The name of the calls that take the most host time (None without any): what the sync finding advises on."""
    if calls.empty:
        return None
    per_name = calls["dur_ns"].clip(lower=0).groupby(calls["name"].astype(str)).sum()
    return str(per_name.idxmax())


def _seen(events: pd.DataFrame, pattern: re.Pattern) -> bool:
    names = events["name"].cat.categories
    return bool(events["name"].isin(names[[pattern.search(n) is not None for n in names]]).any())


def _runtime(events: pd.DataFrame) -> str | None:
    """``hip`` or ``cuda`` from the names of the runtime calls (ROCm's are hip*), ``mtia`` from MTIA's runtime or
    device categories; None when the trace has none."""
    if events["cat"].isin(["mtia_runtime", "mtia_ccp_events"]).any():
        return "mtia"
    calls = [str(n) for n in distinct(events.loc[events["cat"] == "cuda_runtime", "name"])]
    if any(n.startswith("hip") for n in calls):
        return "hip"
    return "cuda" if any(n.startswith("cuda") for n in calls) else None
