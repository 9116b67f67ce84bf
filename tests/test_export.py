"""Perfetto export (``tracekit.render.export``, ``tracekit export``): the Trace Event Format rules, the corrected clock on a
hand-built 2-host run whose second clock runs 5000 us ahead, counters and flows against the Summary, and a round
trip through tracekit's own reader (one file per exported process, ``split_ranks``)."""

import dataclasses
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.cli.main import main
from tracekit.render.export import export_trace, rank_events, split_ranks
from tracedata import kernel, launch, step, write_trace

ROOT = Path(__file__).resolve().parents[1]
SHIFT_US = 5000  # rank 1's host clock runs this far ahead
AR = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "Float",
      "Group size": 2, "Process Group Name": "0"}


def arrival(i, rank):
    """All-reduce start in step i (true clock, us): the ranks take turns arriving last (160 against 100)."""
    return i * 1000 + (160 if (i + rank) % 2 == 0 else 100)


def two_hosts(folder: Path) -> Path:
    """6 steps of 1000 us per rank: a launch at +10, a compute kernel at +20 for 60 us, an all-reduce from its
    arrival to +300 (both ranks leave together). Rank 1 (host b) writes every time SHIFT_US late."""
    for rank in (0, 1):
        events = [step(i + 1, i * 1000, 1000) for i in range(7)]
        for i in range(6):
            events += [launch(i * 1000 + 10, correlation=100 + i),
                       kernel("gemm_kernel", i * 1000 + 20, 60, stream=7, correlation=100 + i),
                       kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", arrival(i, rank), i * 1000 + 300 - arrival(i, rank),
                              stream=20, **AR)]
        shift = SHIFT_US if rank == 1 else 0
        write_trace(folder / f"rank{rank}.json", [{**e, "ts": e["ts"] + shift} for e in events], rank=rank,
                    host_name="b" if rank == 1 else "a")
    return folder


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = two_hosts(tmp_path_factory.mktemp("two_hosts"))
    summary = tracekit.summarize(folder, cache=False)
    return summary, json.loads(json.dumps(export_trace(summary, rank_events(summary))))  # as a file holds it


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def test_every_event_has_the_format_fields(run):
    _, trace = run
    events = trace["traceEvents"]
    assert events and all({"ph", "pid", "tid", "ts"} <= set(e) for e in events)
    assert all(_is_number(e["ts"]) and isinstance(e["pid"], int) and isinstance(e["tid"], int) for e in events)
    complete = [e for e in events if e["ph"] == "X"]
    assert all(_is_number(e["dur"]) and e["dur"] >= 0 for e in complete)
    assert {e["ph"] for e in events} == {"M", "X", "s", "f", "C"}
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}  # every rank its own process
    # Every thread carrying events is named, and kernels lie on stream threads apart from the host thread.
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in complete} <= named
    for pid in (0, 1):
        tids = {e["name"]: e["tid"] for e in complete if e["pid"] == pid}
        assert len({tids["gemm_kernel"], tids["ProfilerStep#1"], tids["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]}) == 3


def test_every_flow_start_has_its_end(run):
    summary, trace = run
    flows = [e for e in trace["traceEvents"] if e["ph"] in ("s", "f")]
    starts = Counter(e["id"] for e in flows if e["ph"] == "s")
    ends = {e["id"]: e for e in flows if e["ph"] == "f"}
    assert set(starts) == set(ends) and set(starts.values()) == {1} and len(ends) == len(flows) // 2
    assert all(e["bp"] == "e" for e in flows)
    by_id = {e["id"]: e for e in flows if e["ph"] == "s"}
    assert all(ends[i]["ts"] >= by_id[i]["ts"] and ends[i]["cat"] == by_id[i]["cat"] for i in ends)
    # One arrow per matched call from the first rank to arrive to the last (2 ranks: 6 calls, 6 arrows), going from
    # the rank that arrived at +100 to the one at +160.
    coll = [i for i in ends if by_id[i]["cat"] == "tracekit.collective"]
    assert len(coll) == 6
    assert sorted((by_id[i]["pid"], ends[i]["pid"], round(ends[i]["ts"] - by_id[i]["ts"], 3)) for i in coll) == \
        sorted((1 - (i % 2), i % 2, 60.0) for i in range(6))
    # Along the critical path: one arrow from each path event to the next of its step.
    path = summary.critical_path_events
    assert len(path) > 0
    assert len(ends) - len(coll) == len(path) - path["step"].nunique()


def test_collective_slices_split_wait_and_transfer(run):
    _, trace = run
    parts = [e for e in trace["traceEvents"] if e.get("cat") == "tracekit.collective" and e["ph"] == "X"]
    wait = sorted((e["pid"], e["ts"], e["dur"]) for e in parts if e["name"] == "wait")
    transfer = sorted((e["pid"], e["ts"], e["dur"]) for e in parts if e["name"] == "transfer")
    # By hand: the early rank waits 60 us, the late one 0; both transfer from the late arrival (+160) to +300.
    assert wait == sorted((r, float(arrival(i, r)), float(160 - arrival(i, r) + i * 1000)) for i in range(6) for r in (0, 1))
    assert transfer == sorted((r, float(i * 1000 + 160), 140.0) for i in range(6) for r in (0, 1))


def test_times_are_on_the_corrected_clock(run):
    summary, trace = run
    assert summary.clock_shift_ns(1) == pytest.approx(SHIFT_US * 1e3, abs=1e3)  # ends agree: the estimate is 5000 us
    x = [e for e in trace["traceEvents"] if e["ph"] == "X" and not e["cat"].startswith("tracekit.")]
    for rank in (0, 1):
        mine = {(e["name"], e["ts"]) for e in x if e["pid"] == rank}
        # True times (rank 1's written 5000 us later): the origin is the first step's start on both.
        assert {(f"ProfilerStep#{i + 1}", float(i * 1000)) for i in range(7)} <= mine
        assert {("gemm_kernel", float(i * 1000 + 20)) for i in range(6)} <= mine
        assert {("ncclDevKernel_AllReduce_Sum_f32_RING_LL", float(arrival(i, rank))) for i in range(6)} <= mine


def test_counters_are_numeric_and_follow_the_summary(run):
    summary, trace = run
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert counters and all(_is_number(v) for e in counters for v in e["args"].values())
    exposed = sorted((e["pid"], e["ts"], e["args"]["us"]) for e in counters if e["name"] == "exposed comm")
    # Exposed comm per step by hand: the all-reduce (arrival to +300) never overlaps the compute (+20 to +80).
    steps = summary.steps[summary.steps["step"] <= 6]
    assert [v for (r, t, v) in exposed if t < 6000] == \
        [float(300 - arrival(i, r) + i * 1000) for r in (0, 1) for i in range(6)]
    assert len(steps) == 12
    idle = [e for e in counters if e["name"] == "idle"]
    g = summary.gaps
    assert len(idle) == 2 * len(g) > 0
    ups = sorted((e["pid"], e["ts"]) for e in idle if list(e["args"].values()) == [1])
    downs = sorted((e["pid"], round(e["ts"], 3)) for e in idle if list(e["args"].values()) == [0])
    assert ups == sorted(zip(g["rank"].tolist(), g["start_us"].tolist()))
    assert downs == sorted(zip(g["rank"].tolist(), np.round(g["start_us"] + g["dur_us"], 3).tolist()))
    # By hand, rank 0 step 1: idle from the compute's end (+80) to its all-reduce's arrival (+160).
    assert (0, 80.0) in ups and (0, 160.0) in downs


def _read_back(trace, folder: Path):
    for rank, doc in split_ranks(trace).items():
        (folder / f"rank{rank}.json").write_text(json.dumps(doc))
    return tracekit.summarize(folder, cache=False)


def test_round_trip_same_ranks_same_busy_time(run, tmp_path):
    summary, trace = run
    back = _read_back(trace, tmp_path)
    assert back.ranks["rank"].tolist() == summary.ranks["rank"].tolist() == [0, 1]
    # Busy by hand: per window step (1-6; the 7th, last, is dropped) 60 us of compute + the all-reduce (140 or 200 us).
    by_hand = [sum(60 + 300 - arrival(i, r) + i * 1000 for i in range(6)) for r in (0, 1)]
    assert summary.ranks["busy_us"].tolist() == pytest.approx(by_hand)
    assert back.ranks["busy_us"].tolist() == pytest.approx(by_hand)
    # Read back already on one clock: the collectives line up at the same times.
    assert back.collectives["start_us"].tolist() == pytest.approx(summary.collectives["start_us"].tolist(), abs=1e-3)


@pytest.mark.parametrize("folder", ["sample_traces/gpt-gloo-2rank", "../shared/traces/hta/nccl_a100_2rank",
                                    "../shared/traces/hta/sampled_128rank", "../shared/traces/hta/cpu_only_gloo"])
def test_round_trip_of_real_runs(folder, tmp_path, summaries):
    """CPU (gloo) and GPU (NCCL, sampled ranks) runs read back with the same ranks, busy, comm and step times."""
    folder = ROOT / folder
    if not folder.exists():
        pytest.skip(f"{folder} not here")
    summary = summaries(folder, cache=False)
    trace = json.loads(json.dumps(export_trace(summary, rank_events(summary))))
    back = _read_back(trace, tmp_path)
    assert back.ranks["rank"].tolist() == summary.ranks["rank"].tolist()
    for col in ("busy_us", "comm_us", "step_time_us"):
        assert back.ranks[col].tolist() == pytest.approx(summary.ranks[col].tolist(), rel=1e-9)
    assert len(back.collectives) == len(summary.collectives)


def test_cli_writes_and_never_replaces_without_force(run, tmp_path, capsys):
    folder = two_hosts(tmp_path / "traces")
    out = tmp_path / "run.json"
    out.write_text("mine")
    assert main(["export", str(folder), "-o", str(out), "--no-cache"]) == 2
    assert out.read_text() == "mine" and "--force" in capsys.readouterr().err
    assert main(["export", str(folder), "-o", str(out), "--no-cache", "--force"]) == 0
    trace = json.loads(out.read_text())
    assert {e["pid"] for e in trace["traceEvents"]} == {0, 1}
    fresh = tmp_path / "fresh.json"
    assert main(["export", str(folder), "-o", str(fresh), "--no-cache"]) == 0 and fresh.exists()


def test_cli_refuses_a_file_inside_the_run_folder_and_a_folder(run, tmp_path, capsys):
    """An export beside the traces would be read back as one more rank of the run, and a folder is not a file."""
    folder = two_hosts(tmp_path / "traces")
    before = sorted(p.name for p in folder.iterdir())
    assert main(["export", str(folder), "-o", str(folder / "perfetto.json"), "--no-cache"]) == 2
    assert "inside the run folder" in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == before
    assert main(["export", str(folder), "-o", str(tmp_path), "--no-cache", "--force"]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_unknown_counter_values_are_left_out_not_zero(run):
    summary, _ = run
    steps = summary.steps.copy()
    steps.loc[steps.index[0], "exposed_comm_us"] = np.nan  # a step whose exposed comm is unknown
    trace = export_trace(dataclasses.replace(summary, steps=steps), {})
    exposed = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "exposed comm"]
    assert len(exposed) == len(steps) - 1
    first = steps.iloc[0]
    assert (int(first["rank"]), float(first["start_us"])) not in {(e["pid"], e["ts"]) for e in exposed}


def test_sublanes_by_hand():
    from tracekit.render.export import _sublanes

    # Rank 0: [0,10] opens thread 0; [5,8] overlaps it -> 1; [9,12] reuses 1 (free at 8); [10,11] reuses 0 (free at
    # 10). Rank 1's [5,8] has its own threads.
    lanes = _sublanes(np.array([0, 0, 0, 0, 1]), np.array([0, 5, 9, 10, 5.0]), np.array([10, 8, 12, 11, 8.0]))
    assert lanes.tolist() == [0, 1, 1, 0, 0]


def _partial_overlaps(trace) -> int:
    """Slices of one thread that overlap without nesting (Perfetto would not keep them as drawn)."""
    frame = pd.DataFrame([(e["pid"], e["tid"], e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"]
                          if e["ph"] == "X"], columns=["pid", "tid", "start", "end"])
    bad = 0
    for _, lane in frame.groupby(["pid", "tid"]):
        lane = lane.sort_values(["start", "end"], ascending=[True, False])
        start, end = lane["start"].to_numpy(), lane["end"].to_numpy()
        open_ends: list[float] = []
        for s, e in zip(start, end):
            while open_ends and open_ends[-1] <= s + 1e-6:
                open_ends.pop()
            bad += bool(open_ends and e > open_ends[-1] + 1e-6)
            open_ends.append(e)
    return bad


def test_slices_of_one_thread_nest_on_runs_with_concurrent_collectives(summaries):
    # resnet-gloo-4rank runs gradient buckets' all-reduces concurrently on gloo's threads: one collectives thread
    # would hold 16 partly overlapping slices.
    folder = ROOT / "sample_traces" / "resnet-gloo-4rank"
    summary = summaries(folder, cache=False)
    trace = export_trace(summary, rank_events(summary))
    assert _partial_overlaps(trace) == 0
    tids = {e["tid"] for e in trace["traceEvents"] if e.get("cat") == "tracekit.collective" and e["ph"] == "X"}
    assert len(tids) > 1  # the concurrent calls went to sub-threads
    named = {(e["pid"], e["tid"]) for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in trace["traceEvents"] if e["ph"] == "X"} <= named
