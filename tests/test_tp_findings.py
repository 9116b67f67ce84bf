"""Exposed tensor-parallel communication (``exposed_tp_comm``, ``tracekit.findings.tp_findings``): tiny hand-worked
GPU runs, and tensor-parallel time kept out of the data-parallel advice of ``exposed_comm``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit.findings.comm_findings import exposed_comm
from tracekit.findings.tp_findings import critical_tp
from tracedata import cpu, kernel, launch, step, write_trace

ROOT = Path(__file__).resolve().parents[1]


def coll(name, ts, dur, corr, desc, pg, seq, stream):
    return kernel(name, ts, dur, stream=stream, correlation=corr, **{
        "Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "Float",
        "Group size": 2, "Process Group Name": pg, "Process Group Description": desc, "Seq": seq})


def tp_step(n, o, tp_us):
    """Step n from o: matmul 100..400, the tp all_reduce 400..400+tp_us on the same stream (the next matmul needs
    it), matmul until 800; a dp all_reduce 250..450 on its own stream (under the first matmul until 400); the host
    synchronizes until 805 and the next step starts at o + 1000."""
    c = 10 * n
    return [step(n, o, 1000), launch(o + 10, c + 1), launch(o + 20, c + 2), launch(o + 30, c + 3), launch(o + 40, c + 4),
            cpu("cudaDeviceSynchronize", o + 700, 105, cat="cuda_runtime"),
            kernel("ampere_sgemm_128x64_nn", o + 100, 300, correlation=c + 1),
            coll("ncclDevKernel_AllReduce_Sum_f32_RING_LL", o + 400, tp_us, c + 2, "mesh_tp", "5", n, 7),
            kernel("ampere_sgemm_128x64_nn", o + 400 + tp_us, 400 - tp_us, correlation=c + 3),
            coll("ncclDevKernel_AllReduce_Sum_f32_RING_LL", o + 250, 200, c + 4, "mesh_dp", "6", n, 21)]


def run(folder, tp_us):
    for rank in (0, 1):
        events = [e for n in (1, 2, 3) for e in tp_step(n, (n - 1) * 1000, tp_us)]
        write_trace(folder / f"rank{rank}.json", events, rank=rank)
    return tracekit.summarize(folder, cache=False, window="all_steps")


def test_exposed_tp_comm_by_hand(tmp_path):
    # Per rank and step: tp all_reduce 400..600 with no compute under it: 200 us exposed, 20% of the 1000 us step;
    # dp all_reduce 250..450, under compute until 400: 50 us exposed. tp share of the exposed communication
    # 200 / (200 + 50) = 80%.
    s = run(tmp_path, 200)
    dims = s.comm_by_dim.set_index(["rank", "dim"])["exposed_us"]
    assert dims[(0, "tp")] == 200 * 3 and dims[(0, "dp")] == 50 * 3
    (f,) = [f for f in s.findings if f.kind == "exposed_tp_comm"]
    assert f.severity == "high" and f.ranks == (0, 1)
    assert f.evidence["share"] == pytest.approx(0.20)
    assert f.evidence["tp_exposed_us_per_step"] == pytest.approx(200)
    assert f.evidence["tp_share_of_exposed_comm"] == pytest.approx(0.80)
    # Each step's path runs through the tp all_reduce: 200 us of it on the path, whatever else the path holds.
    assert f.evidence["tp_critical_path_us_per_step"] == pytest.approx(200)
    assert "20% of the step" in f.message and "80% of their exposed communication" in f.message
    assert "async tensor parallel" in f.recommendation and "sequence parallel" in f.recommendation.lower()
    assert "prefetch more" not in f.recommendation and "bucket_cap_mb" not in f.recommendation


def test_small_tp_exposure_does_not_fire(tmp_path):
    # 40 us of 1000: 4%, under the 5% bar.
    s = run(tmp_path, 40)
    assert "exposed_tp_comm" not in {f.kind for f in s.findings}


def test_critical_tp_counts_only_comm_pieces_inside_tp_calls():
    # Rank 0: a tp call 100..300 and a dp call 400..500. Path pieces: comm 150..300 (inside tp: 150 us), comm
    # 400..450 (dp: not counted), compute 300..400. Two steps, each path 1000 us: 75 us per step, 7.5% of the path.
    calls = pd.DataFrame({"rank": [0, 0], "start_us": [100.0, 400.0], "dur_us": [200.0, 100.0], "dim": ["tp", "dp"]})
    events = pd.DataFrame({"rank": [0, 0, 0], "start_us": [150.0, 400.0, 300.0], "end_us": [300.0, 450.0, 400.0],
                           "kind": ["comm", "comm", "compute"]})
    path = pd.DataFrame({"step": [1, 2], "us": [1000.0, 1000.0]})
    assert critical_tp(events, path, calls) == (75.0, 0.075)


def test_exposed_comm_gives_no_data_parallel_advice_for_tp_time():
    # Rank 0's communication: tp all_reduce 800 us, fsdp all_gather 200 us. Without the split, all_reduce would be
    # the dominant op and get its advice; the tp calls are left to exposed_tp_comm.
    ranks = pd.DataFrame({"rank": [0], "exposed_comm_us": [300.0], "span_us": [1000.0]})
    calls = pd.DataFrame({"rank": [0, 0], "op": ["all_reduce", "all_gather"], "dur_us": [800.0, 200.0],
                          "in_window": [True, True], "dim": ["tp", "fsdp"]})
    (f,) = exposed_comm(ranks, calls, pd.DataFrame(), None)
    assert f.evidence["op_shares"] == {"all_gather": 1.0}
    assert "all_gather / reduce_scatter" in f.recommendation and "async_op=True" not in f.recommendation
    assert "exposed_tp_comm" in f.message
    (only_tp,) = exposed_comm(ranks, calls.iloc[:1], pd.DataFrame(), None)
    assert "sequence parallel" in only_tp.recommendation and "Overlap communication" not in only_tp.recommendation


def test_tp_fsdp_sample_does_not_fire(summaries):
    # The bundled CPU 2-D run: its tp calls are hidden (exposed < 1% of a step on every rank).
    s = summaries(ROOT / "sample_traces" / "tp-fsdp-4rank", cache=False)
    tp = s.comm_by_dim[s.comm_by_dim["dim"] == "tp"].set_index("rank")["exposed_us"]
    assert (tp / s.ranks.set_index("rank")["step_time_us"] < 0.01).all()
    assert "exposed_tp_comm" not in {f.kind for f in s.findings}
    (f,) = [f for f in s.findings if f.kind == "exposed_comm"]
    assert set(f.evidence["op_shares"]) == {"all_gather", "all_reduce"}  # FSDP's (gloo reduces with all_reduce)
    assert "exposed_tp_comm" in f.message


def test_communication_page_shows_the_tp_finding(tmp_path, monkeypatch):
    pytest.importorskip("streamlit")
    import sys

    from streamlit.testing.v1 import AppTest
    from viewer_runs import REPO

    run(tmp_path / "runs" / "tp", 200)
    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(tmp_path / "runs")])
    at = AppTest.from_file(str(REPO / "app" / "main.py"), default_timeout=60)
    at.query_params.update({"run": "runs/tp", "page": "communication"})
    at.run()
    assert not at.exception, at.exception[0].value if at.exception else ""
    assert any("Tensor-parallel communication not hidden" in e.value for e in at.error)  # high: a red box
