"""``tracekit.compare`` on tiny hand-built runs: the per-step parts add up to the step time, and a collective a run
never calls counts 0 there (its bandwidth n/a), never "unknown"."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import tracekit
from tracedata import kernel, memcpy, step, write_trace
from tracekit.render.compare import IDLE_CAUSES, PARTS

ROOT = Path(__file__).resolve().parents[1]

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
AR = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "Float",
      "Group size": 2, "Process Group Name": "0"}


def _run(folder, with_allreduce: bool) -> tracekit.Summary:
    """Two identical ranks, three 1000 us steps (the window: the first two). In each step, from its start:
    gemm 0-400; all_reduce 300-600 (100 under the gemm, 200 exposed) when asked; idle; memcpy 900-1000."""
    for rank in (0, 1):
        events = []
        for k in range(3):
            b = 1000 * k
            events += [step(k + 1, b, 1000), kernel("gemm", b, 400), memcpy(b + 900, 100, stream=30)]
            if with_allreduce:
                events.append(kernel(NCCL, b + 300, 300, stream=20, **AR))
        write_trace(folder / f"rank{rank}.json", events, rank=rank)
    return tracekit.summarize(folder, workers=1, cache=False)


@pytest.fixture
def runs(tmp_path):
    return _run(tmp_path / "a", True), _run(tmp_path / "b", False)


def test_per_step_parts_are_computed_by_hand_and_add_up_to_the_step_time(runs):
    table = tracekit.compare(*runs).table.set_index("metric")
    # a: compute not overlapped 400 - 100, overlapped 100, exposed 200, and the rest (400) shared between
    # memory-only (window totals 200 of 800) and idle; b: compute 400, no comm, memory 100, idle 500.
    expected = {"step_time_ms": (1.0, 1.0), "compute_only_ms": (0.3, 0.4), "overlapped_comm_ms": (0.1, 0.0),
                "exposed_comm_ms": (0.2, 0.0), "memory_ms": (0.1, 0.1), "idle_ms": (0.3, 0.5)}
    for metric, (a, b) in expected.items():
        assert table.loc[metric, ["a", "b"]].tolist() == pytest.approx([a, b]), metric
    for side in ("a", "b"):
        assert table.loc[list(PARTS), side].sum() == pytest.approx(table.loc["step_time_ms", side])
        causes = [f"idle_{c}_ms" for c in IDLE_CAUSES]
        assert table.loc[causes, side].sum() == pytest.approx(table.loc["idle_ms", side])


def test_real_runs_add_up_too(summaries):
    samples = Path(__file__).resolve().parents[1] / "sample_traces"
    a, b = (summaries(samples / n, workers=1, cache=False) for n in ("resnet-gloo-2rank", "gpt-gloo-2rank"))
    table = tracekit.compare(a, b).table.set_index("metric")
    for side in ("a", "b"):
        assert table.loc[list(PARTS), side].sum() == pytest.approx(table.loc["step_time_ms", side], rel=1e-9)


def test_a_collective_one_run_never_calls_is_zero_there(runs):
    comparison = tracekit.compare(*runs)
    table = comparison.table.set_index("metric")
    # a: 2 all_reduces of 1000 float32 per rank in the 2 window steps: 1 call, 4000 bytes per step.
    assert table.loc["all_reduce_calls_per_step", ["a", "b"]].tolist() == [1.0, 0.0]
    assert table.loc["all_reduce_MB_per_step", ["a", "b"]].tolist() == pytest.approx([0.004, 0.0])
    assert table.loc["all_reduce_calls_per_step", "ratio"] == 0.0
    assert not math.isnan(table.loc["all_reduce_median_busbw_gbps", "a"])
    assert math.isnan(table.loc["all_reduce_median_busbw_gbps", "b"])  # no call: no bandwidth
    assert not any(m.startswith("broadcast") for m in table.index)  # an op neither run calls is not listed
    text = str(comparison)
    busbw = next(line for line in text.splitlines() if line.strip().startswith("all_reduce_median_busbw_gbps"))
    calls = next(line for line in text.splitlines() if line.strip().startswith("all_reduce_calls_per_step"))
    assert busbw.split()[3] == "n/a" and calls.split()[2:4] == ["1.00", "0.00"]
    assert not [line for line in text.splitlines() if "all_reduce" in line and "unknown" in line]
    reverse = tracekit.compare(runs[1], runs[0]).table.set_index("metric")
    assert reverse.loc["all_reduce_calls_per_step", ["a", "b"]].tolist() == [0.0, 1.0]
    assert math.isnan(reverse.loc["all_reduce_calls_per_step", "ratio"])  # b / 0


def test_rows_name_their_source_and_a_disagreement_in_direction_is_flagged(summaries):
    """Step time comes from the traces' profiled steps, throughput from run.json's un-profiled ones. With the same
    samples per step, a 1.22x slower profiled step implies 1/1.22 = 0.82x the throughput; run.json saying 1.18x
    disagrees in direction and gets a note. 0.85x would agree and gets none."""
    import dataclasses
    from tracekit.render.compare import THROUGHPUT_SOURCE, TRACE_SOURCE, compare as compare_summaries
    from tracekit.summary.facts import WorkloadRun

    base = summaries(ROOT / "sample_traces" / "gpt-gloo-2rank", cache=False, workers=1)
    slower = dataclasses.replace(base, ranks=base.ranks, steps=base.steps.assign(step_us=base.steps["step_us"] * 1.22))

    def with_rate(s, rate):
        return dataclasses.replace(s, run=dataclasses.replace(
            s.run, workload=WorkloadRun(samples_per_step=16, throughput_samples_per_s={"unprofiled": rate})))

    c = compare_summaries(with_rate(base, 100.0), with_rate(slower, 118.0))
    source = c.table.set_index("metric")["source"]
    assert source["throughput_samples_per_s"] == THROUGHPUT_SOURCE and source["step_time_ms"] == TRACE_SOURCE
    assert set(source.drop("throughput_samples_per_s")) == {TRACE_SOURCE}
    assert len(c.notes) == 1 and "implies 0.820x the throughput" in c.notes[0] and "1.18x" in c.notes[0]
    assert "note: the profiled step time (1.22x)" in str(c)
    assert compare_summaries(with_rate(base, 100.0), with_rate(slower, 85.0)).notes == ()
