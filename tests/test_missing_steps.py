"""Steps that are missing or misnumbered: step times matched by step number, a note and a report line for a step a
rank lacks, the window of a trace without steps, and the report's slowest-rank card."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit import quality
from tracekit.render.report import html_report
from tracedata import kernel, launch, step, write_trace

REPO = Path(__file__).resolve().parents[1]
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
AR = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "Float",
      "Group size": 2, "Process Group Name": "0"}


def step_work(k: int) -> list:
    """Step k's work (it starts at k x 1000 us): a gemm at +20 for 500 us and an all-reduce at +700 for 100 us, each
    launched from the host inside the step."""
    t = (k - 1) * 1000
    return [launch(t + 10, 10 * k), kernel("gemm", t + 20, 500, correlation=10 * k),
            launch(t + 600, 10 * k + 1), kernel(NCCL, t + 700, 100, stream=20, correlation=10 * k + 1, **AR)]


@pytest.fixture
def lacking_run(tmp_path) -> Path:
    """Rank 0: ProfilerStep#1..#3, 1000 us each. Rank 1: the same work, but its trace has no ProfilerStep#2 (#1 runs
    0-900, #3 2000-3000)."""
    work = step_work(1) + step_work(2) + step_work(3)
    write_trace(tmp_path / "rank0.json", [step(1, 0, 1000), step(2, 1000, 1000), step(3, 2000, 1000)] + work, rank=0)
    write_trace(tmp_path / "rank1.json", [step(1, 0, 900), step(3, 2000, 1000)] + work, rank=1)
    return tmp_path


def test_a_step_is_timed_up_to_its_own_successor_not_the_next_one_present(lacking_run):
    s = tracekit.summarize(lacking_run, cache=False, workers=1)
    t = s.steps.set_index(["rank", "step"])["step_us"]
    # rank 0: each step to the next one's start, the last to its end: 1000 us each
    assert [t[(0, n)] for n in (1, 2, 3)] == [1000, 1000, 1000]
    # rank 1: #2 is absent, so #1 ends at its own end (900; its work ends at 800), not at #3's start (2000)
    assert t[(1, 1)] == 900 and t[(1, 3)] == 1000
    ranks = s.ranks.set_index("rank")
    # window drop_last: rank 0 keeps steps 1, 2 (mean 1000), rank 1 keeps step 1 (900)
    assert ranks.loc[0, "step_time_us"] == 1000 and ranks.loc[1, "step_time_us"] == 900


def test_the_lacking_step_gets_a_note_and_the_mismatches_a_line(lacking_run):
    s = tracekit.summarize(lacking_run, cache=False, workers=1)
    assert s.data_quality.set_index("rank")["missing_steps"].to_dict() == {0: "", 1: "2"}
    notes = quality.notes(s.data_quality)
    assert any(n.startswith("rank 1: lacks step 2 (no ProfilerStep#2") for n in notes), notes
    # rank 1's step-2 all-reduce was launched outside any step: rank 0's step-2 call has no partner, nor has it
    assert sorted(s.mismatches["kind"]) == ["missing", "missing"]
    text = str(s)
    assert "rank 1: lacks step 2" in text
    assert "2 collectives do not line up across ranks (2 missing; see summary.mismatches)" in text
    html = html_report(s)
    assert "rank 1: lacks step 2" in html and "2 collectives do not line up across ranks" in html


def test_missing_steps_across_ranks_and_inside_one():
    steps = pd.DataFrame({"rank": [0, 0, 0, 1, 1, 2], "step": [3, 4, 5, 3, 5, 4]})
    # 3..5 seen: rank 1 lacks 4 (a hole), rank 2 lacks 3 and 5 (others have them); rank 0 lacks nothing
    assert quality.missing_steps(steps) == {1: [4], 2: [3, 5]}
    assert quality.missing_steps(steps.iloc[0:0]) == {}
    row = {"rank": 2, "missing_steps": "3, 5"}
    assert quality._row_notes(row)[0].startswith("lacks steps 3, 5 (no ProfilerStep#3")


def test_a_sample_with_a_dropped_step(tmp_path):
    # gpt-gloo-2rank holds ProfilerStep#3..#5 on each rank; drop #4 from rank 1's trace
    run = tmp_path / "run"
    shutil.copytree(REPO / "sample_traces" / "gpt-gloo-2rank", run)
    path = run / "rank-1.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    own = {e["name"]: e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")}
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "ProfilerStep#4"]
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    s = tracekit.summarize(run, cache=False, workers=1)
    t = s.steps.set_index(["rank", "step"])["step_us"]
    # rank 1's step 3 is its own annotation (plus any work of the step ending after it), not #3 to #5
    assert t[(1, 3)] == pytest.approx(own["ProfilerStep#3"]["dur"], abs=1e-3)
    assert t[(1, 3)] < own["ProfilerStep#5"]["ts"] - own["ProfilerStep#3"]["ts"]
    assert "rank 1: lacks step 4" in str(s)
    assert len(s.mismatches) > 0 and f"{len(s.mismatches)} collectives do not line up" in str(s)


def test_a_trace_without_steps_says_what_the_window_is(tmp_path):
    write_trace(tmp_path / "rank0.json", [launch(0, 1), kernel("gemm", 10, 100, correlation=1)], rank=0,
                world_size=1)
    text = str(tracekit.summarize(tmp_path, cache=False, workers=1))
    window = next(line for line in text.splitlines() if line.strip().startswith("window:"))
    assert window.strip() == ("window: drop_last asked, but the trace has no steps: the window is the whole trace "
                              "(times below are per rank over it)")


def test_the_slowest_rank_card_is_the_slowest_rank(summaries):
    s = summaries(REPO / "sample_traces" / "gpt-gloo-2rank", cache=False, workers=1)
    # rank 0 the slowest (300 ms a step), rank 1 most often last to collectives (5 times) and no straggler
    ranks = s.ranks.assign(step_time_us=[300e3, 200e3], last_arrivals=[0, 5])
    s = dataclasses.replace(s, ranks=ranks, stragglers=s.stragglers.iloc[0:0])
    html = html_report(s)
    assert ('<div class="label">slowest rank (mean step time)</div><div class="value">rank 0 (300.00 ms)</div>'
            in html)
    assert '<div class="label">most often last to collectives</div><div class="value">rank 1 (step time' in html
    assert "a rank&#x27;s step: from the start of one ProfilerStep to the next)" in html


def test_one_rank_read_names_no_slowest_rank_and_says_why_waits_are_unknown(summaries):
    """One rank of a two-rank run: no 'slowest rank' or 'most often last' card (there is no other rank), and the
    wait/transfer chart says why it is empty instead of drawing empty axes."""
    from tracekit.render import charts

    s = summaries(REPO / "sample_traces" / "gpt-gloo-2rank", cache=False, workers=1)
    one = dataclasses.replace(s, ranks=s.ranks.iloc[:1])
    head = charts.headline(one)
    assert head["worst_rank"] is None and head["slowest_rank"] is None
    assert charts.headline(s)["slowest_rank"] is not None  # two ranks: named
    html = html_report(one)
    assert "slowest rank (mean step time)" not in html and "most often last" not in html
    no_waits = one.ranks.assign(comm_wait_us=float("nan"), comm_transfer_us=float("nan"))
    fig = charts.wait_vs_transfer(dataclasses.replace(one, ranks=no_waits))
    assert [charts.unwrapped(a.text) for a in fig.layout.annotations] == [
        "unknown: waiting and transfer need each collective matched on two or more ranks (one rank read)"]
