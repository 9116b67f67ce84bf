"""The device side of real traces from other projects, each class as a tiny trace built here (times in us).

Kernels launched before the trace began, synchronising host calls, MTIA devices, GPU traces whose kernels were not
collected, ranks that only deviceProperties or a ``device`` arg mark as device ranks. Every expected number is
worked out in the comments from the events written.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracekit
from tracekit.events.classify import classify
from tracekit.read.reader import read_rank
from tracedata import cpu, kernel, launch, memcpy, step, write_trace

GEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8"
NCCL_AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def one(frame):
    assert len(frame) == 1, frame
    return frame.iloc[0]


def x(cat, name, ts, dur, pid=0, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


# --- 1. kernels launched before profiling began ------------------------------------------------------------------

def busy_device_rank():
    """Steps [0, 1000), [1000, 2000), [2000, 3000). The trace's first launch has correlation 100; before it, the
    device is still running the last unprofiled step: gemms [0, 300) and [300, 600) on stream 7 (ids 5, 6) and an
    all-reduce [100, 700) on stream 20 (id 7), whose launches are not in the trace. Then the trace's own gemms:
    [600, 900) launched at 10, [1100, 1400) at 1010, [2100, 2400) at 2010."""
    return [
        step(1, 0, 1000), step(2, 1000, 1000), step(3, 2000, 1000),
        kernel(GEMM, 0, 300, correlation=5), kernel(GEMM, 300, 300, correlation=6),
        kernel(NCCL_AR, 100, 600, stream=20, correlation=7),
        launch(10, 100), kernel(GEMM, 600, 300, correlation=100),
        launch(1010, 101), kernel(GEMM, 1100, 300, correlation=101),
        launch(2010, 102), kernel(GEMM, 2100, 300, correlation=102),
    ]


def test_kernels_launched_before_the_trace_are_left_out(tmp_path):
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json.gz", busy_device_rank()), cache=False)
    r = one(s.ranks)
    # Window = steps 1 and 2: gemms [600, 900) and [1100, 1400). Span 800, busy 600, idle 200, no communication.
    assert (r["steps"], r["span_us"], r["busy_us"], r["compute_us"], r["comm_us"], r["idle_us"]) == (
        2, 800, 600, 600, 0, 200)
    assert s.gaps["dur_us"].tolist() == [200]
    # The early all-reduce makes no collective row (it used to: op "other", NaN bytes).
    assert s.collectives.empty
    # Step 1 holds only its own gemm: compute 300 of its 1000 us, the rest "other".
    first = s.steps[s.steps["step"] == 1].iloc[0]
    assert (first["compute_us"], first["comm_us"], first["other_us"]) == (300, 0, 700)
    # Counted with their device time: union of [0, 300), [300, 600), [100, 700) = [0, 700).
    q = one(s.data_quality)
    assert (q["pre_trace_events"], q["pre_trace_device_us"]) == (3, 700)


def test_which_unlinked_events_count_as_launched_before_the_trace(tmp_path):
    events = busy_device_rank() + [
        # Launch missing but issued after the trace's first launch (id 150 > 100): kept, placed by its own start
        # (step 1), even though it starts before the first linked event of its stream.
        kernel("late_id_kernel", 50, 10, correlation=150),
        # No correlation at all: early only when it starts before the trace's first launch call (10): [2, 7) is;
        # [20, 40) is kept although it starts before stream 7's first linked event (600), as is [950, 960). (The
        # rule was once "before its stream's first linked event", which left [20, 40) out too; on a real MTIA trace
        # that dropped events the host issued while profiled: tests/test_pretrace.py.)
        memcpy(2, 5), memcpy(20, 20), memcpy(950, 10),
        # Correlation 0 is CUPTI's "unset": judged as no id, and [1500, 1510) starts after the first launch call.
        kernel("zero_id_kernel", 1500, 10, correlation=0),
        # Launched by a driver call (cuLaunchKernel, Triton's way) in step 1, run in step 2's time: linked.
        x("cuda_driver", "cuLaunchKernel", 900, 5, pid=100, correlation=103),
        kernel("triton_poi_fused_add_0", 1450, 50, correlation=103),
    ]
    _, table, comm_args = read_rank(write_trace(tmp_path / "rank0.json.gz", events), default_rank=0)
    out = classify(table, comm_args).assign(name=lambda d: d["name"].astype(str))
    dev = out[out["cat"].isin(["kernel", "gpu_memcpy"])].set_index(["name", "ts_ns"])
    early = dev.loc[dev["pre_trace"], :].index.tolist()
    memcpy_name = memcpy(0, 0)["name"]
    assert sorted(early) == sorted([(GEMM, 0), (GEMM, 300_000), (NCCL_AR, 100_000), (memcpy_name, 2_000)])
    assert dev.loc[(memcpy_name, 20_000), "step"] == 1
    assert dev.loc[("late_id_kernel", 50_000), "step"] == 1
    assert dev.loc[(memcpy_name, 950_000), "step"] == 1
    assert dev.loc[("zero_id_kernel", 1_500_000), "step"] == 2
    triton = dev.loc[("triton_poi_fused_add_0", 1_450_000)]
    assert (triton["launch_ns"], triton["step"], triton["kind"]) == (900_000, 1, "compute")
    # Left-out events have no kind and no step.
    assert dev.loc[dev["pre_trace"], "kind"].isna().all() and (dev.loc[dev["pre_trace"], "step"] == -1).all()


def test_ranks_whose_events_have_no_launch_link_keep_every_event(tmp_path):
    # Rank 0: the busy device rank (3 events launched before the trace). Rank 1: kernels with correlation ids and
    # no runtime call at all (old formats, a trace without runtime events): nothing is judged, all are kept.
    write_trace(tmp_path / "rank0.json.gz", busy_device_rank(), rank=0)
    write_trace(tmp_path / "rank1.json.gz", [kernel(GEMM, 0, 100, correlation=5), kernel(GEMM, 200, 100, correlation=6),
                                             # runtime calls whose ids name no kernel: linking fails everywhere
                                             launch(0, 900), launch(150, 901)], rank=1)
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    q = s.data_quality.set_index("rank")
    assert q.loc[0, "pre_trace_events"] == 3 and q.loc[1, "pre_trace_events"] == 0
    r1 = s.ranks.set_index("rank").loc[1]
    assert (r1["span_us"], r1["busy_us"], r1["idle_us"]) == (300, 200, 100)  # no steps: [0, 100) and [200, 300)


# --- 6. host calls that block until the device drains --------------------------------------------------------------

@pytest.mark.parametrize("call, launcher, cause", [
    ("cudaFree", "cudaLaunchKernel", "sync"),
    ("hipFree", "hipLaunchKernel", "sync"),
    ("cudaMemcpy", "cudaLaunchKernel", "sync"),
    ("hipMemcpy", "hipLaunchKernel", "sync"),
    ("cudaStreamSynchronize", "cudaLaunchKernel", "sync"),
    ("hipDeviceSynchronize", "hipLaunchKernel", "sync"),
    ("cudaEventSynchronize", "cudaLaunchKernel", "sync"),
    # Allocations are the allocator's (issue 33, class 2), pinned ones too, though they also block.
    ("cudaHostAlloc", "cudaLaunchKernel", "alloc"),
    ("hipMalloc", "hipLaunchKernel", "alloc"),
    # Not blocking: plain host work (the next launch, at 4930, came after the gap began at 100).
    ("cudaMemcpyAsync", "cudaLaunchKernel", "host"),
    ("cudaFreeAsync", "cudaLaunchKernel", "host"),
])
def test_synchronising_host_calls_make_sync_idle(tmp_path, call, launcher, cause):
    # Kernel [10, 100); the host then spends [120, 4920) in `call`; the next kernel is launched at 4930 (5 us) and
    # runs [5000, 5100). The one gap, [100, 5000) = 4900 us: 4800 under the call, 5 in the launch (host), and
    # [100, 120), [4920, 4930), [4935, 5000) with nothing recorded: 95.
    events = [
        cpu(launcher, 0, 5, cat="cuda_runtime", correlation=1), kernel(GEMM, 10, 90, correlation=1),
        cpu(call, 120, 4800, cat="cuda_runtime"),
        cpu(launcher, 4930, 5, cat="cuda_runtime", correlation=2), kernel(GEMM, 5000, 100, correlation=2),
    ]
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json.gz", events), cache=False)
    assert s.gaps["cause"].tolist() == [cause] and s.gaps["dur_us"].tolist() == [4900]
    r = one(s.ranks)
    assert r[f"idle_{cause}_us"] == 4800 + (5 if cause == "host" else 0) and r["idle_us"] == 4900
    assert r["idle_host_unrecorded_us"] == 95 and r["idle_host_us"] == 5 + (4800 if cause == "host" else 0)
    assert r["sync_calls"] == (1 if cause == "sync" else 0)


# --- 7. devices that are not CUDA/ROCm, GPU traces without kernels --------------------------------------------------

def mtia_rank():
    """Steps [0, 1000), [1000, 2000), [2000, 2100). MTIA runtime calls launch device events (mtia_ccp_events):
    ids 1, 2 at 10 and 20 run [100, 400) and [500, 900); id 3 at 1010 runs [1100, 1900); id 4 at 2010 runs
    [2020, 2050) (last step, dropped). The host thread (the launcher's) runs aten ops [0, 1000) and [1000, 1950)
    meanwhile."""
    events = [step(1, 0, 1000), step(2, 1000, 1000), step(3, 2000, 100),
              cpu("aten::mm", 0, 1000), cpu("aten::mm", 1000, 950)]
    for cid, (at, start, dur) in enumerate([(10, 100, 300), (20, 500, 400), (1010, 1100, 800), (2010, 2020, 30)], 1):
        events += [x("mtia_runtime", "runFunction", at, 5, pid=100, correlation=cid),
                   x("mtia_ccp_events", "fused_linear_relu", start, dur, pid=2, tid=9, correlation=cid)]
    return events


@pytest.mark.parametrize("props", [{}, {"deviceProperties": [{"id": 0, "name": "MTIA v2"}]}])
def test_an_mtia_rank_gets_device_wording_not_gpu(tmp_path, props):
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json.gz", mtia_rank(), **props), cache=False)
    assert one(s.ranks)["gpu_runtime"] == "mtia"
    host_bound = [f for f in s.findings if f.kind == "host_bound"]
    assert len(host_bound) == 1  # 11% of the span idles waiting for the host
    text = host_bound[0].message + host_bound[0].recommendation
    assert "The device idles" in text and "per-device batch" in text
    assert "GPU" not in text and "CUDA" not in text


def test_mtia_device_events_are_the_device(tmp_path):
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json.gz", mtia_rank()), cache=False)
    r = one(s.ranks)
    # Device events of steps 1-2: [100, 400), [500, 900), [1100, 1900): span 1800, busy 1500, idle 300 (16.7%),
    # not the host thread's ops.
    assert r["device"] == "mtia"
    assert (r["span_us"], r["busy_us"], r["compute_us"], r["idle_us"]) == (1800, 1500, 1500, 300)
    assert r["idle_pct"] == pytest.approx(300 / 1800 * 100)
    # Gap [400, 500): its next event was launched at 20, before the gap: other. Gap [900, 1100): launched at 1010,
    # after the gap began, by the thread running aten ops over it: the host was late. (Without the mtia_runtime
    # link the launching thread and launch time would be unknown.)
    assert dict(zip(s.gaps["dur_us"], s.gaps["cause"])) == {100: "other", 200: "host"}
    assert (r["idle_host_us"], r["idle_other_us"]) == (200, 100)
    assert one(s.data_quality)["device_evidence"] == "device events (mtia_ccp_events)"


def range_profiler_rank():
    """A CUPTI range-profiler trace: runtime calls and profiler ranges, no kernels. Steps [0, 1000), [1000, 2000),
    [2000, 2010)."""
    return [step(1, 0, 1000), step(2, 1000, 1000), step(3, 2000, 10),
            cpu("aten::mm", 10, 500), launch(20, 1), launch(1020, 2),
            x("cuda_profiler_range", "range_0", 20, 900, pid=0, tid=0)]


def test_gpu_trace_without_kernels_has_unknown_device_metrics(tmp_path):
    path = write_trace(tmp_path / "rank0.json.gz", range_profiler_rank(),
                       deviceProperties=[{"id": 0, "name": "NVIDIA B200", "computeMajor": 10}])
    s = tracekit.summarize(path, cache=False)
    r = one(s.ranks)
    assert r["device"] == "NVIDIA B200"  # never "cpu": the host ops are not the device's work
    assert r["steps"] == 2 and r["step_time_us"] == 1000  # the steps are the host's, and known
    for col in ("span_us", "busy_us", "compute_us", "comm_us", "idle_us", "idle_pct", "idle_host_us",
                "idle_sync_us", "compute_kernel_us"):
        assert math.isnan(r[col]), col
    assert s.steps["step_us"].tolist() == [1000, 1000, 10]
    assert s.steps[["compute_us", "exposed_comm_us", "other_us"]].isna().all().all()
    q = one(s.data_quality)
    assert q["device_events_absent"] and q["device_events"] == 0
    assert q["device_evidence"] == "device API events (cuda_profiler_range, cuda_runtime)"
    assert "without device events" in str(s)


@pytest.mark.parametrize("backend, gloo_call, device", [
    ("nccl", False, "NVIDIA H100"),  # deviceProperties: a device rank whose device events are absent
    ("gloo", True, "cpu"),           # a gloo job profiled on a machine with GPUs: still a CPU rank
])
def test_device_properties_mark_a_device_rank_unless_it_runs_on_gloo(tmp_path, backend, gloo_call, device):
    # Steps [0, 1000), [1000, 2000), [2000, 2010); training-thread ops [100, 400) and [1100, 1300).
    events = [step(1, 0, 1000), step(2, 1000, 1000), step(3, 2000, 10), cpu("aten::mm", 100, 300),
              cpu("aten::mm", 1100, 200)]
    if gloo_call:
        events.append(cpu("gloo:all_reduce", 500, 100, cat="user_annotation", tid=2))
    path = write_trace(tmp_path / "rank0.json.gz", events, backend=backend,
                       deviceProperties=[{"id": 0, "name": "NVIDIA H100", "computeMajor": 9}])
    s = tracekit.summarize(path, cache=False)
    r = one(s.ranks)
    assert r["device"] == device
    if device == "cpu":  # steps 1-2 on the training thread: [100, 400), [1100, 1300); comm [500, 600)
        assert (r["span_us"], r["compute_us"], r["comm_us"]) == (1200, 500, 100)
    else:
        assert math.isnan(r["span_us"]) and bool(one(s.data_quality)["device_events_absent"])


def test_unknown_category_with_a_device_arg_marks_a_device_rank(tmp_path):
    # An accelerator tracekit does not know: its events carry "device" args. They are not read as work (their kind
    # is unknown), so the device numbers are NaN, and the notes name the category.
    events = [cpu("aten::mm", 0, 100), x("npu_task", "graph_0", 10, 50, pid=3, device=0),
              x("npu_task", "graph_1", 70, 20, pid=3, device=0)]
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json.gz", events), cache=False)
    r, q = one(s.ranks), one(s.data_quality)
    assert r["device"] == "gpu" and math.isnan(r["span_us"])
    assert q["device_evidence"] == "a device arg on npu_task events"
    assert (q["unknown_categories"], q["unknown_category_events"]) == ("npu_task (2)", 2)


# --- 8. an empty trace ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("doc", ['{"traceEvents": []}', "[]", '{"traceEvents": [{"ph": "M", "name": "process_name"}]}'])
def test_an_empty_trace_is_an_error(tmp_path, doc):
    path = tmp_path / "rank0.json"
    path.write_text(doc)
    with pytest.raises(tracekit.EmptyTraceError, match="rank0.json.*empty trace"):
        tracekit.summarize(path, cache=False)


def test_an_empty_rank_in_a_folder_is_skipped_and_listed(tmp_path):
    write_trace(tmp_path / "rank0.json.gz", [kernel(GEMM, 0, 100)], rank=0)
    (tmp_path / "rank1.json").write_text('{"traceEvents": []}')
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    assert s.ranks["rank"].tolist() == [0]
    assert [(p.path.endswith("rank1.json"), "empty trace" in p.reason) for p in s.run.skipped] == [(True, True)]


def test_device_categories_are_in_the_classified_table(tmp_path):
    # The MTIA rank read through the low-level API: its device events have a kind, its host ops do not.
    _, events, comm_args = read_rank(write_trace(tmp_path / "rank0.json.gz", mtia_rank()), default_rank=0)
    out = classify(events, comm_args)
    kinds = out.groupby(out["cat"].astype(str))["kind"].agg(lambda k: sorted(set(k.dropna().astype(str))))
    assert kinds["mtia_ccp_events"] == ["compute"] and kinds["cpu_op"] == [] and kinds["mtia_runtime"] == []
    assert np.array_equal(out.loc[out["cat"] == "mtia_ccp_events", "launch_ns"].to_numpy(),
                          np.array([10_000, 20_000, 1_010_000, 2_010_000]))


def test_a_real_trace_whose_first_launches_were_not_recorded(tmp_path):
    """nccl_a100_2rank with its 200 earliest runtime calls removed, as if profiling began after them: the device
    events they launched (163 of them, 2 NCCL kernels among them) are left out and counted, and every number
    is what the trace gives with those events deleted outright."""
    import gzip
    import json
    from decimal import Decimal
    from pathlib import Path

    source = Path(__file__).resolve().parents[2] / "shared" / "traces" / "hta" / "nccl_a100_2rank" / "rank-0.json.gz"
    if not source.is_file():
        pytest.skip("../shared/traces/hta is not beside this checkout")
    doc = json.loads(gzip.decompress(source.read_bytes()))
    runtime = sorted((e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"
                      and "correlation" in e.get("args", {})), key=lambda e: e["args"]["correlation"])
    early = {e["args"]["correlation"] for e in runtime[:200]}
    launched = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy",
                "gpu_memset") and e["args"].get("correlation") in early]
    # Their device time, exactly (Decimal microseconds as written: floats near 4e12 us lose nanoseconds).
    exact = json.loads(gzip.decompress(source.read_bytes()), parse_float=Decimal)["traceEvents"]
    ids = {e["args"]["correlation"] for e in launched}
    early_device_us = float(_union([(e["ts"], e["ts"] + e["dur"]) for e in exact if e.get("ph") == "X"
                                    and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                                    and e["args"].get("correlation") in ids]))
    dropped_calls = [e for e in doc["traceEvents"] if e not in runtime[:200]]
    late = tmp_path / "late" / "rank-0.json"
    late.parent.mkdir()
    late.write_text(json.dumps({**doc, "traceEvents": dropped_calls}))
    gone = tmp_path / "gone" / "rank-0.json"
    gone.parent.mkdir()
    gone.write_text(json.dumps({**doc, "traceEvents": [e for e in dropped_calls if e not in launched]}))

    a, b = (tracekit.summarize(p, cache=False, workers=1) for p in (late, gone))
    assert len(launched) == 163 and sum("nccl" in e["name"].lower() for e in launched) == 2
    q = one(a.data_quality)
    assert q["pre_trace_events"] == len(launched)
    assert q["pre_trace_device_us"] == pytest.approx(early_device_us, abs=1e-6)
    numbers = [c for c in a.ranks.columns if a.ranks[c].dtype.kind == "f"]
    assert np.allclose(a.ranks[numbers].to_numpy(float), b.ranks[numbers].to_numpy(float), equal_nan=True)
    assert len(a.collectives) == len(b.collectives)
    assert a.steps[["step", "step_us", "compute_us", "exposed_comm_us", "other_us"]].equals(
        b.steps[["step", "step_us", "compute_us", "exposed_comm_us", "other_us"]])


def _union(spans):
    """Total length of the union of (start, end) spans: a plain sweep, independent of tracekit's intervals."""
    total, end = 0, None
    for s, e in sorted(spans):
        if end is None or e > end:
            total += e - (s if end is None else max(s, end))
            end = e
    return total


def test_whatif_of_a_gpu_trace_without_kernels_is_unknown_beyond_the_baseline(tmp_path):
    """The device's work is unknown, so is any change to it: never a 0 us step and an infinite speedup."""
    path = write_trace(tmp_path / "rank0.json.gz", range_profiler_rank(),
                       deviceProperties=[{"id": 0, "name": "NVIDIA B200", "computeMajor": 10}])
    table = tracekit.whatif(tracekit.summarize(path, cache=False)).set_index("scenario")
    assert table.loc["baseline", "step_time_us"] == 1000  # the host's steps are measured
    assert table.drop(index="baseline")[["step_time_us", "speedup", "saving_us", "saving_pct"]].isna().all().all()
