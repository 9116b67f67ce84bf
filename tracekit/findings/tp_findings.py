"""Exposed tensor-parallel communication (``exposed_tp_comm``), judged after the replay: how much of the step the
tensor-parallel (``dim`` tp) collectives leave uncovered, and how long they sit on the step's critical path.

Tensor parallelism splits each matmul across the group, and the layer's next op needs the collective's result: its
all-reduces (or, with sequence parallel, all-gathers and reduce-scatters) stand between the matmuls on every rank,
so they are on the critical path by construction. Issuing them asynchronously, bucketing or prefetching (the fixes of
data-parallel communication) does not hide them; what does is overlapping each collective with the matmul it feeds,
chunk by chunk (async tensor parallel), and moving less (sequence parallel). So this finding, not ``exposed_comm``,
advises on tensor-parallel time (``exposed_comm`` leaves the tp calls out of its advice), and the pipeline's waits are
no part of it (P2P calls are dim pp).

    tp share of the step     = rank's tp exposed_us (summary.comm_by_dim) / window steps / step_time_us
    tp share of exposed comm = tp exposed_us / all dims' exposed_us, over the ranks it fires on
    on the critical path     = the critical paths' comm pieces (summary.critical_path_events) that lie inside a
                               tp collective of their rank, per window step that has a path

It fires where a rank's tp share of the step reaches ``TP_EXPOSED_SHARE[0]``. No what-if scenario replays only the tp
collectives' removal, so no saving is predicted; the tp time on the critical path is the most hiding it could save
(shortening those pieces shortens that path by at most their length).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracekit import fmt
from tracekit.findings.finding import Finding, severity

# Of the step: lower than exposed_comm's 10%, since every rank stands still for these calls in every layer.
TP_EXPOSED_SHARE = (0.05, 0.15)
_RECOMMENDATION = (
    "Tensor-parallel collectives sit between the matmuls that need their results, so async_op, bucketing or "
    "prefetching (the fixes of DDP's and FSDP's communication) do not hide them. Overlap each one with the matmul it "
    "feeds instead: async tensor parallel splits the all-gather + matmul and matmul + reduce-scatter pairs into "
    "chunks that overlap (torch.compile with torch._inductor.config._micro_pipeline_tp = True, on symmetric memory: "
    "torch.distributed._symmetric_memory.enable_symm_mem_for_group(tp_group.group_name) in torch versions that need "
    "it; torchtitan: --parallelism.enable_async_tensor_parallel with --compile.enable). Use sequence parallel "
    "(SequenceParallel on the norms, ColwiseParallel/RowwiseParallel with sequence-sharded layouts) so each "
    "all-reduce becomes a reduce-scatter and an all-gather that async TP can overlap, and the activations between them "
    "are 1/tp the size. Keep the tensor-parallel group inside a node (NVLink), and if it stays exposed, a smaller TP "
    "degree with more FSDP sharding moves the communication to where it can be prefetched.")


def exposed_tp(ranks: pd.DataFrame, comm_by_dim: pd.DataFrame, collectives: pd.DataFrame,
               critical_path_events: pd.DataFrame, critical_path: pd.DataFrame) -> list[Finding]:
    """The ``exposed_tp_comm`` finding (see the module docstring), or none."""
    if comm_by_dim.empty or "dim" not in collectives:
        return []
    exposed = comm_by_dim.pivot_table(index="rank", columns="dim", values="exposed_us", aggfunc="sum", observed=True)
    if "tp" not in exposed:
        return []
    rows = ranks.set_index("rank").reindex(exposed.index)
    per_step = exposed["tp"] / rows["steps"].where(rows["steps"] > 0)
    step_share = (per_step / rows["step_time_us"]).where(rows["step_time_us"] > 0)
    worst = float(step_share.max()) if step_share.notna().any() else math.nan
    level = severity(worst, TP_EXPOSED_SHARE)
    if level is None:
        return []
    hit = [int(r) for r in step_share.index[step_share >= TP_EXPOSED_SHARE[0]]]
    mine = exposed.loc[hit]
    of_exposed = float(mine["tp"].sum() / mine.sum(axis=1).sum()) if mine.sum(axis=1).sum() > 0 else math.nan
    path_us, path_share = critical_tp(critical_path_events, critical_path, collectives)
    ops = _tp_ops(collectives, hit)
    message = (f"Tensor-parallel communication not hidden under compute takes up to {worst:.0%} of the step "
               f"({fmt.ms(per_step.max(), unit=True)} per step, {fmt.ranks(hit)}): {_pct(of_exposed)} of their exposed "
               f"communication{' (' + ops + ')' if ops else ''}. ")
    message += (f"On the steps' critical paths, tensor-parallel collectives take {fmt.ms(path_us, unit=True)} per step "
                f"({_pct(path_share)} of the path): what hiding them could save at most."
                if not math.isnan(path_us) else "Their time on the critical path is unknown (no critical path).")
    evidence = {"share": worst, "threshold": TP_EXPOSED_SHARE[0], "tp_exposed_us_per_step": float(per_step.max()),
                "tp_share_of_exposed_comm": of_exposed, "tp_critical_path_us_per_step": path_us,
                "tp_critical_path_share": path_share}
    return [Finding("exposed_tp_comm", level, tuple(hit), message, _RECOMMENDATION, evidence)]


def merged(found: tuple, summary) -> tuple:
    """``found`` with the ``exposed_tp_comm`` finding of ``summary`` (after its replay) added."""
    return tuple(found) + tuple(exposed_tp(summary.ranks, summary.comm_by_dim, summary.collectives,
                                           summary.critical_path_events, summary.critical_path))


def critical_tp(events: pd.DataFrame, path: pd.DataFrame, collectives: pd.DataFrame) -> tuple[float, float]:
    """(us per step, share of the path) that the critical paths spend in tensor-parallel collectives: each comm
    piece of ``events`` counted where it lies inside a tp collective of its rank (by ``start_us``/``dur_us``); NaN
    without a critical path."""
    if events is None or path is None or path.empty or events.empty:
        return math.nan, math.nan
    steps = path["step"].nunique()
    total = float(path["us"].sum())
    comm = events[(events["kind"] == "comm").to_numpy()]
    tp_us = 0.0
    calls = collectives[(collectives["dim"].astype(str) == "tp").to_numpy()]
    for rank, pieces in comm.groupby("rank"):  # one pass per rank
        mine = calls[(calls["rank"] == rank).to_numpy()].sort_values("start_us")
        if mine.empty:
            continue
        start = mine["start_us"].to_numpy(dtype=float)
        end = start + mine["dur_us"].to_numpy(dtype=float)
        at = np.searchsorted(start, pieces["start_us"].to_numpy(dtype=float) + 1e-6, side="right") - 1
        ok = at >= 0
        inside = ok & (pieces["end_us"].to_numpy(dtype=float) <= end[np.maximum(at, 0)] + 1e-3)
        tp_us += float((pieces["end_us"] - pieces["start_us"]).to_numpy(dtype=float)[inside].sum())
    return tp_us / steps, (tp_us / total if total > 0 else math.nan)


def _tp_ops(collectives: pd.DataFrame, hit) -> str:
    """The tp calls' ops on ``hit`` by share of their time, e.g. 'all_reduce 80%, all_gather 20% of their time'."""
    calls = collectives[(collectives["dim"].astype(str) == "tp").to_numpy() & collectives["rank"].isin(hit).to_numpy()
                        & collectives["in_window"].astype(bool).to_numpy()]
    per_op = calls.groupby(calls["op"].astype(str))["dur_us"].sum()
    per_op = per_op[per_op > 0].sort_values(ascending=False, kind="stable")
    if per_op.empty:
        return ""
    return ", ".join(f"{op} {v / per_op.sum():.0%}" for op, v in per_op.items()) + " of their call time"


def _pct(x: float) -> str:
    return "an unknown share" if math.isnan(x) else f"{x:.0%}"
