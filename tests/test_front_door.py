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


def test_combine_lets_the_ranks_tables_go_before_the_replays(summaries, monkeypatch):
    """``combine`` empties the results it is given, and each rank's node table goes once the run graph is joined:
    nothing but the Summary holds them while the replays run."""
    import gc
    import weakref

    from tests.golden_summary import compact
    from tracekit.events.config import Config
    from tracekit.predict import critical_path
    from tracekit.rank.engine import EngineOptions, map_ranks
    from tracekit.read.files import find_trace_files

    results = [r for r in map_ranks(find_trace_files(RUN), Config(), None, EngineOptions(workers=1))
               if not isinstance(r, Exception)]  # run.json beside the traces is not one
    graphs, gaps = [weakref.ref(r.graph) for r in results], [weakref.ref(r.gaps) for r in results]
    assert len(graphs) == 2 and all(len(g()) for g in graphs)
    held = []  # what is still alive as the critical paths are walked (the first replay)

    def walked(*args, **kwargs):
        gc.collect()
        held.append([ref() is not None for ref in graphs + gaps])
        return paths(*args, **kwargs)

    paths = critical_path.critical_paths
    monkeypatch.setattr(critical_path, "critical_paths", walked)
    summary = api.combine(results, [], Config(), source=str(RUN), workload_run=api.read_run_json(RUN))
    assert held == [[False] * 4] and results == []
    assert len(summary.graph) and summary.run.ranks_read == 2
    assert compact(summary, RUN) == compact(summaries(RUN, _tables_in_memory=True), RUN)
