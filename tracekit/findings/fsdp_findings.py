"""Findings for sharded training (FSDP), read off ``summary.fsdp``: each names the remedy that fits what was measured.

- ``fsdp_exposed_allgather``: units stand waiting for their all-gathers with no compute running (``wait_us``) for a
  share of the step time (medium, high), or, under those shares, gathers issued on demand after the first unit of a
  pass (an earlier unit could have prefetched them) still stall their units (low). The measure is the units' wait,
  not the gathers' exposed duration: a gather can run uncovered while the rank is blocked on something else (on gloo,
  in the previous unit's reduction, waiting for a late peer) and delay no unit. The remedy follows where the wait
  is: late on-demand gathers -> prefetch more; the backward pass (parameters freed after forward) ->
  ``reshard_after_forward=False`` for the last units, which backward needs first; many small units -> fewer, larger.
  On a forward-only run (every hit rank's ``ranks.training`` False): no backward prefetch, and where a unit gathers
  more than once in the window, keep it gathered (``reshard_after_forward=False``): later forwards then gather nothing.
- ``fsdp_fp32_allgather``: parameters gathered in float32 while units wait for all-gathers: bf16 halves the bytes
  (forward only: no gradient reduction dtype to name).
- ``fsdp_exposed_reduce``: the last unit of backward reduces its gradients with no compute left to hide under.
- ``fsdp_small_units``: units whose all-gather moves little and takes longer than the unit computes, measured on
  each request's fastest rank across ranks (``own_gathers``), so time spent waiting for a late peer does not count.
Thresholds are constants here; shares are of the rank's step time over the window.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd

from tracekit import fmt
from tracekit.findings.finding import Finding, by_severity, trains_on

EXPOSED_ALLGATHER_SHARE = (0.05, 0.20)  # of step time units wait for gathers: medium, high
LATE_WAIT_SHARE = 0.001                 # low: of step time late on-demand gathers stall their units; under: noise
BACKWARD_SHARE = 0.3                    # of exposed all-gather in backward: keep the last units unsharded
EXPOSED_REDUCE_SHARE = 0.05             # of step time, the last backward unit's exposed reduction
SMALL_UNIT_BYTES = 4e6                  # a gather under this is latency-bound on any interconnect
FP32_NAMES = {"float", "float32", "c10::float", "torch.float32"}

PREFETCH_REMEDY = ("prefetch more: FSDP2 block.set_modules_to_forward_prefetch([next blocks]) and "
                   "set_modules_to_backward_prefetch([previous blocks]); FSDP1 forward_prefetch=True, "
                   "backward_prefetch=BackwardPrefetch.BACKWARD_PRE")
RESHARD_REMEDY = ("fully_shard(last blocks, reshard_after_forward=False): backward needs them first, so gathering "
                  "them again right after forward only adds exposed time (costs their unsharded memory)")
LARGER_UNITS_REMEDY = "wrap fewer, larger units (several blocks per fully_shard) so each gather is bigger and rarer"
# A forward-only run (inference): nothing to prefetch for backward, and parameters resharded after each forward are
# gathered again by the next one, which keeping them gathered avoids.
FORWARD_PREFETCH_REMEDY = ("prefetch more: FSDP2 block.set_modules_to_forward_prefetch([next blocks]); FSDP1 "
                           "forward_prefetch=True")
KEEP_GATHERED_REMEDY = ("keep the parameters gathered between forwards: fully_shard(..., reshard_after_forward=False) "
                        "(or module.set_reshard_after_forward(False); FSDP1 ShardingStrategy.SHARD_GRAD_OP), so only "
                        "the first forward gathers them (costs their unsharded memory; a model that fits one device "
                        "needs no FSDP at all)")


def merged(findings: tuple, fsdp: pd.DataFrame, steps: pd.DataFrame,
           ranks: pd.DataFrame | None = None) -> tuple[Finding, ...]:
    """``findings`` and the FSDP findings of ``fsdp`` together, most severe first (``ranks``: as in ``find``)."""
    found = list(findings) + list(find(fsdp, steps, ranks))
    return by_severity(found)


def find(fsdp: pd.DataFrame, steps: pd.DataFrame, ranks: pd.DataFrame | None = None) -> tuple[Finding, ...]:
    """The FSDP findings of a run (none without FSDP rows in the window). ``ranks``: the run's ranks table, whose
    ``training`` words the advice for a forward-only run; None: unknown, the training advice."""
    if fsdp is None or fsdp.empty:
        return ()
    rows = fsdp[fsdp["in_window"].astype(bool)]
    kept = steps[steps["in_window"].astype(bool)]
    step_us = kept.groupby("rank")["step_us"].sum()
    if rows.empty or step_us.empty:
        return ()
    training = functools.partial(trains_on, ranks)  # hit ranks -> whether the advice is for training
    return tuple(f for check in (_exposed_allgather, _fp32_allgather, _exposed_reduce, _small_units)
                 for f in check(rows, step_us, training))


def _level(value: float, thresholds: tuple[float, float]) -> str | None:
    if math.isnan(value) or value < thresholds[0]:
        return None
    return "high" if value >= thresholds[1] else "medium"


def _per_rank_share(rows: pd.DataFrame, column: str, step_us: pd.Series) -> pd.Series:
    return (rows.groupby("rank")[column].sum() / step_us).dropna()


def _exposed_allgather(rows, step_us, training):
    share = _per_rank_share(rows, "wait_us", step_us)
    late = late_on_demand(rows)
    late_share = _per_rank_share(rows[late], "wait_us", step_us).reindex(share.index, fill_value=0.0)
    hit = share.index[(share >= EXPOSED_ALLGATHER_SHARE[0]) | (late_share >= LATE_WAIT_SHARE)]
    if len(hit) == 0:
        return []
    worst = float(share[hit].max())
    level = _level(worst, EXPOSED_ALLGATHER_SHARE) or "low"  # under the shares: only late on-demand gathers stall
    ours = rows["rank"].isin(hit)
    mine, late = rows[ours], late[ours]
    steps = max(1, mine.groupby(["rank", "step"]).ngroups)
    waited = float(mine["wait_us"].sum())
    late_wait = float(mine.loc[late, "wait_us"].sum())
    late_per_step = float(late.sum()) / steps
    backward = float(mine.loc[mine["phase"] == "backward", "wait_us"].sum()) / waited
    per_unit = mine.groupby("unit")["wait_us"].sum().sort_values(ascending=False)
    per_unit = per_unit[per_unit > 0]
    small = float(mine.loc[mine["gathers"] > 0, "allgather_bytes"].median()) < SMALL_UNIT_BYTES
    prefetch = late_wait > 0
    if training(hit):
        remedies = ([PREFETCH_REMEDY] if prefetch else []) + \
                   ([RESHARD_REMEDY] if backward >= BACKWARD_SHARE else []) + ([LARGER_UNITS_REMEDY] if small else [])
    else:  # forward only: a unit that gathers more than once was resharded after a forward and gathered again
        again = bool((mine[mine["gathers"] > 0].groupby(["rank", "unit"], observed=True).size() > 1).any())
        remedies = ([KEEP_GATHERED_REMEDY] if again else []) + ([FORWARD_PREFETCH_REMEDY] if prefetch else []) + \
                   ([LARGER_UNITS_REMEDY] if small else [])
    units = ", ".join(f"{u} {_ms(v / steps)} ms" for u, v in per_unit.head(3).items())
    late_text = (f"; {late_per_step:.1f} gathers per step and rank were issued on demand after the first unit of "
                 f"their pass (an earlier unit could have prefetched them), and their units waited "
                 f"{_ms(late_wait / steps)} ms per step for them" if prefetch else "")
    return [Finding(
        "fsdp_exposed_allgather", level, tuple(int(r) for r in hit),
        f"FSDP units stand waiting for their all-gathers, with no compute running, for up to {worst:.1%} of the step "
        f"time ({backward:.0%} of it in backward){late_text}. Most waiting units, per step and rank: {units}.",
        "; ".join(remedies or ["overlap the gathers with compute (prefetch), or gather fewer bytes"]) + ".",
        {"share": worst, "wait_us": waited, "allgather_exposed_us": float(mine["allgather_exposed_us"].sum()),
         "late_on_demand_per_step": late_per_step, "late_on_demand_wait_us": late_wait,
         "late_on_demand_exposed_us": float(mine.loc[late, "allgather_exposed_us"].sum()),
         "backward_share": backward, "threshold": EXPOSED_ALLGATHER_SHARE[0], "late_threshold": LATE_WAIT_SHARE,
         "prefetch_remedy": prefetch, "units": {str(u): float(v) for u, v in per_unit.items()}})]


def _ms(us: float) -> str:
    """Milliseconds as every number of tracekit's (``fmt.ms``): a small wait reads 0.0123, never 0.0."""
    return fmt.ms(us)


def late_on_demand(rows: pd.DataFrame) -> pd.Series:
    """Rows whose all-gather was issued on demand although an earlier unit of the same pass could have prefetched
    it (the first gathering unit of a pass has nothing before it to hide under)."""
    gathered = rows["gathers"] > 0
    passes = [rows["rank"], rows["step"], rows["phase"]]
    first = rows["order"].where(gathered).groupby(passes, observed=True).transform("min")
    return (rows["prefetch"] == "on_demand") & (rows["order"] > first)


def _fp32_allgather(rows, step_us, training):
    fp32 = rows["allgather_dtype"].astype(str).str.lower().isin(FP32_NAMES) & (rows["gathers"] > 0)
    if not fp32.any():
        return []
    share = _per_rank_share(rows[fp32], "wait_us", step_us)
    worst = float(share.max()) if len(share) else math.nan
    if math.isnan(worst) or worst < EXPOSED_ALLGATHER_SHARE[0]:
        return []
    hit = share.index[share >= EXPOSED_ALLGATHER_SHARE[0]]
    # A gather of unknown size leaves the step's bytes unknown (NaN), never a 0 MB gather.
    gathers = rows[fp32 & rows["rank"].isin(hit)]
    by_step = [gathers["rank"], gathers["step"]]
    per_step = gathers["allgather_bytes"].groupby(by_step).sum().where(
        ~gathers["allgather_bytes"].isna().groupby(by_step).any())
    size = "unknown MB" if per_step.isna().any() else f"{per_step.mean() / 1e6:.2f} MB"
    return [Finding(
        "fsdp_fp32_allgather", "medium", tuple(int(r) for r in hit),
        f"FSDP gathers parameters in float32 ({size} per step and rank) while units wait "
        f"for all-gathers up to {worst:.0%} of the step time.",
        "MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) halves the all-gather bytes "
        "(FSDP1: MixedPrecision(param_dtype=torch.bfloat16))." if training(hit) else  # forward only: no reduction
        "Gather in bf16: MixedPrecisionPolicy(param_dtype=torch.bfloat16) (FSDP1: MixedPrecision(param_dtype="
        "torch.bfloat16)), or load the weights in bf16 before sharding them (model.to(torch.bfloat16)): either halves "
        "the all-gather bytes.",
        {"share": worst, "allgather_bytes_per_step": float(per_step.mean()),
         "bytes_saved_per_step": float(per_step.mean()) / 2})]


def _exposed_reduce(rows, step_us, training):  # backward's reductions: a forward-only run has none
    bwd = rows[rows["phase"] == "backward"]
    if bwd.empty:
        return []
    last = bwd[bwd["order"] == bwd.groupby(["rank", "step"])["order"].transform("max")]
    share = _per_rank_share(last, "reduce_exposed_us", step_us)
    worst = float(share.max()) if len(share) else math.nan
    if math.isnan(worst) or worst < EXPOSED_REDUCE_SHARE:
        return []
    hit = share.index[share >= EXPOSED_REDUCE_SHARE]
    units = sorted(set(last.loc[last["rank"].isin(hit), "unit"].astype(str)))
    return [Finding(
        "fsdp_exposed_reduce", "medium", tuple(int(r) for r in hit),
        f"The reduce-scatter of the last unit of backward ({', '.join(units)}) runs with no compute left to hide "
        f"under: up to {worst:.0%} of the step time.",
        "Make the last unit of backward small (shard the embeddings apart from the root), reduce in bf16 "
        "(MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)) if accuracy allows, and with gradient accumulation "
        "reduce once per optimizer step (set_requires_gradient_sync(False) on the other micro-batches).",
        {"share": worst, "reduce_exposed_us": float(last.loc[last["rank"].isin(hit), "reduce_exposed_us"].sum()),
         "threshold": EXPOSED_REDUCE_SHARE, "units": units})]


def _small_units(rows, step_us, training):
    """Units whose gathers move under ``SMALL_UNIT_BYTES`` and cost more than the unit computes, judged on the
    gathers' own cost (``own_gathers``: the fastest rank's time of each matched request), not on time spent waiting
    for a late peer; at least two such units."""
    own = own_gathers(rows)
    own = own[own["gather_us"].notna() & own["compute_us"].notna()]  # unknown on some rank: the request is not judged
    if own.empty:
        return []
    per_unit = own.groupby("unit").agg(bytes=("bytes", "median"), gather_us=("gather_us", "sum"),
                                       compute_us=("compute_us", "sum"))
    small = per_unit[(per_unit["bytes"] < SMALL_UNIT_BYTES) & (per_unit["gather_us"] > per_unit["compute_us"])]
    if len(small) < 2:
        return []
    share = float(small["gather_us"].sum() / per_unit["gather_us"].sum())
    return [Finding(
        "fsdp_small_units", "low", tuple(int(r) for r in np.unique(rows.loc[rows["gathers"] > 0, "rank"])),
        f"{len(small)} of {len(per_unit)} FSDP units gather under {SMALL_UNIT_BYTES / 1e6:.0f} MB "
        f"(median {small['bytes'].median() / 1e6:.3g} MB) and their gathers take longer than the unit computes even "
        "on the fastest rank, which waited for no late peer: their collectives are latency-bound.",
        LARGER_UNITS_REMEDY + ".",
        {"gather_share": share, "units": [str(u) for u in small.index],
         "median_bytes": float(small["bytes"].median()),
         "own_gather_us": {str(u): float(v) for u, v in small["gather_us"].items()},
         "compute_us": {str(u): float(v) for u, v in small["compute_us"].items()}})]


def own_gathers(rows: pd.DataFrame) -> pd.DataFrame:
    """The all-gathers' own cost, per FSDP request matched across ranks (same step, phase, order and unit on every
    rank that gathers): ``gather_us`` the fastest rank's gather time, ``compute_us`` the ranks' mean compute,
    ``bytes`` their median. A rank's gather lasts its own transfer plus its wait for the last peer to arrive; the
    last to arrive waits for no one, so the fastest rank's time holds (almost) no waiting. (The collectives'
    ``transfer_us`` splits each call, but no fsdp row names its calls: hence the match by request.) A request
    not seen gathering on every such rank, or unknown on one (NaN), is NaN: its waiting cannot be told apart; with
    one rank, every request is (a single trace cannot say when its peers arrived)."""
    gathered = rows[rows["gathers"] > 0]
    g = gathered.groupby(["step", "phase", "order", "unit"], observed=True, sort=False)
    size = g.size()
    out = pd.DataFrame({"gather_us": g["allgather_us"].min(), "compute_us": g["compute_us"].mean(),
                        "bytes": g["allgather_bytes"].median(), "ranks": g["rank"].nunique()})
    everywhere = (out["ranks"] == gathered["rank"].nunique()) & (out["ranks"] >= 2)
    out["gather_us"] = out["gather_us"].where(everywhere & (g["allgather_us"].count() == size))
    out["compute_us"] = out["compute_us"].where(g["compute_us"].count() == size)
    return out.reset_index()
