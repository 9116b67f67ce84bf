"""The rank a step's critical path ends on: the one whose next step boundary comes last, ranks ending apart.

Two GPU ranks, no collectives, three ProfilerSteps each (the window keeps steps 1 and 2). Times in us:
  rank 0: steps at 0, 1000, 2000 (1000 each); kernel [20, 1300] launched at 10 (step 1), [1310, 1400] launched at
          1005 (step 2), [2010, 2050] launched at 2005 (step 3)
  rank 1: steps at 0, 1200, 2100; kernel [20, 100] launched at 10, [1210, 1300] at 1205, [2110, 2150] at 2105
Step boundaries (the later of the next annotation and the device work so far): rank 0 at 0, 1300, 2000; rank 1 at 0,
1200, 2100. So step 1 ends on rank 0 at 1300 (its device work; by the annotations alone rank 1's 1200 would win) and
step 2 on rank 1 at 2100, 100 us after rank 0.

By hand: step 1's path is rank 0's kernel (20 to 1300: compute 1280), its launch latency (10 to 20: launch 10) and
the host before the launch (0 to 10: host 10). Step 2's runs on rank 1 from its boundary at 1200: host from the end
of the launch at 1207 to the next step at 2100 (893), the launch call (1205 to 1207: launch 2) and the host before
it (1200 to 1205: 5): host 898, launch 2.
"""

from __future__ import annotations

import pytest

import tracekit
from tests.tracedata import kernel, launch, step, write_trace


def _rank(starts, kernels) -> list[dict]:
    events = [step(i + 1, s, e - s) for i, (s, e) in enumerate(zip(starts, starts[1:] + [3000]))]
    for corr, (at, k0, k1) in enumerate(kernels, start=10):
        events += [launch(at, corr), kernel(f"k{corr}", k0, k1 - k0, correlation=corr)]
    return events


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("end-rank")
    write_trace(folder / "rank-0.pt.trace.json.gz",
                _rank([0, 1000, 2000], [(10, 20, 1300), (1005, 1310, 1400), (2005, 2010, 2050)]), rank=0)
    write_trace(folder / "rank-1.pt.trace.json.gz",
                _rank([0, 1200, 2100], [(10, 20, 100), (1205, 1210, 1300), (2105, 2110, 2150)]), rank=1)
    return tracekit.summarize(folder, cache=False, workers=1)


def test_each_step_ends_on_the_rank_whose_boundary_is_last(run):
    path = run.critical_path
    assert path.groupby("step")["ends_on_rank"].unique().map(list).to_dict() == {1: [0], 2: [1]}


def test_the_paths_by_hand(run):
    by = run.critical_path.groupby(["step", "category"], observed=True)["us"].sum()
    assert by.loc[1].to_dict() == pytest.approx({"compute": 1280, "launch": 10, "host": 10})
    assert by.loc[2].to_dict() == pytest.approx({"host": 898, "launch": 2})
    assert not run.critical_path["waiting"].any()  # each path stays on the rank that ends it
