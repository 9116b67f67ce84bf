"""Metric functions on tiny hand-built traces whose answers are computed by hand."""

import math

import numpy as np
import pytest

import tracekit
from tracedata import cpu, kernel, launch, memcpy, step, write_trace

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _two_step_gpu_trace(tmp_path):
    # Step 1 [0, 100), step 2 [100, 200), step 3 [200, 250) (dropped by default).
    # Device, step 1:  compute [10, 40) on stream 7, comm [30, 60) on stream 20, memcpy [70, 80).
    # Device, step 2:  compute [110, 150), comm [150, 170) fully exposed.
    # Step 3: compute [210, 240).
    events = [
        step(1, 0, 100), step(2, 100, 100), step(3, 200, 50),
        launch(5, 1), kernel("gemm", 10, 30, correlation=1),
        launch(6, 2), kernel(NCCL, 30, 30, stream=20, correlation=2),
        launch(7, 3), {**memcpy(70, 10), "args": {"device": 0, "stream": 7, "correlation": 3}},
        launch(105, 4), kernel("gemm", 110, 40, correlation=4),
        launch(106, 5), kernel(NCCL, 150, 20, stream=20, correlation=5),
        launch(205, 6), kernel("gemm", 210, 30, correlation=6),
    ]
    return write_trace(tmp_path / "rank0.json.gz", events)


def test_rank_breakdown_by_hand(tmp_path):
    s = tracekit.summarize(_two_step_gpu_trace(tmp_path))
    r = s.ranks.iloc[0]
    # Window = steps 1 and 2: device events from 10 to 170.
    assert r["span_us"] == 160
    assert r["compute_us"] == 30 + 40
    assert r["comm_us"] == 30 + 20
    assert r["overlap_us"] == 10          # [30, 40)
    assert r["exposed_comm_us"] == 40     # [40, 60) + [150, 170)
    assert r["memory_us"] == 10
    assert r["busy_us"] == 50 + 10 + 60   # [10, 60) + [70, 80) + [110, 170)
    assert r["idle_us"] == 160 - 120
    assert r["overlap_pct"] == pytest.approx(10 / 50 * 100)
    assert r["idle_pct"] == pytest.approx(40 / 160 * 100)
    assert r["steps"] == 2 and r["step_time_us"] == 100


def test_gaps_are_the_idle_intervals(tmp_path):
    s = tracekit.summarize(_two_step_gpu_trace(tmp_path))
    origin = 0  # the earliest event is ProfilerStep#1 at ts 0
    gaps = s.gaps
    assert list(zip(gaps["start_us"] - origin, gaps["dur_us"])) == [(60, 10), (80, 30)]
    assert gaps["dur_us"].sum() == s.ranks.iloc[0]["idle_us"]


def test_step_breakdown_follows_the_plugin(tmp_path):
    s = tracekit.summarize(_two_step_gpu_trace(tmp_path))
    st = s.steps.set_index("step")
    # Step 1: comp 30, comm 30, overlap 10 -> computation 20, communication 20, other 100 - 30 - 30 + 10 = 50.
    assert st.loc[1, ["step_us", "compute_us", "overlap_us", "exposed_comm_us", "other_us"]].tolist() == [100, 20, 10, 20, 50]
    # Step 2: comp 40, comm 20, no overlap; other 40.
    assert st.loc[2, ["step_us", "compute_us", "overlap_us", "exposed_comm_us", "other_us"]].tolist() == [100, 40, 0, 20, 40]
    assert st.loc[3, "step_us"] == 50 and not st.loc[3, "in_window"]


def test_window_options(tmp_path):
    path = _two_step_gpu_trace(tmp_path)
    every = tracekit.summarize(path, window="all_steps").ranks.iloc[0]
    assert every["span_us"] == 230 and every["compute_us"] == 100 and every["steps"] == 3
    whole = tracekit.summarize(path, window="trace").ranks.iloc[0]
    assert whole["span_us"] == 230
    with pytest.raises(ValueError):
        tracekit.summarize(path, window="bogus")


def test_no_comm_gives_nan_overlap(tmp_path):
    path = write_trace(tmp_path / "rank0.json", [kernel("gemm", 0, 10), kernel("gemm", 20, 10)], gz=False)
    r = tracekit.summarize(path).ranks.iloc[0]
    assert math.isnan(r["overlap_pct"]) and r["comm_us"] == 0 and r["idle_us"] == 10


def test_allreduce_totals_and_busbw(tmp_path):
    # 1,000,000 float elements = 4 MB in 100 us on 4 ranks: algbw 40 GB/s, busbw 40 * 2 * 3 / 4 = 60 GB/s.
    args = {"Collective name": "allreduce", "In msg nelems": 1_000_000, "Out msg nelems": 1_000_000,
            "dtype": "Float", "Group size": 4, "Process Group Name": "0"}
    events = [step(1, 0, 1000), step(2, 1000, 10), kernel(NCCL, 100, 100, **args), kernel(NCCL, 400, 100, **args)]
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json", events, world_size=4))
    c = s.collectives
    assert c["op"].tolist() == ["all_reduce", "all_reduce"]
    assert c["bytes"].tolist() == [4e6, 4e6]
    assert c["algbw_gbps"].tolist() == pytest.approx([40, 40])
    assert c["busbw_gbps"].tolist() == pytest.approx([60, 60])
    r = s.ranks.iloc[0]
    assert (r["allreduce_count"], r["allreduce_us"], r["allreduce_bytes"]) == (2, 200, 8e6)


def test_unknown_sizes_stay_unknown(tmp_path):
    events = [step(1, 0, 1000), step(2, 1000, 10), kernel(NCCL, 100, 100)]
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json", events))
    assert np.isnan(s.collectives["bytes"]).all() and np.isnan(s.collectives["busbw_gbps"]).all()
    assert np.isnan(s.ranks.iloc[0]["allreduce_bytes"])
    assert "unknown" in str(s)


def test_cpu_gloo_rank(tmp_path):
    # Training thread 1: ops [0, 40) and [70, 90); gloo thread 9: all_reduce [30, 80) of 100 floats.
    events = [
        step(1, 0, 100), step(2, 100, 10),
        cpu("aten::mm", 0, 40), cpu("aten::add_", 70, 20),
        cpu("gloo:all_reduce", 30, 50, cat="user_annotation", tid=9, **{"Input Dims": [[100]], "Input type": ["float"]}),
    ]
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json", events, backend="gloo"))
    r = s.ranks.iloc[0]
    assert r["device"] == "cpu"
    assert (r["span_us"], r["compute_us"], r["comm_us"], r["overlap_us"], r["idle_us"]) == (90, 60, 50, 20, 0)
    assert s.collectives["bytes"].tolist() == [400]
