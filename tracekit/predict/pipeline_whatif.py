"""The pipeline's what-ifs: a balanced slowest stage (a replay of the run graph) and twice the microbatches at the
same global batch (a simulation of the schedule).

``balanced_stages``: the compute of the slowest stage's blocks (``summary.pipeline_blocks``), graph nodes of its
rank that start inside one, is scaled by the median of the other stages' microbatch cost over its own
(``microbatch_compute_us``), as ``no_straggler`` does for a rank; the replay moves everything else.

``microbatches_x2``: the schedule that ran (``pipesim.rank_orders``) is simulated twice, with m microbatches at the
measured costs and with 2m at half of them. An action costs its block's measured span (per stage and phase, the
median over the window's actions and the stage's data-parallel replicas): the work in it halves with the
microbatch, the host's dispatch inside it does not (``dispatch_per_block``: the same ops issued, each on half the
data). Between blocks, a rank's compute (a loss, say) halves and its host time (the schedule's own Python) does not
(``between_blocks``); a send or receive call is left out there, since its time lies inside the transfer. Each
transfer (per pair of ranks and direction, the median matched pair of the window) halves with the bytes it sends.
The predicted step is the measured one (the baseline replay) plus the difference of the two simulated spans, so
what the simulation leaves out (the optimizer, other collectives) stays as measured; where the simulation at the
measured costs misses the measured span by over ``SIMULATION_TOLERANCE``, nothing is predicted. Halving assumes
work proportional to the microbatch's size: kernels too small to fill the device shrink less, and transfers that
cost mostly their latency too; the prediction is then optimistic.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracekit.events.pipeline import P2P_CALL
from tracekit.predict import pipesim

PIPELINE_SCENARIOS = ("balanced_stages", "microbatches_x2")
# The schedule simulated at the measured costs must span the measured blocks within this fraction, else the run's
# time goes to what the simulation leaves out and a difference of two simulations says nothing of it.
SIMULATION_TOLERANCE = 0.25
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
        _, end = _block_at(spans["start_us"].to_numpy(), spans["end_us"].to_numpy(), start)
        inside |= (rank == r) & (start <= end)
    computing = np.isin(cat, ("compute", "memory"))
    return np.where(inside & computing, factor, 1.0), ""


def dispatch_per_block(graph: pd.DataFrame | None, blocks: pd.DataFrame) -> np.ndarray:
    """Per block, the host's dispatch time inside it (us): the gaps between its compute events (graph nodes of its
    rank, ``compute`` or ``memory``, in start order, nested ones merged), each counted up to its rank's median gap
    inside blocks. A gap that long is the host issuing the next op, which a smaller microbatch does not shorten; the
    part of a longer gap beyond it (a wait, a descheduled thread) is not. Zeros without a graph."""
    dispatch = np.zeros(len(blocks))
    if graph is None or graph.empty:
        return dispatch
    computing = graph[graph["cat"].isin(["compute", "memory"]).to_numpy()]
    blocks = blocks.reset_index(drop=True)  # labels are positions
    for r, own in blocks.groupby("rank"):
        nodes = computing[(computing["rank"] == r).to_numpy()]
        order = np.argsort(nodes["start_ns"].to_numpy(), kind="stable")
        start = nodes["start_ns"].to_numpy(dtype=np.float64)[order] / 1e3
        end = nodes["end_ns"].to_numpy(dtype=np.float64)[order] / 1e3
        spans = own.sort_values("start_us")
        block, block_end = _block_at(spans["start_us"].to_numpy(), spans["end_us"].to_numpy(), start)
        inside = start <= block_end
        start, end, block = start[inside], end[inside], block[inside]
        if len(start) < 2:
            continue
        gap = start[1:] - np.maximum.accumulate(end)[:-1]
        gap = np.where((block[1:] == block[:-1]) & (gap > 0), gap, 0.0)
        typical = float(np.median(gap[gap > 0])) if (gap > 0).any() else 0.0
        per_block = np.bincount(block[1:], weights=np.minimum(gap, typical), minlength=len(spans))
        dispatch[spans.index.to_numpy()] = per_block
    return dispatch


def _block_at(lo: np.ndarray, hi: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For blocks [``lo``, ``hi``] sorted by start: the last one starting at or before each time (-1 for none) and
    its end (-inf for none)."""
    block = np.searchsorted(lo, t, side="right") - 1
    return block, np.where(block >= 0, hi[np.maximum(block, 0)], -np.inf)


def _window_blocks(blocks: pd.DataFrame, steps: set[int]) -> pd.DataFrame:
    """The blocks of a known stage in ``steps``."""
    return blocks[((blocks["stage"] >= 0) & blocks["step"].isin(steps)).to_numpy()]


def _per_action(blocks: pd.DataFrame, value) -> dict[tuple[int, str], float]:
    """(stage, phase) -> the median over the actions (rank, step, microbatch: a data-parallel replica's are its own)
    of ``value`` (one per block) summed per action; B, I and W together as B."""
    phase = blocks["phase"].where(blocks["phase"] == "F", "B")
    per_action = blocks.assign(phase=phase, value=np.asarray(value, dtype=np.float64)).groupby(
        ["stage", "phase", "rank", "step", "microbatch"])["value"].sum()
    return {k: float(v) for k, v in per_action.groupby(["stage", "phase"]).median().items()}


def hop_times(p2p: pd.DataFrame, steps: set[int]) -> dict[tuple[int, int], float]:
    """(sender, receiver) -> the median transfer of the pair's matched calls in ``steps`` (us)."""
    if p2p is None or p2p.empty:
        return {}
    pairs = p2p[(p2p["status"] == "matched") & p2p["step"].isin(steps)].dropna(subset=["src_rank", "dst_rank"])
    medians = pairs.groupby([pairs["src_rank"].astype(int), pairs["dst_rank"].astype(int)])["transfer_us"].median()
    return {(int(a), int(b)): float(t) for (a, b), t in medians.items() if np.isfinite(t)}


def between_blocks(graph: pd.DataFrame | None, blocks: pd.DataFrame,
                   steps: set[int]) -> dict[int, tuple[float, float]]:
    """rank -> (compute, host time) per block between its blocks, from its first block's start to its last block's
    end (median over ``steps``; us): what each action of the schedule costs the rank besides its block. Compute is
    the own time of its ``compute`` and ``memory`` nodes starting there; host time that of its other nodes (not its
    P2P spans, which wait, nor its send and receive calls, whose time lies inside the transfer), plus the enclosing
    ops' own time before them (``busy_ns``)."""
    if graph is None or graph.empty:
        return {}
    mine = graph[~graph["cat"].isin(["comm", "marker"]).to_numpy()]
    start = mine["start_ns"].to_numpy(dtype=float) / 1e3
    own = (mine["end_ns"].to_numpy(dtype=float) - mine["start_ns"].to_numpy(dtype=float)
           + mine["busy_ns"].to_numpy(dtype=float)) / 1e3
    rank = mine["rank"].to_numpy()
    computing = mine["cat"].isin(["compute", "memory"]).to_numpy()
    names = mine["name"].astype("category").cat
    labels = names.categories.astype(str)
    is_call = np.fromiter((P2P_CALL.search(n) is not None for n in labels), dtype=bool, count=len(labels))
    call = np.append(is_call, False)[names.codes.to_numpy()]  # code -1 (no name): the appended False
    per: dict[int, list[tuple[float, float]]] = {}
    for r, own_blocks in blocks[blocks["step"].isin(steps)].groupby("rank"):
        spans = own_blocks.sort_values("start_us")
        after, end = _block_at(spans["start_us"].to_numpy(), spans["end_us"].to_numpy(), start)
        between = (rank == r) & (after >= 0) & (start >= end) & ~call
        for _, bb in spans.groupby("step"):
            inside = between & (start >= bb["start_us"].min()) & (start <= bb["end_us"].max())
            per.setdefault(int(r), []).append((float(own[inside & computing].sum()) / len(bb),
                                               float(own[inside & ~computing].sum()) / len(bb)))
    return {r: (float(np.median([c for c, _ in v])), float(np.median([h for _, h in v]))) for r, v in per.items()}


def microbatch_prediction(pipeline: pd.DataFrame, blocks: pd.DataFrame, p2p: pd.DataFrame, base_step_us: float,
                          factor: int = 2, compute_scale: dict[int, float] | None = None,
                          graph: pd.DataFrame | None = None) -> tuple[float, dict, str]:
    """(predicted step us, the simulation's facts, '') with ``factor`` x the microbatches at the same global batch;
    (NaN, facts, why not) where it cannot be predicted. ``compute_scale``: rank -> factor on its stages' compute
    (as ``scenarios.whatif``'s); ``graph``: the run graph, for the host's dispatch inside blocks and each rank's
    time between them (None: none; each action then costs its block's span, all of it work)."""
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
    # An action's measured span is its work, which halves with the microbatch, and its host's dispatch, which does not.
    window = _window_blocks(blocks, steps)
    dispatch = dispatch_per_block(graph, window)
    stage_rank = rows.groupby("stage")["rank"].first().to_dict()
    work = _per_action(window, (window["end_us"] - window["start_us"]).to_numpy() - dispatch)
    fixed = _per_action(window, dispatch)
    n_stages = p * v
    missing = [(s, ph) for s in range(n_stages) for ph in ("F", "B") if not np.isfinite(work.get((s, ph), np.nan))]
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
    between = between_blocks(graph, blocks, steps)

    def cost(scale: dict, share: float):
        """Each action's time with its work (and the compute between blocks) scaled by ``scale`` and ``share``."""
        def of(st: int, ph: str) -> float:
            r = stage_rank[st]
            compute, host = between.get(r, (0.0, 0.0))
            return (work[(st, ph)] + compute) * scale.get(r, 1.0) * share + fixed[(st, ph)] + host
        return of

    def hop(share: float):
        return lambda a, b: 0.0 if stage_rank[a] == stage_rank[b] else hops[(stage_rank[a], stage_rank[b])] * share

    scale = compute_scale or {}
    span = pipesim.makespan(orders, cost(scale, 1.0), hop(1.0), n_stages)
    span_more = pipesim.makespan(bigger, cost(scale, 1 / factor), hop(1 / factor), n_stages)
    as_measured = span if not scale else pipesim.makespan(orders, cost({}, 1.0), hop(1.0), n_stages)
    measured = measured_span_us(window, steps)
    facts = {"schedule": schedule, "stages": p, "stages_per_rank": v, "microbatches": m,
             "between_blocks_us": between, "dispatch_us": fixed, "simulated_span_us": span,
             "simulated_span_more_us": span_more, "measured_span_us": measured}
    if not abs(as_measured - measured) <= SIMULATION_TOLERANCE * measured:
        return math.nan, facts, (f"the {schedule} schedule simulated at the measured costs spans "
                                 f"{as_measured / 1e3:,.2f} ms against the {measured / 1e3:,.2f} ms the blocks "
                                 "measured: the run's time goes to what the simulation leaves out (other work, "
                                 "contention), so it cannot say what twice the microbatches would do")
    return base_step_us + span_more - span, facts, ""


def measured_span_us(blocks: pd.DataFrame, steps: set[int]) -> float:
    """The mean over ``steps`` of the time from the pipeline's first block start to its last block end (blocks of a
    known stage, as the simulation's)."""
    known = _window_blocks(blocks, steps)
    per_step = known.groupby("step").agg(lo=("start_us", "min"), hi=("end_us", "max"))
    return float((per_step["hi"] - per_step["lo"]).mean()) if len(per_step) else math.nan
