"""Steps tile on the later of two clocks, and a what-if that removes work never lengthens a step.

The trace: an engine's decode loop replaying one CUDA graph per step, its device lagging the host. One GPU rank,
three ProfilerSteps of 400 us ([0, 400], [400, 800], [800, 1200]; the window keeps steps 1 and 2). In step s (0, 1,
2) the host calls cudaGraphLaunch at 400s + 10 (20 us), and the graph's 10 kernels run on stream 7 under programmatic
dependent launch: kernel n of the run (n = 10s + k) runs [20 + 50n, 75 + 50n], 55 us each, every one overlapping the
next by 5 us. So step s's work ends at 525 + 500s: after the next step's annotation begins (400, 800).

By hand:
  - Step boundaries: max(annotation, the work of the steps so far) = 0, max(400, 525) = 525, max(800, 1025) = 1025:
    steps 525 and 500 us (the host's clock said 400 and 400), ``ended_by`` device, mean 512.5 us.
  - ``device_step_us``: the same, 525 and 500 (compute is all the device does).
  - The critical path of step 1 ends at its last kernel's end (525): 10 kernels back to back (20 to 525, compute
    505), the graph launch's latency (10 to 20, launch 10) and the host before it (0 to 10, host 10).
  - ``no_host_gaps``: the device is the bound; removing host time moves no kernel (each starts 5 us before its
    predecessor ends: a measured delay of -5 us, kept). Predicted 512.5 us, a saving of 0. Before the fix the -5 us
    delays became 0, every kernel ran 55 us after the one before, and the replay predicted (570 + 550) / 2 = 560 us:
    longer than measured.
"""

from __future__ import annotations

import numpy as np
import pytest

import tracekit
from tests.tracedata import cpu, kernel, step, write_trace


def _decode(steps: int = 3) -> list[dict]:
    events = []
    for s in range(steps):
        events += [step(s + 1, 400 * s, 400),
                   cpu("cudaGraphLaunch", 400 * s + 10, 20, cat="cuda_runtime", correlation=100 + s)]
        events += [kernel(f"decode_{k}", 20 + 50 * (10 * s + k), 55, correlation=100 + s) for k in range(10)]
    return events


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("graph-decode")
    write_trace(folder / "rank-0.pt.trace.json.gz", _decode(), rank=0, world_size=1)
    return tracekit.summarize(folder, cache=False, workers=1)


def test_steps_tile_on_the_device_clock(run):
    steps = run.steps.set_index("step")
    assert steps.loc[[1, 2], "step_us"].tolist() == pytest.approx([525, 500])
    assert steps.loc[[1, 2], "ended_by"].tolist() == ["device", "device"]
    assert steps.loc[[1, 2], "device_step_us"].tolist() == pytest.approx([525, 500])
    # Tiled: step 2 starts where step 1 ends, step 3 where step 2 ends.
    start = steps["start_us"] - steps["start_us"].iloc[0]
    assert start.tolist() == pytest.approx([0, 525, 1025])
    # The breakdown is over the tiled step [0, 525]: kernels 0-9 cover [20, 525], nothing runs before 20.
    assert steps.loc[1, "compute_us"] == pytest.approx(505)
    assert steps.loc[1, "other_us"] == pytest.approx(20)
    assert run.ranks["step_time_us"].iloc[0] == pytest.approx(512.5)  # the window's steps add up: 1025 / 2
    text = str(run)
    assert "step clock: device for 2 of 2 window steps (rank 0: 1, 2)" in text


def test_the_replay_baseline_is_the_measured_step(run):
    table = tracekit.whatif(run, ["baseline"]).set_index("scenario")
    assert table.loc["baseline", "step_time_us"] == pytest.approx(512.5)


def test_the_critical_path_ends_with_the_device_work(run):
    path = run.critical_path[run.critical_path["step"] == 1]
    by = path.groupby("category", observed=True)["us"].sum()
    assert by.sum() == pytest.approx(525)
    assert by.get("compute", 0) == pytest.approx(505)
    assert by.get("launch", 0) == pytest.approx(10)
    assert by.get("host", 0) == pytest.approx(10)


def test_removing_host_gaps_never_lengthens_a_graph_replay(run):
    table = tracekit.whatif(run, ["baseline", "no_host_gaps", "no_data_wait", "perfect_overlap", "comm_x2",
                                  "no_straggler"]).set_index("scenario")
    assert table.loc["no_host_gaps", "step_time_us"] == pytest.approx(512.5)
    assert (table["step_time_us"] <= 512.5 + 1e-9).all()


def test_negative_measured_delays_are_kept_by_every_scenario(run):
    from tracekit.predict import replay

    model = replay.measure(run.graph)
    kernels = (run.graph["cat"] == "compute").to_numpy()
    overlapped = model.delay[kernels]
    assert (overlapped == -5000).sum() == 29  # every kernel but the first starts 5 us before its predecessor ends
    cut = replay.cut(np.array([-5.0, 10.0, 10.0, 0.0]), np.array([0.0, 0.0, 20.0, 3.0]))
    assert cut.tolist() == [-5.0, 0.0, 10.0, 0.0]
