"""What to change: findings read off a Summary, each with the numbers that triggered it and the usual fix.

Thresholds are shares of a rank's span (the window's device time) unless said otherwise; they are constants
here so a reader can see exactly when a finding fires.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}

EXPOSED_COMM_SHARE = (0.10, 0.25)     # medium, high
STRAGGLER_WAIT_SHARE = (0.05, 0.20)   # of the median step time
DATA_IDLE_SHARE = (0.05, 0.20)
HOST_IDLE_SHARE = (0.10, 0.30)        # GPU ranks only
SYNC_IDLE_SHARE = 0.01
REDUCED_PRECISION_SHARE = 0.01        # of compute-kernel time
BUSBW_SHARE = 0.25                    # of the link's bandwidth
LARGE_MESSAGE_BYTES = 16e6            # smaller all-reduces are latency-bound, not bandwidth-bound

# Per-GPU one-way NVLink bandwidth (GB/s) by device name: what nccl-tests' busbw is compared with on one node.
LINK_GBPS = {"H200": 450.0, "H100": 450.0, "B200": 900.0, "A100": 300.0, "V100": 150.0, "MI300": 448.0, "MI250": 400.0}


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
    return [Finding(
        "exposed_comm", level, tuple(int(r) for r in hit),
        f"Communication not hidden under compute takes up to {worst:.0%} of the device time (ranks {_list(hit)}).",
        "Overlap all-reduce with backward: tune DDP bucket_cap_mb (fewer, larger buckets cut per-call cost; smaller "
        "ones start earlier), pass gradient_as_bucket_view=True, accumulate gradients under no_sync() so the "
        "all-reduce runs once per optimizer step, and prefer fewer, larger collectives.",
        {"share": worst, "exposed_comm_us": float(ranks["exposed_comm_us"].max()), "threshold": EXPOSED_COMM_SHARE[0]})]


def _straggler(ranks, collectives, stragglers, run):
    if stragglers.empty or ranks["step_time_us"].isna().all():
        return []
    step_us = float(ranks["step_time_us"].median())
    out = []
    for row in stragglers.itertuples():
        share = row.caused_wait_us_per_step / step_us
        level = _level(share, STRAGGLER_WAIT_SHARE)
        if level is None:
            continue
        out.append(Finding(
            "straggler", level, (int(row.rank),),
            f"Rank {row.rank} arrives last at {row.last_arrivals} of {row.matched} collectives (chance: "
            f"{row.expected_share:.0%}); the others wait {row.caused_wait_us_per_step / 1e3:.1f} ms per step for it "
            f"({share:.0%} of a step).",
            "Find what this rank does differently: a slower input shard or data loader, a slower device or link, or "
            "extra work on it (logging, checkpointing, evaluation on rank 0). Balance the work or move it off the step.",
            {"share": share, "last_share": row.last_share, "p_value": row.p_value,
             "caused_wait_us_per_step": row.caused_wait_us_per_step}))
    return out


def _data_loading(ranks, collectives, stragglers, run):
    return _idle_finding(ranks, "idle_data_us", DATA_IDLE_SHARE, "data_loading",
                         "The device waits for the next batch for up to {share:.0%} of its time (ranks {ranks}).",
                         "Load data ahead of the step: DataLoader(num_workers>0, pin_memory=True, persistent_workers=True, "
                         "prefetch_factor=2+), and copy batches with non_blocking=True.")


def _host_bound(ranks, collectives, stragglers, run):
    gpu = ranks[ranks["device"] != "cpu"]
    return _idle_finding(gpu, "idle_host_us", HOST_IDLE_SHARE, "host_bound",
                         "The GPU idles waiting for kernel launches for up to {share:.0%} of its time (ranks {ranks}).",
                         "Cut launch overhead: capture the step with CUDA graphs or torch.compile(mode='reduce-overhead'), "
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
    return [Finding(
        "sync_in_step", "medium", tuple(int(r) for r in hit["rank"]),
        f"Host-device synchronizations inside the step ({per_step:.1f} per step) leave the device idle for up to "
        f"{float(share[hit.index].max()):.0%} of its time.",
        "Remove synchronizations from the step: .item(), .cpu(), printing tensors, torch.cuda.synchronize(), blocking "
        "copies. Keep values on the device and read them every N steps; copy with non_blocking=True.",
        {"share": float(share[hit.index].max()), "sync_calls_per_step": per_step})]


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
    return [Finding(
        "no_reduced_precision", "medium", tuple(int(r) for r in hit["rank"]),
        f"Only {float(share[hit.index].max()):.1%} of compute-kernel time runs in fp16/bf16 on GPUs with tensor "
        f"cores (ranks {_list(hit['rank'])}).",
        "Train with mixed precision: torch.autocast('cuda', dtype=torch.bfloat16) around forward and loss "
        "(float16 needs torch.amp.GradScaler); matmuls and convolutions then run on tensor cores.",
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
    return [Finding(
        "low_busbw", "medium", tuple(int(r) for r in sorted(calls["rank"].unique())),
        f"Large all-reduces reach a median bus bandwidth of {achieved:.0f} GB/s, {achieved / link:.0%} of the "
        f"{link:.0f} GB/s NVLink of these GPUs.",
        "Check the interconnect (nvidia-smi topo -m; NCCL_DEBUG=INFO for the chosen transport), avoid "
        "PCIe/host-staged paths, and keep buckets large enough (bucket_cap_mb) to be bandwidth-bound.",
        {"share": 1 - achieved / link, "busbw_gbps": achieved, "link_gbps": link, "calls": int(len(calls))})]


def _list(ranks) -> str:
    values = [int(r) for r in ranks]
    return ", ".join(map(str, values[:8])) + (f" and {len(values) - 8} more" if len(values) > 8 else "")


_CHECKS = (_data_parallel, _exposed_comm, _straggler, _data_loading, _host_bound, _syncs, _no_reduced_precision,
           _low_busbw)
