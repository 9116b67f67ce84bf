"""What-if step times: replay the run's graph with measured times changed, one scenario at a time.

Scenarios (each changes the measured ``delay``/``tail`` of some nodes, see ``tracekit.replay``; the replay then
finds where every other event moves, so the critical path may change):

  baseline         nothing changed: reproduces the measured step time
  no_straggler     at each collective a rank arrived at last, that rank's time since its previous collective (its
                   nodes' positive delays and own times, communication excepted) is cut to the median of the other
                   ranks' for the same collective
  comm_x<k>        collective transfer times divided by k (``comm_x2``, ``comm_x0.5`` for twice as slow)
  perfect_overlap  collective transfers take no time (ranks still meet at every collective)
  no_host_gaps     the host is never late: on GPU ranks, host-thread delays and launch calls take no time and
                   device events no longer wait for their launches; on CPU-only ranks, the training thread's
                   unrecorded time between ops (not data loading, not waits) is removed
  no_data_wait     DataLoader ``__next__`` and everything inside it takes no time

``compute_scale`` ({rank: factor}) multiplies the compute nodes' own times on top of any scenario.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd

from tracekit import replay

SCENARIOS = ("baseline", "no_straggler", "comm_x2", "perfect_overlap", "no_host_gaps", "no_data_wait")
WHATIF_COLUMNS = ["scenario", "step_time_us", "speedup", "saving_us", "saving_pct"]
_COMM_X = re.compile(r"^comm_x(\d+(?:\.\d+)?)$")
# Which scenario predicts the saving of each finding's fix, and how to say it.
_FIX = {"straggler": ("no_straggler", "removing rank {ranks}'s delay"),
        "straggler_suspected": ("no_straggler", "removing rank {ranks}'s delay"),
        "exposed_comm": ("perfect_overlap", "hiding all communication"),
        "data_loading": ("no_data_wait", "removing DataLoader waits"),
        "host_bound": ("no_host_gaps", "removing host gaps")}


def whatif(summary_or_dir, scenarios=SCENARIOS, compute_scale: dict[int, float] | None = None, **summarize_kwargs):
    """Predicted mean step time of the run under each scenario, by replaying its dependency graph.

    Args:
      summary_or_dir: a ``Summary`` or a run folder (summarized with ``summarize_kwargs``).
      scenarios: names from ``SCENARIOS`` or ``comm_x<k>`` (k > 0).
      compute_scale: rank -> factor applied to the compute nodes' own times in every scenario (e.g. to model a
        run where ranks compute more slowly); None for none.
    Returns a DataFrame: scenario, step_time_us (mean over ranks of the mean window step), speedup (baseline step
    time / this one), saving_us and saving_pct (per step, against the baseline).

    Example:
      >>> table = whatif("sample_traces/gpt-gloo-2rank-straggler", ["baseline", "no_straggler"], cache=False)
      >>> list(table.columns[:3])
      ['scenario', 'step_time_us', 'speedup']
    """
    summary = summary_or_dir
    if isinstance(summary_or_dir, (str, Path)):
        from tracekit.api import summarize

        summary = summarize(summary_or_dir, **summarize_kwargs)
    return predict_graph(summary.graph, _window(summary.steps), scenarios, compute_scale)


def predict_graph(graph: pd.DataFrame, window_steps: pd.DataFrame, scenarios=SCENARIOS,
            compute_scale: dict[int, float] | None = None) -> pd.DataFrame:
    """``whatif`` on a run graph and the window's (rank, step) pairs."""
    names = [scenarios] if isinstance(scenarios, str) else list(scenarios)
    for name in names:
        _check(name)
    if graph.empty:
        return pd.DataFrame({"scenario": names, "step_time_us": np.nan, "speedup": np.nan, "saving_us": np.nan,
                             "saving_pct": np.nan})
    model = replay.measure(graph)
    base = _step_us(graph, model, "baseline", window_steps, compute_scale or {})
    times = [base if name == "baseline" else _step_us(graph, model, name, window_steps, compute_scale or {})
             for name in names]
    table = pd.DataFrame({"scenario": names, "step_time_us": times})
    table["speedup"] = base / table["step_time_us"]
    table["saving_us"] = base - table["step_time_us"]
    table["saving_pct"] = table["saving_us"] / base * 100
    return table[WHATIF_COLUMNS]


def _check(name: str) -> None:
    if name in SCENARIOS:
        return
    match = _COMM_X.match(name)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"unknown scenario {name!r}: use one of {', '.join(SCENARIOS)} or comm_x<k> with k > 0")


def _window(steps: pd.DataFrame) -> pd.DataFrame:
    if steps.empty:
        return steps
    return steps.loc[steps["in_window"].astype(bool), ["rank", "step"]]


def _step_us(graph, model, name, window_steps, compute_scale) -> float:
    delay, tail, ps = model.delay.copy(), model.tail.copy(), model.ps
    cat = graph["cat"].astype(str).to_numpy()
    rank = graph["rank"].to_numpy()
    comm = cat == "comm"
    match = _COMM_X.match(name)
    if match:
        tail = np.where(comm, tail / float(match.group(1)), tail)
    elif name == "perfect_overlap":
        tail = np.where(comm, 0.0, tail)
    elif name == "no_data_wait":
        data = graph["in_data"].to_numpy(dtype=bool)
        delay, tail = np.where(data, 0.0, delay), np.where(data, 0.0, tail)
    elif name == "no_host_gaps":
        delay, tail, ps = _no_host_gaps(graph, model, delay, tail)
    elif name == "no_straggler":
        factor = straggler_factors(graph, model)
        delay = np.where(delay > 0, delay * factor, delay)
        tail = np.where(comm, tail, tail * factor)
    for r, f in compute_scale.items():
        scale = (rank == r) & np.isin(cat, ("compute", "memory"))
        tail = np.where(scale, tail * f, tail)
    start, end = replay.simulate(model, delay=delay, tail=tail, ps=ps)
    return replay.mean_step_us(replay.step_times(graph, model, start, end, window_steps))


def _no_host_gaps(graph, model, delay, tail):
    cat = graph["cat"].astype(str).to_numpy()
    device_rank = np.isin(graph["rank"].to_numpy(), graph.loc[(model.ps >= 0) & np.isin(cat, ("compute", "memory")), "rank"])
    device_node = np.isin(cat, ("compute", "memory", "comm")) & device_rank | (cat == "comm")
    launched = device_node & (model.ps >= 0) & device_rank
    host_gpu = device_rank & ~device_node & ~graph["in_data"].to_numpy(dtype=bool)
    delay = np.where(launched, 0.0, delay)
    delay = np.where(host_gpu & (delay > 0), 0.0, delay)
    tail = np.where(host_gpu & (cat == "launch"), 0.0, tail)
    ps = np.where(launched, -1, model.ps)
    # CPU-only ranks: the training thread's own unrecorded time, where nothing else bound the node's start.
    from tracekit.critical_path import bindings

    start_by, _, _ = bindings(graph, model)
    cpu_host = ~device_rank & ~device_node & ~graph["in_data"].to_numpy(dtype=bool) & (start_by == 0)
    delay = np.where(cpu_host & (delay > 0), 0.0, delay)
    return delay, tail, ps


def straggler_factors(graph: pd.DataFrame, model: replay.Model) -> np.ndarray:
    """Per node: the factor its delay and own time are scaled by in ``no_straggler`` (1 for most)."""
    factor = np.ones(len(graph))
    member = np.flatnonzero(model.group >= 0)
    if len(member) == 0:
        return factor
    rank = graph["rank"].to_numpy()
    arrivals = pd.DataFrame({"rank": rank[member], "g": model.group[member], "t": model.start[member]})
    arrivals = arrivals.sort_values(["g", "t"]).drop_duplicates(["rank", "g"]).sort_values(["rank", "t"],
                                                                                           ignore_index=True)
    # Each node's segment: the first collective of its rank that it does not start after.
    nodes = pd.DataFrame({"rank": rank, "t": model.start, "i": np.arange(len(graph)),
                          "w": np.maximum(model.delay, 0) + np.where(graph["cat"] == "comm", 0, model.tail)})
    nodes = nodes[~(graph["cat"].astype(str).isin(["comm"])).to_numpy()].sort_values("t")
    seg = pd.merge_asof(nodes, arrivals.rename(columns={"t": "arrival"}).sort_values("arrival"),
                        left_on="t", right_on="arrival", by="rank", direction="forward").dropna(subset=["g"])
    seg["g"] = seg["g"].astype(np.int64)
    work = seg.groupby(["g", "rank"])["w"].sum().rename("work").reset_index()
    latest = arrivals.groupby("g")["t"].transform("max")
    at_latest = arrivals[arrivals["t"] == latest]
    alone = at_latest.groupby("g")["rank"].agg(["first", "size"])
    last = alone.loc[alone["size"] == 1, "first"]  # a tie has no last arrival
    work["last"] = work["g"].map(last)
    others = work[work["rank"] != work["last"]].groupby("g")["work"].median().rename("typical")
    own = work[work["rank"] == work["last"]].set_index("g").join(others, how="inner")
    own["factor"] = np.clip(own["typical"] / own["work"], 0.0, 1.0).where(own["work"] > 0, 1.0)
    seg = seg.merge(own[["rank", "factor"]].reset_index(), on=["g", "rank"], how="inner")
    factor[seg["i"].to_numpy()] = seg["factor"].to_numpy()
    return factor


def annotate_findings(findings: tuple, graph: pd.DataFrame, window_steps: pd.DataFrame) -> tuple:
    """The findings, each whose fix a scenario models quoting the replay's predicted saving in its message and
    evidence (``predicted_step_us``, ``predicted_saving_us``, ``scenario``)."""
    wanted = sorted({_FIX[f.kind][0] for f in findings if f.kind in _FIX})
    if not wanted or graph.empty:
        return findings
    table = predict_graph(graph, window_steps, ["baseline", *wanted]).set_index("scenario")
    out = []
    for f in findings:
        if f.kind not in _FIX or not np.isfinite(table.loc[_FIX[f.kind][0], "step_time_us"]):
            out.append(f)
            continue
        scenario, label = _FIX[f.kind]
        row = table.loc[scenario]
        text = label.format(ranks=", ".join(str(r) for r in f.ranks))
        message = (f"{f.message} Predicted by replay: {text}: -{row['saving_us'] / 1e3:.1f} ms/step "
                   f"(-{row['saving_pct']:.0f}%).")
        out.append(dataclasses.replace(f, message=message, evidence={
            **f.evidence, "scenario": scenario, "predicted_step_us": float(row["step_time_us"]),
            "predicted_saving_us": float(row["saving_us"])}))
    return tuple(out)


def with_predictions(summary, graphs: list[pd.DataFrame], shift: dict[int, int]):
    """The Summary with its run graph, the critical path of each window step, and findings quoting the saving the
    replay predicts for their fix. ``graphs``: each rank's ``RankResult.graph``, in the order of its collectives in
    ``summary.collectives``; ``shift``: the clock correction per rank (ns)."""
    from tracekit.critical_path import critical_paths
    from tracekit.graph import run_graph

    graph = run_graph(graphs, summary.collectives, shift, int(summary.run.get("origin_ns", 0)))
    window_steps = _window(summary.steps)
    if graph.empty:
        return dataclasses.replace(summary, graph=graph)
    path, events = critical_paths(graph, replay.measure(graph), window_steps)
    return dataclasses.replace(summary, graph=graph, critical_path=path, critical_path_events=events,
                               findings=annotate_findings(summary.findings, graph, window_steps))
