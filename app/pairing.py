"""Which run the Compare page proposes as the second one: a run of the same workload (``run.json``'s ``workload``,
e.g. ``resnet``), of the same model where the config names one, and of the same world size where it can; with none,
the run after this one in the sidebar's list. Among equals, the first after this one in the list (wrapping)."""

from __future__ import annotations

from collections.abc import Callable


def _model(workload) -> object:
    config = getattr(workload, "config", None)
    return config.get("model") if isinstance(config, dict) else None


def second_run(current: str, runs: list[str] | tuple[str, ...], workload_of: Callable[[str], object]) -> str | None:
    """The run to compare ``current`` with, of ``runs`` (the sidebar's list); ``workload_of(run)``: its
    ``tracekit.summary.facts.WorkloadRun``, or None without a readable run.json. None when there is no other run."""
    runs = list(runs)
    if current in runs:
        at = runs.index(current)
        others = runs[at + 1:] + runs[:at]  # the next run first
    else:
        others = list(runs)
    if not others:
        return None
    mine = workload_of(current)
    name = getattr(mine, "workload", None)
    if not name:
        return others[0]
    model, world = _model(mine), getattr(mine, "world_size", None)
    best, best_score = None, None
    for run in others:
        theirs = workload_of(run)
        if getattr(theirs, "workload", None) != name:
            continue
        score = (model is None or _model(theirs) == model, world is None or getattr(theirs, "world_size", None) == world)
        if best_score is None or score > best_score:
            best, best_score = run, score
    return best or others[0]
