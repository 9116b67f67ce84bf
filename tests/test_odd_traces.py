"""Valid but unusual traces that once stopped ``summarize`` with an error from pandas or numpy, or gave an
impossible number (each found by random traces; each value here worked out by hand).

Times in microseconds, as traces write them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

import tracekit
from tests.tracedata import cpu, kernel, launch, step, write_trace
from tracekit import nesting, quality
from tracekit.events import flops, optree
from tracekit.errors import TraceReadError

AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _summary(folder, ranks: dict, **top):
    for rank, events in ranks.items():
        write_trace(folder / f"rank{rank}.json", events, rank=rank, world_size=len(ranks), **top)
    return tracekit.summarize(folder, cache=False, workers=1)


def _mem(ts, nbytes=512, total=512, addr=1, tid=1):
    args = {"Device Type": 1, "Device Id": 0, "Addr": addr, "Bytes": nbytes, "Total Reserved": 1024}
    if total is not None:
        args["Total Allocated"] = total
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 100, "tid": tid, "ts": ts, "s": "t",
            "args": args}


def test_an_allocation_with_no_op_in_the_trace_is_no_op(tmp_path):
    # A kernel and one allocation of 512 B, no host op at all: the peak's live bytes belong to no op.
    s = _summary(tmp_path, {0: [kernel("k", 0, 10), _mem(10)]})
    top = s.memory_top
    assert top[["op", "live_bytes", "allocations"]].values.tolist() == [["(no op)", 512.0, 1]]


def test_steps_whose_events_carry_no_total_have_an_unknown_peak(tmp_path):
    # Step 1 [0, 100] holds an allocation at 50 us inside aten::mm [10, 60] that gives no Total Allocated; a second,
    # at 500 us (after the step, in no op), gives 512 + 512 = 1024 B. Step 1's peak is unknown, not 0; the device's
    # peak is at 500 us, where both allocations are live (no free), and no step has a known peak.
    s = _summary(tmp_path, {0: [step(1, 0, 100), cpu("aten::mm", 10, 50), _mem(50, total=None),
                                _mem(500, total=1024, addr=2)]})
    row = s.memory[s.memory["step"] == 1].iloc[0]
    assert np.isnan(row["peak_allocated_bytes"]) and row["peak_reserved_bytes"] == 1024
    top = s.memory_top.set_index("op")
    assert top.loc["aten::mm", "live_bytes"] == 512 and top.loc["(no op)", "live_bytes"] == 512
    assert set(top["step"]) == {-1}


def test_a_negative_total_is_unknown_and_a_negative_size_is_no_size(tmp_path):
    # "Total Allocated" -512 (no device holds less than nothing); "In msg nelems" -1 and "Group size" -1 (what
    # some writers put for "unknown"): the bytes are unknown, and the group size falls back to the world size (1).
    args = {"Collective name": "allreduce", "In msg nelems": -1, "Out msg nelems": -1, "dtype": "Float",
            "Group size": -1, "Process Group Name": "0"}
    s = _summary(tmp_path, {0: [step(1, 0, 1000), step(2, 1000, 1000), kernel("gemm", 50, 20),
                                kernel(AR, 100, 10, stream=20, **args), _mem(10, nbytes=-512, total=-512)]})
    c = s.collectives.iloc[0]
    assert np.isnan(c["bytes"]) and np.isnan(c["algbw_gbps"]) and c["group_size"] == 1
    assert s.memory["peak_allocated_bytes"].isna().all()


def test_a_collective_without_a_duration_is_a_dropped_event(tmp_path):
    # An NCCL kernel without "dur": no collective row (it once gave dur_us -0.001, the -1 ns "no duration"), one
    # dropped event, and no all-reduce time.
    ar = kernel(AR, 100, 10, stream=20)
    del ar["dur"]
    s = _summary(tmp_path, {0: [step(1, 0, 1000), step(2, 1000, 1000), kernel("gemm", 50, 20), ar]})
    assert s.collectives.empty
    assert s.data_quality["dropped_events"].tolist() == [1]
    assert s.ranks[["allreduce_count", "allreduce_us"]].values.tolist() == [[0, 0.0]]


def test_an_fsdp_pre_hook_without_any_post_hook(tmp_path):
    # A cut trace: FSDP2's root pre-forward hook [10, 15] and no post-hook: the unit's compute window has no end.
    s = _summary(tmp_path, {0: [step(1, 0, 1000), step(2, 1000, 1000),
                                cpu("FSDP::pre_forward", 10, 5, cat="user_annotation")]})
    row = s.fsdp.iloc[0]
    assert (row["api"], row["unit"], row["phase"], row["start_us"]) == ("fsdp2", "(root)", "forward", 10.0)
    assert np.isnan(row["compute_us"])


def test_an_op_before_the_base_time_is_moved_by_it_too(tmp_path):
    # baseTimeNanoseconds B: every time is B + ts. An op at ts -100 us once kept -100 us while the rest moved by B,
    # and the memory pass's span of ~B ns per thread overflowed. The allocation at 50 us on thread 1 lies in
    # aten::mm [40, 60] of thread 1.
    events = [cpu("aten::add", -100, 10)] + [cpu("aten::mm", 40, 20, tid=t) for t in range(1, 7)] + [_mem(50)]
    s = _summary(tmp_path, {0: events}, baseTimeNanoseconds=1_700_000_000_000_000_000)
    assert s.memory_top["op"].tolist() == ["aten::mm"]


def test_times_past_int64_nanoseconds_are_a_named_error(tmp_path):
    # ts of 2**53 us on a base of 1.7e18 ns pass 2**63 ns: the times would wrap around to negative.
    base = 2**53
    path = write_trace(tmp_path / "rank0.json", [step(1, base, 1000), step(2, base + 1000, 1000)], rank=0,
                       world_size=1, baseTimeNanoseconds=1_700_000_000_000_000_000)
    with pytest.raises(TraceReadError, match="pass the nanoseconds int64 holds") as err:
        tracekit.summarize(path, cache=False, workers=1)
    assert err.value.path == str(path) and err.value.rank == 0


def test_steps_numbered_out_of_time_order_replay_in_time_order(tmp_path):
    # ProfilerStep#2 [0, 100] then #1 [100, 200] (aten::add [110, 160] in it). The step table takes steps in time
    # order: #1's time is 100 us. The replay's baseline gives the same 100 us (it once took #1 -> #2 by number:
    # -100 us), and without host gaps #1 is aten::add's 50 us.
    s = _summary(tmp_path, {0: [step(2, 0, 100), step(1, 100, 100), cpu("aten::add", 110, 50)]})
    window = s.steps[s.steps["in_window"].astype(bool)]
    assert window[["step", "step_us"]].values.tolist() == [[1, 100.0]]
    table = tracekit.whatif(s, scenarios=["baseline", "no_host_gaps"]).set_index("scenario")
    assert table.loc["baseline", "step_time_us"] == pytest.approx(100.0)
    assert table.loc["no_host_gaps", "step_time_us"] == pytest.approx(50.0)
    # The end marker is where the last step to start (#1) ends, numbered past every step.
    g = s.graph
    end = g[(g["name"] == "ProfilerStep end").to_numpy()]
    assert end[["start_ns", "step"]].values.tolist() == [[200_000, 3]]


def test_children_that_overlap_each_other_count_once_in_their_parents_self_time(tmp_path):
    # One thread: aten::empty [0, 300] holds aten::mm [0, 200] and aten::add [100, 300], which starts inside mm and
    # ends after it (so it is empty's child, not mm's). Self time is the time no child covers: empty 300 - |[0, 300]|
    # = 0 (it was 300 - 200 - 200 = -100), mm 200, add 200. aten::clone [1000, 1100] with children [1010, 1030] and
    # [1050, 1060]: 100 - 20 - 10 = 70, as before. (The shared ns_resolution trace has 219 such ops, mostly
    # AccumulateGrad, where a detach ends 25 ns after the aten::detach it runs in.)
    s = _summary(tmp_path, {0: [cpu("aten::empty", 0, 300), cpu("aten::mm", 0, 200), cpu("aten::add", 100, 200),
                                cpu("aten::clone", 1000, 100), cpu("aten::copy_", 1010, 20),
                                cpu("aten::fill_", 1050, 10)]})
    self_us = s.ops.set_index("name")["host_self_us"].to_dict()
    assert self_us == {"aten::empty": 0.0, "aten::mm": 200.0, "aten::add": 200.0, "aten::clone": 70.0,
                       "aten::copy_": 20.0, "aten::fill_": 10.0}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(0, 30)), min_size=1, max_size=30),
       st.lists(st.tuples(st.integers(0, 3), st.integers(0, 90)), min_size=1, max_size=20))
def test_nesting_on_ranked_times_is_nesting_on_times(spans, points):
    # The rank transform keeps order and ties, so every answer is the same as on the times themselves.
    tid = [t for t, _, _ in spans]
    start = np.array([s for _, s, _ in spans])
    end = start + np.array([d for _, _, d in spans])
    p_tid, p_ns = [t for t, _ in points], np.array([p for _, p in points])
    np.testing.assert_array_equal(nesting._innermost_ranked(p_tid, p_ns, tid, start, end),
                                  nesting.innermost(p_tid, p_ns, tid, start, end))
    ranked = nesting._ranked(p_ns, start, end)
    np.testing.assert_array_equal(nesting.count_starts_within(p_tid, ranked[0], tid, ranked[1], ranked[2]),
                                  nesting.count_starts_within(p_tid, p_ns, tid, start, end))


def test_one_op_at_ts_0_in_a_trace_of_epoch_times(tmp_path):
    # Older traces write epoch microseconds (1.7e15); one op at ts 0 spreads each of 6 threads over 1.7e18 ns, and
    # the thread offsets passed int64 (OverflowError). The 10 us kernel is still that of the launch inside aten::mm
    # of thread 1 [t+10, t+60]: aten::mm's device time.
    t = 1_700_000_000_000_000
    events = [cpu("aten::add", 0, 10)] + [cpu("aten::mm", t + 10 * k, 50, tid=k) for k in range(1, 7)]
    events += [launch(t + 20, correlation=1), kernel("gemm", t + 30, 10, correlation=1)]
    s = _summary(tmp_path, {0: events})
    ops = s.ops.set_index("name")
    assert ops["calls"].to_dict() == {"aten::mm": 6, "aten::add": 1}
    assert ops.loc["aten::mm", "device_us"] == 10.0 and ops.loc["aten::add", "device_us"] == 0.0


def test_step_numbers_far_apart_are_listed_as_a_run():
    # Rank 0 has #1, #2 and rank 1 #300000001, #300000002: every number between is wanted, and was once listed one
    # by one (a set of 300 million ints). A run of more than 20 is one item; 20 are still listed.
    far = pd.DataFrame({"rank": [0, 0, 1, 1], "step": [1, 2, 300_000_001, 300_000_002]})
    assert quality.missing_steps(far) == {0: ["3-300000002"], 1: ["1-300000000"]}
    twenty = pd.DataFrame({"rank": [0, 0, 1], "step": [1, 22, 1]})
    assert quality.missing_steps(twenty) == {0: list(range(2, 22)), 1: ["2-22"]}


def test_a_step_number_past_int64_is_an_annotation(tmp_path):
    # ProfilerStep#99999999999999999999 names no step a profiler counted (OverflowError once): no step.
    s = _summary(tmp_path, {0: [cpu("ProfilerStep#99999999999999999999", 0, 100, cat="user_annotation"),
                                cpu("aten::mm", 10, 20)]})
    assert s.steps.empty and s.data_quality["step_source"].tolist() == ["none"]


def test_steps_annotated_on_two_threads_replay_in_order(tmp_path):
    # ProfilerStep#1 [1000, 1300] on thread 1, #2 [8900, 8950] on thread 2, after aten::add [670, 675] there. #2's
    # marker starts after #1's started (an edge between the threads), so no scenario starts #2 first: without it,
    # no_host_gaps moved #2 to 675 us and predicted -325 us for step 1. Baseline: 8900 - 1000 = 7900 us.
    s = _summary(tmp_path, {0: [step(1, 1000, 300, tid=1), step(2, 8900, 50, tid=2), cpu("aten::add", 670, 5, tid=2)]})
    g = s.graph
    first, second = (np.flatnonzero((g["name"] == f"ProfilerStep#{k}").to_numpy())[0] for k in (1, 2))
    assert g.loc[second, "ps"] == first and g.loc[first, "ps"] == -1
    table = tracekit.whatif(s).set_index("scenario")["step_time_us"]
    assert table["baseline"] == pytest.approx(7900.0)
    assert ((table >= 0) & (table <= 7900.0 + 1e-6)).all(), table


def test_mfu_of_a_host_that_runs_ahead_is_on_the_device_clock(tmp_path):
    # Four 100 us ProfilerSteps on an H100, each launching an 8192^3 bf16 mm whose kernel takes 1200 us: kernel k
    # runs [30 + 1200k, 1230 + 1200k]. On the host the steps take 100, 100, 100 and (the last, to its work's end)
    # 4530 us, so MFU over host time was 1111 %. On the device's clock step 1 runs [0, 1230], step 2 [1230, 2430],
    # step 3 [2430, 3630], step 4 [3630, 4830]. The mm's 2 * 8192^3 FLOPs take 1111.29 us at 989.4 TFLOP/s.
    props = [{"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "totalGlobalMem": 85899345920}]
    shapes = {"Input Dims": [[8192, 8192], [8192, 8192]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}
    events = []
    for k in range(4):
        t, c = 100 * k, k + 1
        events += [step(k + 1, t, 100), cpu("aten::mm", t + 10, 50, **{"External id": c, **shapes}),
                   {**launch(t + 20, c), "args": {"correlation": c, "External id": c}},
                   kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 30 + 1200 * k, 1200, correlation=c, **{"External id": c})]
    s = _summary(tmp_path, {0: events}, deviceProperties=props)
    steps = s.steps
    assert steps["step_us"].tolist() == [100.0, 100.0, 100.0, 4530.0]
    assert steps["device_step_us"].tolist() == [1230.0, 1200.0, 1200.0, 1200.0]
    assert steps["matmul_flops"].tolist() == [2 * 8192**3] * 4
    assert steps["matmul_at_peak_us"].iloc[0] == pytest.approx(2 * 8192**3 / 989.4e12 * 1e6, rel=1e-4)
    np.testing.assert_allclose(steps["mfu_pct"], steps["matmul_at_peak_us"] / steps["device_step_us"] * 100)
    assert steps["mfu_pct"].iloc[0] == pytest.approx(1111.29 / 1230 * 100, rel=1e-5)  # 90.35 %
    # The window (steps 1-3): 3 x 1111.29 us at peak in 1230 + 1200 + 1200 us of device time.
    assert s.ranks["mfu_pct"].iloc[0] == pytest.approx(3 * 1111.29 / 3630 * 100, rel=1e-5)  # 91.84 %


def test_a_negative_size_in_input_dims_is_no_shape():
    # Input Dims [[-1, 4], [4, 4]]: no tensor has -1 rows (it gave -32 FLOPs). The mm's FLOPs are unknown; a 2 x 4
    # by 4 x 4 mm is 2 * 2 * 4 * 4 = 64 FLOPs and reads and writes (8 + 16 + 8) x 4 bytes = 128 B.
    bad = flops.op_cost("aten::mm", [[-1, 4], [4, 4]], ["float", "float"])
    assert np.isnan(bad.flops) and np.isnan(bad.bytes)
    good = flops.op_cost("aten::mm", [[2, 4], [4, 4]], ["float", "float"])
    assert (good.flops, good.bytes) == (64.0, 128.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 60), st.integers(0, 40)), min_size=1, max_size=25))
def test_children_cover_is_the_union_of_the_childrens_spans(spans):
    # Whatever the tree the stack pass builds, each op's covered time is the length of the union of its children.
    tid = np.array([t for t, _, _ in spans])
    start = np.array([s for _, s, _ in spans])
    end = start + np.array([d for _, _, d in spans])
    parent, _, covered = optree.op_tree(tid, start, end)
    for i in range(len(spans)):
        kids = sorted((start[k], end[k]) for k in np.flatnonzero(parent == i))
        union, reach = 0, None
        for a, b in kids:
            if reach is None or a > reach:
                union, reach = union + (b - a), b
            elif b > reach:
                union, reach = union + (b - reach), b
        assert covered[i] == union, (i, kids)
