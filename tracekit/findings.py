"""What to change: findings read off a Summary, each with the numbers that triggered it and the usual fix.

Thresholds are shares of a rank's span (the window's device time) unless said otherwise; they are constants
here so a reader can see exactly when a finding fires.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from tracekit import fmt
from tracekit.crossrank import MIN_TESTED, STRAGGLER_P

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}

EXPOSED_COMM_SHARE = (0.10, 0.25)     # medium, high
STRAGGLER_WAIT_SHARE = (0.05, 0.20)   # of the median step time
DATA_IDLE_SHARE = (0.05, 0.20)
HOST_IDLE_SHARE = (0.10, 0.30)        # GPU ranks only
SYNC_IDLE_SHARE = 0.01
REDUCED_PRECISION_SHARE = 0.01        # of compute-kernel time
BUSBW_SHARE = 0.25                    # of the link's bandwidth
LARGE_MESSAGE_BYTES = 16e6            # smaller all-reduces are latency-bound, not bandwidth-bound
DOMINANT_OP_SHARE = 0.20              # of communication time: an op this large gets its own advice

# Per-GPU one-way GPU-to-GPU link bandwidth (GB/s) by device name (NVLink on NVIDIA, Infinity Fabric on AMD):
# what nccl-tests' busbw is compared with on one node.
LINK_GBPS = {"H200": 450.0, "H100": 450.0, "B200": 900.0, "A100": 300.0, "V100": 150.0, "MI300": 448.0, "MI250": 400.0}

# The vendor decides how the link is named and inspected. ROCm's runtime calls are hip*, CUDA's cuda*; device names
# settle traces without runtime calls. Unknown vendor: nothing vendor-specific is said.
_AMD_NAME = re.compile(r"(?i)\bamd\b|radeon|instinct|\bmi\d{2,3}")
_NVIDIA_NAME = re.compile(r"(?i)nvidia|tesla|geforce|quadro|titan|\b(gb|gh)?[abhlv]\d{2,3}\b")
_VENDOR = {
    "nvidia": {"link": "NVLink", "inspect": "nvidia-smi topo -m; NCCL_DEBUG=INFO for the chosen transport",
               "graphs": "CUDA graphs", "matrix": "tensor cores"},
    "amd": {"link": "Infinity Fabric", "inspect": "rocm-smi --showtopo; NCCL_DEBUG=INFO, which RCCL reads too, for the "
            "chosen transport", "graphs": "HIP graphs (torch.cuda.CUDAGraph on ROCm)", "matrix": "matrix cores"},
    None: {"link": "GPU-to-GPU link", "inspect": "the GPU topology and the communication library's chosen transport",
           "graphs": "device graphs (CUDA/HIP graphs)", "matrix": "tensor/matrix cores"},
}

# Advice per collective op: what usually shrinks exposed time of that op. DDP's knobs only where DDP runs.
_OP_ADVICE = {
    "all_reduce": "all_reduce: issue it asynchronously (async_op=True) as each tensor is ready and wait only where the "
                  "result is needed, and flatten small tensors into fewer, larger calls.",
    "ddp_all_reduce": "all_reduce from DDP's gradient reducer: tune bucket_cap_mb (fewer, larger buckets cut per-call "
                      "cost; smaller ones start earlier), pass gradient_as_bucket_view=True, and accumulate gradients "
                      "under no_sync() so the all-reduce runs once per optimizer step.",
    "all_gather": "all_gather / reduce_scatter (sharded parameters, FSDP or ZeRO): prefetch the next gather while this "
                  "layer computes (FSDP forward_prefetch=True, backward_prefetch=BACKWARD_PRE), wrap larger units so "
                  "calls are fewer and bigger, and keep gathers inside a node (hybrid sharding) when the job spans nodes.",
    "all_to_all": "all_to_all (embedding tables sharded across ranks as in DLRM/TorchRec, or mixture-of-experts "
                  "dispatch): pipeline the exchange behind dense compute (TorchRec's TrainPipelineSparseDist), send "
                  "less (fp16/bf16 quantized communication, smaller embedding dims or expert capacity), and balance "
                  "the sharding so no rank sends more than the others.",
    "broadcast": "broadcast: send only what changed, once, outside the step.",
    "ddp_broadcast": "broadcast from DDP's buffer sync: DistributedDataParallel(broadcast_buffers=False) when the "
                     "buffers need no sync each step.",
    "send": "send / recv (pipeline stages): more micro-batches per step or an interleaved schedule shrink the bubble; "
            "post receives early so transfers run under compute.",
    "barrier": "barrier: take barriers out of the step (logging and checkpoint coordination belong outside it).",
    "other": "calls of unnamed op (the collectives table's name column lists them): overlap them with compute and "
             "batch them into fewer, larger calls.",
}
_ADVICE_KEY = {"reduce_scatter": "all_gather", "recv": "send"}


@dataclass(frozen=True)
class Finding:
    """One thing to change: its kind, severity (high/medium/low), the ranks it concerns, what was seen,
    what people do about it, and the numbers behind it."""

    kind: str
    severity: str
    ranks: tuple[int, ...]
    message: str
    recommendation: str
    evidence: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The finding as plain values."""
        return asdict(self)


def find(ranks: pd.DataFrame, collectives: pd.DataFrame, stragglers: pd.DataFrame, run: dict) -> tuple[Finding, ...]:
    """All findings of a run, most severe first (then by how much time is at stake)."""
    found = [f for check in _CHECKS for f in check(ranks, collectives, stragglers, run)]
    return tuple(sorted(found, key=lambda f: (SEVERITY_ORDER[f.severity], -f.evidence.get("share", 0.0))))


def _share(ranks: pd.DataFrame, column: str) -> pd.Series:
    return (ranks[column] / ranks["span_us"]).where(ranks["span_us"] > 0)


def _level(value: float, thresholds: tuple[float, float]) -> str | None:
    if math.isnan(value) or value < thresholds[0]:
        return None
    return "high" if value >= thresholds[1] else "medium"


def _exposed_comm(ranks, collectives, stragglers, run):
    share = _share(ranks, "exposed_comm_us")
    worst = float(share.max()) if len(share) else math.nan
    level = _level(worst, EXPOSED_COMM_SHARE)
    if level is None:
        return []
    hit = ranks.loc[share >= EXPOSED_COMM_SHARE[0], "rank"]
    ops = op_shares(collectives, hit)
    dominant = dominant_ops(ops)
    ddp = _flag(ranks, hit, "ddp")
    named = ", ".join(f"{op} {ops[op]:.0%}" for op in dominant)
    advice = list(dict.fromkeys(_op_advice(op, ddp) for op in dominant))
    return [Finding(
        "exposed_comm", level, tuple(int(r) for r in hit),
        f"Communication not hidden under compute takes up to {worst:.0%} of the device time ({_list(hit)})"
        + (f"; by op, {named} of the communication time." if dominant else "."),
        " ".join(advice or ["Overlap communication with compute and prefer fewer, larger collectives."]),
        {"share": worst, "exposed_comm_us": float(ranks["exposed_comm_us"].max()), "threshold": EXPOSED_COMM_SHARE[0],
         "op_shares": ops, "ddp": ddp})]


def op_shares(collectives: pd.DataFrame, ranks) -> dict[str, float]:
    """Share of the summed call time of the window's collectives on ``ranks``, per op, largest first."""
    calls = collectives[collectives["in_window"].astype(bool) & collectives["rank"].isin(list(ranks))]
    per_op = calls.groupby(calls["op"].astype(str))["dur_us"].sum()
    total = float(per_op.sum())
    if total <= 0:
        return {}
    per_op = per_op[per_op > 0].sort_values(ascending=False, kind="stable")
    return {str(op): float(v) / total for op, v in per_op.items()}


def dominant_ops(shares: dict[str, float]) -> list[str]:
    """The ops worth advice: the largest, and any other with at least ``DOMINANT_OP_SHARE`` of the time."""
    return [op for i, (op, v) in enumerate(shares.items()) if i == 0 or v >= DOMINANT_OP_SHARE]


def _op_advice(op: str, ddp: bool) -> str:
    key = _ADVICE_KEY.get(op, op)
    if ddp and f"ddp_{key}" in _OP_ADVICE:
        return _OP_ADVICE[f"ddp_{key}"]
    return _OP_ADVICE.get(key, _OP_ADVICE["other"])


def _flag(ranks: pd.DataFrame, hit, column: str) -> bool:
    """Whether a host fact (``ddp``) holds on any of the ranks ``hit``; False when the table lacks it."""
    if column not in ranks:
        return False
    return bool(ranks.loc[ranks["rank"].isin(list(hit)), column].fillna(False).astype(bool).any())


def gpu_vendor(ranks: pd.DataFrame, run: dict) -> str | None:
    """``amd``, ``nvidia`` or None (unknown): from the runtime calls' names, else the device names."""
    runtimes = set(ranks["gpu_runtime"].dropna()) if "gpu_runtime" in ranks else set()
    names = [str(n) for n in run.get("device_names", [])]
    if "hip" in runtimes or any(_AMD_NAME.search(n) for n in names):
        return "amd"
    if "cuda" in runtimes or any(_NVIDIA_NAME.search(n) for n in names):
        return "nvidia"
    return None


def _straggler(ranks, collectives, stragglers, run):
    """Stragglers (the binomial test passed) and, at low severity, suspicions (over the bar, but too few calls or p
    too high: ``run["straggler_suspicions"]``), when the others wait at least STRAGGLER_WAIT_SHARE[0] of a step."""
    suspected = pd.DataFrame(run.get("straggler_suspicions") or [])
    if (stragglers.empty and suspected.empty) or ranks["step_time_us"].isna().all():
        return []
    step_us = float(ranks["step_time_us"].median())
    fix = ("find what this rank does differently: a slower input shard or data loader, a slower device or link, or "
           "extra work on it (logging, checkpointing, evaluation on rank 0). Balance the work or move it off the step.")
    out = []
    for proven, table in ((True, stragglers), (False, suspected)):
        for row in table.itertuples():
            share = row.caused_wait_us_per_step / step_us
            level = _level(share, STRAGGLER_WAIT_SHARE)
            if level is None:
                continue
            seen = (f"Rank {row.rank} arrives last at {row.last_arrivals} of {row.matched} matched collectives "
                    f"(chance: {row.expected_share:.0%}; p = {row.p_value:.2g})")
            waits = f"the others wait {row.caused_wait_us_per_step / 1e3:.1f} ms per step for it ({share:.0%} of a step)"
            evidence = {"share": share, "last_share": row.last_share, "p_value": row.p_value, "matched": row.matched,
                        "last_arrivals": row.last_arrivals, "caused_wait_us_per_step": row.caused_wait_us_per_step}
            if proven:
                out.append(Finding("straggler", level, (int(row.rank),), f"{seen}; {waits}.", fix[0].upper() + fix[1:],
                                   evidence))
            else:
                out.append(Finding(
                    "straggler_suspected", "low", (int(row.rank),),
                    f"{seen}: too little evidence to call it a straggler (that takes p < {STRAGGLER_P:g} over at least "
                    f"{MIN_TESTED} calls), but {waits}.",
                    "Profile more steps, or use smaller DDP buckets for more collectives per step, to confirm it; if it "
                    "holds, " + fix, evidence))
    return out


def _data_loading(ranks, collectives, stragglers, run):
    return _idle_finding(ranks, "idle_data_us", DATA_IDLE_SHARE, "data_loading",
                         "The device waits for the next batch for up to {share:.0%} of its time ({ranks}).",
                         "Load data ahead of the step: DataLoader(num_workers>0, pin_memory=True, persistent_workers=True, "
                         "prefetch_factor=2+), and copy batches with non_blocking=True.")


def _host_bound(ranks, collectives, stragglers, run):
    gpu = ranks[ranks["device"] != "cpu"]
    graphs = _VENDOR[gpu_vendor(gpu, run)]["graphs"]
    return _idle_finding(gpu, "idle_host_us", HOST_IDLE_SHARE, "host_bound",
                         "The GPU idles waiting for kernel launches for up to {share:.0%} of its time ({ranks}).",
                         f"Cut launch overhead: capture the step with {graphs} or torch.compile(mode='reduce-overhead'), "
                         "fuse small ops, or raise the per-GPU batch size.")


def _idle_finding(ranks, column, thresholds, kind, message, recommendation):
    if ranks.empty:
        return []
    share = _share(ranks, column)
    worst = float(share.max())
    level = _level(worst, thresholds)
    if level is None:
        return []
    hit = ranks.loc[share >= thresholds[0], "rank"]
    return [Finding(kind, level, tuple(int(r) for r in hit), message.format(share=worst, ranks=_list(hit)),
                    recommendation, {"share": worst, column: float(ranks[column].max()), "threshold": thresholds[0]})]


def _syncs(ranks, collectives, stragglers, run):
    share = _share(ranks, "idle_sync_us")
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
        "no GIL contention, and all-reduce overlapped with backward. It is usually about 2x faster on 8 GPUs.",
        {"share": 1.0})]


def _no_reduced_precision(ranks, collectives, stragglers, run):
    gpu = ranks[(ranks["device"] != "cpu") & (ranks["compute_major"] >= 7) & (ranks["compute_kernel_us"] > 0)]
    if gpu.empty:
        return []
    share = gpu["reduced_precision_us"] / gpu["compute_kernel_us"]
    hit = gpu[share < REDUCED_PRECISION_SHARE]
    if hit.empty:
        return []
    matrix = _VENDOR[gpu_vendor(gpu, run)]["matrix"]
    return [Finding(
        "no_reduced_precision", "medium", tuple(int(r) for r in hit["rank"]),
        f"Only {float(share[hit.index].max()):.1%} of compute-kernel time runs in fp16/bf16 on GPUs with {matrix} "
        f"({_list(hit['rank'])}).",
        "Train with mixed precision: torch.autocast('cuda', dtype=torch.bfloat16) around forward and loss "
        f"(float16 needs torch.amp.GradScaler); matmuls and convolutions then run on {matrix}.",
        {"share": float(1 - share[hit.index].max()), "reduced_precision_share": float(share[hit.index].max())})]


def _low_busbw(ranks, collectives, stragglers, run):
    world = run.get("world_size")
    calls = collectives[collectives["in_window"].astype(bool) & (collectives["op"] == "all_reduce")
                        & (collectives["bytes"] >= LARGE_MESSAGE_BYTES)]
    gpu_names = [n for n in run.get("device_names", [])]
    link = next((bw for key, bw in LINK_GBPS.items() for n in gpu_names if key in n), None)
    pcie = any("pcie" in n.lower() for n in gpu_names)
    one_host = len(set(run.get("host_names", []))) <= 1
    if calls.empty or link is None or pcie or not one_host or not isinstance(world, int) or world > 8:
        return []  # no known NVLink to compare with (CPU, unknown or PCIe GPU, or across nodes)
    # Bandwidth over the transfer only, when the collective was matched, so waiting for late ranks is not counted.
    seconds = calls["transfer_us"].where(calls["transfer_us"] > 0, calls["dur_us"]).fillna(calls["dur_us"])
    n = calls["group_size"]
    achieved = float(np.nanmedian(calls["bytes"] / seconds / 1e3 * 2 * (n - 1) / n))
    if not achieved < BUSBW_SHARE * link:
        return []
    hit = sorted(int(r) for r in calls["rank"].unique())
    vendor = _VENDOR[gpu_vendor(ranks, run)]
    ddp = _flag(ranks, hit, "ddp")
    size = "keep DDP's buckets large enough (bucket_cap_mb) " if ddp else "send fewer, larger all-reduces "
    return [Finding(
        "low_busbw", "medium", tuple(hit),
        f"Large all-reduces reach a median bus bandwidth of {achieved:.0f} GB/s, {achieved / link:.0%} of the "
        f"{link:.0f} GB/s {vendor['link']} of these GPUs.",
        f"Check the interconnect ({vendor['inspect']}), avoid PCIe/host-staged paths, and {size}to be "
        "bandwidth-bound.",
        {"share": 1 - achieved / link, "busbw_gbps": achieved, "link_gbps": link, "calls": int(len(calls)),
         "ddp": ddp})]


def _list(ranks) -> str:
    """'rank 3' or 'ranks 0, 1' (the first eight, then how many more)."""
    return fmt.ranks(ranks)


_CHECKS = (_data_parallel, _exposed_comm, _straggler, _data_loading, _host_bound, _syncs, _no_reduced_precision,
           _low_busbw)
