"""The pipeline's what-ifs: a balanced slowest stage (a replay of the run graph) and twice the microbatches at the
same global batch (a simulation of the schedule).

``balanced_stages``: the compute of the slowest stage's blocks (``summary.pipeline_blocks``), graph nodes of its
rank that start inside one, is scaled by the median of the other stages' microbatch cost over its own
(``microbatch_compute_us``), as ``no_straggler`` does for a rank; the replay moves everything else.

``microbatches_x2``: the schedule that ran (``pipesim.rank_orders``) is simulated twice, with m microbatches at the
measured costs and with 2m at half of them: each action's compute (per stage and phase, the median block of the
window) and each transfer (per pair of ranks and direction, the median matched pair of the window) halve, as the
microbatch and the bytes it sends do. Each action also pays its rank's host time between blocks
(``action_overhead_us``: posting sends and receives, the schedule's own Python), which does not shrink with the
microbatch. The predicted step is the measured one (the baseline replay) plus the difference of the two simulated
spans, so what the simulation leaves out (the optimizer, other collectives) stays as measured. Halving assumes
compute proportional to the microbatch's size: kernels too small to fill the device, or per-op host overhead
inside a block, shrink less, and the prediction is then optimistic.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracekit.predict import pipesim

PIPELINE_SCENARIOS = ("balanced_stages", "microbatches_x2")
NOT_PIPELINE = "the run has no pipeline stages (summary.pipeline is empty)"


def window_rows(pipeline: pd.DataFrame) -> pd.DataFrame:
    """The pipeline rows of the window (all of them where none is in it)."""
    rows = pipeline[pipeline["in_window"].astype(bool)]
    return rows if len(rows) else pipeline


def balanced_scale(graph: pd.DataFrame, pipeline: pd.DataFrame, blocks: pd.DataFrame,
                   cat: np.ndarray) -> tuple[np.ndarray | None, str]:
    """Per graph node: the factor ``balanced_stages`` scales its compute by (1 for most), and '' ; or (None, why
    not)."""
    if pipeline is None or pipeline.empty or blocks is None or blocks.empty:
        return None, NOT_PIPELINE
    if graph.empty:
        return None, "the run has no dependency graph to replay (no events that take time)"
    per_stage = window_rows(pipeline).groupby("stage")["microbatch_compute_us"].first()
    per_stage = per_stage[(per_stage.index >= 0) & np.isfinite(per_stage) & (per_stage > 0)]
    if len(per_stage) < 2:
        return None, "fewer than two stages with a known microbatch cost"
    slowest = int(per_stage.idxmax())
    factor = min(float(np.median(per_stage.drop(slowest))) / float(per_stage[slowest]), 1.0)
    mine = blocks[blocks["stage"] == slowest]
    start = graph["start_ns"].to_numpy(dtype=np.float64) / 1e3
    rank = graph["rank"].to_numpy()
    inside = np.zeros(len(graph), dtype=bool)
    for r, own in mine.groupby("rank"):
        spans = own.sort_values("start_us")
        lo, hi = spans["start_us"].to_numpy(), spans["end_us"].to_numpy()
        on_rank = rank == r
        i = np.searchsorted(lo, start, side="right") - 1
        hit = (i >= 0) & (start <= hi[np.maximum(i, 0)])
        inside |= on_rank & hit
    computing = np.isin(cat, ("compute", "memory"))
    return np.where(inside & computing, factor, 1.0), ""


def stage_costs(blocks: pd.DataFrame, steps: set[int]) -> dict[tuple[int, str], float]:
    """(stage, phase) -> the median compute of its blocks in ``steps`` (us); B, I and W together as B."""
    known = blocks[(blocks["stage"] >= 0) & blocks["step"].isin(steps)]
    phase = known["phase"].where(known["phase"] == "F", "B")
    per_block = known.assign(phase=phase).groupby(["stage", "phase", "step", "microbatch"])["compute_us"].sum()
    return {k: float(v) for k, v in per_block.groupby(["stage", "phase"]).median().items()}


def hop_times(p2p: pd.DataFrame, steps: set[int]) -> dict[tuple[int, int], float]:
    """(sender, receiver) -> the median transfer of the pair's matched calls in ``steps`` (us)."""
    if p2p is None or p2p.empty:
        return {}
    pairs = p2p[(p2p["status"] == "matched") & p2p["step"].isin(steps)].dropna(subset=["src_rank", "dst_rank"])
    medians = pairs.groupby([pairs["src_rank"].astype(int), pairs["dst_rank"].astype(int)])["transfer_us"].median()
    return {(int(a), int(b)): float(t) for (a, b), t in medians.items() if np.isfinite(t)}


def action_overhead_us(graph: pd.DataFrame | None, blocks: pd.DataFrame, steps: set[int]) -> dict[int, float]:
    """rank -> its busy time per block, outside the blocks' compute, from its first block's start to its last
    block's end (median over ``steps``; us): what each action of the schedule costs the rank besides its compute.
    Busy time is the graph's own times of the rank's nodes starting there (not its P2P spans, which wait) plus the
    enclosing ops' own time before them (``busy_ns``)."""
    if graph is None or graph.empty:
        return {}
    mine = graph[~graph["cat"].isin(["comm", "marker"]).to_numpy()]
    start = mine["start_ns"].to_numpy(dtype=float)
    own = (mine["end_ns"].to_numpy(dtype=float) - start + mine["busy_ns"].to_numpy(dtype=float)) / 1e3
    rank = mine["rank"].to_numpy()
    per: dict[int, list[float]] = {}
    for (r, _), bb in blocks[blocks["step"].isin(steps)].groupby(["rank", "step"]):
        lo, hi = bb["start_us"].min() * 1e3, bb["end_us"].max() * 1e3
        inside = (rank == r) & (start >= lo) & (start <= hi)
        per.setdefault(int(r), []).append(max(float(own[inside].sum() - bb["compute_us"].sum()), 0.0) / len(bb))
    return {r: float(np.median(v)) for r, v in per.items()}


def microbatch_prediction(pipeline: pd.DataFrame, blocks: pd.DataFrame, p2p: pd.DataFrame, base_step_us: float,
                          factor: int = 2, compute_scale: dict[int, float] | None = None,
                          graph: pd.DataFrame | None = None) -> tuple[float, dict, str]:
    """(predicted step us, the simulation's facts, '') with ``factor`` x the microbatches at the same global batch;
    (NaN, facts, why not) where it cannot be predicted. ``compute_scale``: rank -> factor on its stages' compute
    (as ``scenarios.whatif``'s); ``graph``: the run graph, for each rank's host time per action (None: none)."""
    if pipeline is None or pipeline.empty or blocks is None or blocks.empty:
        return math.nan, {}, NOT_PIPELINE
    rows = window_rows(pipeline)
    steps = {int(s) for s in rows["step"].unique()}
    schedule, p, v = str(rows["schedule"].iloc[0]), int(rows["stages"].iloc[0]), int(rows["stages_per_rank"].iloc[0])
    m = int(rows["microbatches"].median())
    orders, bigger = pipesim.rank_orders(schedule, p, v, m), pipesim.rank_orders(schedule, p, v, factor * m)
    if orders is None or bigger is None:
        return math.nan, {}, (f"no simulated order for the {schedule} schedule (ordered: "
                              f"{', '.join(pipesim.ORDERED)})")
    cost = stage_costs(blocks, steps)
    stage_rank = rows.groupby("stage")["rank"].first().to_dict()
    cost = {(st, ph): c * (compute_scale or {}).get(stage_rank.get(st), 1.0) for (st, ph), c in cost.items()}
    n_stages = p * v
    missing = [(s, ph) for s in range(n_stages) for ph in ("F", "B") if not np.isfinite(cost.get((s, ph), np.nan))]
    if missing:
        return math.nan, {}, f"no measured block for stage/phase {missing[0][0]}{missing[0][1]} in the window"
    hops = hop_times(p2p, steps)
    unknown = [(a, b) for a in range(n_stages) for b in (a - 1, a + 1) if 0 <= b < n_stages
               and stage_rank.get(a) != stage_rank.get(b) and (stage_rank.get(a), stage_rank.get(b)) not in hops]
    if unknown:
        return math.nan, {}, (f"no matched send/recv from stage {unknown[0][0]}'s rank to stage {unknown[0][1]}'s "
                              "in the window")
    # The simulated rank r is the one whose stages are r, r + p, ...; its measured rank comes from the stage.
    orders = {stage_rank[order[0][0]]: order for order in orders.values()}
    bigger = {stage_rank[order[0][0]]: order for order in bigger.values()}

    def hop(a: int, b: int, scale: float = 1.0) -> float:
        ra, rb = stage_rank[a], stage_rank[b]
        return 0.0 if ra == rb else hops[(ra, rb)] * scale

    overhead = action_overhead_us(graph, blocks, steps)
    extra = {st: overhead.get(r, 0.0) for st, r in stage_rank.items()}
    span = pipesim.makespan(orders, lambda s, ph: cost[(s, ph)] + extra[s], hop, n_stages)
    span_more = pipesim.makespan(bigger, lambda s, ph: cost[(s, ph)] / factor + extra[s],
                                 lambda a, b: hop(a, b, 1 / factor), n_stages)
    measured = measured_span_us(blocks, steps)
    facts = {"schedule": schedule, "stages": p, "stages_per_rank": v, "microbatches": m, "action_overhead_us": overhead,
             "simulated_span_us": span, "simulated_span_more_us": span_more, "measured_span_us": measured}
    return base_step_us + span_more - span, facts, ""


def measured_span_us(blocks: pd.DataFrame, steps: set[int]) -> float:
    """The mean over ``steps`` of the time from the pipeline's first block start to its last block end."""
    known = blocks[blocks["step"].isin(steps)]
    per_step = known.groupby("step").agg(lo=("start_us", "min"), hi=("end_us", "max"))
    return float((per_step["hi"] - per_step["lo"]).mean()) if len(per_step) else math.nan
