"""On every sample and shared run, the replay's baseline is the measured step time, in either window: each window
step, the last one included, is replayed from its boundary to the next (a ProfilerStep marker or, later, the end of
the device work so far; where the last one ends)."""

from __future__ import annotations

import math

import pytest

import tracekit
from tests import golden_summary as golden

RUNS = golden.runs()


@pytest.mark.parametrize("window", ["drop_last", "all_steps"])
@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_the_baseline_is_the_measured_step_time(run, window, summaries):
    s = summaries(run, window=window)
    steps = s.steps[s.steps["in_window"].astype(bool)]
    measured = steps.groupby("rank")["step_us"].mean().mean()
    replayed = tracekit.whatif(s, ["baseline"]).loc[0, "step_time_us"]
    if steps.empty:  # a trace without ProfilerStep: nothing to replay, and it says so
        assert math.isnan(replayed)
    else:
        assert replayed == pytest.approx(measured, rel=1e-9)


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_each_critical_path_adds_up_to_its_step(run, summaries):
    """The path of a step covers it, on the rank that ends it, from its start to the next step's (steps tile: the
    later of the next marker and the device work so far): time the trace links to nothing earlier is there as
    ``unknown``, not left out."""
    s = summaries(run, window="all_steps")
    path, events = s.critical_path, s.critical_path_events
    if path.empty:
        return
    for step, part in events.groupby("step"):
        rank = int(part["ends_on_rank"].iloc[0])
        span_us = s.steps.loc[(s.steps["rank"] == rank).to_numpy() & (s.steps["step"] == step).to_numpy(), "step_us"]
        span_us = float(span_us.iloc[0])
        assert path.loc[path["step"] == step, "us"].sum() == pytest.approx(span_us, rel=1e-9, abs=1e-3)
