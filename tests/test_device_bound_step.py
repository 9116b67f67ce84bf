"""A device-bound step is not host-bound: a host that runs ahead of a saturated device ends its ProfilerStep before
the step's kernels finish, and the step ends when they do.

One GPU rank, one step (the window keeps it). Times in ms:
  host thread:  ProfilerStep#1 [0, 100]; cudaLaunchKernel at 1, 2, 3, 4 (2 us each), then nothing recorded (the
                host spin-waits on device counters, which records no event) until the annotation ends at 100
  stream 7:     gemm_1 [1.5, 31.5], gemm_2 [31.5, 61.5], gemm_3 [61.5, 91.5], gemm_4 [91.5, 121.5], back to back
So the step is [0, 121.5]: 121.5 ms, not the annotation's 100. Its critical path, walked back from the end of
gemm_4: four kernels back to back (compute 4 x 30 = 120 ms), the latency from gemm_1's launch at 1 to its start at
1.5 (launch 0.5 ms), and the unrecorded host time from the step's start to that launch (host 1 ms): 121.5 in all.
Removing host gaps cannot make the device faster: ``no_host_gaps`` saves nothing (gemm_1 already starts at 1.5,
where it is pinned once it no longer waits for its launch, and the device is busy from there to the end).
"""

from __future__ import annotations

import pytest

import tracekit
from tests.tracedata import kernel, launch, step, write_trace

MS = 1000  # trace times are microseconds


def _events(device_ms: float = 30) -> list[dict]:
    events = [step(1, 0, 100 * MS)]
    for i in range(4):
        events += [launch((1 + i) * MS, 10 + i),
                   kernel(f"gemm_{i + 1}", int((1.5 + device_ms * i) * MS), int(device_ms * MS), correlation=10 + i)]
    return events


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("device-bound")
    write_trace(folder / "rank-0.pt.trace.json.gz", _events(), rank=0, world_size=1)
    return tracekit.summarize(folder, cache=False, workers=1)


def test_the_step_ends_when_its_device_work_does(run):
    steps = run.steps
    assert list(steps["step"]) == [1]
    assert steps["step_us"].iloc[0] == pytest.approx(121.5 * MS)
    assert steps["compute_us"].iloc[0] == pytest.approx(120 * MS)  # gemm_1..4, all inside [0, 121.5]
    assert steps["other_us"].iloc[0] == pytest.approx(1.5 * MS)  # before gemm_1


def test_the_critical_path_runs_through_the_device(run):
    path = run.critical_path
    by = path.groupby("category", observed=True)["us"].sum()
    assert by.sum() == pytest.approx(121.5 * MS)
    assert by.get("compute", 0) == pytest.approx(120 * MS)
    assert by.get("launch", 0) == pytest.approx(0.5 * MS)
    assert by.get("host", 0) == pytest.approx(1 * MS)


def test_no_host_gaps_saves_nothing_on_a_saturated_device(run):
    table = tracekit.whatif(run, ["baseline", "no_host_gaps"]).set_index("scenario")
    assert table.loc["baseline", "step_time_us"] == pytest.approx(121.5 * MS)
    assert table.loc["no_host_gaps", "saving_pct"] == pytest.approx(0, abs=0.1)


def test_device_work_inside_the_annotation_leaves_the_step_alone(tmp_path):
    # The same host, kernels of 20 ms: gemm_4 ends at 1.5 + 80 = 81.5, inside the annotation: the step is 100 ms.
    write_trace(tmp_path / "rank-0.pt.trace.json.gz", _events(device_ms=20), rank=0, world_size=1)
    run = tracekit.summarize(tmp_path, cache=False, workers=1)
    assert run.steps["step_us"].iloc[0] == pytest.approx(100 * MS)
    by = run.critical_path.groupby("category", observed=True)["us"].sum()
    assert by.sum() == pytest.approx(100 * MS)
    assert by.get("compute", 0) == pytest.approx(0)  # the host ends the step: 96 ms of it after the last launch
