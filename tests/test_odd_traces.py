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
    # ProfilerStep#1 [1000, 1300] on thread 1, #2 [8900, 8950] on thread 2, after aten::add [670, 675] there.
    # Without host gaps #2's marker moves to 675 us, before #1 began (it predicted -325 us for step 1). No step
    # begins before the one before it: #2 begins at 1000 us, and step 1, which records nothing, takes 0 us.
    # Baseline: 8900 - 1000 = 7900 us.
    s = _summary(tmp_path, {0: [step(1, 1000, 300, tid=1), step(2, 8900, 50, tid=2), cpu("aten::add", 670, 5, tid=2)]})
    table = tracekit.whatif(s).set_index("scenario")["step_time_us"]
    assert table["baseline"] == pytest.approx(7900.0) and table["no_host_gaps"] == 0.0
    assert ((table >= 0) & (table <= 7900.0 + 1e-6)).all(), table


def test_mfu_of_a_host_that_runs_ahead_is_on_the_device_clock(tmp_path):
    # Four 100 us ProfilerSteps on an H100, each launching an 8192^3 bf16 mm whose kernel takes 1200 us: kernel k
    # runs [30 + 1200k, 1230 + 1200k]. On the host's clock the steps took 100, 100, 100 and 4530 us (MFU over host
    # time was 1111 %). Each step's work ends after the next annotation: steps tile on the device's clock, step 1
    # [0, 1230], step 2 [1230, 2430], step 3 [2430, 3630], step 4 [3630, 4830], and so does the device clock.
    # The mm's 2 * 8192^3 FLOPs take 1111.29 us at 989.4 TFLOP/s.
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
    assert steps["step_us"].tolist() == [1230.0, 1200.0, 1200.0, 1200.0]
    assert steps["ended_by"].tolist() == ["device"] * 4
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


H100 = [{"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9, "totalGlobalMem": 85899345920}]
MM_8192 = {"Input Dims": [[8192, 8192], [8192, 8192]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}


def _mm_step(k, t, period, kernel_at, corr):
    return [step(k, t, period), cpu("aten::mm", t + 10, 50, **{"External id": corr, **MM_8192}),
            {**launch(t + 20, corr), "args": {"correlation": corr, "External id": corr}},
            kernel("sm90_xmma_gemm_bf16bf16_bf16f32", kernel_at, 1200, correlation=corr, **{"External id": corr})]


def test_a_collective_that_runs_into_the_next_step_does_not_move_its_device_clock(tmp_path):
    # Steps of 2000 us, each an mm whose 1200 us kernel starts 30 us in; step 1 also runs an all-reduce on stream 20
    # [1230, 3000], into step 2 (whose mm runs [2030, 3230]). Compute keeps up, so each device step is 2000 us and
    # MFU 1111.29 / 2000 = 55.56 % (the all-reduce in the device clock gave step 2 1000 us and 111 %). The steps
    # tile on all of their device work: step 1 ends when its all-reduce does, [0, 3000], step 2 [3000, 4000], step
    # 3 [4000, 6000] (``step_us``, the wall clock; MFU stays on the device clock).
    events = [e for k in range(3) for e in _mm_step(k + 1, 2000 * k, 2000, 2000 * k + 30, k + 1)]
    events += [{**launch(1100, 10), "args": {"correlation": 10}}, kernel(AR, 1230, 1770, stream=20, correlation=10)]
    s = _summary(tmp_path, {0: events}, deviceProperties=H100)
    assert s.steps["device_step_us"].tolist() == [2000.0] * 3
    assert s.steps["step_us"].tolist() == [3000.0, 1000.0, 2000.0]
    assert s.steps["ended_by"].tolist() == ["device", "host", "host"]
    assert s.steps["mfu_pct"].tolist() == pytest.approx([1111.29 / 2000 * 100] * 3, rel=1e-5)


def test_the_device_clock_with_negative_times_and_without_device_events(tmp_path):
    # Times from -10 ms (no base): steps of 1000 us, kernels in steps 1 and 3 only; the device keeps up, so each
    # device step is its step (a step without device work once counted as ending at -1 ns: 9000 us).
    events = [step(1, -10000, 1000), step(2, -9000, 1000), step(3, -8000, 1000), cpu("aten::mm", -9990, 50),
              launch(-9980, 1), kernel("gemm", -9970, 100, correlation=1), cpu("aten::mm", -7990, 50),
              launch(-7980, 2), kernel("gemm", -7970, 100, correlation=2)]
    s = _summary(tmp_path / "negative", {0: events})
    assert s.steps["device_step_us"].tolist() == [1000.0] * 3
    # A GPU rank whose kernels were not collected: the device's clock is unknown, and so is MFU.
    events = [e for k in range(3) for e in _mm_step(k + 1, 100 * k, 100, 0, k + 1)[:3]]
    s = _summary(tmp_path / "nodevice", {0: events}, deviceProperties=H100)
    assert s.steps["device_step_us"].isna().all() and s.steps["mfu_pct"].isna().all()
    assert s.ranks["mfu_pct"].isna().all() and s.steps["step_us"].tolist() == [100.0] * 3


def test_the_text_report_gives_achieved_tflops_on_the_device_clock(tmp_path):
    # The host-ahead run above: 2 * 8192^3 FLOPs a step over a mean device step of 3630 / 3 = 1210 us in the window:
    # 908.69 TFLOP/s, 91.8 % of the H100's 989.4 (it read 10,995.12 over the host's 100 us).
    events = [e for k in range(4) for e in _mm_step(k + 1, 100 * k, 100, 30 + 1200 * k, k + 1)]
    text = str(_summary(tmp_path, {0: events}, deviceProperties=H100))
    assert f"{2 * 8192**3 / 1210e-6 / 1e12:,.2f}" == "908.69" and " 908.69 " in text and " 91.8" in text


def test_a_step_recorded_on_another_thread_while_a_sync_waits_does_not_make_a_cycle(tmp_path):
    # #1 at 100 us on thread 1, #2 at 100.5 us on thread 2, #3 at 600 us on thread 1; a cudaStreamSynchronize on
    # thread 1 from 99.9 us (host and device clocks 0.1 us apart) returns after the kernel launched from thread 2.
    # An edge ordering the markers across threads closed a cycle with the sync; the replay orders the boundaries.
    events = [step(1, 100, 400, tid=1), step(2, 100.5, 400, tid=2), step(3, 600, 100, tid=1),
              cpu("cudaStreamSynchronize", 99.9, 50, cat="cuda_runtime", tid=1), launch(101, 1, tid=2),
              kernel("k", 110, 20, correlation=1)]
    table = tracekit.whatif(_summary(tmp_path, {0: events})).set_index("scenario")["step_time_us"]
    assert table["baseline"] == pytest.approx(250.0)  # (600 - 100) / 2 steps
    assert (table >= 0).all()


def test_times_at_the_end_of_int64(tmp_path):
    # A ProfilerStep number one below 2**63: an annotation (its end marker, #N + 1, would pass int64).
    s = _summary(tmp_path / "number", {0: [cpu(f"ProfilerStep#{2**63 - 1}", 0, 100, cat="user_annotation"),
                                           cpu("aten::mm", 10, 20)]})
    assert s.steps.empty
    # A kernel lasting 8e15 us: an impossible duration, its event dropped (its end wrapped past int64).
    s = _summary(tmp_path / "dur", {0: [step(1, 0, 100), step(2, 100, 100), cpu("aten::mm", 10, 50),
                                        kernel("k", 20, 8_000_000_000_000_000)]},
                 baseTimeNanoseconds=1_700_000_000_000_000_000)
    assert s.data_quality["dropped_events"].tolist() == [1] and s.kernels.empty
    # A [memory] event 8e15 us after a base of 1.7e18 ns: past int64, a named error for the file.
    path = write_trace(tmp_path / "memory" / "rank0.json", [step(1, 0, 100), _mem(8_000_000_000_000_000)], rank=0,
                       world_size=1, baseTimeNanoseconds=1_700_000_000_000_000_000)
    with pytest.raises(TraceReadError, match="pass the nanoseconds int64 holds"):
        tracekit.summarize(path, cache=False, workers=1)


def test_missing_step_runs_read_as_runs_in_the_text():
    # A run is plural and names its first step (it read "lacks step 3-29 (no ProfilerStep#3-29 ...").
    for lacking, text in (("3-300000002", "lacks steps 3-300000002 (no ProfilerStep#3 "),
                          ("4", "lacks step 4 (no ProfilerStep#4 "), ("4, 7", "lacks steps 4, 7 (no ProfilerStep#4 ")):
        assert quality._row_notes({"rank": 0, "missing_steps": lacking})[0].startswith(text)


def test_an_op_past_the_traces_horizon_is_dropped_from_the_op_tables_too(tmp_path):
    # aten::add lasting 8e15 us: the events table drops it (dropped_events 1), and the op tables now leave it out
    # too (it showed 8e15 us of host time). ProfilerStep#1 [0, 100] holds aten::mm [10, 60]: 50 us of its own.
    s = _summary(tmp_path, {0: [step(1, 0, 100), step(2, 100, 100), cpu("aten::mm", 10, 50),
                                cpu("aten::add", 20, 8_000_000_000_000_000)]},
                 baseTimeNanoseconds=1_700_000_000_000_000_000)
    assert s.data_quality["dropped_events"].tolist() == [1]
    ops = s.ops.set_index("name")
    assert "aten::add" not in ops.index and ops.loc["ProfilerStep#1", "host_self_us"] == 50.0
