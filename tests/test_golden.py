"""The Summary of every sample and shared run is what the golden files say (``tests/golden_summary.py``).

A refactor must not change a number. A change that is meant to change one rewrites the golden files with
``python -m tests.golden_summary`` and says why in its commit; ``git diff tests/golden`` then shows what moved.
"""

from __future__ import annotations

import json

import pytest

from tests import golden_summary as golden

RUNS = golden.runs()


def test_every_sample_and_shared_run_has_a_golden_file():
    names = {p.name for p in RUNS}
    assert {p.stem for p in golden.GOLDEN.glob("*.json")} == names
    assert len(names) >= 14  # 8 samples and 6 shared runs


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_summary_is_unchanged(run, summaries):
    expected = json.loads((golden.GOLDEN / f"{run.name}.json").read_text())
    # golden.summarize(run), with the session's Summary of the same run and options
    actual = json.loads(json.dumps(golden.compact(summaries(run, **golden.OPTIONS), run), sort_keys=True))
    diff = golden.differences(expected, actual)
    assert not diff, f"{run.name}: {len(diff)} differences, first: " + "; ".join(diff[:8])


def test_the_comparison_names_a_changed_number():
    before = {"ranks": [{"rank": 0, "busy_us": 10.0}], "run": {"files": ["<run>/rank-0.json"]}}
    after = {"ranks": [{"rank": 0, "busy_us": 10.5}], "run": {"files": ["<run>/rank-0.json"]}}
    assert golden.differences(before, after) == [".ranks[0].busy_us: 10.0, now 10.5"]
    assert golden.differences(before, before) == []


def test_a_large_table_keeps_its_sums_and_a_digest():
    rows = [{"rank": 0, "dur_us": float(i)} for i in range(golden.WHOLE_ROWS + 1)]
    compact = golden._table(rows)
    assert compact["rows"] == golden.WHOLE_ROWS + 1 and compact["sums"]["dur_us"] == sum(range(golden.WHOLE_ROWS + 1))
    rows[3]["dur_us"] += 1.0
    assert golden._table(rows)["sha256"] != compact["sha256"]
