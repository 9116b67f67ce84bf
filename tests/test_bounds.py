"""Issue 33, class 3: every rate judged against the bound that really holds it (TF32 peak for float GEMMs on tensor
cores, the host link for host <-> device copies, one buffer for write-only in-place ops), and none printed above
its bound. Hand-worked inline traces on an A100 SXM4 80GB (fp32 19.5, tf32 156 TFLOPS; 2,039 GB/s; PCIe Gen4 x16,
64 GB/s both ways: 32 GB/s one way)."""

import math

import numpy as np
import pytest

import tracekit
from tracekit import devices, quality
from tracekit.summary.text import text_report
from tests.tracedata import cpu, kernel, step, write_trace

A100 = [{"name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_198_045_184, "computeMajor": 8}]
F = "float"


def runtime(name, ts, corr, dur=2):
    return cpu(name, ts, dur, cat="cuda_runtime", correlation=corr)


def device_event(cat, name, ts, dur, corr):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr}}


def one_op(op, dims, types, kernels, ts=0, op_dur=50):
    """An op at ``ts`` that launches ``kernels`` [(cat, name, dur)] one after another from ``ts + 100``."""
    events, t = [cpu(op, ts + 10, op_dur, **{"Input Dims": dims, "Input type": types})], ts + 100
    for i, (cat, name, dur) in enumerate(kernels):
        corr = ts + i + 1
        events += [runtime("cudaMemcpyAsync" if cat == "gpu_memcpy" else "cudaLaunchKernel", ts + 11 + i, corr),
                   device_event(cat, name, t, dur, corr)]
        t += dur + 10
    return events


def summary(tmp_path, events, name="r", step_us=5000):
    steps = [step(1, 0, step_us)]
    write_trace(tmp_path / name / "rank0.json", steps + events, world_size=1, gz=False, deviceProperties=A100)
    return tracekit.summarize(tmp_path / name, cache=False)


def row(s, name):
    rows = s.ops[s.ops["name"] == name]
    assert len(rows) == 1
    return rows.iloc[0]


MM = [[2048, 2048], [2048, 2048]]  # 2 * 2048^3 = 17.18e9 FLOPs; 3 * 2048^2 * 4 = 50.3e6 bytes
MM_FLOPS = 2 * 2048**3


def test_float_gemm_on_tensor_cores_is_judged_at_tf32(tmp_path):
    """The kernel's name says TF32: the roof is 17.18e9 / 156e12 = 110.1 us; 200 us measured -> 55.1 %. At the FP32
    peak it would be 881 us, 440 % of the measured time (the issue's 155 % class)."""
    s = summary(tmp_path, one_op("aten::mm", MM, [F, F], [("kernel", "cutlass_80_tensorop_s1688gemm_256x128_32x3", 200)]))
    mm = row(s, "aten::mm")
    assert mm["dtype"] == F and mm["math"] == "tf32"
    assert mm["roofline_us"] == pytest.approx(MM_FLOPS / 156e12 * 1e6)
    assert mm["pct_of_roofline"] == pytest.approx(MM_FLOPS / 156e12 * 1e6 / 200 * 100)  # 55.07
    assert mm["achieved_tflops"] == pytest.approx(MM_FLOPS / 200e-6 / 1e12)  # 85.9 <= 156
    # MFU: the step's FLOPs at the TF32 peak over the device step; the one kernel is all of it.
    assert s.steps["mfu_pct"].iloc[0] <= 100


@pytest.mark.parametrize("name", ["sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16",
                                  "cutlass3x_sm90_tensorop_s64x128x8tf32gemm_f32_f32"])
def test_other_tf32_kernel_names(tmp_path, name):
    assert row(summary(tmp_path, one_op("aten::mm", MM, [F, F], [("kernel", name, 200)])), "aten::mm")["math"] == "tf32"


def test_float_gemm_on_simt_beyond_fp32_peak_is_unknown_with_a_note(tmp_path):
    """ampere_sgemm is FP32 without tensor cores: its roof is 881 us at 19.5 TFLOPS. 200 us measured beats it: the
    FP32 assumption is wrong, so roofline, pct and achieved TFLOPS/s are unknown, and a data-quality note says so."""
    s = summary(tmp_path, one_op("aten::mm", MM, [F, F], [("kernel", "ampere_sgemm_128x64_nn", 200)]), step_us=400)
    mm = row(s, "aten::mm")
    assert mm["math"] == "fp32" and bool(mm["beyond_bound"])
    assert math.isnan(mm["pct_of_roofline"]) and math.isnan(mm["roofline_us"]) and math.isnan(mm["achieved_tflops"])
    # The bytes' rate is within the memory bound (50.3e6 B / 200 us = 252 GB/s <= 2,039): kept.
    assert mm["achieved_gbps"] == pytest.approx(3 * 2048**2 * 4 / 200e-6 / 1e9)
    assert int(s.data_quality["ops_beyond_bound"].iloc[0]) == 1
    assert any("faster than the bound" in n for n in quality.notes(s.data_quality))
    assert math.isnan(s.steps["mfu_pct"].iloc[0])  # 881 us at peak in a 400 us device step: above 100, unknown
    assert "unknown" in text_report(s).split("Matmul FLOPs and MFU")[1].splitlines()[2]  # TFLOPS/s and MFU


def test_host_to_device_copy_is_judged_against_the_host_link(tmp_path):
    """aten::copy_ of 8e6 floats from host (pinned) to device: one buffer, 32e6 bytes, crosses PCIe Gen4 x16 at
    32 GB/s one way: roof 1,000 us; 2,000 us measured -> 50 %, 16 GB/s. Against HBM (old) it read 96e6 bytes at
    2,039 GB/s: 47 us, 2.4 % of its 'roofline', with torch.compile as the advice."""
    n = 8_000_000
    s = summary(tmp_path, one_op("aten::copy_", [[n], [n], []], [F, F, "Scalar"],
                                 [("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 2000)]))
    cp = row(s, "aten::copy_")
    assert cp["bytes"] == 4 * n and cp["host_link_bytes"] == 4 * n
    assert cp["roofline_us"] == pytest.approx(4 * n / 32e9 * 1e6)
    assert cp["pct_of_roofline"] == pytest.approx(50.0)
    assert cp["achieved_gbps"] == pytest.approx(16.0)
    assert cp["achieved_gbps"] <= devices.match("NVIDIA A100-SXM4-80GB").host_link_gbps


def test_device_to_device_copy_stays_on_memory_bandwidth(tmp_path):
    """A DtoD copy_ reads src and writes self: 2 x 4e6 bytes at 2,039 GB/s = 3.92 us; 8 us measured -> 49.0 %."""
    n = 1_000_000
    s = summary(tmp_path, one_op("aten::copy_", [[n], [n], []], [F, F, "Scalar"],
                                 [("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 8)]))
    cp = row(s, "aten::copy_")
    assert cp["bytes"] == 8 * n and cp["host_link_bytes"] == 0
    assert cp["pct_of_roofline"] == pytest.approx(8 * n / 2039e9 * 1e6 / 8 * 100)


def test_write_only_in_place_op_is_one_buffer(tmp_path):
    """aten::zero_ of 1e6 floats writes 4e6 bytes once: roof 1.96 us; 3 us measured -> 65.4 %. Counted as read +
    written (old: 8e6 bytes) it was 130.8 %."""
    n = 1_000_000
    s = summary(tmp_path, one_op("aten::zero_", [[n]], [F], [("kernel", "vectorized_elementwise_kernel", 3)]))
    z = row(s, "aten::zero_")
    assert z["bytes"] == 4 * n
    assert z["pct_of_roofline"] == pytest.approx(4 * n / 2039e9 * 1e6 / 3 * 100)


def test_copy_advice_is_pinned_memory_not_a_faster_kernel(tmp_path):
    """A step spent mostly in a slow pageable host copy (32e6 bytes in 4,000 us: 25 % of the link's roof): the
    roofline finding's advice is the link's (pinned memory, fewer copies, overlap), never torch.compile."""
    n = 8_000_000
    events = one_op("aten::copy_", [[n], [n], []], [F, F, "Scalar"],
                    [("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 4000)], op_dur=30)
    # The host waits for the copy (a synchronize up to its end): the copy is on the step's critical path.
    s = summary(tmp_path, events + [cpu("cudaDeviceSynchronize", 50, 4060, cat="cuda_runtime")], step_us=4200)
    found = [f for f in s.findings if f.kind == "roofline_gap"]
    assert len(found) == 1
    assert "pinned" in found[0].recommendation and "torch.compile" not in found[0].recommendation
    assert bool(s.optimization["host_copy"].iloc[0])


def test_mfu_without_any_compute_is_unknown_not_zero(tmp_path):
    """A step of copies only: MFU n/a (NaN), as on a CPU rank, not 0.0 %."""
    n = 1_000_000
    s = summary(tmp_path, one_op("aten::copy_", [[n], [n], []], [F, F, "Scalar"],
                                 [("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 500)]))
    assert s.steps["matmul_flops"].iloc[0] == 0
    assert math.isnan(s.steps["mfu_pct"].iloc[0]) and math.isnan(s.ranks["mfu_pct"].iloc[0])
