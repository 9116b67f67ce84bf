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


def test_summarize_lets_the_ranks_tables_go_before_the_replays(summaries, monkeypatch, tmp_path):
    """``combine`` empties the results it is given, and each rank's node table goes once the run graph is joined:
    nothing but the Summary holds them while the replays run, in ``summarize`` too (whose folder here ends with a
    trace, not run.json: its loop's last result must not outlive the loop)."""
    import gc
    import shutil
    import weakref

    from tests.golden_summary import compact
    from tracekit.predict import critical_path

    for trace in sorted(RUN.glob("rank-*")):
        shutil.copy(trace, tmp_path / trace.name)
    refs, held = [], []  # each rank's graph and gaps; what of them is alive as the critical paths are walked

    def combined(results, *args, **kwargs):
        refs.extend(weakref.ref(getattr(r, t)) for r in results for t in ("graph", "gaps"))
        return combine(results, *args, **kwargs)

    def walked(*args, **kwargs):
        gc.collect()
        held.append([ref() is not None for ref in refs])
        return paths(*args, **kwargs)

    combine, paths = api.combine, critical_path.critical_paths
    monkeypatch.setattr(api, "combine", combined)
    monkeypatch.setattr(critical_path, "critical_paths", walked)
    summary = tracekit.summarize(tmp_path, workers=1, cache=False, window="all_steps")
    assert len(refs) == 4 and held == [[False] * 4]
    assert len(summary.graph) and summary.run.ranks_read == 2
    reference = summaries(RUN, window="all_steps", _tables_in_memory=True)
    assert compact(summary, tmp_path)["ranks"] == compact(reference, RUN)["ranks"]
    assert summary.graph.equals(reference.graph)
