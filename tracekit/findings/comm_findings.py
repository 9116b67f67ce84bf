"""The communication checks of ``tracekit.findings.checks``: exposed communication (with advice per dominant op),
stragglers, and all-reduce bus bandwidth far below the GPUs' link.

Thresholds are shares of a rank's span (the window's device time) unless said otherwise.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from tracekit import fmt
from tracekit.run.crossrank import MIN_TESTED, STRAGGLER_P
from tracekit.findings.finding import (VENDOR, Finding, gpu_vendor, holds_on_any, severity, share_of_span, trains,
                                       trains_on)

EXPOSED_COMM_SHARE = (0.10, 0.25)     # medium, high
STRAGGLER_WAIT_SHARE = (0.05, 0.20)   # of the median step time
BUSBW_SHARE = 0.25                    # of the link's bandwidth
LARGE_MESSAGE_BYTES = 16e6            # smaller all-reduces are latency-bound, not bandwidth-bound
WAIT_SHARE = 0.5                      # of the communication time: waiting, not transfer, is what to fix
DOMINANT_OP_SHARE = 0.20              # of communication time: an op this large gets its own advice

# Per-GPU one-way GPU-to-GPU link bandwidth (GB/s) by device name (NVLink on NVIDIA, Infinity Fabric on AMD):
# what nccl-tests' busbw is compared with on one node.
LINK_GBPS = {"H200": 450.0, "H100": 450.0, "B200": 900.0, "A100": 300.0, "V100": 150.0, "MI300": 448.0, "MI250": 400.0}

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
    # A forward-only run (ranks.training False) has no training pipeline to pipeline the exchange in: what MoE
    # inference engines and inference-side sharded embeddings do instead.
    "inference_all_to_all": "all_to_all (mixture-of-experts dispatch/combine, or embedding tables sharded across "
                            "ranks): overlap the exchange with compute by splitting each batch in two micro-batches, "
                            "one dispatching or combining while the other computes (two-batch overlap, as SGLang and "
                            "vLLM offer for expert parallelism), carry more tokens per exchange (a larger batch per "
                            "expert-parallel step) and fuse small exchanges into fewer calls, send less (fp8 dispatch, "
                            "quantized embedding tables), and balance the experts or tables so no rank sends more "
                            "than the others.",
    # Forward only: no backward to prefetch for; parameters FSDP gathers again each forward can stay gathered instead.
    "inference_all_gather": "all_gather / reduce_scatter in a forward-only run: sharded parameters (FSDP, ZeRO) that "
                            "are gathered again each forward can stay gathered (FSDP2 reshard_after_forward=False, "
                            "FSDP1 ShardingStrategy.SHARD_GRAD_OP: later forwards gather nothing, at the cost of the "
                            "unsharded parameters' memory; a model that fits one device needs no sharding at all); "
                            "otherwise prefetch the next gather while this layer computes (FSDP forward_prefetch=True), "
                            "wrap larger units so calls are fewer and bigger, and keep the gathers (tensor-parallel "
                            "ones too) inside a node when the job spans nodes.",
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
_TP_ONLY = ("All of these collectives are tensor-parallel: their fix is sequence parallel or async tensor parallel "
            "(see exposed_tp_comm), not overlap with other work.")
# DDP advice that concerns its gradient reducer: a forward-only run under DDP has none, so it gets the op's own advice.
_GRADIENT_ONLY = frozenset({"ddp_all_reduce"})


def exposed_comm(ranks, collectives, stragglers, run):
    """Communication not hidden under compute over ``EXPOSED_COMM_SHARE`` of a rank's span, with advice that follows
    what the calls spent their time on: where collectives were matched across ranks, a call's time is waiting for the
    last rank to arrive (``wait_us``) and transfer after it. Advice about the transfer (issue asynchronously, flatten,
    quantize: per op, ``_OP_ADVICE``) goes to the ops whose time not known to be waiting (``transfer_shares``) holds
    the most of the communication time, as ``dominant_ops`` picks them; where waiting is at least ``WAIT_SHARE`` of
    it, only ops with ``DOMINANT_OP_SHARE`` of it in transfer keep that advice, and the finding points first to the
    rank the waiting is for (``late_rank``)."""
    share = share_of_span(ranks, "exposed_comm_us")
    worst = float(share.max()) if len(share) else math.nan
    level = severity(worst, EXPOSED_COMM_SHARE)
    if level is None:
        return []
    # Tensor-parallel calls sit between the matmuls that need them: data-parallel advice (async_op, buckets,
    # prefetch) does not fit them, so they are judged on their own (tracekit.findings.tp_findings).
    tp = (collectives["dim"].astype(str) == "tp").to_numpy() if "dim" in collectives else np.zeros(len(collectives), bool)
    collectives = collectives[~tp]
    hit = ranks.loc[share >= EXPOSED_COMM_SHARE[0], "rank"]
    ops = op_shares(collectives, hit)
    dominant = dominant_ops(ops)
    ddp = holds_on_any(ranks, hit, "ddp")
    training = trains(ranks[ranks["rank"].isin(list(hit))])  # ranks disagreeing: training wins if any hit rank trains
    named = ", ".join(f"{op} {ops[op]:.0%}" for op in dominant)
    moving, wait_us, transfer_us, total_us = transfer_shares(collectives, hit)
    waiting = wait_us / total_us if total_us > 0 else math.nan
    mostly_waiting = waiting >= WAIT_SHARE
    advised = [op for op in dominant_ops(moving) if moving[op] >= DOMINANT_OP_SHARE or not mostly_waiting]
    advice = list(dict.fromkeys(_op_advice(op, ddp, training) for op in advised))
    evidence = {"share": worst, "exposed_comm_us": float(ranks["exposed_comm_us"].max()),
                "threshold": EXPOSED_COMM_SHARE[0], "op_shares": ops, "ddp": ddp}
    message = (f"Communication not hidden under compute takes up to {worst:.0%} of the device time ({fmt.ranks(hit)})"
               + (f"; by op, {named} of the communication time." if dominant else "."))
    if wait_us + transfer_us > 0:
        evidence.update(comm_wait_us=wait_us, comm_transfer_us=transfer_us, wait_share=waiting)
        message += (f" Of the calls matched across ranks, {fmt.ms(wait_us, unit=True)} is waiting for the last rank to "
                    f"arrive and {fmt.ms(transfer_us, unit=True)} transfer ({_share(waiting)} of the communication time "
                    "waits).")
    if mostly_waiting:
        late, late_share = late_rank(collectives, hit)
        evidence.update(late_rank=late, late_wait_share=late_share)
        advice.insert(0, _wait_advice(late, late_share, waiting, stragglers, run))
    fallback = [] if mostly_waiting else ["Overlap communication with compute and prefer fewer, larger collectives."]
    if tp.any():
        message += " Tensor-parallel calls are left out of these shares and this advice (exposed_tp_comm judges them)."
        if not len(collectives):
            fallback = [_TP_ONLY]
    return [Finding("exposed_comm", level, tuple(int(r) for r in hit), message, " ".join(advice or fallback),
                    evidence)]


def _wait_advice(late, late_share, waiting, stragglers, run) -> str:
    """What to do when the calls mostly wait: look at the rank they wait for, not at the transfer."""
    head = (f"{_share(waiting)} of this communication time is waiting for other ranks to reach the call, not moving "
            "data: faster transfers (async_op, fewer or quantized calls) would not shorten it.")
    if late is None:
        return (head + " No one rank is last to arrive: the ranks reach these calls at different times, so balance "
                "the work before them (the per-step imbalance table shows the slowest rank of each step).")
    proven = isinstance(stragglers, pd.DataFrame) and "rank" in stragglers and late in set(stragglers["rank"])
    suspects = getattr(run, "straggler_suspicions", None)
    suspected = isinstance(suspects, pd.DataFrame) and "rank" in suspects and late in set(suspects["rank"])
    see = " (a straggler: see the stragglers table)" if proven else " (a suspected straggler)" if suspected else ""
    return (head + f" Rank {late} arrives last at the calls behind {_share(late_share)} of the wait{see}: find what it "
            "does before them that the others do not (a slower input shard or data loader, extra work such as "
            "logging or evaluation, uneven sharding, a slower device or link) and balance it.")


def _share(x: float) -> str:
    """A share as a whole percentage that says 100% only when it is: 0.995 is '>99%'."""
    return ">99%" if 0.99 < x < 1 else f"{x:.0%}"


def transfer_shares(collectives: pd.DataFrame, ranks) -> tuple[dict[str, float], float, float, float]:
    """(per op, the share of the communication time of ``ranks`` not known to be waiting: a matched call's time
    after the last rank arrived, an unmatched call's whole time, largest first; the matched calls' summed wait and
    transfer, and all the calls' summed time, us.) Without matched calls (one rank, no ``wait_us`` column) the
    shares are ``op_shares``'s, wait and transfer 0."""
    calls = collectives[collectives["in_window"].astype(bool) & collectives["rank"].isin(list(ranks))]
    if "wait_us" in calls and "matched" in calls:
        matched = calls["matched"].fillna(False).astype(bool) & calls["wait_us"].notna()
        wait = calls["wait_us"].where(matched, 0.0).clip(lower=0).clip(upper=calls["dur_us"])
        transfer = float(calls["transfer_us"].where(matched, 0.0).sum())
    else:
        wait, transfer = pd.Series(0.0, index=calls.index), 0.0
    total = float(calls["dur_us"].sum())
    if total <= 0:
        return {}, 0.0, 0.0, 0.0
    per_op = (calls["dur_us"] - wait).groupby(calls["op"].astype(str)).sum()
    per_op = per_op[per_op > 0].sort_values(ascending=False, kind="stable")
    return {str(op): float(v) / total for op, v in per_op.items()}, float(wait.sum()), transfer, total


def late_rank(collectives: pd.DataFrame, ranks) -> tuple[int | None, float]:
    """The rank that arrived last at the matched calls behind the most of ``ranks``' waiting, and its share of that
    waiting; (None, nan) when no call has one last arrival."""
    if "last_arrival" not in collectives or "match_id" not in collectives:
        return None, math.nan
    calls = collectives[collectives["in_window"].astype(bool)]
    last = calls[calls["last_arrival"].fillna(False).astype(bool)].drop_duplicates("match_id").set_index("match_id")
    mine = calls[calls["rank"].isin(list(ranks)) & calls["matched"].fillna(False).astype(bool)
                 & (calls["wait_us"] > 0)]
    waited_for = mine["match_id"].map(last["rank"])
    per_rank = mine["wait_us"].groupby(waited_for).sum()
    if per_rank.empty or not float(mine["wait_us"].sum()) > 0:
        return None, math.nan
    return int(per_rank.idxmax()), float(per_rank.max() / mine["wait_us"].sum())


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


def _op_advice(op: str, ddp: bool, training: bool = True) -> str:
    key = _ADVICE_KEY.get(op, op)
    if not training and f"inference_{key}" in _OP_ADVICE:
        return _OP_ADVICE[f"inference_{key}"]
    if ddp and f"ddp_{key}" in _OP_ADVICE and (training or f"ddp_{key}" not in _GRADIENT_ONLY):
        return _OP_ADVICE[f"ddp_{key}"]
    return _OP_ADVICE.get(key, _OP_ADVICE["other"])


def straggler(ranks, collectives, stragglers, run):
    """Stragglers (the binomial test passed) and, at low severity, suspicions (over the bar, but too few calls or p
    too high: ``run.straggler_suspicions``), when the others wait at least STRAGGLER_WAIT_SHARE[0] of a step."""
    suspected = run.straggler_suspicions
    if (stragglers.empty and suspected.empty) or ranks["step_time_us"].isna().all():
        return []
    step_us = float(ranks["step_time_us"].median())
    fix = ("find what this rank does differently: a slower input shard or data loader, a slower device or link, or "
           "extra work on it (logging, checkpointing, evaluation on rank 0). Balance the work or move it off the step.")
    out = []
    for proven, table in ((True, stragglers), (False, suspected)):
        for row in table.itertuples():
            share = row.caused_wait_us_per_step / step_us
            level = severity(share, STRAGGLER_WAIT_SHARE)
            if level is None:
                continue
            seen = (f"Rank {row.rank} arrives last at {row.last_arrivals} of {row.matched} matched collectives "
                    f"(chance: {row.expected_share:.0%}; p = {row.p_value:.2g})")
            waits = f"the others wait {fmt.ms(row.caused_wait_us_per_step, unit=True)} per step for it ({share:.0%} of a step)"
            evidence = {"share": share, "last_share": row.last_share, "p_value": row.p_value, "matched": row.matched,
                        "last_arrivals": row.last_arrivals, "caused_wait_us_per_step": row.caused_wait_us_per_step}
            if proven:
                out.append(Finding("straggler", level, (int(row.rank),), f"{seen}; {waits}.", fix[0].upper() + fix[1:],
                                   evidence))
            else:
                # DDP's buckets hold gradients: a forward-only rank has none to split into more collectives.
                more = ("Profile more steps, or use smaller DDP buckets for more collectives per step, to confirm it"
                        if trains_on(ranks, [row.rank]) else "Profile more steps to confirm it")
                out.append(Finding(
                    "straggler_suspected", "low", (int(row.rank),),
                    f"{seen}: too little evidence to call it a straggler (that takes p < {STRAGGLER_P:g} over at least "
                    f"{MIN_TESTED} calls), but {waits}.",
                    more + "; if it holds, " + fix, evidence))
    return out


def low_busbw(ranks, collectives, stragglers, run):
    """Large all-reduces (``LARGE_MESSAGE_BYTES``) whose median bus bandwidth is under ``BUSBW_SHARE`` of the
    GPUs' link (``LINK_GBPS``); judged on one node of known, non-PCIe GPUs only."""
    world = run.world_size
    calls = collectives[collectives["in_window"].astype(bool) & (collectives["op"] == "all_reduce")
                        & (collectives["bytes"] >= LARGE_MESSAGE_BYTES)]
    gpu_names = list(run.device_names)
    link = next((bw for key, bw in LINK_GBPS.items() for n in gpu_names if key in n), None)
    pcie = any("pcie" in n.lower() for n in gpu_names)
    one_host = len(set(run.host_names)) <= 1
    if calls.empty or link is None or pcie or not one_host or not isinstance(world, int) or world > 8:
        return []  # no known NVLink to compare with (CPU, unknown or PCIe GPU, or across nodes)
    # Bandwidth over the transfer only, when the collective was matched, so waiting for late ranks is not counted.
    seconds = calls["transfer_us"].where(calls["transfer_us"] > 0, calls["dur_us"]).fillna(calls["dur_us"])
    n = calls["group_size"]
    achieved = float(np.nanmedian(calls["bytes"] / seconds / 1e3 * 2 * (n - 1) / n))
    if not achieved < BUSBW_SHARE * link:
        return []
    hit = sorted(int(r) for r in calls["rank"].unique())
    vendor = VENDOR[gpu_vendor(ranks, run.device_names)]
    ddp = holds_on_any(ranks, hit, "ddp")
    # DDP's buckets are its gradients' all-reduces: on forward-only ranks the large all-reduces are someone else's.
    buckets = ddp and trains_on(ranks, hit)
    size = "keep DDP's buckets large enough (bucket_cap_mb) " if buckets else "send fewer, larger all-reduces "
    return [Finding(
        "low_busbw", "medium", tuple(hit),
        f"Large all-reduces reach a median bus bandwidth of {achieved:.0f} GB/s, {achieved / link:.0%} of the "
        f"{link:.0f} GB/s {vendor['link']} of these GPUs.",
        f"Check the interconnect ({vendor['inspect']}), avoid PCIe/host-staged paths, and {size}to be "
        "bandwidth-bound.",
        {"share": 1 - achieved / link, "busbw_gbps": achieved, "link_gbps": link, "calls": int(len(calls)),
         "ddp": ddp})]
