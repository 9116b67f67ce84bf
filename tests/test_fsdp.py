"""FSDP per unit (tracekit.events.fsdp), its findings and the FSDP page, on tiny hand-made traces whose numbers are worked
out here, event by event."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
from tests.tracedata import cpu, kernel, launch, write_trace
from tracekit.events import fsdp_hooks
from tracekit.nesting import innermost
from tracekit.findings import fsdp_findings

ROOT = Path(__file__).resolve().parents[1]
from tracekit.schema import FSDP_COLUMNS
from frame_equal import assert_frame_equal, labels_as_objects

GLOO = 9  # gloo's worker thread; the training thread is 1
NCCL_ARGS = {"Collective name": "_allgather_base", "dtype": "Float", "In msg nelems": 50, "Out msg nelems": 100,
             "Group size": 2, "Process Group Name": "0"}


def ann(name, ts, dur, tid=1):
    return cpu(name, ts, dur, cat="user_annotation", tid=tid)


def c10d(name, ts, dims):
    return cpu(name, ts, 1, **{"Input Dims": dims, "Input type": ["float"] * len(dims)})


def gloo(name, ts, dur, n):
    return cpu(name, ts, dur, cat="user_annotation", tid=GLOO, **{"Input Dims": [[n]], "Input type": ["float"]})


def dist_info():
    return {"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 2,
                                "pg_config": [{"pg_name": "0", "pg_size": 2, "ranks": [0, 1]}]}}


def fsdp2_cpu_events():
    """One step of a 3-unit FSDP2 model on a gloo rank: root (100-element shard), blocks.0 and blocks.1 (50 each).
    Forward: root and blocks.0 gather on demand, blocks.1 is prefetched under blocks.0's compute. Backward: the root
    stays unsharded; blocks.1 gathers on demand inside an autograd op (which waits, not computes); blocks.0 is
    prefetched under blocks.1's compute; each unit reduces its gradients with a gloo all-reduce."""
    ag, rs = "c10d::_allgather_base_", "c10d::_reduce_scatter_base_"
    return [
        cpu("ProfilerStep#1", 0, 600, cat="user_annotation"),
        # forward: the root
        ann("FSDP::pre_forward", 10, 50), ann("FSDP::all_gather", 12, 8), cpu("fsdp::all_gather_copy_in", 12, 2),
        c10d(ag, 14, [[200], [100]]), gloo("gloo:all_gather", 16, 34, 100),
        cpu("aten::embedding", 60, 40),
        # blocks.0: on demand; its copy-out computes 3 us
        ann("FSDP::pre_forward (blocks.0)", 100, 45), ann("FSDP::all_gather (blocks.0)", 101, 4),
        c10d(ag, 102, [[100], [50]]), gloo("gloo:all_gather", 103, 37, 50),
        ann("FSDP::all_gather_copy_out (blocks.0)", 140, 5), cpu("fsdp::split_with_sizes_copy", 141, 3),
        ann("FSDP::forward_prefetch for blocks.1", 146, 4), ann("FSDP::all_gather (blocks.1)", 147, 2),
        c10d(ag, 148, [[100], [50]]), gloo("gloo:all_gather", 150, 30, 50),
        cpu("aten::linear", 150, 50), ann("FSDP::post_forward (blocks.0)", 200, 2),
        ann("FSDP::pre_forward (blocks.1)", 205, 2), cpu("aten::linear", 207, 30),
        ann("FSDP::post_forward (blocks.1)", 240, 2),
        cpu("aten::linear", 242, 20), ann("FSDP::post_forward", 262, 2),
        # backward
        ann("FSDP::pre_backward", 290, 5),
        cpu("autograd::engine::evaluate_function: AddBackward0", 300, 120),
        ann("FSDP::pre_backward (blocks.1)", 302, 48), ann("FSDP::all_gather (blocks.1)", 303, 3),
        c10d(ag, 304, [[100], [50]]), gloo("gloo:all_gather", 305, 40, 50),
        ann("FSDP::backward_prefetch for blocks.0", 352, 4), ann("FSDP::all_gather (blocks.0)", 353, 2),
        c10d(ag, 353, [[100], [50]]), gloo("gloo:all_gather", 356, 20, 50), cpu("aten::mm", 356, 44),
        ann("FSDP::post_backward_reshard (blocks.1)", 405, 2), ann("FSDP::post_backward_reduce (blocks.1)", 407, 8),
        c10d(rs, 408, [[50], [100]]), gloo("gloo:all_reduce", 409, 31, 100),
        ann("FSDP::pre_backward (blocks.0)", 420, 2), cpu("aten::mm", 422, 48),
        ann("FSDP::post_backward_reduce (blocks.0)", 472, 8),
        c10d(rs, 473, [[50], [100]]), gloo("gloo:all_reduce", 474, 26, 100),
        cpu("aten::embedding_backward", 490, 25),
        ann("FSDP::post_backward_reduce", 520, 5), c10d(rs, 521, [[100], [200]]), gloo("gloo:all_reduce", 522, 28, 200),
        cpu("aten::add_", 530, 8),
    ]


# unit, phase, compute, gathers, all-gather, exposed, bytes, wait, verdict, reduce, exposed, bytes (us and bytes)
EXPECTED = [
    ("(root)", "forward", 62, 1, 34, 34, 800, 38, "on_demand", 0, 0, 0),  # compute 2 + 40 + 20; wait 40 - copy-in 2
    ("blocks.0", "forward", 53, 1, 37, 37, 400, 40, "on_demand", 0, 0, 0),  # 3 (copy-out) + 50
    ("blocks.1", "forward", 30, 1, 30, 0, 400, 0, "prefetched", 0, 0, 0),  # gathered under blocks.0's linear
    ("(root)", "backward", 25, 0, 0, 0, 0, 0, "no_gather", 28, 20, 800),  # reduce 522-550 under add_ 530-538
    ("blocks.1", "backward", 44, 1, 40, 40, 400, 43, "on_demand", 31, 13, 400),  # reduce 409-440, mm from 422
    ("blocks.0", "backward", 48, 1, 20, 0, 400, 0, "prefetched", 26, 16, 400),  # reduce 474-500, 490-500 computing
]


@pytest.fixture
def fsdp2_run(tmp_path) -> Path:
    return write_trace(tmp_path / "run" / "rank0.json.gz", fsdp2_cpu_events(), rank=None, **dist_info()).parent


def test_each_unit_and_phase_gets_its_gathers_waits_and_reductions(fsdp2_run, tmp_path):
    s = tracekit.summarize(fsdp2_run, window="all_steps", cache=False, workers=1)
    f = s.fsdp
    assert list(f.columns) == list(FSDP_COLUMNS)
    got = list(zip(f["unit"], f["phase"].astype(str), f["compute_us"], f["gathers"], f["allgather_us"],
                   f["allgather_exposed_us"], f["allgather_bytes"], f["wait_us"], f["prefetch"].astype(str),
                   f["reduce_us"], f["reduce_exposed_us"], f["reduce_bytes"]))
    assert [g[:2] for g in got] == [e[:2] for e in EXPECTED]
    for row, want in zip(got, EXPECTED):
        assert row[2:8] == pytest.approx(want[2:8]), row
        assert row[8] == want[8], row
        assert row[9:] == pytest.approx(want[9:]), row
    assert f["order"].tolist() == [0, 1, 2, 0, 1, 2]
    assert (f["step"] == 1).all() and f["in_window"].all() and (f["api"] == "fsdp2").all()
    assert f["start_us"].tolist() == pytest.approx([10, 100, 205, 290, 302, 420])  # the run starts at 0


def test_per_rank_totals_are_shares_of_the_step(fsdp2_run):
    totals = tracekit.summarize(fsdp2_run, window="all_steps", cache=False, workers=1).fsdp_totals()
    row = totals.iloc[0]
    assert row["allgather_exposed_us"] == pytest.approx(34 + 37 + 40)
    assert row["reduce_exposed_us"] == pytest.approx(20 + 13 + 16)
    assert row["allgather_exposed_pct"] == pytest.approx(111 / 600 * 100)  # the step runs 0-600
    assert row["reduce_exposed_pct"] == pytest.approx(49 / 600 * 100)


def test_the_fsdp_table_survives_the_cache(fsdp2_run, tmp_path):
    cold = tracekit.summarize(fsdp2_run, window="all_steps", cache_dir=tmp_path / "cache", workers=1).fsdp
    warm = tracekit.summarize(fsdp2_run, window="all_steps", cache_dir=tmp_path / "cache", workers=1).fsdp
    assert any((tmp_path / "cache").glob("??/*/fsdp.arrow"))
    assert_frame_equal(cold, warm)


def test_on_demand_gathers_give_the_prefetch_remedy(fsdp2_run):
    s = tracekit.summarize(fsdp2_run, window="all_steps", cache=False, workers=1)
    found = {f.kind: f for f in s.findings}
    f = found["fsdp_exposed_allgather"]
    # the units wait (wait_us) 38 + 40 + 43 = 121 us for their gathers: 121 / 600 = 20.2%, over 20%
    assert f.severity == "high"
    assert f.evidence["share"] == pytest.approx(121 / 600)
    # blocks.0's forward gather came on demand after the root's: prefetching could have hidden it (its unit waited
    # 40 us, 37 us of gather exposed); the root, first in forward, and blocks.1, first to gather in backward, had
    # nothing before them.
    assert f.evidence["late_on_demand_wait_us"] == pytest.approx(40)
    assert f.evidence["late_on_demand_exposed_us"] == pytest.approx(37)
    assert f.evidence["prefetch_remedy"] and "set_modules_to_forward_prefetch" in f.recommendation
    assert f.evidence["backward_share"] == pytest.approx(43 / 121)  # over 30%: keep the last blocks unsharded
    assert "reshard_after_forward=False" in f.recommendation
    assert "fsdp_fp32_allgather" in found  # float gathers while units wait 20.2% of the step
    # the last unit of backward (blocks.0) leaves 16 us of its reduction exposed: 2.7% of the step, under 5% ...
    assert "fsdp_exposed_reduce" not in found
    # ... and 60 us would be 10%: the finding names the unit
    last = s.fsdp.assign(reduce_exposed_us=s.fsdp["reduce_exposed_us"].where(s.fsdp.index != 5, 60.0))
    reduce = {f.kind: f for f in fsdp_findings.find(last, s.steps)}["fsdp_exposed_reduce"]
    assert reduce.evidence["share"] == pytest.approx(0.1) and reduce.evidence["units"] == ["blocks.0"]
    # a DDP-shaped run has none of these
    assert not fsdp_findings.find(s.fsdp.iloc[0:0], s.steps)


def test_prefetched_gathers_do_not_ask_for_prefetching():
    rows = pd.DataFrame({"rank": 0, "step": 1, "phase": ["forward"] * 3 + ["backward"] * 3,
                         "order": [0, 1, 2, 0, 1, 2], "gathers": [1, 1, 1, 0, 1, 1],
                         "prefetch": ["on_demand", "prefetched", "on_demand", "no_gather", "on_demand", "prefetched"]})
    # forward: unit 2 came on demand after unit 0's gather; backward: unit 1 is the first to gather, so it is not late
    assert fsdp_findings.late_on_demand(rows).tolist() == [False, False, True, False, False, False]


def test_innermost_span_of_nested_annotations():
    # thread a: [0,100) holds [10,50) which holds [20,30); [60,70) inside [0,100) again. thread b: [0,5).
    tid = ["a", "a", "a", "a", "b"]
    start, end = [0, 10, 20, 60, 0], [100, 50, 30, 70, 5]
    points = innermost(["a", "a", "a", "a", "a", "b", "b"], [5, 25, 40, 55, 65, 3, 7], tid, start, end)
    assert points.tolist() == [0, 2, 1, 0, 3, 4, -1]


def test_fsdp1_units_are_named_by_order_and_paired_in_reverse(tmp_path):
    p = "FullyShardedDataParallel."
    events = [
        cpu("ProfilerStep#1", 0, 400, cat="user_annotation"),
        ann(p + "_pre_forward", 10, 10), c10d("c10d::_allgather_base_", 12, [[200], [100]]),
        gloo("gloo:all_gather", 13, 17, 100), cpu("aten::linear", 30, 30), ann(p + "_post_forward", 60, 2),
        ann(p + "_pre_forward", 62, 8), c10d("c10d::_allgather_base_", 63, [[200], [100]]),
        gloo("gloo:all_gather", 64, 26, 100), cpu("aten::linear", 90, 10), ann(p + "_post_forward", 100, 2),
        ann(p + "_pre_backward_hook", 200, 10), ann(p + "_pre_backward_prefetch", 205, 4),
        c10d("c10d::_allgather_base_", 206, [[200], [100]]), gloo("gloo:all_gather", 207, 23, 100),
        cpu("aten::mm", 210, 50),
        ann(p + "_post_backward_hook", 260, 10), c10d("c10d::_reduce_scatter_base_", 261, [[100], [200]]),
        gloo("gloo:all_reduce", 262, 18, 200),
        ann(p + "_pre_backward_hook", 280, 5), cpu("aten::mm", 285, 35),
        ann(p + "_post_backward_hook", 320, 10), c10d("c10d::_reduce_scatter_base_", 321, [[100], [200]]),
        gloo("gloo:all_reduce", 322, 18, 200),
    ]
    run = write_trace(tmp_path / "r" / "rank0.json.gz", events, rank=None, **dist_info()).parent
    f = tracekit.summarize(run, window="all_steps", cache=False, workers=1).fsdp
    assert (f["api"] == "fsdp1").all()
    assert list(zip(f["unit"], f["phase"].astype(str))) == [("#0", "forward"), ("#1", "forward"),
                                                           ("#1", "backward"), ("#0", "backward")]
    assert f["allgather_us"].tolist() == pytest.approx([17, 26, 0, 23])
    assert f["prefetch"].astype(str).tolist() == ["on_demand", "on_demand", "no_gather", "prefetched"]
    assert f["compute_us"].tolist() == pytest.approx([30, 10, 50, 35])
    assert f["reduce_us"].tolist() == pytest.approx([0, 0, 18, 18])
    assert f["reduce_bytes"].tolist() == pytest.approx([0, 0, 800, 800])
    assert f["allgather_bytes"].tolist() == pytest.approx([800, 800, 0, 800])


def test_gpu_gathers_are_tied_by_their_launch(tmp_path):
    """A GPU rank: the NCCL kernel belongs to the FSDP annotation around its launch; compute kernels to the unit
    whose window launched them; the wait runs from the end of the compute launched before the pre-hook."""
    events = [
        cpu("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        ann("FSDP::pre_forward (blocks.0)", 10, 20), ann("FSDP::all_gather (blocks.0)", 12, 6),
        launch(14, 1), ann("FSDP::post_forward (blocks.0)", 40, 2), launch(32, 2),
        ann("FSDP::pre_forward (blocks.1)", 50, 10), ann("FSDP::all_gather (blocks.1)", 52, 4), launch(53, 3),
        launch(61, 4), ann("FSDP::post_forward (blocks.1)", 70, 2),
        # device: gathers on stream 20, compute on stream 7 (runs later than the host, as GPUs do)
        kernel("ncclDevKernel_AllGather_RING_LL", 100, 50, stream=20, correlation=1, **NCCL_ARGS),
        kernel("gemm_blocks0", 150, 40, correlation=2),
        kernel("ncclDevKernel_AllGather_RING_LL", 160, 60, stream=20, correlation=3, **NCCL_ARGS),
        kernel("gemm_blocks1", 220, 30, correlation=4),
    ]
    run = write_trace(tmp_path / "g" / "rank0.json.gz", events, rank=None,
                      distributedInfo={"backend": "nccl", "rank": 0, "world_size": 2}).parent
    f = tracekit.summarize(run, window="all_steps", cache=False, workers=1).fsdp
    assert f["unit"].tolist() == ["blocks.0", "blocks.1"]
    assert f["allgather_us"].tolist() == pytest.approx([50, 60])
    assert f["allgather_exposed_us"].tolist() == pytest.approx([50, 30])  # 160-190 under gemm_blocks0
    assert f["compute_us"].tolist() == pytest.approx([40, 30])
    # blocks.1 could start when gemm_blocks0 (launched before its pre-hook) ended at 190; its gather ended at 220
    assert f["wait_us"].tolist() == pytest.approx([140, 30])  # blocks.0: nothing computed from its pre-hook at 10
    assert f["prefetch"].astype(str).tolist() == ["on_demand", "on_demand"]
    assert f["allgather_bytes"].tolist() == pytest.approx([400, 400])  # 100 float32 out


def test_a_ddp_run_has_an_empty_fsdp_table(summaries):
    s = summaries("sample_traces/gpt-gloo-2rank", cache=False, workers=1)
    assert s.fsdp.empty and list(s.fsdp.columns) == list(FSDP_COLUMNS)
    assert s.fsdp_totals().empty
    assert not [f for f in s.findings if f.kind.startswith("fsdp_")]
    assert "fsdp" in s.to_dict()


# ------------------------------------------------------------------------------------------------ the FSDP page

REPO = Path(__file__).resolve().parents[1]
FSDP_RUN, DDP_RUN = "sample_traces/fsdp-gloo-2rank", "sample_traces/gpt-gloo-2rank"


def open_page(monkeypatch, run: str, rank: int = 0):
    streamlit_testing = pytest.importorskip("streamlit.testing.v1")
    monkeypatch.setattr("sys.argv", ["main.py", "--root", str(REPO / "sample_traces")])
    at = streamlit_testing.AppTest.from_file(str(REPO / "app" / "main.py"), default_timeout=120)
    at.query_params.update({"run": run, "page": "fsdp", "rank": str(rank)})
    return at.run()


def test_the_fsdp_page_shows_each_unit_and_the_findings(monkeypatch, summaries):
    import json

    from app import fmt

    at = open_page(monkeypatch, FSDP_RUN, rank=1)
    assert not at.exception, at.exception[0].value if at.exception else ""
    assert at.title[0].value == "FSDP" and at.session_state["tracekit.has_fsdp"]
    s = summaries(REPO / FSDP_RUN, cache=False)
    f = s.fsdp[s.fsdp["in_window"] & (s.fsdp["rank"] == 1)]
    # per unit and phase, the mean over the window's steps, worked out here from summary.fsdp
    shown = at.dataframe[0].value
    assert list(zip(shown["phase"], shown["unit"])) == [("forward", "(root)"), ("forward", "blocks.0"),
                                                        ("forward", "blocks.1"), ("backward", "(root)"),
                                                        ("backward", "blocks.1"), ("backward", "blocks.0")]
    for (phase, unit), want in f.groupby([f["phase"].astype(str), "unit"]):
        row = shown[(shown["phase"] == phase) & (shown["unit"] == unit)].iloc[0]
        assert row["allgather_exposed_ms"] == pytest.approx(want["allgather_exposed_us"].mean() / 1e3)
        assert row["compute_ms"] == pytest.approx(want["compute_us"].mean() / 1e3)
        verdicts = set(want["prefetch"].astype(str))
        assert row["prefetch"] == ("mixed" if verdicts >= {"prefetched", "on_demand"} else
                                   "prefetched" if "prefetched" in verdicts else
                                   "on demand" if "on_demand" in verdicts else "no gather")
    # the forward chart: one group of bars per unit, in ms
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    forward = {t["name"]: t for t in charts[0]["data"]}
    assert set(forward) == {"compute", "all-gather", "exposed all-gather"}
    fwd = f[f["phase"] == "forward"].groupby("unit", sort=False)["allgather_us"].mean() / 1e3
    assert list(forward["all-gather"]["x"]) == list(fwd.index)
    y = forward["all-gather"]["y"]
    if isinstance(y, dict):  # plotly's typed array
        import base64

        import numpy as np

        y = np.frombuffer(base64.b64decode(y["bdata"]), dtype=y["dtype"]).tolist()
    assert y == pytest.approx(fwd.tolist())
    assert_frame_equal(labels_as_objects(at.dataframe[1].value), labels_as_objects(fmt.display_units(s.fsdp_totals())),
                       check_dtype=False)
    boxes = [e.value for e in [*at.error, *at.warning, *at.info]]
    for finding in (x for x in s.findings if x.kind.startswith("fsdp_")):
        assert any(finding.message in b for b in boxes)


def test_a_ddp_run_does_not_list_the_fsdp_page(monkeypatch):
    at = open_page(monkeypatch, DDP_RUN)
    assert not at.exception
    assert at.session_state["tracekit.has_fsdp"] is False
    assert any("no FSDP units" in i.value for i in at.info)


def test_the_workload_documents_its_flags_and_refuses_bad_ones():
    import subprocess
    import sys

    pytest.importorskip("torch")
    from tests.workload_cli import run_main

    # A real process: the module runs under -m and prints no warning at import.
    help_ = subprocess.run([sys.executable, "-m", "workloads.fsdp", "--help"], cwd=REPO, capture_output=True, text=True,
                           timeout=120)
    assert help_.returncode == 0 and help_.stderr == ""
    for flag in ("--reshard-after-forward", "--prefetch", "--mp", "torchrun --standalone"):
        assert flag in help_.stdout
    for flags, message in ((["--prefetch", "-1"], "--prefetch must be >= 0"),
                           (["--mode", "dp"], "FSDP needs a process group"),
                           (["--reshard-after-forward", "maybe"], "invalid choice")):
        bad = run_main("fsdp", *flags)
        assert bad.returncode == 2 and message in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_fsdp1_brackets_pair_nested_and_chained_units():
    """Forward: A holds B, then C after A. Forward ends come B, A, C, so backward pre-hooks are C, A, B."""
    p = "_pre_forward"
    hooks = [(p, 0), (p, 10), ("_post_forward", 20), ("_post_forward", 30), (p, 40), ("_post_forward", 50),
             ("_pre_backward_hook", 100), ("_pre_backward_hook", 110), ("_pre_backward_hook", 120)]
    ann = pd.DataFrame({"row": range(len(hooks)), "api": "fsdp1", "hook": [h for h, _ in hooks], "unit": None,
                        "tid": "1", "step": 1, "start_ns": [t for _, t in hooks], "end_ns": [t + 5 for _, t in hooks]})
    req = fsdp_hooks.requests(ann)
    assert list(zip(req["phase"], req["unit"])) == [("forward", "#0"), ("forward", "#1"), ("forward", "#2"),
                                                   ("backward", "#2"), ("backward", "#0"), ("backward", "#1")]


@pytest.mark.parametrize("a, b", [(DDP_RUN, FSDP_RUN), (FSDP_RUN, "sample_traces/fsdp-gloo-2rank-prefetch0")])
def test_compare_ddp_with_fsdp_and_two_fsdp_settings_per_step(a, b, summaries):
    from tracekit.render.compare import PARTS

    sa, sb = (summaries(REPO / r, cache=False) for r in (a, b))
    table = tracekit.compare(sa, sb).table.set_index("metric")
    for side, s in (("a", sa), ("b", sb)):
        assert sum(float(table.loc[p, side]) for p in PARTS) == pytest.approx(float(table.loc["step_time_ms", side]))
        steps = s.steps[s.steps["in_window"]]
        assert float(table.loc["step_time_ms", side]) == pytest.approx(steps.groupby("rank")["step_us"].mean().mean() / 1e3)


def test_the_compare_page_puts_ddp_beside_fsdp(monkeypatch, summaries):
    streamlit_testing = pytest.importorskip("streamlit.testing.v1")
    monkeypatch.setattr("sys.argv", ["main.py", "--root", str(REPO / "sample_traces")])
    at = streamlit_testing.AppTest.from_file(str(REPO / "app" / "main.py"), default_timeout=120)
    at.query_params.update({"run": DDP_RUN, "page": "compare", "b": FSDP_RUN})
    at.run()
    assert not at.exception, at.exception[0].value if at.exception else ""
    shown = at.dataframe[0].value
    expected = tracekit.compare(summaries(REPO / DDP_RUN, cache=False),
                                summaries(REPO / FSDP_RUN, cache=False)).table
    assert_frame_equal(labels_as_objects(shown).astype(object).where(shown.notna(), None),
                       labels_as_objects(expected).astype(object).where(expected.notna(), None), check_dtype=False)
    assert "all_gather_MB_per_step" in set(shown["metric"])


def test_fp32_gather_finding_of_unknown_size_says_unknown_not_zero(summaries):
    """A float32 gather whose size the trace does not give (a DTensor-sharded gather on gloo) is 'unknown MB', and
    its evidence NaN: never '0.00 MB'."""
    s = summaries(ROOT / "sample_traces" / "fsdp-gloo-2rank-prefetch0", cache=False, workers=1)
    from tracekit.findings import fsdp_findings

    fsdp = s.fsdp.assign(allgather_dtype="float", wait_us=s.fsdp["wait_us"] * 0 + 1e9)
    known = [f for f in fsdp_findings.merged([], fsdp, s.steps, s.ranks) if f.kind == "fsdp_fp32_allgather"]
    assert len(known) == 1 and "unknown MB" not in known[0].message and " MB per step" in known[0].message
    unknown = fsdp.assign(allgather_bytes=np.where(fsdp["gathers"] > 0, np.nan, fsdp["allgather_bytes"]))
    found = [f for f in fsdp_findings.merged([], unknown, s.steps, s.ranks) if f.kind == "fsdp_fp32_allgather"]
    assert len(found) == 1 and "(unknown MB per step and rank)" in found[0].message
    assert math.isnan(found[0].evidence["allgather_bytes_per_step"])

