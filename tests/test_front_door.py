"""The package's front door: ``tracekit.summarize``/``whatif``/``compare`` take run folders or Summaries alike,
while the modules under them (``predict``, ``compare``) take Summaries only, so nothing below ``api`` summarizes."""

from __future__ import annotations

import doctest
from pathlib import Path

import tracekit
from tracekit import api
from frame_equal import assert_frame_equal

RUN = Path(__file__).resolve().parents[1] / "sample_traces" / "gpt-gloo-2rank-straggler"
OTHER = Path(__file__).resolve().parents[1] / "sample_traces" / "gpt-gloo-2rank"


def test_whatif_of_a_folder_is_whatif_of_its_summary(summaries):
    scenarios = ["baseline", "no_straggler"]
    by_path = tracekit.whatif(RUN, scenarios, window="all_steps", cache=False)
    by_summary = tracekit.whatif(summaries(RUN, window="all_steps", cache=False), scenarios)
    assert_frame_equal(by_path, by_summary)
    assert by_path.loc[1, "step_time_us"] < by_path.loc[0, "step_time_us"]  # the straggler's delay is removed


def test_compare_of_folders_is_compare_of_their_summaries(summaries):
    by_path = tracekit.compare(OTHER, RUN, cache=False)
    both = [summaries(p, cache=False) for p in (OTHER, RUN)]
    by_summary = tracekit.compare(*both)
    assert_frame_equal(by_path.table, by_summary.table)
    assert (by_path.a, by_path.b) == (str(OTHER), str(RUN))


def test_the_front_door_examples_run():
    result = doctest.testmod(api, raise_on_error=False, verbose=False)
    assert result.attempted >= 2 and result.failed == 0
