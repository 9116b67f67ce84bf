"""Why a device sits idle: the causes an idle gap's time is split between, the names that say them, and the host
facts the findings read.

Causes (``CAUSES``; how a gap's time is split between them: ``tracekit.events.gapsplit``):
  sync             a host call that blocks until the device drains ran: a synchronize, a blocking copy, a free
                   (cudaFree/hipFree), ``.item()`` (``SYNC_CALL``)
  alloc            an allocation call ran: cudaMalloc, cudaMallocAsync, cudaMallocHost, cudaHostAlloc, hipMalloc, ...
                   (``ALLOC_CALL``): the caching allocator taking memory from the driver
  data             a DataLoader ``__next__`` ran
  comm_wait        a host-side collective call, or a wait for one, ran (``COMM_CALL``)
  host             the host ran other recorded work (operators, runtime calls, Python functions) and launched late
  host_unrecorded  the launching thread recorded nothing then (Python between ops, or work the profiler missed)
  other            the work that ends the gap was launched before it began (a cross-stream dependency, an event wait)

The part of a gap that is ``host`` has a kind (``host_kinds``): ``graph launch`` when the work that ends it was
issued by a graph launch (``cudaGraphLaunch``/``hipGraphLaunch``: ``tracekit.events.graphs``), ``kernel launch``
when by any other call.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit import intervals as iv
from tracekit.events.graphs import GRAPH_LAUNCH, runtime_calls
from tracekit.read.categories import DEVICE_CATEGORIES, RUNTIME_CATEGORIES
from tracekit.read.coded import distinct
from tracekit.commnames import COLLECTIVE_OP, HOST_COMM_PREFIXES
from tracekit.schema import IDLE_CAUSES

# The one order of the causes: the Summary's idle_<cause>_us columns, the charts' stacks and compare's rows follow it.
CAUSES = tuple(IDLE_CAUSES)
# Host calls that block until the device drains: every *Synchronize, blocking (not *Async) copies and memsets, frees
# (the async stream-ordered cudaFreeAsync excepted) and pinned host allocations, and ops that read a device value.
SYNC_CALL = re.compile(r"(?i)synchronize$|^(cuda|hip)memcpy(2d|3d|dtoh|htod|dtod|withstream)?$|^(cuda|hip)memset$"
                       r"|^(cuda|hip)(free|freehost|hostfree|freearray|hostalloc|mallochost|hostmalloc)$"
                       r"|^cumem(free|freehost|allochost)(_v2)?$|^aten::(item|_local_scalar_dense)$")
# Allocation calls: device, managed and pinned host memory taken from the driver (the runtime's and the driver API's).
# They win over SYNC_CALL where both match (cudaHostAlloc): the fix is the allocator's, not fewer synchronizations.
ALLOC_CALL = re.compile(r"(?i)^(cuda|hip)(malloc\w*|hostalloc|hostmalloc|extmalloc\w*)$"
                        r"|^cumem(alloc\w*|create|map|addressreserve)(_v2)?$")
DATA_LOADER = re.compile(r"^enumerate\(DataLoader\)#.*__next__$")
# A host op that hands work to a communication backend, or waits for one (a name that ends in ``::wait``).
HOST_COMM = re.compile("^(?:" + "|".join(map(re.escape, HOST_COMM_PREFIXES)) + r")|::wait$")
# What makes the host wait on communication: HOST_COMM, any op that is a collective (commnames.COLLECTIVE_OP:
# _c10d_functional::all_to_all_single, vllm::all_reduce, ...) and functional collectives' wait_tensor.
COMM_CALL = re.compile(f"{HOST_COMM.pattern}|(?i:{COLLECTIVE_OP.pattern.removeprefix('(?i)')})|::wait_tensor$")
DATA_PARALLEL_OP = "DataParallel.forward"  # torch.nn.DataParallel's forward: seen only when DataParallel runs
# DistributedDataParallel's forward and its gradient reducer: seen only when DDP runs (and so communicates).
DDP_OP = re.compile(r"^DistributedDataParallel\.forward$|^torch\.distributed\.ddp\.reducer::")
REDUCED_PRECISION = re.compile(r"(?i)bf16|fp16|f16|half|bfloat16|h884|h1688|h16816|hmma|fp8|e4m3|e5m2")


def host_kinds(gaps: pd.DataFrame, dev: pd.DataFrame, events: pd.DataFrame, device_rank: bool = True) -> np.ndarray:
    """Per gap (with its ``idle_host_us``): ``graph launch`` where some of it is ``host`` and the work that ends it
    was issued by a graph launch (its ``launch_ns`` is a graph-launch call's start on the rank), ``kernel launch``
    where some is ``host`` and another call issued it, ``''`` where none of it is ``host``, and on every gap of a
    rank with no device (``device_rank`` False: a CPU-only rank launches nothing)."""
    if gaps.empty or not device_rank:
        return np.full(len(gaps), "", dtype=object)
    graph = runtime_calls(events, GRAPH_LAUNCH)
    graph_ts = np.unique(events["ts_ns"].to_numpy()[graph])
    ge = gaps["start_ns"].to_numpy() + np.rint(gaps["dur_us"].to_numpy() * 1e3).astype(np.int64)
    nxt = next_work(dev, ge)
    by_graph = np.isin(dev["launch_ns"].to_numpy()[nxt], graph_ts)
    host = gaps["idle_host_us"].to_numpy() > 0
    return np.where(host, np.where(by_graph, "graph launch", "kernel launch"), "").astype(object)


def next_work(dev: pd.DataFrame, ends_ns: np.ndarray) -> np.ndarray:
    """Per gap end, the row of ``dev`` (start_ns, launch_ns) of the work that ends the gap: the first to start at or
    after it; of several that start together, the last launched (where one was launched during the gap, the device
    waited for it), so that the answer does not hang on the order of the trace's events."""
    start, launch = dev["start_ns"].to_numpy(), dev["launch_ns"].to_numpy()
    order = np.lexsort((np.arange(len(start)), -launch, start))
    return order[np.minimum(np.searchsorted(start[order], ends_ns, side="left"), len(order) - 1)]


def idle_by_cause(gaps: pd.DataFrame) -> dict[str, float]:
    """Idle time (us) per cause, the sums of the gaps' split (``idle_<cause>_us``): they add up to the rank's idle
    time. ``idle_graph_launch_us``: the part of ``idle_host_us`` in gaps of kind ``graph launch`` (``host_kinds``)."""
    out = {f"idle_{c}_us": float(gaps[f"idle_{c}_us"].sum()) if len(gaps) else 0.0 for c in CAUSES}
    graph = gaps["host_kind"] == "graph launch" if "host_kind" in gaps else np.zeros(len(gaps), dtype=bool)
    return {**out, "idle_graph_launch_us": float(gaps.loc[graph, "idle_host_us"].sum()) if len(gaps) else 0.0}


def host_facts(events: pd.DataFrame, dev: pd.DataFrame, steps_in_window: pd.DataFrame | None) -> dict:
    """Facts the findings need: sync calls (allocation calls are not counted: ``alloc``) and graph launches inside
    the window's steps (``None``: the whole trace), DataParallel, DistributedDataParallel, the GPU runtime
    (``cuda``/``hip``), reduced-precision compute time."""
    names = events["name"].cat.categories
    sync_names = names[[SYNC_CALL.search(n) is not None and ALLOC_CALL.search(n) is None for n in names]]
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
