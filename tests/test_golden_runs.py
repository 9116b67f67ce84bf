"""Hand values of the synthetic golden runs (``tests/golden_runs/make.py``): the golden files pin every number; these
pin the few that matter, worked out from the events written and the datasheet peaks in ``tracekit/devices.py``."""

from __future__ import annotations

import gzip

import pytest

from tests import golden_summary as golden
from tests.golden_runs import make
from tracekit import devices

RUN = {p.name: p for p in golden.runs()}
A100 = devices.match("NVIDIA A100-SXM4-80GB", 85_198_045_184)


def _summary(summaries, name):
    return summaries(RUN[name], **golden.OPTIONS)


def test_the_runs_are_what_make_writes(tmp_path, monkeypatch):
    """The committed files are the script's output, byte for byte (the script is deterministic)."""
    monkeypatch.setattr(make, "HERE", tmp_path)
    for name in make.RUNS:
        assert name in RUN
        for path in make.write(name):
            committed = RUN[name] / path.name
            assert gzip.decompress(committed.read_bytes()) == gzip.decompress(path.read_bytes())


def test_a100_rooflines_mfu_and_optimisation_by_hand(summaries):
    s = _summary(summaries, "synth-a100-gemm")
    assert A100.name == "NVIDIA A100 SXM4 80GB" and (A100.tflops["bf16"], A100.tflops["tf32"]) == (312, 156)
    ops = s.ops.set_index("name")
    # aten::mm bf16: 2 * 1024 * 4096 * 4096 = 34.36 GFLOP at 312 TFLOPS = 110.13 us per call (HBM: 50.3 MB at
    # 2,039 GB/s = 24.7 us, lower); 160 us measured -> 68.83 %.
    mm_roof_us = 2 * 1024 * 4096 * 4096 / 312e12 * 1e6
    assert ops.loc["aten::mm", "math"] == "bf16"
    assert ops.loc["aten::mm", "roofline_us"] == pytest.approx(3 * mm_roof_us)
    assert ops.loc["aten::mm", "pct_of_roofline"] == pytest.approx(mm_roof_us / 160 * 100)  # 68.83
    # aten::addmm float on a TF32 tensor-op kernel: 2 * 1024 * 4096 * 2048 = 17.18 GFLOP at 156 = 110.13 us; 250 us
    # -> 44.05 %.
    addmm_roof_us = 2 * 1024 * 4096 * 2048 / 156e12 * 1e6
    assert ops.loc["aten::addmm", "math"] == "tf32"
    assert ops.loc["aten::addmm", "pct_of_roofline"] == pytest.approx(addmm_roof_us / 250 * 100)  # 44.05
    # aten::conv2d bf16, 3x3, stride 1, padding 1: out 8x64x56x56; 2 * 8 * 56 * 56 * 64 * 64 * 9 = 1.850 GFLOP at
    # 312 = 5.93 us; 200 us -> 2.96 %.
    conv_roof_us = 2 * 8 * 56 * 56 * 64 * 64 * 9 / 312e12 * 1e6
    assert ops.loc["aten::conv2d", "pct_of_roofline"] == pytest.approx(conv_roof_us / 200 * 100)  # 2.96
    # MFU: the step's matmul time at peak (110.13 + 110.13 + 5.93 = 226.18 us) over its 850 us -> 26.61 %.
    window = s.steps[s.steps["in_window"].astype(bool)]
    at_peak_us = mm_roof_us + addmm_roof_us + conv_roof_us
    assert window["mfu_pct"].tolist() == pytest.approx([at_peak_us / 850 * 100] * 2)
    assert s.ranks["mfu_pct"].iloc[0] == pytest.approx(at_peak_us / 850 * 100)
    # The optimisation table: every kernel is on the critical path (the host waits in cudaDeviceSynchronize), so each
    # op saves its measured time less its roofline per step: conv 200 - 5.93 = 194.07, addmm 250 - 110.13 = 139.87,
    # mm 160 - 110.13 = 49.87 us, largest first.
    opt = s.optimization
    assert opt["name"].tolist() == ["aten::conv2d", "aten::addmm", "aten::mm"]
    assert opt["critical_path_us"].tolist() == [200, 250, 160]
    assert opt["predicted_saving_us"].tolist() == pytest.approx(
        [200 - conv_roof_us, 250 - addmm_roof_us, 160 - mm_roof_us])
    assert opt["predicted_step_us"].tolist() == pytest.approx(850 - opt["predicted_saving_us"])


def test_decode_graphs_engine_steps_and_capture_by_hand(summaries):
    s = _summary(summaries, "synth-h100-decode-graphs")
    q = s.data_quality.iloc[0]
    # Four step[DECODE bs=16] annotations, numbered 0-3; the window drops the last: steps 0, 1, 2.
    assert q["step_source"] == r"detected: step\[.*\]"
    assert s.steps[s.steps["in_window"].astype(bool)]["step"].tolist() == [0, 1, 2]
    # The capture in step 0: BeginCapture, EndCapture and Instantiate are 3 capture calls.
    assert (q["graph_capture_calls"], q["captured_steps"], q["held_back_findings"]) == (3, "0", "host_bound")
    r = s.ranks.iloc[0]
    # One cudaGraphLaunch per window step, each running 8 kernels of 60 us: 3 launches, 24 kernels, 1440 us.
    assert r["graph_launches"] == 3
    assert (s.kernels["calls"].sum(), r["compute_us"]) == (24, 1440)
    # Device busy [310, 790) + [1310, 1790) + [2310, 2790): span 2480, idle 1040 us.
    assert (r["span_us"], r["idle_us"]) == (2480, 1040)


def test_ep_comm_by_hand(summaries):
    s = _summary(summaries, "synth-h800-ep-2rank")
    calls = s.collectives[s.collectives["in_window"].astype(bool)]
    # Two window steps on two ranks: a dispatch and a combine each, all all_to_all of unknown size.
    assert calls["op"].astype(str).unique().tolist() == ["all_to_all"] and len(calls) == 8
    assert calls["bytes"].isna().all()
    assert s.data_quality["unsized_ep_comm"].tolist() == [6, 6]
    # Per step: comm = dispatch 300 + combine 100 (rank 1: 140); under the GEMMs [100, 500) and [550, 850): dispatch
    # 300 + combine [800, 850) 50 = 350. Exposed 50 (rank 1: 90) per step, 100 / 180 over the window.
    ranks = s.ranks.set_index("rank")
    assert ranks["comm_us"].tolist() == [800, 880] and ranks["exposed_comm_us"].tolist() == [100, 180]
    assert ranks["overlap_pct"].tolist() == pytest.approx([700 / 800 * 100, 700 / 880 * 100])  # 87.5, 79.5
    # Matched with nothing on purpose, so never reported as missing on the other rank.
    assert s.mismatches.empty
