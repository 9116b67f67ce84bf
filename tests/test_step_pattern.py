"""Traces without ProfilerStep: steps from an engine's own annotations (found, or named by ``step_pattern``), and
what is unknown without any; advice worded for a forward-only trace.

The decode trace (one GPU rank, times in us), k = 0, 1, 2 and T = 1000 k:
  host thread:  step[DECODE bs=16] [T, T+1000] holding decode_forward [T+50, T+800] and a launch at T+100
  stream 7:     sgemm [T+200, T+700]
So the steps are the three step[...] annotations, 0, 1, 2; the window (all but the last) keeps 0 and 1. Each step
runs from its start to the next one's: step_us 1000, compute 500 (the kernel), other 500, no communication.
With ``step_pattern="decode_forward"`` the steps are the inner annotations: step 0 [50, 1050) and step 1
[1050, 2050) in the window, again 1000 us each with one 500 us kernel.
"""

from __future__ import annotations

import math

import pytest

import tracekit
from tests.tracedata import cpu, kernel, launch, write_trace
from tracekit.quality import notes

PROPS = {"deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0,
                               "totalGlobalMem": 85e9}]}


def _decode(annotate: bool = True, training: bool = False, operators: bool = False) -> list[dict]:
    events = []
    for k in range(3):
        t = 1000 * k
        if annotate:
            events += [cpu("step[DECODE bs=16]", t, 1000, cat="user_annotation"),
                       cpu("decode_forward", t + 50, 750, cat="user_annotation")]
        if operators:  # the forward's ops recorded: a forward-only trace is known to be one
            events.append(cpu("aten::mm", t + 90, 30))
        events += [launch(t + 100, 10 + k), kernel("sgemm_128x64_nn", t + 200, 500, correlation=10 + k)]
        if training:
            events.append(cpu("autograd::engine::evaluate_function: MmBackward0", t + 110, 20))
    return events


def _run(folder, events, **options):
    write_trace(folder / "rank-0.pt.trace.json.gz", events, rank=0, world_size=1, **PROPS)
    return tracekit.summarize(folder, cache=False, workers=1, **options)


def test_engine_step_annotations_are_found_and_named(tmp_path):
    run = _run(tmp_path, _decode())
    steps = run.steps
    assert list(steps["step"]) == [0, 1, 2]
    window = steps[steps["in_window"]]
    assert list(window["step"]) == [0, 1]
    assert list(window["step_us"]) == [1000, 1000]
    assert list(window["compute_us"]) == [500, 500]
    assert list(window["other_us"]) == [500, 500]
    assert run.ranks["steps"].iloc[0] == 2
    assert run.ranks["step_time_us"].iloc[0] == 1000
    assert run.data_quality["step_source"].iloc[0] == r"detected: step\[.*\]"
    assert any(r"steps are the annotations matching step\[.*\]" in n for n in notes(run.data_quality))
    assert len(run.critical_path) and run.critical_path["us"].sum() == pytest.approx(2000)  # two window steps


def test_an_explicit_step_pattern_picks_other_annotations(tmp_path):
    run = _run(tmp_path, _decode(), step_pattern="decode_forward")
    window = run.steps[run.steps["in_window"]]
    assert list(window["step"]) == [0, 1]
    assert list(window["start_us"] - window["start_us"].iloc[0]) == [0, 1000]
    assert list(window["step_us"]) == [1000, 1000]
    assert list(window["compute_us"]) == [500, 500]
    assert run.data_quality["step_source"].iloc[0] == "step_pattern: decode_forward"
    assert any("annotations matching decode_forward (step_pattern)" in n for n in notes(run.data_quality))


def test_a_step_pattern_that_matches_nothing_says_there_are_no_steps(tmp_path):
    # A pattern that names no host annotation ("gemm" is a kernel's name) gives no steps: the trace is taken whole,
    # and the note says why the per-step numbers, the critical path and what-if are unknown.
    run = _run(tmp_path, _decode(), step_pattern="no_such_annotation|gemm")
    assert run.steps.empty and run.critical_path.empty
    assert run.data_quality["step_source"].iloc[0].startswith("none: step_pattern no_such_annotation|gemm")
    assert any("matched no annotation" in n and "what-if are unknown" in n for n in notes(run.data_quality))


def test_a_bad_step_pattern_is_refused(tmp_path):
    with pytest.raises(ValueError, match="step_pattern"):
        _run(tmp_path, _decode(), step_pattern="step[")


def test_without_steps_per_step_numbers_the_critical_path_and_whatif_are_unknown(tmp_path):
    run = _run(tmp_path, _decode(annotate=False))
    assert run.steps.empty
    assert run.ranks["steps"].iloc[0] == 0
    assert math.isnan(run.ranks["step_time_us"].iloc[0])  # not the trace's length over a step count of 1
    assert math.isnan(run.ranks["matmul_flops_per_step"].iloc[0])
    assert run.ranks["compute_us"].iloc[0] == 1500  # whole-trace numbers are still known
    assert run.data_quality["step_source"].iloc[0] == "none"
    note = next(n for n in notes(run.data_quality) if "no steps" in n)
    assert "critical path and what-if are unknown" in note and "--step-pattern" in note
    assert run.critical_path.empty
    table = tracekit.whatif(run, ["baseline", "no_host_gaps"])
    assert table["step_time_us"].isna().all()
    assert "no steps" in str(run)  # the text report says so too


def _advice(run) -> str:
    return " ".join(f.recommendation for f in run.findings)


def test_a_forward_only_trace_gets_no_training_advice(tmp_path):
    inference = _run(tmp_path / "inference", _decode(operators=True))
    kinds = {f.kind for f in inference.findings}
    assert "no_reduced_precision" in kinds  # an fp32 GEMM on an A100: the finding stands
    training = inference.ranks["training"].iloc[0]
    assert training is not None and not training  # known: forward only
    text = _advice(inference).lower()
    for word in ("train with mixed precision", "gradscaler", "optimizer", "gradient", "backward"):
        assert word not in text, word
    assert "bf16" in text


def test_a_training_trace_still_gets_training_advice(tmp_path):
    training = _run(tmp_path / "training", _decode(training=True))
    assert training.ranks["training"].iloc[0]
    assert "Train with mixed precision" in _advice(training)


def test_the_cli_takes_a_step_pattern(tmp_path, capsys):
    import json

    from tracekit.cli.main import main

    write_trace(tmp_path / "rank-0.pt.trace.json.gz", _decode(), rank=0, world_size=1, **PROPS)
    assert main(["summarize", str(tmp_path), "--step-pattern", "decode_forward", "--json", "--no-cache",
                 "--workers", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["data_quality"][0]["step_source"] == "step_pattern: decode_forward"
    assert main(["whatif", str(tmp_path), "--step-pattern", "decode_forward", "--no-cache", "--workers", "1"]) == 0
    with pytest.raises(SystemExit):  # not a regular expression: refused by the parser
        main(["summarize", str(tmp_path), "--step-pattern", "step["])


def test_detected_steps_are_numbered_per_rank_and_never_called_missing(tmp_path):
    # Rank 1's profiler started one engine step later: it has 3 steps where rank 0 has 4. Detected steps are
    # numbered in each rank's own time order (rank 1's first is its step 0), so no rank "lacks" a step, and the
    # note says how ranks are paired.
    def work(t, c):
        return [cpu("step[DECODE bs=16]", t, 1000, cat="user_annotation"), launch(t + 10, c),
                kernel("sgemm_128x64_nn", t + 20, 500, correlation=c)]

    write_trace(tmp_path / "rank0.json.gz", sum((work(1000 * k, 10 + k) for k in range(4)), []), rank=0)
    write_trace(tmp_path / "rank1.json.gz", sum((work(1000 * k, 10 + k) for k in range(1, 4)), []), rank=1)
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    assert s.steps.groupby("rank")["step"].apply(list).to_dict() == {0: [0, 1, 2, 3], 1: [0, 1, 2]}
    assert (s.data_quality["missing_steps"] == "").all()
    assert any(n.startswith("ranks 0, 1:") and "time order" in n for n in notes(s.data_quality))


def test_whatif_says_why_its_predictions_are_unknown(tmp_path, capsys):
    import json

    from tracekit.cli.main import main
    from tracekit.predict.scenarios import SCENARIOS

    # The decode trace without its step annotations: no steps (data_quality.step_source "none"), so every scenario is
    # unknown, and the line under the table says why.
    bare = tmp_path / "bare"
    write_trace(bare / "rank-0.pt.trace.json.gz", _decode(annotate=False), rank=0, world_size=1, **PROPS)
    flags = ["--no-cache", "--workers", "1"]
    assert main(["whatif", str(bare), *flags]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1:] for line in lines[1:7]] == [["unknown"] * 4] * 6
    assert lines[7:] == ["unknown: rank 0: no steps found in the trace (step_source: none); a what-if replay needs "
                         "steps; see --step-pattern"]
    # --json: the records (all null) carry the table's reason, and stderr says it too.
    assert main(["whatif", str(bare), "--json", *flags]) == 0
    out = capsys.readouterr()
    records = json.loads(out.out)
    assert [r["scenario"] for r in records] == list(SCENARIOS)
    assert all(set(r) == {"scenario", "step_time_us", "speedup", "saving_us", "saving_pct", "reason"} for r in records)
    assert all(r["step_time_us"] is None for r in records)
    assert {r["reason"] for r in records} == {"rank 0: no steps found in the trace (step_source: none); a what-if "
                                              "replay needs steps; see --step-pattern"}
    assert ("tracekit: note: unknown: rank 0: no steps found in the trace (step_source: none); a what-if replay needs "
            "steps; see --step-pattern") in out.err.splitlines()
    # A step pattern that matches nothing: the reason is the source the Summary holds.
    assert main(["whatif", str(bare), "--step-pattern", "decode_forward", *flags]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "unknown: rank 0: no steps found in the trace (step_source: none: step_pattern decode_forward matched no "
        "annotation); a what-if replay needs steps; see --step-pattern")
    # With its step[...] annotations every scenario is predicted (steps 1000 us, nothing to save but host time):
    # nothing is unknown and no reason is printed.
    steps = tmp_path / "steps"
    write_trace(steps / "rank-0.pt.trace.json.gz", _decode(), rank=0, world_size=1, **PROPS)
    assert main(["whatif", str(steps), *flags]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["baseline", "1.00", "1.00x", "0.00", "0.0"] and len(lines) == 7
    assert "unknown" not in "\n".join(lines)


def test_a_device_trace_without_kernels_says_why_only_the_baseline_is_known(tmp_path, capsys):
    from tracekit.cli.main import main

    # ProfilerSteps [0, 1000), [1000, 2000), [2000, 2010) and launches, but no kernel: a device rank whose device
    # events were not collected (device_events_absent). The baseline is the host's 1000 us step; a change to the
    # device work is unknown.
    events = [cpu(f"ProfilerStep#{n}", t, d, cat="user_annotation") for n, t, d in ((1, 0, 1000), (2, 1000, 1000),
                                                                                      (3, 2000, 10))]
    events += [launch(20, 1), launch(1020, 2)]
    write_trace(tmp_path / "rank0.json.gz", events, rank=0, world_size=1, **PROPS)
    assert main(["whatif", str(tmp_path), "--no-cache", "--workers", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["baseline", "1.00", "1.00x", "0.00", "0.0"]
    assert lines[-1] == ("unknown: rank 0: a device trace without device events (kernels not collected): what a "
                         "change does to the device work is unknown, so every scenario but the baseline is")


def test_whatif_blames_missing_steps_only_when_no_rank_has_steps(tmp_path, capsys):
    from tracekit.cli.main import main

    # Rank 0: the device trace without kernels above (steps, no device events); rank 1: the decode trace without
    # its step annotations (kernels, no steps). Only rank 0's missing kernels unknow the scenarios: the replay runs
    # over rank 0's steps, so rank 1's missing steps are no reason and get no line (found by a review).
    events = [cpu(f"ProfilerStep#{n}", t, d, cat="user_annotation") for n, t, d in ((1, 0, 1000), (2, 1000, 1000),
                                                                                      (3, 2000, 10))]
    write_trace(tmp_path / "rank0.json.gz", events + [launch(20, 1), launch(1020, 2)], rank=0, world_size=2, **PROPS)
    write_trace(tmp_path / "rank1.json.gz", _decode(annotate=False), rank=1, world_size=2, **PROPS)
    assert main(["whatif", str(tmp_path), "--no-cache", "--workers", "1"]) == 0
    why = [line for line in capsys.readouterr().out.splitlines() if line.startswith("unknown: ")]
    assert why == ["unknown: rank 0: a device trace without device events (kernels not collected): what a change "
                   "does to the device work is unknown, so every scenario but the baseline is"]


@pytest.mark.parametrize("pattern, label", [
    (None, r"a rank's step: from the start of one annotation matching step\[.*\] to the next)"),
    ("decode_forward", "a rank's step: from the start of one annotation matching decode_forward (step_pattern) to "
                       "the next)"),
    ("no_such_annotation", "a rank's step: none found (see Data quality))"),
])
def test_the_html_step_card_says_what_the_steps_are(tmp_path, pattern, label):
    import html

    from tracekit.render.report import html_report

    run = _run(tmp_path, _decode(), step_pattern=pattern)
    page = html_report(run)
    assert html.escape(label) in page
    assert "ProfilerStep" not in page.split('class="cards"')[1].split("</div></div></div>")[0]
