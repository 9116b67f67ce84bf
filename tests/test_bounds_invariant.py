"""Issue 33's invariant: no number tracekit prints exceeds its physical bound. pct_of_roofline <= 100, MFU <= 100,
achieved TFLOPS/s <= the peak at the op's math key, achieved GB/s <= the bandwidth it is judged against (the host
link for host <-> device copies). Checked on every trace in ../shared/traces/hta and sample_traces (none of which
records shapes on a known device: they pass without a roofline, so the synthetic traces below carry the test), on
the synthetic golden runs (tests/golden_runs: synth-a100-gemm has rooflines and MFU), and
on synthetic A100 / MI300X traces of every dtype and op class with drawn durations and kernel names (hypothesis)."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tracekit
from tracekit import devices
from tracekit.events import bounds
from tests.tracedata import cpu, step, write_trace

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces" / "hta"
TRACES = sorted([*(p for p in SHARED.iterdir() if p.is_dir() and p.name != "LICENSE")] if SHARED.is_dir() else []) + \
    sorted(p for p in (ROOT / "sample_traces").iterdir() if p.is_dir()) + \
    sorted(p for p in (ROOT / "tests" / "golden_runs").iterdir() if p.is_dir() and p.name.startswith("synth-"))
BY_NAME = {p.name: p for p in devices.PEAKS}


def assert_within_bounds(s):
    """Every rate and share of ``s`` within the bound it is judged against."""
    peaks = {int(r): BY_NAME.get(str(d)) for r, d in zip(s.data_quality["rank"], s.data_quality["device_peaks"])}
    for table in (s.ops, s.ops_by_shape):
        assert not (table["pct_of_roofline"].astype(float) > 100).any()
        for r in table.itertuples(index=False):
            p = peaks.get(int(r.rank))
            if p is None:
                continue
            peak = devices.peak_tflops(p, r.math) if isinstance(r.math, str) and r.math != "mixed" else math.nan
            assert not r.achieved_tflops > peak * (1 + 1e-9), (r.name, r.achieved_tflops, peak)
            link = r.host_link_bytes if np.isfinite(r.host_link_bytes) else 0
            bandwidth = (p.host_link_gbps if link and link == r.bytes else
                         p.memory_gbps if not link else max(p.memory_gbps, p.host_link_gbps))
            assert not r.achieved_gbps > bandwidth * (1 + 1e-9), (r.name, r.achieved_gbps, bandwidth)
    assert not (s.optimization["pct_of_roofline"].astype(float) > 100).any()
    assert not (s.steps["mfu_pct"].astype(float) > 100).any() if "mfu_pct" in s.steps else True
    assert not (s.ranks["mfu_pct"].astype(float) > 100).any()


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_every_real_trace_is_within_its_bounds(path, summaries):
    assert_within_bounds(summaries(path))


DEVICES = {"a100": [{"name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_198_045_184, "computeMajor": 8}],
           "mi300x": [{"name": "AMD Instinct MI300X", "totalGlobalMem": 205_822_885_888, "computeMajor": 9}]}
DTYPES = ["float", "c10::BFloat16", "c10::Half", "double", "c10::Float8_e4m3fn"]
KERNELS = ["cutlass_80_tensorop_s1688gemm_256x128_32x3", "ampere_sgemm_128x64_nn", "sm80_xmma_gemm_bf16bf16_f32",
           "vectorized_elementwise_kernel", "Memcpy HtoD (Pinned -> Device)", "Memcpy DtoH (Device -> Pageable)",
           "Memcpy DtoD (Device -> Device)", "Cijk_Ailk_Bljk_SB_MT64x16x32_xf32"]
CONV_ARGS = ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
CONV_TYPES = ["", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]


def op_classes(t):
    """(op, Input Dims, Input type, Concrete Inputs) of every op class at dtype ``t``."""
    return [
        ("aten::mm", [[512, 1024], [1024, 256]], [t, t], None),
        ("aten::addmm", [[256], [512, 1024], [1024, 256], [], []], [t, t, t, "Scalar", "Scalar"], None),
        ("aten::bmm", [[8, 128, 64], [8, 64, 128]], [t, t], None),
        ("aten::linear", [[4, 128, 512], [256, 512], [256]], [t, t, t], None),
        ("aten::convolution", [[8, 16, 32, 32], [32, 16, 3, 3], [], [], [], [], [], [], []], [t, t, *CONV_TYPES],
         CONV_ARGS),
        ("aten::_scaled_dot_product_flash_attention", [[2, 8, 256, 64]] * 3, [t] * 3, None),
        ("aten::add", [[1 << 20], [1 << 20], []], [t, t, "Scalar"], None),
        ("aten::add_", [[1 << 20], [1 << 20], []], [t, t, "Scalar"], None),
        ("aten::zero_", [[1 << 20]], [t], None),
        ("aten::fill_", [[1 << 20], []], [t, "Scalar"], None),
        ("aten::copy_", [[1 << 22], [1 << 22], []], [t, t, "Scalar"], None),
        ("aten::native_layer_norm", [[64, 1024], [], [1024], [1024], []], [t, "ScalarList", t, t, "Scalar"], None),
    ]


def trace(ops, durations, kernel_names, step_us):
    """One step of ``ops``, one after another, each launching one device event of the drawn name and duration."""
    events, t = [step(1, 0, step_us)], 10
    for i, ((op, dims, types, concrete), dur, name) in enumerate(zip(ops, durations, kernel_names)):
        args = {"Input Dims": dims, "Input type": types, **({"Concrete Inputs": concrete} if concrete else {})}
        cat = "gpu_memcpy" if name.startswith("Memcpy") else "kernel"
        events += [cpu(op, t, 5, **args), cpu("cudaLaunchKernel", t + 1, 2, cat="cuda_runtime", correlation=i + 1),
                   {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": t + 3, "dur": dur,
                    "args": {"device": 0, "stream": 7, "correlation": i + 1}}]
        t += 10 + dur
    return events


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(device=st.sampled_from(sorted(DEVICES)), dtype=st.sampled_from(DTYPES), data=st.data())
def test_synthetic_traces_of_every_dtype_and_op_class_are_within_bounds(tmp_path_factory, device, dtype, data):
    ops = op_classes(dtype)
    durations = data.draw(st.lists(st.sampled_from([0.001, 0.5, 1, 3, 20, 500, 5000]), min_size=len(ops),
                                   max_size=len(ops)))
    names = data.draw(st.lists(st.sampled_from(KERNELS), min_size=len(ops), max_size=len(ops)))
    step_us = data.draw(st.sampled_from([20, 1000, 100_000]))
    path = tmp_path_factory.mktemp("syn") / "rank0.json"
    write_trace(path, trace(ops, durations, names, step_us), world_size=1, gz=False,
                deviceProperties=DEVICES[device])
    s = tracekit.summarize(path.parent, cache=False)
    assert s.ops["pct_of_roofline"].notna().any() or s.ops["beyond_bound"].any()  # the bounds were applied
    assert_within_bounds(s)


@settings(max_examples=200, deadline=None)
@given(flops=st.floats(0, 1e15), total=st.floats(0, 1e10), link_share=st.sampled_from([0.0, 0.5, 1.0]),
       measured=st.floats(1e-3, 1e7), math_key=st.sampled_from(["fp32", "tf32", "bf16", "fp8", "mixed", None]),
       entry=st.sampled_from(devices.PEAKS))
def test_rooflines_never_exceed_their_bound(flops, total, link_share, measured, math_key, entry):
    """bounds.rooflines on one drawn row: every rate it keeps is within the bound it used."""
    table = pd.DataFrame({"flops": [flops], "bytes": [total], "host_link_bytes": [total * link_share],
                          "math": [math_key]})
    out = bounds.rooflines(table, entry, np.array([measured])).iloc[0]
    assert not out["pct_of_roofline"] > 100
    peak = devices.peak_tflops(entry, math_key) if math_key not in ("mixed", None) else math.nan
    assert not out["achieved_tflops"] > peak * (1 + 1e-9)
    link = total * link_share
    if link and link == total and math.isfinite(entry.host_link_gbps):
        assert not out["achieved_gbps"] > entry.host_link_gbps * (1 + 1e-9)
    elif not link:
        assert not out["achieved_gbps"] > entry.memory_gbps * (1 + 1e-9)
    # A row it made unknown is flagged; a row it kept is the plain quotient.
    if not out["beyond_bound"] and math.isfinite(out["achieved_gbps"]):
        assert out["achieved_gbps"] == pytest.approx(total / measured / 1e3)
