"""What runs: the kernel, operator and memory tables and MFU, on tiny traces whose every number is worked out here,
and the operator table against torch.profiler's own key_averages() on a real CPU run made by the test."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import tracekit
from tracedata import cpu, kernel, launch, step, write_trace

A100 = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_899_345_920, "computeMajor": 8}]


def _gpu_run(tmp_path, events, **top):
    write_trace(tmp_path / "rank-0.json.gz", events, rank=0, world_size=1, **top)
    return tracekit.summarize(tmp_path / "rank-0.json.gz", cache=False, workers=1)


def test_two_kernels_by_hand(tmp_path):
    """Step 1: gemm runs twice (10 and 30 us) on stream 7 and once (20 us) on stream 9; step 2: relu once (5 us)."""
    events = [step(1, 0, 1000), step(2, 1000, 1000)]
    for i, (ts, dur, stream) in enumerate([(100, 10, 7), (200, 30, 7), (300, 20, 9)]):
        events += [launch(ts - 50, correlation=i + 1), kernel("gemm", ts, dur, stream=stream, correlation=i + 1)]
    events += [launch(1100, correlation=9), kernel("relu", 1150, 5, correlation=9)]
    s = _gpu_run(tmp_path, events)
    k = s.kernels.set_index("name")
    assert k.loc["gemm", "calls"] == 3 and k.loc["gemm", "total_us"] == 60 and k.loc["gemm", "streams"] == 2
    assert k.loc["gemm", "mean_us"] == 20 and k.loc["gemm", "min_us"] == 10 and k.loc["gemm", "max_us"] == 30
    assert k.loc["gemm", "std_us"] == pytest.approx(10.0)  # sqrt(((10-20)^2 + 10^2 + 0) / 2)
    assert k.loc["gemm", "kind_share_pct"] == 100
    # relu runs in step 2, the last, which the default window drops (as HTA): counted in the trace columns only.
    assert k.loc["relu", "calls"] == 0 and k.loc["relu", "total_us"] == 0 and math.isnan(k.loc["relu", "mean_us"])
    assert k.loc["relu", "trace_calls"] == 1 and k.loc["relu", "trace_us"] == 5
    assert k.loc["gemm", "trace_calls"] == 3 and k.loc["gemm", "trace_us"] == 60
    assert list(s.kernels["name"]) == ["gemm", "relu"]  # largest first


def test_a_three_op_nest_by_hand(tmp_path):
    """aten::linear [0, 100] holds aten::t [5, 10] and aten::addmm [20, 90]; addmm launches a 40 us kernel and t
    none. Host self: linear 100 - 5 - 70 = 25, t 5, addmm 70; device: addmm 40 itself, linear 40 through it."""
    linear_args = {"External id": 1, "Input Dims": [[64, 128], [32, 128], [32]],
                   "Input type": ["float", "float", "float"]}
    events = [step(1, 0, 1000),
              cpu("aten::linear", 0, 100, **linear_args),
              cpu("aten::t", 5, 5, **{"External id": 2, "Input Dims": [[32, 128]], "Input type": ["float"]}),
              cpu("aten::addmm", 20, 70, **{"External id": 3, "Input Dims": [[32], [64, 128], [128, 32], [], []],
                                            "Input type": ["float", "float", "float", "Scalar", "Scalar"]}),
              {**launch(30, correlation=5), "args": {"correlation": 5, "External id": 3}},
              kernel("sgemm", 50, 40, correlation=5, **{"External id": 3})]
    s = _gpu_run(tmp_path, events, deviceProperties=A100)
    ops = s.ops.set_index("name")
    assert ops.loc["aten::linear", "host_self_us"] == 25 and ops.loc["aten::linear", "host_total_us"] == 100
    assert ops.loc["aten::t", "host_self_us"] == 5 and ops.loc["aten::addmm", "host_self_us"] == 70
    assert ops.loc["aten::addmm", "device_self_us"] == 40 and ops.loc["aten::addmm", "device_us"] == 40
    assert ops.loc["aten::linear", "device_self_us"] == 0 and ops.loc["aten::linear", "device_us"] == 40
    assert ops.loc["aten::t", "device_us"] == 0
    # One GEMM with M=64, K=128, N=32: 2 * 64 * 128 * 32 FLOPs; counted once, at the innermost op (addmm).
    flops = 2 * 64 * 128 * 32
    assert ops.loc["aten::addmm", "flops"] == flops and ops.loc["aten::linear", "flops"] == flops
    assert ops.loc["aten::addmm", "counted_flops"] == flops and ops.loc["aten::linear", "counted_flops"] == 0
    assert ops.loc["aten::addmm", "dtype"] == "float"
    # On an A100 SXM4 80GB: fp32 19.5 TFLOPS (non-tensor), 2039 GB/s. Bytes: A, B, bias and the output, 4 B each.
    nbytes = 4 * (64 * 128 + 128 * 32 + 32 + 64 * 32)
    assert ops.loc["aten::addmm", "bytes"] == nbytes
    assert ops.loc["aten::addmm", "achieved_tflops"] == pytest.approx(flops / 40e-6 / 1e12)
    roofline_us = max(flops / 19.5e12, nbytes / 2039e9) * 1e6
    assert ops.loc["aten::addmm", "roofline_us"] == pytest.approx(roofline_us)
    assert ops.loc["aten::addmm", "pct_of_roofline"] == pytest.approx(roofline_us / 40 * 100)
    by_shape = s.ops_by_shape.set_index("name")
    assert by_shape.loc["aten::addmm", "input_dims"] == "[[32], [64, 128], [128, 32], [], []]"  # as recorded


def test_mfu_of_one_gemm_on_a_known_gpu(tmp_path):
    """A bf16 mm of M=N=K=4096 in each 1 ms step on an H100 SXM (989.4 dense bf16 TFLOPS):
    2 * 4096^3 = 137.4 GFLOP, 0.1389 ms at peak, MFU 13.89%."""
    h100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_520_809_984, "computeMajor": 9}]
    mm = {"Input Dims": [[4096, 4096], [4096, 4096]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}
    events = []
    for k in (1, 2, 3):
        t = (k - 1) * 1000
        events += [step(k, t, 1000), cpu("aten::mm", t + 10, 50, **{"External id": k, **mm}),
                   {**launch(t + 20, correlation=k), "args": {"correlation": k, "External id": k}},
                   kernel("sm90_gemm_bf16", t + 100, 800, correlation=k, **{"External id": k})]
    s = _gpu_run(tmp_path, events, deviceProperties=h100)
    flops = 2 * 4096 ** 3
    window = s.steps[s.steps["in_window"]]
    assert list(window["matmul_flops"]) == [flops, flops]
    from tracekit import devices

    peak = devices.peak_tflops(devices.match("NVIDIA H100 80GB HBM3"), "bf16") * 1e12
    assert s.ranks.loc[0, "mfu_pct"] == pytest.approx(flops / peak / 1000e-6 * 100)
    assert 13 < s.ranks.loc[0, "mfu_pct"] < 15


def test_unknown_device_or_shapes_is_nan_with_a_note(tmp_path):
    events = [step(1, 0, 1000), step(2, 1000, 1000),
              cpu("aten::mm", 10, 50, **{"External id": 1}),  # no Input Dims: record_shapes off
              {**launch(20, correlation=1), "args": {"correlation": 1, "External id": 1}},
              kernel("gemm", 100, 800, correlation=1, **{"External id": 1})]
    s = _gpu_run(tmp_path, events, deviceProperties=[{"id": 0, "name": "Mystery GPU 9000"}])
    assert math.isnan(s.steps.loc[0, "matmul_flops"]) and math.isnan(s.ranks.loc[0, "mfu_pct"])
    assert math.isnan(s.ops.set_index("name").loc["aten::mm", "roofline_us"])
    text = str(s)
    assert "Mystery GPU 9000" in text and "MFU are n/a" in text
    assert "profile_memory was off" in text


def test_memory_peaks_by_hand(tmp_path):
    """Allocations on cuda:0: +100 at 10 (in op A), +50 at 20, -100 at 30, +200 at 40 (in op B, step 1);
    step 2: -50 at 1100. Peak 250 at 40 with A's 100 freed: live are 200 (B) and 50, allocated outside any op
    but inside the ProfilerStep#1 annotation."""
    def mem(ts, nbytes, total, addr):
        return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 100, "tid": 1, "ts": ts, "s": "t",
                "args": {"Device Type": 1, "Device Id": 0, "Addr": addr, "Bytes": nbytes,
                         "Total Allocated": total, "Total Reserved": 512}}
    events = [step(1, 0, 1000), step(2, 1000, 1000), cpu("A", 5, 10), cpu("B", 35, 10),
              mem(10, 100, 100, 1), mem(20, 50, 150, 2), mem(30, -100, 50, 1), mem(40, 200, 250, 3),
              mem(1100, -50, 200, 2)]
    s = _gpu_run(tmp_path, events, deviceProperties=A100)
    m = s.memory.set_index("step")
    assert m.loc[1, "peak_allocated_bytes"] == 250 and m.loc[1, "end_allocated_bytes"] == 250
    # Nothing before the first event: the step starts at its reading less its bytes, 100 - 100 = 0 (was NaN).
    assert m.loc[1, "start_allocated_bytes"] == 0 and m.loc[1, "growth_bytes"] == 250
    assert m.loc[2, "start_allocated_bytes"] == 250 and m.loc[2, "end_allocated_bytes"] == 200
    assert m.loc[2, "peak_allocated_bytes"] == 250 and m.loc[2, "growth_bytes"] == -50
    assert m.loc[1, "device"] == "cuda:0" and m.loc[1, "device_memory_bytes"] == 85_899_345_920
    top = s.memory_top.set_index("op")["live_bytes"].to_dict()
    assert top == {"B": 200, "ProfilerStep#1": 50}


@pytest.mark.slow
def test_ops_agree_with_key_averages_on_a_real_cpu_run(tmp_path):
    """Counts exact, host self and total within 2%, for every op key_averages() lists; the memory peak is the
    largest Total Allocated of the raw events."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 16 * 16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        for _ in range(3):
            with record_function("train_step"):
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                opt.zero_grad()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    s = tracekit.summarize(path, cache=False, workers=1)
    ops = s.ops.set_index("name")
    theirs = {e.key: e for e in prof.key_averages()}
    assert len(theirs) > 20 and set(theirs) <= set(ops.index)
    for name, e in theirs.items():
        row = ops.loc[name]
        assert row["calls"] == e.count, name
        assert row["host_total_us"] == pytest.approx(e.cpu_time_total, rel=0.02, abs=0.5), name
        assert row["host_self_us"] == pytest.approx(e.self_cpu_time_total, rel=0.02, abs=0.5), name
    import json

    raw = [e["args"]["Total Allocated"] for e in json.loads(path.read_text())["traceEvents"]
           if e.get("name") == "[memory]"]
    assert s.memory["peak_allocated_bytes"].max() == max(raw)


def test_a_bf16_gemm_whose_kernel_name_hides_it_is_reduced_precision(tmp_path):
    """hipBLASLt's Cijk_* names do not say bf16; the op's Input type does. 100% of matmul time is bf16: no
    no_reduced_precision finding, where the kernel-name rule alone would have said 0%."""
    mi300 = [{"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 206_141_652_992, "computeMajor": 9}]
    mm = {"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}
    events = []
    for k in (1, 2, 3):
        t = (k - 1) * 1000
        events += [step(k, t, 1000), cpu("aten::mm", t + 10, 50, **{"External id": k, **mm}),
                   {**launch(t + 20, correlation=k), "name": "hipLaunchKernel",
                    "args": {"correlation": k, "External id": k}},
                   kernel("Cijk_Ailk_Bljk_BBS_BH_MT128x128x32_MI32x32x8_SN", t + 100, 800, correlation=k,
                          **{"External id": k})]
    s = _gpu_run(tmp_path, events, deviceProperties=mi300)
    assert s.ranks.loc[0, "matmul_reduced_us"] == s.ranks.loc[0, "matmul_device_us"] == 2400  # 3 x 800, whole trace
    assert s.ranks.loc[0, "reduced_precision_us"] == 0  # what the kernel names alone say
    assert "no_reduced_precision" not in [f.kind for f in s.findings]


def _mem(ts, nbytes, total, addr, reserved=None):
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 100, "tid": 1, "ts": ts, "s": "t",
            "args": {"Device Type": 1, "Device Id": 0, "Addr": addr, "Bytes": nbytes, "Total Allocated": total,
                     "Total Reserved": total if reserved is None else reserved}}


def _memory_run(tmp_path, totals, capacity):
    """Steps 1..4 of 1000 us (the window: 1-3); in step k one allocation brings Total Allocated to totals[k-1]."""
    events, prev = [], 0
    for k, total in enumerate(totals, start=1):
        events += [step(k, (k - 1) * 1000, 1000), _mem((k - 1) * 1000 + 10, total - prev, total, k)]
        prev = total
    props = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": capacity}]
    return _gpu_run(tmp_path, events, deviceProperties=props)


def test_a_device_near_its_memory_is_a_finding(tmp_path):
    s = _memory_run(tmp_path / "full", [90e9, 90e9, 90e9, 90e9], 100e9)  # 90% of 100 GB: medium
    found = {f.kind: f for f in s.findings}["memory_near_capacity"]
    assert found.severity == "medium" and found.evidence["share"] == pytest.approx(0.9)
    assert "90%" in found.message and "cuda:0" in found.message
    s = _memory_run(tmp_path / "roomy", [50e9] * 4, 100e9)
    assert "memory_near_capacity" not in [f.kind for f in s.findings]


def test_memory_that_grows_every_step_is_a_finding(tmp_path):
    s = _memory_run(tmp_path / "leak", [1e9, 1.1e9, 1.2e9, 1.3e9], 100e9)  # +0.1 GB per window step
    found = {f.kind: f for f in s.findings}["memory_growth"]
    # Window steps 1-3 end at 1.0, 1.1, 1.2 GB: +200 MB over 3 steps, 16.7% of the 1.2 GB peak.
    assert found.evidence["growth_bytes"] == pytest.approx(0.2e9) and found.evidence["steps"] == 3
    assert found.evidence["share"] == pytest.approx(0.2 / 1.2)
    s = _memory_run(tmp_path / "steady", [1e9, 1e9, 1e9, 1e9], 100e9)
    assert "memory_growth" not in [f.kind for f in s.findings]


def test_memory_growth_in_a_forward_only_run_names_a_growing_kv_cache(tmp_path):
    """Forward only (ranks.training False): a KV cache growing with each generated token grows memory every step by
    design, and there are no losses to .detach(); training (or unknown) keeps the leak advice."""
    from tracekit.findings import memory_findings

    s = _memory_run(tmp_path / "leak", [1e9, 1.1e9, 1.2e9, 1.3e9], 100e9)
    (infer,) = [f for f in memory_findings.find(s.memory, s.steps, training=False) if f.kind == "memory_growth"]
    (train,) = [f for f in memory_findings.find(s.memory, s.steps, training=True) if f.kind == "memory_growth"]
    assert "KV cache" in infer.message and "static" in infer.recommendation and "losses" not in infer.recommendation
    assert "KV cache" not in train.message and "losses" in train.recommendation
    assert infer.evidence == train.evidence and infer.severity == train.severity


@pytest.mark.parametrize("run", ["resnet-gloo-2rank-memory", "resnet-gloo-2rank-bf16"])
def test_flops_per_step_agree_with_flop_counter_mode(run, summaries):
    """The workload counted one optimizer step with torch's FlopCounterMode (run.json); tracekit's FLOPs from the
    trace's shapes must agree within 3% (they are equal: the formulas are FlopCounterMode's)."""
    from pathlib import Path

    s = summaries(Path(__file__).resolve().parents[1] / "sample_traces" / run, cache=False, workers=1)
    reference = s.run.workload.flop_counter_flops_per_step
    window = s.steps[s.steps["in_window"]]
    assert reference > 0 and len(window) >= 2
    for value in window["matmul_flops"]:
        assert value == pytest.approx(reference, rel=0.03)


def test_the_bundled_memory_run_holds_its_raw_peak(summaries):
    """The largest Total Allocated in the raw [memory] events is the memory table's peak, per rank."""
    import gzip
    import json
    from pathlib import Path

    run = Path(__file__).resolve().parents[1] / "sample_traces" / "resnet-gloo-2rank-memory"
    s = summaries(run, cache=False, workers=1)
    for path in sorted(run.glob("rank-*.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        rank = doc["distributedInfo"]["rank"]
        raw = max(e["args"]["Total Allocated"] for e in doc["traceEvents"] if e.get("name") == "[memory]")
        assert s.memory.loc[s.memory["rank"] == rank, "peak_allocated_bytes"].max() == raw


def test_where_optimisation_pays_by_replay(tmp_path):
    """Each 1000 us step: a bf16 mm (M=N=K=4096) launches a 895 us kernel [100, 995) that the host waits for in a
    cudaDeviceSynchronize; the next step starts 5 us later. On an A100 SXM4 80GB the mm's roofline is
    2*4096^3 / 312 TFLOPS = 440.5 us (its 100.7 MB at 2039 GB/s take 49.4 us): at it, the kernel ends at 540.5
    and so does the sync, and the step is 454.5 us shorter: 545.5 us, -45.5%."""
    mm = {"Input Dims": [[4096, 4096], [4096, 4096]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}
    events = []
    for k in (1, 2, 3):
        t = (k - 1) * 1000
        events += [step(k, t, 1000), cpu("aten::mm", t + 10, 40, **{"External id": k, **mm}),
                   {**launch(t + 20, correlation=k), "args": {"correlation": k, "External id": k}},
                   cpu("cudaDeviceSynchronize", t + 60, 935, cat="cuda_runtime"),
                   kernel("ampere_bf16_gemm", t + 100, 895, correlation=k, **{"External id": k})]
    s = _gpu_run(tmp_path, events, deviceProperties=A100)
    roofline = 2 * 4096 ** 3 / 312e12 * 1e6
    opt = s.optimization.set_index("name")
    assert opt.loc["aten::mm", "roofline_us"] == pytest.approx(3 * roofline)  # three calls
    assert opt.loc["aten::mm", "critical_path_us"] == pytest.approx(895)  # per step, the whole kernel
    assert opt.loc["aten::mm", "predicted_saving_us"] == pytest.approx(895 - roofline, rel=1e-6)
    assert opt.loc["aten::mm", "saving_pct"] == pytest.approx((895 - roofline) / 1000 * 100, rel=1e-6)
    found = {f.kind: f for f in s.findings}["roofline_gap"]
    assert found.severity == "high" and "aten::mm" in found.message and "-45%" in found.message


def test_a_known_roofline_on_ops_that_took_no_device_time_has_no_candidate(tmp_path):
    """Two A100 ranks whose only matmul (mm, roofline known from its shapes) launched no kernel: its device time is
    0, so there is nothing to shorten and the optimisation table is empty. (Across ranks the op names are text, not
    one categorical, and the empty candidates' critical-path column came out as text: a TypeError.) The relu's
    kernel makes each rank a device rank."""
    mm = {"Input Dims": [[64, 128], [128, 32]], "Input type": ["float", "float"]}
    for rank in (0, 1):
        events = []
        for k in (1, 2, 3):
            t = (k - 1) * 1000
            events += [step(k, t, 1000), cpu("aten::mm", t + 10, 40, **{"External id": k, **mm}),
                       cpu("aten::relu" if rank else "aten::gelu", t + 60, 20, **{"External id": 10 + k}),
                       {**launch(t + 70, correlation=k), "args": {"correlation": k, "External id": 10 + k}},
                       kernel("act_kernel", t + 100, 30, correlation=k, **{"External id": 10 + k})]
        write_trace(tmp_path / f"rank-{rank}.json.gz", events, rank=rank, world_size=2, deviceProperties=A100)
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    mm_rows = s.ops[s.ops["name"] == "aten::mm"]
    # fp32 mm: 2*64*128*32 FLOPs at 19.5 TFLOPS = 26.9 ns; its (64*128 + 128*32 + 64*32) * 4 B at 2039 GB/s = 28.1 ns
    assert list(mm_rows["rank"]) == [0, 1] and (mm_rows["device_us"] == 0).all()
    assert mm_rows["roofline_us"].tolist() == pytest.approx([3 * (64 * 128 + 128 * 32 + 64 * 32) * 4 / 2039e9 * 1e6] * 2,
                                                            rel=1e-3)
    assert s.optimization.empty and list(s.optimization.columns) == list(tracekit.opschema.OPTIMIZATION_COLUMNS)
    assert "roofline_gap" not in [f.kind for f in s.findings]


def test_an_op_off_the_critical_path_is_no_candidate_and_leaves_no_blank_row(tmp_path):
    """Host-bound steps: a bf16 mm (roofline known) launches a 30 us kernel at +20 us, then the host computes for
    900 us (aten::cumsum, no kernel). The kernel ends long before the host does, so the mm's critical-path time is
    0: nothing to gain from it, and the table is empty (it held a row of NaN: the gap column assigned to the empty
    frame brought its index)."""
    mm = {"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": ["c10::BFloat16", "c10::BFloat16"]}
    events = []
    for k in (1, 2, 3):
        t = (k - 1) * 1000
        events += [step(k, t, 1000), cpu("aten::mm", t + 10, 20, **{"External id": k, **mm}),
                   {**launch(t + 15, correlation=k), "args": {"correlation": k, "External id": k}},
                   kernel("ampere_bf16_gemm", t + 20, 30, correlation=k, **{"External id": k}),
                   cpu("aten::cumsum", t + 40, 900, **{"External id": 10 + k})]
    s = _gpu_run(tmp_path, events, deviceProperties=A100)
    mm_row = s.ops.set_index("name").loc["aten::mm"]
    assert mm_row["device_us"] == 90 and mm_row["roofline_us"] == pytest.approx(3 * 2 * 1024 ** 3 / 312e12 * 1e6)
    assert s.optimization.empty


def test_a_step_of_0_us_has_unknown_mfu_and_a_rank_without_steps_keeps_the_others_numeric(tmp_path):
    """Rank 0's only step (a 0 us annotation matched by the step pattern) has no time, so its MFU is unknown, not
    inf (and not a ZeroDivisionError); rank 1 has no step, and its empty step table does not make the run's step
    columns Python objects. The mm (at +1 us) runs after the step has ended: no saving can be quoted in % of a 0 us
    step."""
    mm = {"Input Dims": [[64, 128], [128, 32]], "Input type": ["float", "float"]}
    for rank in (0, 1):
        events = [cpu("marker", 0, 0, cat="user_annotation")] if rank == 0 else []
        events += [cpu("aten::mm", 1, 50, **mm), launch(2, 1), kernel("gemm", 10, 30, correlation=1)]
        write_trace(tmp_path / f"rank-{rank}.json", events, rank=rank, world_size=2, deviceProperties=A100)
    s = tracekit.summarize(tmp_path, cache=False, workers=1, step_pattern="marker", window="all_steps")
    assert s.steps[["rank", "step", "step_us"]].to_dict("records") == [{"rank": 0, "step": 0, "step_us": 0.0}]
    assert s.steps["step_us"].dtype == np.float64 and math.isnan(s.steps.loc[0, "mfu_pct"])
    assert s.ranks["mfu_pct"].isna().all() and s.optimization.empty
    assert "unknown" in str(s)  # the text report's TFLOPS/s of a 0 us step (it divided by 0)


def test_the_profilers_own_flops_arg_is_read(tmp_path):
    """with_flops=True writes a 'flops' arg on matmul ops: kept beside tracekit's count, summed over calls."""
    mm = {"Input Dims": [[64, 128], [128, 32]], "Input type": ["float", "float"], "flops": 524288}
    events = [step(1, 0, 1000), step(2, 1000, 1000), cpu("aten::mm", 10, 50, **{"External id": 1, **mm}),
              cpu("aten::mm", 1010, 50, **{"External id": 2, **mm})]
    s = _gpu_run(tmp_path, events, deviceProperties=A100)
    row = s.ops.set_index("name").loc["aten::mm"]
    assert row["flops_arg"] == 2 * 524288 and row["flops"] == 2 * 2 * 64 * 128 * 32


def test_a_kernel_belongs_to_the_op_around_its_launch_whatever_the_ids_say(tmp_path):
    """Older Kineto gives a launch call an External id equal to its correlation id, which may be another op's:
    here the launch (correlation 7) sits inside aten::copy_ [100, 200) while an unrelated aten::to has External
    id 7. The 60 us memcpy is copy_'s, as the profiler's own tree says."""
    events = [step(1, 0, 1000), step(2, 1000, 1000),
              cpu("aten::to", 10, 20, **{"External id": 7}),
              cpu("aten::copy_", 100, 100, **{"External id": 40}),
              {**launch(120, correlation=7), "name": "cudaMemcpyAsync", "args": {"correlation": 7, "External id": 7}},
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
               "ts": 300, "dur": 60, "args": {"device": 0, "stream": 7, "correlation": 7, "External id": 7}}]
    s = _gpu_run(tmp_path, events, deviceProperties=A100)
    ops = s.ops.set_index("name")
    assert ops.loc["aten::copy_", "device_self_us"] == 60 and ops.loc["aten::to", "device_self_us"] == 0


H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_520_809_984, "computeMajor": 9}]
NO_CPU_OPS = ("no CPU ops recorded (no cpu_op events; annotations such as ProfilerStep are not ops): the operators' "
              "FLOPs cannot be counted, so FLOPs and MFU are unknown")


def _annotated_gemms():
    """Three 1 ms ProfilerStep annotations (user_annotation), each with a launch and an 800 us gemm kernel, and no
    cpu_op at all (a trace whose operators were not recorded)."""
    events = []
    for k in (1, 2, 3):
        t = (k - 1) * 1000
        events += [step(k, t, 1000), launch(t + 20, correlation=k),
                   kernel("sm90_gemm_bf16", t + 100, 800, correlation=k)]
    return events


def test_annotations_without_cpu_ops_have_unknown_flops_and_mfu(tmp_path):
    """The ops table holds the three ProfilerStep annotations but no operator: no FLOPs can be counted, so every
    step's matmul FLOPs, the rank's FLOPs per step and its MFU are unknown (NaN), not 0, and a note says why."""
    from tracekit import quality
    from tracekit.render.report import html_report

    s = _gpu_run(tmp_path, _annotated_gemms(), deviceProperties=H100)
    assert len(s.steps) == 3 and s.steps["matmul_flops"].isna().all() and s.steps["mfu_pct"].isna().all()
    assert s.steps["matmul_at_peak_us"].isna().all()
    assert math.isnan(s.ranks.loc[0, "matmul_flops_per_step"]) and math.isnan(s.ranks.loc[0, "mfu_pct"])
    assert f"rank 0: {NO_CPU_OPS}" in quality.notes(s.data_quality)
    text, page = str(s), html_report(s)
    assert NO_CPU_OPS in text and "MFU" not in repr(s) and "GFLOP/step" not in text  # no 0 shown as a number
    table = page[page.rfind("<table", 0, page.index("<th>mfu_pct</th>")):]
    table = table[:table.index("</table>")]  # the HTML report's ranks table: one row, rank 0
    heads, cells = re.findall(r"<th>(.*?)</th>", table), re.findall(r"<td>(.*?)</td>", table)
    row = dict(zip(heads[-len(cells):], cells))
    assert (row["matmul_flops_per_step"], row["mfu_pct"]) == ("unknown", "unknown")


UNUSABLE_OPS = ("CPU ops were recorded, but none had a usable duration (all dropped for no, negative or impossible "
                "durations): the operators' FLOPs cannot be counted, so FLOPs and MFU are unknown")


@pytest.mark.parametrize("dur", [-1, None])  # an unfinished op (dur -1), and one written with no dur at all
def test_operators_none_of_a_usable_duration_have_unknown_flops_and_say_why(tmp_path, dur):
    """The three annotated gemm steps with one bf16 aten::mm [512, 1024] x [1024, 256] per step whose duration is
    unusable: the reader drops all 3 (dropped_events 3), which leaves the annotations alone, so every step's FLOPs,
    the rank's FLOPs per step and MFU are unknown (NaN), not 0 and not 3 x 268,435,456. The note says the operators
    were recorded (record_shapes was on: shapes_recorded is True) but unusable, not that none was recorded."""
    from tracekit import quality

    events = _annotated_gemms()
    for k in (1, 2, 3):
        mm = cpu("aten::mm", (k - 1) * 1000 + 30, dur, **{
            "External id": k, "Input Dims": [[512, 1024], [1024, 256]], "Input type": ["c10::BFloat16"] * 2})
        events.append({key: v for key, v in mm.items() if v is not None})
    s = _gpu_run(tmp_path, events, deviceProperties=H100)
    assert s.steps["matmul_flops"].isna().all() and s.steps["mfu_pct"].isna().all()
    assert math.isnan(s.ranks.loc[0, "matmul_flops_per_step"]) and math.isnan(s.ranks.loc[0, "mfu_pct"])
    q = s.data_quality.iloc[0]
    assert (q["dropped_events"], q["shapes_recorded"], q["operators_unusable"]) == (3, True, True)
    notes = quality.notes(s.data_quality)
    assert f"rank 0: {UNUSABLE_OPS}" in notes and not any(NO_CPU_OPS in n for n in notes)
    assert UNUSABLE_OPS in str(s)


def test_one_usable_operator_keeps_flops_known_and_no_unusable_note(tmp_path):
    """The same steps with the step-1 mm usable (dur 40) and the step-2 one unfinished (dur -1): the 1 operator left
    counts 2 * 512 * 256 * 1024 = 268,435,456 FLOPs in step 1 and a known 0 in step 2, and no note says the
    operators were unusable (the dropped-events note says 1 was dropped)."""
    from tracekit import quality

    events = _annotated_gemms()
    for k, dur in ((1, 40), (2, -1)):
        events.append(cpu("aten::mm", (k - 1) * 1000 + 30, dur, **{
            "External id": k, "Input Dims": [[512, 1024], [1024, 256]], "Input type": ["c10::BFloat16"] * 2}))
    s = _gpu_run(tmp_path, events, deviceProperties=H100)
    steps = s.steps.set_index("step")
    assert steps.loc[1, "matmul_flops"] == 268_435_456 and steps.loc[2, "matmul_flops"] == 0
    q = s.data_quality.iloc[0]
    assert (q["dropped_events"], q["operators_unusable"]) == (1, False)
    assert not any(UNUSABLE_OPS in n or NO_CPU_OPS in n for n in quality.notes(s.data_quality))


@pytest.mark.parametrize("cat", ["cpu_op", "Operator"])  # today's category, and older Kineto's name for it
def test_one_mm_beside_the_annotations_counts_its_flops_by_hand(tmp_path, cat):
    """Rank 0: the same trace with one bf16 aten::mm [M, K] x [K, N] = [512, 1024] x [1024, 256] in step 1, which
    launches step 1's gemm. Its FLOPs: 2 * M * N * K = 2 * 512 * 256 * 1024 = 268,435,456. Step 2 runs no op: a
    known 0. Window (drop_last): steps 1 and 2, so FLOPs per step = 268,435,456 / 2 = 134,217,728, and MFU =
    (268,435,456 / 989.4e12 s at the H100 SXM5's dense bf16 peak = 0.2713 us) / 2000 us x 100 = 0.01357%.
    Rank 1: the annotations only, unknown (NaN), and the text report says so beside rank 0's numbers."""
    m, k, n = 512, 1024, 256
    flops = 2 * m * n * k
    assert flops == 268_435_456
    mm = cpu("aten::mm", 30, 40, cat=cat, **{"External id": 11, "Input Dims": [[m, k], [k, n]],
                                             "Input type": ["c10::BFloat16", "c10::BFloat16"]})
    events = _annotated_gemms()
    events[1] = {**events[1], "ts": 40, "args": {**events[1]["args"], "External id": 11}}  # inside the mm
    events[2] = {**events[2], "args": {**events[2]["args"], "External id": 11}}
    write_trace(tmp_path / "rank-0.json.gz", [mm, *events], rank=0, world_size=2, deviceProperties=H100)
    write_trace(tmp_path / "rank-1.json.gz", _annotated_gemms(), rank=1, world_size=2, deviceProperties=H100)
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    op = s.ops[s.ops["rank"] == 0].set_index("name").loc["aten::mm"]
    assert op["flops"] == flops and op["counted_flops"] == flops and op["device_self_us"] == 800
    steps = s.steps.set_index(["rank", "step"])
    assert steps.loc[(0, 1), "matmul_flops"] == flops and steps.loc[(0, 2), "matmul_flops"] == 0
    assert steps.loc[(0, 1), "matmul_at_peak_us"] == pytest.approx(flops / 989.4e12 * 1e6)
    ranks = s.ranks.set_index("rank")
    assert ranks.loc[0, "matmul_flops_per_step"] == flops / 2
    assert ranks.loc[0, "mfu_pct"] == pytest.approx(flops / 989.4e12 / 2000e-6 * 100)
    assert math.isnan(ranks.loc[1, "matmul_flops_per_step"]) and math.isnan(ranks.loc[1, "mfu_pct"])
    table = str(s).split("Matmul FLOPs and MFU per rank")[1].split("\n\n")[0].splitlines()
    assert table[2].split()[-3:] == ["0.134", "0.134", "0.0"]  # rank 0: 0.134 GFLOP in each 1 ms step: 0.134 TFLOPS/s
    assert table[3].split()[-3:] == ["unknown"] * 3  # rank 1


def test_a_step_without_matmul_on_an_unknown_device_has_unknown_mfu_not_0(tmp_path):
    """The same rank 0 with no deviceProperties: its peaks are unknown. Step 1's mm still counts 268,435,456 FLOPs
    and step 2 a known 0 FLOPs, but the time at peak of both steps is unknown, so both steps' MFU and the rank's are
    NaN: a step with no matmul on a device whose peak is unknown is not 0% of that peak (it was 0 before)."""
    mm = cpu("aten::mm", 30, 40, **{"External id": 11, "Input Dims": [[512, 1024], [1024, 256]],
                                    "Input type": ["c10::BFloat16", "c10::BFloat16"]})
    events = _annotated_gemms()
    events[1] = {**events[1], "ts": 40, "args": {**events[1]["args"], "External id": 11}}
    events[2] = {**events[2], "args": {**events[2]["args"], "External id": 11}}
    write_trace(tmp_path / "rank-0.json.gz", [mm, *events], rank=0, world_size=1)
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    steps = s.steps.set_index("step")
    assert steps.loc[1, "matmul_flops"] == 268_435_456 and steps.loc[2, "matmul_flops"] == 0
    assert steps["matmul_at_peak_us"].isna().all() and steps["mfu_pct"].isna().all()
    assert s.ranks.loc[0, "matmul_flops_per_step"] == 268_435_456 / 2 and math.isnan(s.ranks.loc[0, "mfu_pct"])


def test_training_is_unknown_without_operators_and_known_with_them(tmp_path):
    """ranks.training: True with a backward op, False with operators but none of backward or optimizer (forward
    only), None (unknown) when no operator was recorded at all (kernels and ProfilerStep annotations only): such a
    trace cannot tell inference from training, so it keeps the training advice."""
    mm = cpu("aten::mm", 30, 40, **{"External id": 11})
    backward = cpu("autograd::engine::evaluate_function: MmBackward0", 1100, 40)
    reducer = cpu("torch.distributed.ddp.reducer::copy_bucket_to_grad", 1200, 5)  # end of DDP's backward
    # DDP's forward runs this whenever grad is enabled (find_unused_parameters=True), evaluation loops too.
    search = cpu("torch.distributed.ddp.reducer::search_unused_parameters", 20, 5)
    for case, extra, expected in (("none", [], None), ("forward", [mm], False), ("train", [mm, backward], True),
                                  ("reducer", [mm, reducer], True), ("ddp_forward", [mm, search], False)):
        write_trace(tmp_path / case / "rank-0.json.gz", [*extra, *_annotated_gemms()], rank=0, world_size=1,
                    deviceProperties=H100)
        training = tracekit.summarize(tmp_path / case, cache=False, workers=1).ranks.loc[0, "training"]
        assert (training is None) if expected is None else (training is expected or training == expected), case


def test_profilersteps_filed_as_operators_are_not_operators(tmp_path):
    """2021-era traces file ProfilerStep#N under cat "Operator" (cpu_op): with no other op, no operator was
    recorded, so FLOPs and MFU are unknown (NaN) as for user_annotation steps, and training is unknown (found by a
    review: the step rows counted as operators and gave 0)."""
    events = []
    for k in (1, 2, 3):
        t = (k - 1) * 1000
        events += [cpu(f"ProfilerStep#{k}", t, 1000, cat="Operator"), launch(t + 20, correlation=k),
                   kernel("sm90_gemm_bf16", t + 100, 800, correlation=k)]
    s = _gpu_run(tmp_path, events, deviceProperties=H100)
    assert len(s.steps) == 3 and s.steps["matmul_flops"].isna().all() and s.steps["mfu_pct"].isna().all()
    assert math.isnan(s.ranks.loc[0, "mfu_pct"]) and s.ranks.loc[0, "training"] is None


def test_the_kernel_table_counts_by_name_whatever_the_name_column_type():
    """kernel_table groups by the name's codes: a plain (object) name column gives what a categorical one does.
    Kernels a (10 ns, 30 ns) and b (20 ns), all in the window: a has 2 calls and 0.04 us, b 1 call and 0.02 us."""
    import pandas as pd

    from tracekit.events.kernels import kernel_table

    events = pd.DataFrame({"rank": np.int32(0), "cat": ["kernel"] * 3, "name": ["a", "b", "a"], "dur_ns": [10, 20, 30],
                           "ts_ns": [0, 10, 40], "kind": pd.Categorical(["compute"] * 3), "stream": 7,
                           "pre_trace": False})
    window = pd.DataFrame({"rank": [0, 0, 0], "name": ["a", "b", "a"], "start_ns": [0, 10, 40], "end_ns": [10, 30, 70]})
    plain = kernel_table(events, window)
    assert plain.equals(kernel_table(events.assign(name=events["name"].astype("category")), window))
    assert plain[["name", "trace_calls", "calls"]].values.tolist() == [["a", 2, 2], ["b", 1, 1]]
    assert plain["total_us"].tolist() == pytest.approx([0.04, 0.02])
