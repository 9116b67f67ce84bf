"""``tracekit.whatif`` says why a prediction is unknown in its own table (``reason``), so a pandas user sees what the
CLI prints under its table: the data-quality notes that unknow that row, '' where the prediction is known."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import tracekit
from tracekit import schema
from tracekit.cli.main import main
from tracekit.predict.scenarios import SCENARIOS, UNKNOWN_REASON
from tracedata import cpu, launch, write_trace

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "gpt-gloo-2rank-straggler"
PROPS = {"deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8}]}
NO_KERNELS = ("rank 0: a device trace without device events (kernels not collected): what a change does to the "
              "device work is unknown, so every scenario but the baseline is")
NO_STEPS = ("rank 0: no steps found in the trace (step_source: none); a what-if replay needs steps; "
            "see --step-pattern")


def no_kernels(path: Path, steps: bool = True) -> Path:
    """A device rank (deviceProperties) with launches but no kernel. With ``steps``: ProfilerSteps [0, 1000),
    [1000, 2000), [2000, 2010), so the baseline is the host's 1000 us step; without: one aten op, no step at all."""
    events = [launch(20, 1), launch(1020, 2)]
    if steps:
        events += [cpu(f"ProfilerStep#{n}", t, d, cat="user_annotation")
                   for n, t, d in ((1, 0, 1000), (2, 1000, 1000), (3, 2000, 10))]
    else:
        events.append(cpu("aten::mm", 0, 100))
    write_trace(path / "rank0.json.gz", events, rank=0, world_size=1, **PROPS)
    return path


def test_a_device_trace_without_kernels_names_why_beside_each_unknown_row(tmp_path, capsys):
    run = no_kernels(tmp_path / "run")
    table = tracekit.whatif(run, cache=False, workers=1)
    assert table["scenario"].tolist() == list(SCENARIOS) and list(table.columns) == list(schema.WHATIF_COLUMNS)
    # the baseline replays the host's steps: known, no reason; every change to the device work is unknown, and says so
    assert table.loc[0, "step_time_us"] == pytest.approx(1000) and table.loc[0, "reason"] == ""
    assert table["step_time_us"].iloc[1:].isna().all()
    assert table["reason"].iloc[1:].tolist() == [NO_KERNELS] * (len(SCENARIOS) - 1)
    # --json: each record carries its row's reason; stderr keeps the note it printed before
    assert main(["whatif", str(run), "--no-cache", "--workers", "1", "--json"]) == 0
    out = capsys.readouterr()
    records = json.loads(out.out)
    assert [r["reason"] for r in records] == table["reason"].tolist()
    assert [r["step_time_us"] for r in records][1:] == [None] * (len(SCENARIOS) - 1)
    assert out.err.splitlines() == [f"tracekit: note: unknown: {NO_KERNELS}"]
    # the text output is as it was: the table's columns, then the note once
    assert main(["whatif", str(run), "--no-cache", "--workers", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["scenario", "step", "ms", "speed-up", "saving", "ms", "saving", "%"]
    assert lines[-1] == f"unknown: {NO_KERNELS}" and len(lines) == 1 + len(SCENARIOS) + 1
    assert "reason" not in "\n".join(lines)


def test_without_steps_every_row_says_so_and_the_baseline_only_that(tmp_path):
    # No steps on the only rank: nothing is replayed, every row NaN for want of steps. The missing kernels unknow every
    # scenario but the baseline, so the baseline's reason is the missing steps alone; the others give both, '; '.
    table = tracekit.whatif(no_kernels(tmp_path, steps=False), cache=False, workers=1)
    assert table["step_time_us"].isna().all()
    assert table.loc[0, "reason"] == NO_STEPS
    assert table["reason"].iloc[1:].tolist() == [f"{NO_STEPS}; {NO_KERNELS}"] * (len(SCENARIOS) - 1)


def test_the_cli_notes_only_the_reasons_of_the_scenarios_it_shows(tmp_path, capsys):
    # Only the baseline asked for: it is unknown for want of steps, and the missing kernels leave it known, so the
    # note under the table is the missing steps alone; with comm_x2 too, both notes, each once.
    run = no_kernels(tmp_path, steps=False)
    assert main(["whatif", str(run), "--no-cache", "--workers", "1", "--scenario", "baseline"]) == 0
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("unknown: ")] == [
        f"unknown: {NO_STEPS}"]
    assert main(["whatif", str(run), "--no-cache", "--workers", "1", "--scenario", "baseline", "--scenario",
                 "comm_x2"]) == 0
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("unknown: ")] == [
        f"unknown: {NO_STEPS}", f"unknown: {NO_KERNELS}"]


@pytest.fixture(scope="module")
def sample():
    return tracekit.summarize(SAMPLE, cache=False, workers=1)


def test_a_sample_run_predicts_every_row_with_no_reason(sample):
    table = tracekit.whatif(sample)
    assert table["step_time_us"].notna().all() and table["reason"].tolist() == [""] * len(SCENARIOS)


def test_a_reason_only_the_summary_knows_and_none_at_all(sample):
    # Clean data quality (no note applies) on both. An empty graph: nothing to replay, and the Summary says so.
    empty = tracekit.whatif(dataclasses.replace(sample, graph=sample.graph.iloc[0:0]), ["baseline", "comm_x2"])
    assert empty["step_time_us"].isna().all()
    assert empty["reason"].tolist() == ["the run has no dependency graph to replay (no events that take time)"] * 2
    # No step in the window (a Summary edited by hand; no fact the Summary holds explains it): said to be unknown.
    outside = tracekit.whatif(dataclasses.replace(sample, steps=sample.steps.assign(in_window=False)), ["baseline"])
    assert outside["step_time_us"].isna().all() and outside["reason"].tolist() == [UNKNOWN_REASON]
