"""A host that spin-waits on the device (DeepEP's busy-polling of a pinned flag) records no sync: the wait is found
from the device's side (``tracekit.rank.spinwait``), and a device-bound step's path runs through its kernels.

One GPU rank, three ProfilerSteps of 1000 us (the window keeps steps 1 and 2). In each step, from its start b:
  host:      cudaLaunchKernel at b+10 (2 us), nothing recorded (spinning) until cudaLaunchKernel at b+602 (2 us),
             nothing recorded again until the next step's annotation at b+1000
  stream 7:  dispatch [b+20, b+600] (580 us), launched at b+10
  stream 8:  combine  [b+610, b+997] (387 us), launched at b+602
The host interval [b+12, b+602] is 98% device-busy (580 of 590 us) and ends 2 us after dispatch does; [b+604, b+1000]
is 97.7% busy (387 of 396) and ends 3 us after combine. Both are waits on the device.

By hand, step 1's critical path from the next step's marker at 1000: 3 us waiting for combine (other), combine 387
(compute), its launch latency 602 to 610 (launch 8), 2 us waiting for dispatch (other), dispatch 580 (compute), its
launch latency 10 to 20 (launch 10) and the host before it, 0 to 10 (host 10): compute 967 of 1000. Without the rule
the path is 996 us of "host" and 4 of launch.

``no_host_gaps``, by hand: the host still sees each kernel finish before it launches the next. Step 1: dispatch
stays at [20, 600] (the first kernel of its stream, pinned), combine, launched as soon as dispatch ends, runs [600,
987], and the marker follows at 987. Step 2: dispatch [987, 1567], combine [1567, 1954]. Steps 987 and 967: 977 us
against 1000 measured (-2.3%, the device's idle time). Without the rule (the host's waits as removable host time)
combine of step 2 would run right after step 1's and the replay would promise 692 us (-31%).
"""

from __future__ import annotations

import pytest

import tracekit
from tests.tracedata import kernel, launch, step, write_trace


def _events(steps: int = 3) -> list[dict]:
    events = []
    for s in range(steps):
        b = 1000 * s
        events += [step(s + 1, b, 1000), launch(b + 10, 10 + 2 * s), launch(b + 602, 11 + 2 * s),
                   kernel("deep_ep::dispatch", b + 20, 580, stream=7, correlation=10 + 2 * s),
                   kernel("deep_ep::combine", b + 610, 387, stream=8, correlation=11 + 2 * s)]
    return events


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spin-wait")
    write_trace(folder / "rank-0.pt.trace.json.gz", _events(), rank=0, world_size=1)
    return tracekit.summarize(folder, cache=False, workers=1)


def test_the_waits_are_edges_to_the_work_waited_for(run):
    g = run.graph
    name = g["name"].astype(str).to_numpy()
    pe = g["pe"].to_numpy()
    second_launch = g.index[(name == "cudaLaunchKernel") & (g["start_ns"].to_numpy() % 1_000_000 == 602_000)]
    assert [name[pe[i]] for i in second_launch] == ["deep_ep::dispatch"] * 3
    markers = g.index[(g["cat"] == "marker").to_numpy() & (g["start_ns"].to_numpy() > 0)]
    assert [name[pe[i]] for i in markers] == ["deep_ep::combine"] * 3  # steps 2, 3 and the end marker


def test_a_device_bound_steps_path_runs_through_its_kernels(run):
    path = run.critical_path[run.critical_path["step"] == 1]
    by = path.groupby("category", observed=True)["us"].sum()
    assert by.sum() == pytest.approx(1000)
    assert by.get("compute", 0) == pytest.approx(967)
    assert by.get("launch", 0) == pytest.approx(18)
    assert by.get("other", 0) == pytest.approx(5)
    assert by.get("host", 0) == pytest.approx(10)


def test_no_host_gaps_gains_only_the_devices_idle_time(run):
    table = tracekit.whatif(run, ["baseline", "no_host_gaps"]).set_index("scenario")
    assert table.loc["baseline", "step_time_us"] == pytest.approx(1000)
    assert table.loc["no_host_gaps", "step_time_us"] == pytest.approx(977)


def test_a_host_interval_the_device_leaves_idle_is_no_wait(tmp_path):
    # Combine shortened to [b+610, b+900]: [b+604, b+1000] is 73% busy (290 of 396) and ends 100 us after it.
    events = [e if e["name"] != "deep_ep::combine" else {**e, "dur": 290} for e in _events()]
    write_trace(tmp_path / "rank-0.pt.trace.json.gz", events, rank=0, world_size=1)
    g = tracekit.summarize(tmp_path, cache=False, workers=1).graph
    markers = g.index[(g["cat"] == "marker").to_numpy() & (g["start_ns"].to_numpy() > 0)]
    assert (g["pe"].to_numpy()[markers] == -1).all()  # steps 2, 3 and the end marker (its work ends at 2900)
