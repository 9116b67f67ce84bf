"""The Summary with its predictions: the run graph, each window step's critical path, where optimisation pays, and
the findings quoting the saving a scenario predicts for their fix (``predict.scenarios``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from tracekit import fmt
from tracekit.predict import pipeline_whatif, replay
from tracekit.predict.scenarios import _FIX, NO_GAIN_PCT, _cats, _window, predict_graph
from tracekit.read.release import release_memory


def annotate_findings(findings: tuple, graph: pd.DataFrame, window_steps: pd.DataFrame,
                      model: replay.Model | None = None, pipeline: pd.DataFrame | None = None,
                      blocks: pd.DataFrame | None = None, p2p: pd.DataFrame | None = None) -> tuple:
    """The findings, each whose fix a scenario models quoting the replay's predicted saving in its message and
    evidence (``predicted_step_us``, ``predicted_saving_us``, ``scenario``). A saving under ``NO_GAIN_PCT`` of the
    step is worded as no measurable gain; the severity stays what was measured (the replay models the host's pace
    from the trace, so a device-bound run whose host was throttled only inside its launch calls would be missed).
    ``pipeline``, ``blocks``, ``p2p``: the Summary's pipeline tables and pairs, for the pipeline scenarios."""
    wanted = sorted({_FIX[f.kind][0] for f in findings if f.kind in _FIX})
    if not wanted or graph.empty:
        return findings
    stage_scale = None
    if "balanced_stages" in wanted:
        stage_scale, _ = pipeline_whatif.balanced_scale(graph, pipeline, blocks, _cats(graph))
    table = predict_graph(graph, window_steps, ["baseline", *wanted], model=model,
                          stage_scale=stage_scale).set_index("scenario")
    base = float(table.loc["baseline", "step_time_us"])
    unpredicted = ""  # why microbatches_x2 has no prediction
    if "microbatches_x2" in wanted:
        predicted, _, unpredicted = pipeline_whatif.microbatch_prediction(pipeline, blocks, p2p, base, graph=graph)
        table.loc["microbatches_x2", ["step_time_us", "saving_us", "saving_pct"]] = [
            predicted, base - predicted, (base - predicted) / base * 100]
    out = []
    for f in findings:
        if f.kind in _FIX and _FIX[f.kind][0] == "microbatches_x2" and unpredicted:
            out.append(dataclasses.replace(f, message=f"{f.message} Twice the microbatches is not predicted: "
                                           f"{unpredicted}.", evidence={**f.evidence, "unpredicted": unpredicted}))
            continue
        if f.kind not in _FIX or not np.isfinite(table.loc[_FIX[f.kind][0], "step_time_us"]):
            out.append(f)
            continue
        scenario, label = _FIX[f.kind]
        row = table.loc[scenario]
        text = label.format(ranks=", ".join(str(r) for r in f.ranks))
        saving = f"-{fmt.ms(row['saving_us'], unit=True)}/step (-{row['saving_pct']:.0f}%)"
        evidence = {**f.evidence, "scenario": scenario, "predicted_step_us": float(row["step_time_us"]),
                    "predicted_saving_us": float(row["saving_us"])}
        how = "Predicted by replay" if scenario != "microbatches_x2" else "Predicted by simulating the schedule"
        if row["saving_pct"] < NO_GAIN_PCT:  # what was seen is true, but the replay finds no faster step from the fix
            why = ("the steps' critical paths do not wait on it" if scenario != "microbatches_x2" else
                   "the smaller microbatches' own cost outweighs the shorter fill and drain")
            saving = f"no measurable gain ({fmt.ms(row['step_time_us'])} against {fmt.ms(base, unit=True)}/step): {why}"
        out.append(dataclasses.replace(f, message=f"{f.message} {how}: {text}: {saving}.", evidence=evidence))
    return tuple(out)


def predictions(summary, graphs: list[pd.DataFrame], shift: dict[int, int],
                kernel_ops: pd.DataFrame | None = None, p2p_calls: pd.DataFrame | None = None) -> dict:
    """The Summary's fields the replay sets: its run graph, the critical path of each window step, findings quoting
    the saving the replay predicts for their fix, and where optimisation pays (``optimize.optimization``).
    ``graphs``: each rank's ``RankResult.graph``, in the order of its collectives in ``summary.collectives``
    (``run_graph`` empties the list as it joins them, so they can go before the replays); ``shift``: the clock
    correction per rank (ns); ``kernel_ops``: each kernel name's launching op per rank; ``p2p_calls``: every rank's
    ``RankResult.p2p``, in the same order (the send->recv edges of ``summary.p2p``)."""
    from tracekit.predict.critical_path import critical_paths
    from tracekit.run.rungraph import run_graph

    graph = run_graph(graphs, summary.collectives, shift, summary.run.origin_ns, p2p_calls, summary.p2p)
    window_steps = _window(summary.steps)
    if graph.empty:
        return {"graph": graph}
    model = replay.measure(graph)  # one model for the critical path and every prediction the findings quote
    release_memory()  # the joins' working arrays: freed, and kept by the allocators unless handed back
    path, events = critical_paths(graph, model, window_steps)
    release_memory()  # the walks' pieces
    from tracekit.predict.optimize import optimization

    kernel_ops = pd.DataFrame(columns=["rank", "kernel", "op"]) if kernel_ops is None else kernel_ops
    device_ranks = {int(r) for r in summary.ranks.loc[summary.ranks["device"] != "cpu", "rank"]}
    gains = optimization(graph, model, window_steps, summary.ops, kernel_ops, device_ranks, events)
    return {"graph": graph, "critical_path": path, "critical_path_events": events, "optimization": gains,
            "findings": annotate_findings(summary.findings, graph, window_steps, model, summary.pipeline,
                                          summary.pipeline_blocks, summary.p2p)}
