"""What to change: findings read off a Summary, each with the numbers that triggered it and the usual fix.

``find`` runs every check, in the order of ``_CHECKS``. The checks of idle time and host work are here; the
communication checks (exposed communication, stragglers, bus bandwidth) are in ``tracekit.findings.comm_findings``, the
Finding type and severity in ``tracekit.findings.finding``, FSDP's in ``tracekit.findings.fsdp_findings``.

Thresholds are shares of a rank's span (the window's device time) unless said otherwise; they are constants
here and in ``comm_findings`` (importable from here too) so a reader can see exactly when a finding fires.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd

from tracekit import fmt
# Finding and the communication checks' thresholds stay importable from here: tracekit.Finding, render.checked().
from tracekit.findings.comm_findings import BUSBW_SHARE, EXPOSED_COMM_SHARE, STRAGGLER_WAIT_SHARE  # noqa: F401
from tracekit.findings.comm_findings import exposed_comm, low_busbw, straggler
from tracekit.findings.finding import VENDOR, Finding, by_severity, gpu_vendor, severity, share_of_span
from tracekit.findings.finding import trains as _trains

DATA_IDLE_SHARE = (0.05, 0.20)
ALLOC_IDLE_SHARE = (0.05, 0.20)
HOST_IDLE_SHARE = (0.10, 0.30)        # GPU ranks only
SYNC_IDLE_SHARE = 0.01
REDUCED_PRECISION_SHARE = 0.01        # of compute-kernel time


def find(ranks: pd.DataFrame, collectives: pd.DataFrame, stragglers: pd.DataFrame, run) -> tuple[Finding, ...]:
    """All findings of a run, most severe first (then by how much time is at stake). ``run``: its
    ``tracekit.summary.facts.RunFacts`` (device and host names, world size, straggler suspicions)."""
    return by_severity(f for check in _CHECKS for f in check(ranks, collectives, stragglers, run))


def _data_loading(ranks, collectives, stragglers, run):
    return _idle_finding(ranks, "idle_data_us", DATA_IDLE_SHARE, "data_loading",
                         "The device waits for the next batch for up to {share:.0%} of its time ({ranks}).",
                         "Load data ahead of the step: DataLoader(num_workers>0, pin_memory=True, persistent_workers=True, "
                         "prefetch_factor=2+), and copy batches with non_blocking=True.")


def _allocator_stalls(ranks, collectives, stragglers, run):
    """The device idles while the host takes memory from the driver (``idle_alloc_us``): the caching allocator
    growing its pool. Not launch overhead: graph capture or a larger batch would need more memory, not less."""
    device = ranks[ranks["device"] != "cpu"]
    hip = bool((device["gpu_runtime"] == "hip").any()) if "gpu_runtime" in device else False
    conf = "PYTORCH_HIP_ALLOC_CONF" if hip else "PYTORCH_CUDA_ALLOC_CONF"
    return _idle_finding(
        device, "idle_alloc_us", ALLOC_IDLE_SHARE, "allocator_stall",
        "The device idles while the host allocates memory from the driver (cudaMalloc, cudaHostAlloc and the like: "
        "the caching allocator growing its pool) for up to {share:.0%} of its time ({ranks}).",
        "Reserve memory up front and keep it: run a warm-up step at the largest shapes before the loop so the "
        "allocator's pool is filled once, call no torch.cuda.empty_cache() inside the loop, set "
        f"{conf}=expandable_segments:True so segments grow in place rather than being allocated anew, avoid "
        "fragmentation by keeping tensor shapes steady (pad variable lengths to a few sizes), and allocate pinned "
        "host buffers once and reuse them.")


def _host_bound(ranks, collectives, stragglers, run):
    device = ranks[ranks["device"] != "cpu"]
    graphs = VENDOR[gpu_vendor(device, run.device_names)]["graphs"]
    if (device["gpu_runtime"] == "mtia").any():  # no GPU (whatever its devices are named): say device, no GPU graphs
        unit, capture = "device", "torch.compile the step"
    else:
        unit, capture = "GPU", f"capture the step with {graphs} or torch.compile(mode='reduce-overhead')"
    eager = f"Cut launch overhead: {capture}, fuse small ops, or raise the per-{unit} batch size."
    message = f"The {unit} idles waiting for kernel launches for up to {{share:.0%}} of its time ({{ranks}})."
    found = _idle_finding(device, "idle_host_us", HOST_IDLE_SHARE, "host_bound", message, eager)
    if not found or "graph_launches" not in device:
        return found
    # Steps that already replay graphs: capturing them is done; what is left is the host time between replays.
    f = found[0]
    hit = device[device["rank"].isin(f.ranks)]
    replays = hit[hit["graph_launches"].fillna(0) > 0]
    if replays.empty:
        return found
    stepped = (replays["steps"] > 0).all()
    launches = float((replays["graph_launches"] / (replays["steps"] if stepped else 1)).max())
    graph_share = float((replays["idle_graph_launch_us"] / replays["idle_host_us"]).max())
    advice = REPLAY_ADVICE.format(graphs=graphs)
    if len(replays) < len(hit):
        advice = f"On {fmt.ranks(replays['rank'])}: {advice} Elsewhere: {eager}"
    message = (f"{f.message} The steps on {fmt.ranks(replays['rank'])} already replay {graphs} ({launches:,.1f} graph "
               f"launches{' per step' if stepped else ''}; {graph_share:.0%} of that wait is for a graph launch).")
    return [dataclasses.replace(f, message=message, recommendation=advice,
                                evidence={**f.evidence, "graph_launches": launches, "per_step": bool(stepped),
                                          "graph_launch_wait_share": graph_share})]


def _host_unrecorded(ranks, collectives, stragglers, run):
    """The device idles while the thread that launches its work records nothing (``idle_host_unrecorded_us``): the
    trace cannot say what the host did, so the advice is first to record it. Steps that already replay graphs are
    not told to capture them."""
    device = ranks[ranks["device"] != "cpu"]
    unit = "device" if (device["gpu_runtime"] == "mtia").any() else "GPU"
    replay = "graph_launches" in device and bool((device["graph_launches"].fillna(0) > 0).any())
    python = ("fewer, larger graph replays and less Python between them" if replay
              else "torch.compile, or capture the step as a graph")
    return _idle_finding(
        device, "idle_host_unrecorded_us", HOST_IDLE_SHARE, "host_unrecorded",
        f"The {unit} idles for up to {{share:.0%}} of its time ({{ranks}}) while the thread that launches its work "
        "records nothing: Python between operators, or work the profiler did not record.",
        "Record what the host does there: profile with with_stack=True (Python functions) or wrap the loop's host "
        "work in torch.profiler.record_function ranges, and look at the longest gaps on the timeline. Python "
        f"overhead between small ops: {python}. One long stall (logging, checkpointing, evaluation, input "
        "preparation outside the DataLoader): move it off the step.")


# For steps that already replay CUDA/HIP graphs (an engine's decode, torch.compile's cudagraph trees).
REPLAY_ADVICE = ("The steps already replay {graphs}, so capturing them again gains nothing; cut the host time between "
                 "replays: fewer, larger graphs (capture more of the step in one graph; under torch.compile, fewer "
                 "graph breaks, so that cudagraph trees replay fewer partitions), a larger batch per replay, and less "
                 "host work between replays (scheduling, sampling, input preparation and copies: overlap them with "
                 "the replay, or move them onto the device or off the step).")


def _idle_finding(ranks, column, thresholds, kind, message, recommendation):
    if ranks.empty:
        return []
    share = share_of_span(ranks, column)
    worst = float(share.max())
    level = severity(worst, thresholds)
    if level is None:
        return []
    hit = ranks.loc[share >= thresholds[0], "rank"]
    return [Finding(kind, level, tuple(int(r) for r in hit), message.format(share=worst, ranks=fmt.ranks(hit)),
                    recommendation, {"share": worst, column: float(ranks[column].max()), "threshold": thresholds[0]})]


def _syncs(ranks, collectives, stragglers, run):
    share = share_of_span(ranks, "idle_sync_us")
    hit = ranks[(ranks["sync_calls"].fillna(0) > 0) & (share >= SYNC_IDLE_SHARE)]
    if hit.empty:
        return []
    per_step = float((hit["sync_calls"] / hit["steps"].clip(lower=1)).max())
    top = hit["sync_top_call"].dropna().astype(str).mode() if "sync_top_call" in hit else pd.Series(dtype=str)
    call = str(top.iloc[0]) if len(top) else None
    advice = next((text for pattern, text in _SYNC_ADVICE if call and pattern.search(call)), _SYNC_ADVICE[-1][1])
    return [Finding(
        "sync_in_step", "medium", tuple(int(r) for r in hit["rank"]),
        f"Host-device synchronizations inside the step ({per_step:.1f} per step"
        + (f", most of their time in {call}" if call else "") + ") leave the device idle for up to "
        f"{float(share[hit.index].max()):.0%} of its time.",
        advice.format(call=call),
        {"share": float(share[hit.index].max()), "sync_calls_per_step": per_step, "top_call": call})]


# Advice by the synchronizing call that takes the most time; the last entry is the general case.
_SYNC_ADVICE = (
    (re.compile(r"(?i)free|malloc|hostalloc|hostregister"),
     "{call} waits for the device to drain: the caching allocator is giving memory back to the driver or taking "
     "more. Keep it cached: no torch.cuda.empty_cache() in the loop, steady tensor shapes, expandable segments "
     "against fragmentation (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or PYTORCH_HIP_ALLOC_CONF on ROCm), "
     "and pinned host buffers allocated once."),
    (re.compile(r"(?i)memcpy|memset"),
     "{call} is a blocking copy: copy from pinned memory (DataLoader pin_memory=True) with non_blocking=True, and "
     "read device values (.item(), .cpu()) every N steps rather than every step."),
    (re.compile(r""),
     "Remove synchronizations from the step: .item(), .cpu(), printing tensors, torch.cuda.synchronize(), blocking "
     "copies. Keep values on the device and read them every N steps; copy with non_blocking=True."),
)


def _data_parallel(ranks, collectives, stragglers, run):
    hit = ranks[ranks["data_parallel"].fillna(False).astype(bool)]
    if hit.empty:
        return []
    return [Finding(
        "data_parallel", "high", tuple(int(r) for r in hit["rank"]),
        "torch.nn.DataParallel runs in this trace (DataParallel.forward): one process drives every GPU.",
        "Switch to DistributedDataParallel, one process per GPU (torchrun): no per-step replication of the model, "
        "no GIL contention, and all-reduce overlapped with backward. It is usually about 2x faster on 8 GPUs."
        if _trains(hit) else  # forward only: no gradients to all-reduce, so no DDP wrapper either
        "Run one process per GPU (torchrun), each with its own copy of the model (no DataParallel, and no "
        "DistributedDataParallel either: without gradients there is nothing to all-reduce) and its own share of the "
        "inputs: no per-step replication of the model, no GIL contention.",
        {"share": 1.0})]


def _no_reduced_precision(ranks, collectives, stragglers, run):
    """Where the ops' dtypes were recorded, the share of matmul-class device time in bf16/fp16/fp8; elsewhere, of
    compute-kernel time whose kernel names say so."""
    gpu = ranks[(ranks["device"] != "cpu") & (ranks["compute_major"] >= 7) & (ranks["compute_kernel_us"] > 0)]
    if gpu.empty:
        return []
    typed = gpu["matmul_device_us"].to_numpy() > 0 if "matmul_device_us" in gpu else np.zeros(len(gpu), dtype=bool)
    share = pd.Series(np.where(typed, gpu.get("matmul_reduced_us", np.nan) / gpu.get("matmul_device_us", np.nan),
                               gpu["reduced_precision_us"] / gpu["compute_kernel_us"]), index=gpu.index)
    hit = gpu[share < REDUCED_PRECISION_SHARE]
    if hit.empty:
        return []
    matrix = VENDOR[gpu_vendor(gpu, run.device_names)]["matrix"]
    what = ("of matmul device time runs in fp16/bf16/fp8 (the ops' recorded dtypes)" if typed[gpu.index.get_indexer(
        hit.index)].all() else "of compute-kernel time runs in fp16/bf16")
    return [Finding(
        "no_reduced_precision", "medium", tuple(int(r) for r in hit["rank"]),
        f"Only {float(share[hit.index].max()):.1%} {what} on GPUs with {matrix} ({fmt.ranks(hit['rank'])}).",
        ("Train with mixed precision: torch.autocast('cuda', dtype=torch.bfloat16) around forward and loss "
         f"(float16 needs torch.amp.GradScaler); matmuls and convolutions then run on {matrix}.")
        if _trains(hit) else  # a forward-only trace (inference): no training advice
        ("Run the model in bf16: load its weights as torch.bfloat16 (model.to(torch.bfloat16)) or wrap the forward "
         f"in torch.autocast('cuda', dtype=torch.bfloat16); matmuls and convolutions then run on {matrix}."),
        {"share": float(1 - share[hit.index].max()), "reduced_precision_share": float(share[hit.index].max())})]


_CHECKS = (_data_parallel, exposed_comm, straggler, _data_loading, _allocator_stalls, _host_bound, _host_unrecorded,
           _syncs, _no_reduced_precision, low_busbw)
