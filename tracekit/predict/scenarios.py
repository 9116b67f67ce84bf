"""What-if step times: replay the run's graph with measured times changed, one scenario at a time.

Scenarios (each changes the measured ``delay``/``tail`` of some nodes, see ``tracekit.predict.replay``; the replay then
finds where every other event moves, so the critical path may change):

  baseline         nothing changed: reproduces the measured step time
  no_straggler     at each collective a rank arrived at last, that rank's time since its previous collective is cut
                   to the median of the other ranks' for the same collective, compute (own times of compute nodes)
                   and host time (positive delays, own times of the other nodes) each on its own
                   (``straggler_factors``)
  comm_x<k>        collective transfer times divided by k (``comm_x2``, ``comm_x0.5`` for twice as slow)
  perfect_overlap  collective transfers take no time (ranks still meet at every collective)
  no_host_gaps     the host is never late: on GPU ranks, host-thread delays and launch calls take no time and
                   device events no longer wait for their launches, only for the device work their host waited
                   for before launching them (a sync, a spin-wait); on CPU-only ranks, the training thread's
                   unrecorded time between ops (not data loading, not waits) is removed
  no_data_wait     DataLoader ``__next__`` and everything inside it takes no time
  balanced_stages  pipeline runs: the slowest stage's block compute cut to the median of the other stages' per
                   microbatch (``pipeline_whatif.balanced_scale``)
  microbatches_x2  pipeline runs: twice the microbatches at the same global batch, each half the size; not a
                   replay but the schedule simulated both ways, added to the measured step
                   (``pipeline_whatif.microbatch_prediction``)

``compute_scale`` ({rank: factor}) multiplies the compute nodes' own times, after the scenario's changes (the cut
of ``no_straggler`` is measured on the trace as it is).
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd

from tracekit import quality as quality_notes
from tracekit import schema
from tracekit.predict import pipeline_whatif, replay, stepbounds
from tracekit.predict.pipeline_whatif import PIPELINE_SCENARIOS

SCENARIOS = ("baseline", "no_straggler", "comm_x2", "perfect_overlap", "no_host_gaps", "no_data_wait")
WHATIF_COLUMNS = list(schema.WHATIF_COLUMNS)[:-1]  # the replay's (predict_graph); whatif adds the reason
NO_GAIN_PCT = 1.0  # a predicted saving under this % of the step is worded as no measurable gain
UNKNOWN_REASON = "unknown: the trace does not say why"  # whatif's reason where no fact of the Summary explains it
_COMM_X = re.compile(r"^comm_x(\d+(?:\.\d+)?)$")
# Which scenario predicts the saving of each finding's fix, and how to say it.
_FIX = {"straggler": ("no_straggler", "removing rank {ranks}'s delay"),
        "straggler_suspected": ("no_straggler", "removing rank {ranks}'s delay"),
        "exposed_comm": ("perfect_overlap", "hiding all communication"),
        "data_loading": ("no_data_wait", "removing DataLoader waits"),
        "host_bound": ("no_host_gaps", "removing host gaps"), "host_unrecorded": ("no_host_gaps", "removing host gaps"),
        "stage_imbalance": ("balanced_stages", "the slowest stage's compute brought to the others' median"),
        "pipeline_bubble": ("microbatches_x2", "twice the microbatches at the same global batch")}


def default_scenarios(summary) -> tuple[str, ...]:
    """``SCENARIOS``, and ``PIPELINE_SCENARIOS`` on a run with pipeline stages."""
    has_pipeline = summary.pipeline is not None and not summary.pipeline.empty
    return SCENARIOS + PIPELINE_SCENARIOS if has_pipeline else SCENARIOS


def whatif(summary, scenarios=None, compute_scale: dict[int, float] | None = None):
    """Predicted mean step time of the run under each scenario, by replaying its dependency graph.

    ``tracekit.whatif`` (``tracekit.api.whatif``) also takes a run folder and summarizes it first.

    Args:
      summary: the run's ``Summary``.
      scenarios: names from ``SCENARIOS``, ``PIPELINE_SCENARIOS`` or ``comm_x<k>`` (k > 0); None for
        ``default_scenarios``.
      compute_scale: rank -> factor applied to the compute nodes' own times in every scenario (e.g. to model a
        run where ranks compute more slowly); None for none.
    Returns a DataFrame: scenario, step_time_us (mean over ranks of the mean window step), speedup (baseline step
    time / this one), saving_us and saving_pct (per step, against the baseline), reason ('' where step_time_us is
    known; else why not: the data-quality notes that unknow the row, ``quality.whatif_notes``, joined by '; '; where
    none applies, that the graph is empty, or ``UNKNOWN_REASON``).

    """
    names = list(default_scenarios(summary) if scenarios is None else
                 [scenarios] if isinstance(scenarios, str) else scenarios)
    for name in names:
        _check(name)
    window = _window(summary.steps)
    cat = _cats(summary.graph) if not summary.graph.empty else np.array([], dtype=object)
    stage_scale, stage_reason = pipeline_whatif.balanced_scale(summary.graph, summary.pipeline,
                                                               summary.pipeline_blocks, cat)
    replays = [n for n in names if n != "microbatches_x2"]
    table = predict_graph(summary.graph, window, ["baseline", *replays], compute_scale,
                          stage_scale=stage_scale).drop_duplicates("scenario").set_index("scenario")
    pipeline_reason = {"balanced_stages": stage_reason}
    if "microbatches_x2" in names:
        base = float(table.loc["baseline", "step_time_us"])
        predicted, _, why = pipeline_whatif.microbatch_prediction(
            summary.pipeline, summary.pipeline_blocks, summary.p2p, base, compute_scale=compute_scale,
            graph=summary.graph)
        pipeline_reason["microbatches_x2"] = why
        table.loc["microbatches_x2", "step_time_us"] = predicted
        table.loc["microbatches_x2", ["speedup", "saving_us", "saving_pct"]] = [
            base / predicted, base - predicted, (base - predicted) / base * 100]
    table = table.loc[names].reset_index()[WHATIF_COLUMNS]
    quality = summary.data_quality
    if quality["device_events_absent"].astype(bool).any():
        # A device rank whose kernels were not collected: what the device did is unknown, so is any change to it.
        changed = (table["scenario"] != "baseline").to_numpy()
        table.loc[changed, ["step_time_us", "speedup", "saving_us", "saving_pct"]] = np.nan
    # The reason beside each unknown row, so a pandas user sees it too (the CLI prints these notes under its table).
    empty = ["the run has no dependency graph to replay (no events that take time)"] if summary.graph.empty else []
    table["reason"] = ["" if known else pipeline_reason.get(name) or "; ".join(
                       quality_notes.whatif_notes(quality, name) or empty) or UNKNOWN_REASON
                       for name, known in zip(table["scenario"], table["step_time_us"].notna())]
    return table


def predict_graph(graph: pd.DataFrame, window_steps: pd.DataFrame, scenarios=SCENARIOS,
                  compute_scale: dict[int, float] | None = None, model: replay.Model | None = None,
                  stage_scale: np.ndarray | None = None) -> pd.DataFrame:
    """``whatif`` on a run graph and the window's (rank, step) pairs; ``model``: the graph's ``replay.measure``,
    when the caller has it already; ``stage_scale``: ``pipeline_whatif.balanced_scale``'s factors (without them,
    ``balanced_stages`` is unknown)."""
    names = [scenarios] if isinstance(scenarios, str) else list(scenarios)
    for name in names:
        _check(name)
    if graph.empty:
        return pd.DataFrame({"scenario": names, "step_time_us": np.nan, "speedup": np.nan, "saving_us": np.nan,
                             "saving_pct": np.nan})
    model = replay.measure(graph) if model is None else model
    shared = _Shared(cat=_cats(graph), marks=stepbounds.marks(graph), stage_scale=stage_scale)  # once, not per scenario
    base = _step_us(graph, model, "baseline", window_steps, compute_scale or {}, shared)
    times = [base if name == "baseline" else np.nan if name == "microbatches_x2" or (name == "balanced_stages"
                                                                                     and stage_scale is None)
             else _step_us(graph, model, name, window_steps, compute_scale or {}, shared) for name in names]
    table = pd.DataFrame({"scenario": names, "step_time_us": times})
    table["speedup"] = base / table["step_time_us"]
    table["saving_us"] = base - table["step_time_us"]
    table["saving_pct"] = table["saving_us"] / base * 100
    return table[WHATIF_COLUMNS]


def _cats(graph: pd.DataFrame) -> np.ndarray:
    """The node categories as a fixed-width text array (through the codes: no string conversion per row), which
    numpy compares in C, not one Python object at a time (3-4x faster on a run's hundreds of thousands of nodes)."""
    return np.asarray(list(graph["cat"].cat.categories), dtype=str)[graph["cat"].cat.codes.to_numpy()]


def _check(name: str) -> None:
    if name in SCENARIOS or name in PIPELINE_SCENARIOS:
        return
    match = _COMM_X.match(name)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"unknown scenario {name!r}: use one of {', '.join(SCENARIOS + PIPELINE_SCENARIOS)} "
                         "or comm_x<k> with k > 0")


def _window(steps: pd.DataFrame) -> pd.DataFrame:
    if steps.empty:
        return steps
    return steps.loc[steps["in_window"].astype(bool), ["rank", "step"]]


@dataclasses.dataclass(frozen=True)
class _Shared:
    """What every scenario of one graph reads: the node categories, its step markers (``stepbounds.marks``), and
    ``balanced_stages``'s factors."""

    cat: np.ndarray
    marks: stepbounds.Marks
    stage_scale: np.ndarray | None = None


def _step_us(graph, model, name, window_steps, compute_scale, shared: _Shared) -> float:
    start, end = replayed(graph, model, name, compute_scale, shared.cat, shared.stage_scale)
    return stepbounds.mean_step_us(stepbounds.step_times(graph, start, end, window_steps, shared.marks))


def replayed(graph: pd.DataFrame, model: replay.Model, name: str, compute_scale: dict[int, float] | None = None,
             cat: np.ndarray | None = None, stage_scale: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of every node of ``graph`` replayed under scenario ``name`` (``cat``: ``_cats(graph)``;
    ``stage_scale``: ``balanced_stages``'s factor per node)."""
    # A delay is host time (``delay - busy``) plus, on CPU-only ranks, enclosing ops' own time (``busy``).
    # The model's own arrays, never changed in place: each scenario makes new ones (``replay.cut`` too).
    host, busy, tail, ps, pe = model.delay - model.busy, model.busy, model.tail, model.ps, model.pe
    cat = _cats(graph) if cat is None else cat
    rank = graph["rank"].to_numpy()
    comm = cat == "comm"
    match = _COMM_X.match(name)
    if match:
        tail = np.where(comm, tail / float(match.group(1)), tail)
    elif name == "perfect_overlap":
        tail = np.where(comm, 0.0, tail)
    elif name == "no_data_wait":
        data = graph["in_data"].to_numpy(dtype=bool)
        host, busy, tail = np.where(data, 0.0, host), np.where(data, 0.0, busy), np.where(data, 0.0, tail)
    elif name == "no_host_gaps":
        host, tail, ps, pe = _no_host_gaps(graph, model, host, tail, cat)
    elif name == "no_straggler":
        host_factor, tail_factor, busy_factor = straggler_factors(graph, model, cat)
        host = np.where(host > 0, host * host_factor, host)
        tail, busy = tail * tail_factor, busy * busy_factor
    elif name == "balanced_stages":
        tail, busy = tail * stage_scale, busy * stage_scale
    if not (match and float(match.group(1)) < 1):  # comm_x0.5 slows communication down: it adds work
        # The others only remove work: a positive time shrinks, a negative one (a measured overlap) stays.
        host, busy, tail = (replay.cut(m, x) for m, x in ((model.delay - model.busy, host), (model.busy, busy),
                                                             (model.tail, tail)))
    for r, f in (compute_scale or {}).items():
        mine = rank == r
        tail = np.where(mine & np.isin(cat, ("compute", "memory")), tail * f, tail)
        busy = np.where(mine, busy * f, busy)
    return replay.simulate(model, delay=host + busy, tail=tail, ps=ps, pe=pe)


def _no_host_gaps(graph, model, host, tail, cat):
    """(host, tail, ps, pe) of ``no_host_gaps``. A device node no longer waits for its launch, but it still waits
    for the device work its host waited for before launching it (a sync, or a spin-wait: ``rank.spinwait``): a host
    that is never late still cannot launch what depends on work it had to see finish."""
    device_rank = np.isin(graph["rank"].to_numpy(), graph.loc[(model.ps >= 0) & np.isin(cat, ("compute", "memory")), "rank"])
    device_node = np.isin(cat, ("compute", "memory", "comm")) & device_rank | (cat == "comm")
    launched = device_node & (model.ps >= 0) & device_rank
    not_data = ~graph["in_data"].to_numpy(dtype=bool)
    host_gpu = device_rank & ~device_node & not_data
    host = np.where(launched | (host_gpu & (host > 0)), 0.0, host)
    tail = np.where(host_gpu & (cat == "launch"), 0.0, tail)
    ps = np.where(launched, -1, model.ps)
    seen = _seen_device_work(graph, model, device_node)[np.maximum(model.ps, 0)]
    seen_end = model.end[np.maximum(seen, 0)]
    later = np.where(model.pe >= 0, model.end[np.maximum(model.pe, 0)], -np.inf) < seen_end
    pe = np.where(launched & (seen >= 0) & later & (seen_end <= model.start), seen, model.pe)  # ended before it began
    # CPU-only ranks: the training thread's unrecorded time, where nothing else bound the node's start.
    from tracekit.predict.critical_path import start_bindings

    cpu_host = ~device_rank & ~device_node & not_data & (start_bindings(model) == 0)
    return np.where(cpu_host & (host > 0), 0.0, host), tail, ps, pe


def _seen_device_work(graph: pd.DataFrame, model: replay.Model, device_node: np.ndarray) -> np.ndarray:
    """Per node: the device node that ends last among those its lane's host nodes waited for up to it (``pe`` or
    ``dr`` edges to device work), -1 for none. Lanes are contiguous and in time order in the graph."""
    target = np.full(len(graph), -1, dtype=np.int64)
    t = np.full(len(graph), -np.inf)
    for edge in (model.pe, model.dr):
        hit = ~device_node & (edge >= 0) & device_node[np.maximum(edge, 0)]
        end = np.where(hit, model.end[np.maximum(edge, 0)], -np.inf)
        target, t = np.where(end > t, edge, target), np.maximum(t, end)
    from tracekit.predict._lane_kernel import latest_setter  # numba: imported on first use

    lane, lanes = pd.factorize(model.lane)  # each lane's running latest, and the node that set it
    return latest_setter(lane, t, target, len(lanes))


def straggler_factors(graph: pd.DataFrame, model: replay.Model,
                      cat: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node: the factors the host part of its delay, its own time and the busy part of its delay (enclosing
    ops' own time) are scaled by in ``no_straggler`` (1 for most).

    A node belongs to the segment that ends at its rank's next arrival at a matched collective. At each collective
    with a strict last arrival, that rank's segment time is cut, class by class, to the median of the other ranks'
    segments: *compute* (own times of compute and memory nodes, and the busy parts of delays) and *host* (the rest
    of every positive delay, and the own times of the other nodes: launches, syncs, sleeps, data loading). Cutting each class apart keeps a straggler
    that sleeps from losing compute it shares with the others."""
    member = np.flatnonzero(model.group >= 0)
    if len(member) == 0:
        return np.ones(len(graph)), np.ones(len(graph)), np.ones(len(graph))
    rank = graph["rank"].to_numpy()
    arrivals = pd.DataFrame({"rank": rank[member], "g": model.group[member], "t": model.start[member]})
    arrivals = arrivals.sort_values(["g", "t"]).drop_duplicates(["rank", "g"]).sort_values(["rank", "t"],
                                                                                           ignore_index=True)
    cat = _cats(graph) if cat is None else cat
    keep = np.flatnonzero(cat != "comm")
    computing = np.isin(cat[keep], ("compute", "memory")).astype(int)
    n = len(keep)
    pieces = pd.DataFrame({  # each node three times: host part of its delay, busy part (compute), own time
        "rank": np.tile(rank[keep], 3), "t": np.tile(model.start[keep], 3), "i": np.tile(keep, 3),
        "part": np.repeat([0, 1, 2], n), "cls": np.concatenate([np.zeros(n, dtype=int), np.ones(n, dtype=int), computing]),
        "w": np.concatenate([np.maximum(model.delay[keep] - model.busy[keep], 0), model.busy[keep],
                             model.tail[keep]])}).sort_values("t")
    seg = pd.merge_asof(pieces, arrivals.rename(columns={"t": "arrival"}).sort_values("arrival"),
                        left_on="t", right_on="arrival", by="rank", direction="forward").dropna(subset=["g"])
    seg["g"] = seg["g"].astype(np.int64)
    work = seg.groupby(["g", "rank", "cls"])["w"].sum().rename("work").reset_index()
    latest = arrivals.groupby("g")["t"].transform("max")
    alone = arrivals[arrivals["t"] == latest].groupby("g")["rank"].agg(["first", "size"])
    last = alone.loc[alone["size"] == 1, "first"]  # a tie has no last arrival
    work["last"] = work["g"].map(last)
    others = work[work["rank"] != work["last"]].groupby(["g", "cls"])["work"].median().rename("typical")
    own = work[work["rank"] == work["last"]].set_index(["g", "cls"]).join(others, how="inner").reset_index()
    own["factor"] = np.clip(own["typical"] / own["work"], 0.0, 1.0).where(own["work"] > 0, 1.0)
    seg = seg.merge(own[["g", "rank", "cls", "factor"]], on=["g", "rank", "cls"], how="inner")
    out = (host_factor, busy_factor, tail_factor) = np.ones(len(graph)), np.ones(len(graph)), np.ones(len(graph))
    for part, factor in enumerate(out):
        rows = seg[seg["part"] == part]
        factor[rows["i"].to_numpy()] = rows["factor"].to_numpy()
    return host_factor, tail_factor, busy_factor
