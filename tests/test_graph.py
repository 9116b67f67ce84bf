"""The dependency graph, its critical path and its replay on a tiny hand-built 2-rank GPU (NCCL) run.

Times in us; both ranks, step k starts at T = 100 (k - 1), ProfilerStep#1..#3, the window is steps 1-2:
  host thread:  launch gemm [T, T+1], launch all-reduce [T+2, T+3], launch sgd [T+4, T+5],
                cudaDeviceSynchronize [T+6, T+90], then 10 us of host time before the next step
  stream 7:     gemm [T+10, T+10+G] (G = 30 on rank 0, 60 on rank 1), sgd [T+80, T+90]
  stream 20:    ncclKernel_AllReduce [T+10+G, T+80]: it starts when gemm ends (a cross-stream wait) and moves data
                for 10 us once rank 1 arrives at T+70
Rank 0 waits 30 us for rank 1 at each all-reduce; the step is 100 us on both.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tracekit
from tests.tracedata import cpu, kernel, launch, step, write_trace
from tracekit.predict import replay
from frame_equal import assert_frame_equal

GEMM = {0: 30, 1: 60}


def _rank_events(rank: int) -> list[dict]:
    g = GEMM[rank]
    events = []
    for k in (1, 2):
        t, c = 100 * (k - 1), 10 * k
        events += [step(k, t, 100), launch(t, c, dur=1), launch(t + 2, c + 1, dur=1), launch(t + 4, c + 2, dur=1),
                   cpu("cudaDeviceSynchronize", t + 6, 84, cat="cuda_runtime"),
                   kernel("volta_sgemm_128x64_nn", t + 10, g, stream=7, correlation=c),
                   kernel("ncclKernel_AllReduce_RING_LL_Sum_float", t + 10 + g, 70 - g, stream=20, correlation=c + 1),
                   kernel("sgd_update", t + 80, 10, stream=7, correlation=c + 2)]
    return events + [step(3, 200, 10)]


@pytest.fixture(scope="module")
def gpu_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nccl-2rank")
    for rank in (0, 1):
        write_trace(folder / f"rank-{rank}.pt.trace.json.gz", _rank_events(rank), rank=rank)
    return folder


@pytest.fixture(scope="module")
def gpu_run(gpu_dir):
    return tracekit.summarize(gpu_dir, cache=False, workers=1)


def _node(g: pd.DataFrame, rank: int, name: str, step: int) -> int:
    hit = g.index[(g["rank"] == rank).to_numpy() & (g["name"].astype(str) == name).to_numpy()
                  & (g["step"] == step).to_numpy()]
    assert len(hit) == 1, (rank, name, step, len(hit))
    return int(hit[0])


def test_edges(gpu_run):
    g = gpu_run.graph
    assert set(g["cat"].astype(str)) == {"marker", "launch", "sync", "compute", "comm"}
    for rank in (0, 1):
        for k in (1, 2):
            gemm, comm, sgd = (_node(g, rank, n, k) for n in
                               ("volta_sgemm_128x64_nn", "ncclKernel_AllReduce_RING_LL_Sum_float", "sgd_update"))
            sync = _node(g, rank, "cudaDeviceSynchronize", k)
            launches = g.index[(g["rank"] == rank).to_numpy() & (g["cat"] == "launch").to_numpy()
                               & (g["step"] == k).to_numpy()].tolist()
            assert [g.loc[gemm, "ps"], g.loc[comm, "ps"], g.loc[sgd, "ps"]] == launches  # launch -> kernel
            assert g.loc[comm, "pe"] == gemm   # the comm stream waits for the gemm (start == its end)
            assert g.loc[sgd, "pe"] == comm    # the compute stream waits for the all-reduce
            assert g.loc[gemm, "pe"] == -1     # its start is explained by its launch (and its stream)
            assert g.loc[sync, "dr"] == sgd    # the synchronize returns when the sgd ends
    comm_nodes = g[g["cat"] == "comm"]
    assert comm_nodes.groupby("step")["group"].nunique().eq(1).all()  # one collective per step, both ranks


def test_measured_model(gpu_run):
    model = replay.measure(gpu_run.graph)
    g = gpu_run.graph
    comm = (g["cat"] == "comm").to_numpy()
    np.testing.assert_allclose(model.tail[comm], 10_000)  # ns: the transfer after rank 1 arrived
    gemm = (g["name"].astype(str) == "volta_sgemm_128x64_nn").to_numpy()
    np.testing.assert_allclose(model.delay[gemm], 10_000)  # launched at T, ran at T+10
    sync = (g["cat"] == "sync").to_numpy()
    np.testing.assert_allclose(model.tail[sync], 0)  # returns as the device drains


@pytest.mark.parametrize("scenario, step_us", [
    ("baseline", 100.0),
    ("comm_x2", 95.0),          # transfer 10 -> 5: everything after it, and the next step, 5 us earlier
    ("perfect_overlap", 90.0),
    # The host takes no time and kernels stop waiting for launches: step 1 from the gemm's measured start
    # (10) through gemm 60 + transfer 10 + sgd 10 = 90; step 2 back to back: 80.
    ("no_host_gaps", 85.0),
    # Rank 1 is last at both all-reduces; its compute since its previous one is cut to rank 0's, host time is the
    # same on both. All-reduce 1: gemm 60 -> 30 (x 1/2). All-reduce 2: sgd of step 1 + gemm, 70 -> 40 (x 4/7).
    # Step 1: both arrive at 40, transfer to 50; rank 1's sgd takes 40/7, so its ProfilerStep#2 comes at
    # 50 + 40/7 + 10, rank 0's at 70. Step 2: rank 1's gemm runs 10 after its launch for 240/7: both arrive at 110,
    # end 120, sgd to 130 (nothing after the last all-reduce is cut), ProfilerStep#3 at 140 on both. Each rank's
    # two steps add up to 140: a mean of 70.
    ("no_straggler", 70.0),
])
def test_scenarios(gpu_run, scenario, step_us):
    got = tracekit.whatif(gpu_run, scenarios=[scenario]).loc[0, "step_time_us"]
    assert got == pytest.approx(step_us)


def test_critical_path(gpu_run):
    """Step 1 ends on rank 0 (a tie goes to the lower rank): 10 us of host time after the synchronize, the sgd (10),
    the transfer (10); then rank 1, that rank 0 waited for: its gemm (60) and the 10 us from launch to start."""
    path = gpu_run.critical_path
    one = path[path["step"] == 1].set_index(["rank", "category", "waiting"])["us"]
    assert one.to_dict() == pytest.approx({(0, "host", False): 10, (0, "compute", False): 10,
                                           (0, "comm_transfer", False): 10, (1, "compute", True): 60,
                                           (1, "launch", True): 10})
    two = path[path["step"] == 2]
    assert two["us"].sum() == pytest.approx(100)
    events = gpu_run.critical_path_events
    first = events[events["step"] == 1].iloc[0]
    assert (first["rank"], first["name"], first["category"]) == (1, "volta_sgemm_128x64_nn", "launch")
    assert list(events.columns) == ["rank", "step", "start_us", "end_us", "name", "kind", "category", "waiting",
                                    "ends_on_rank"]


def test_graph_survives_the_cache(gpu_dir, gpu_run, tmp_path):
    """The per-rank graph travels in RankResult through the cache: a run read back from it replays the same."""
    first = tracekit.summarize(gpu_dir, cache_dir=tmp_path, workers=1)
    assert any(tmp_path.glob("??/*/graph.arrow"))  # each rank's entry, in its shard folder
    again = tracekit.summarize(gpu_dir, cache_dir=tmp_path, workers=1)
    assert_frame_equal(again.graph, gpu_run.graph)
    assert_frame_equal(first.graph, gpu_run.graph)
    assert_frame_equal(again.critical_path, gpu_run.critical_path)
    assert len(gpu_run.graph) == 2 * 18  # per rank: 3 step markers, an end marker, 2 x (3 launches, 1 sync, 3 kernels)


def test_cli_whatif(gpu_dir, capsys):
    from tracekit.cli.main import main

    assert main(["whatif", str(gpu_dir), "--no-cache", "--scenario", "baseline", "--scenario", "comm_x2"]) == 0
    out = capsys.readouterr().out
    # 100 us -> 95 us: the CLI speaks ms (0.0950, three significant digits below 1), the speed-up 1.05x, the saving
    # 0.00500 ms and 5.0%
    row = next(line.split() for line in out.splitlines() if line.strip().startswith("comm_x2"))
    assert row == ["comm_x2", "0.0950", "1.05x", "0.00500", "5.0"]
