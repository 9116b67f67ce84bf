"""Pipeline parallelism: blocks (from PP: actions, GPipe's annotations, or inferred between P2P calls), the bubble
split (fill, wait, drain), the schedule's theory, the stages' imbalance and the findings, on tiny traces computed
by hand (CPU/gloo ranks: the training thread's ops are the compute; c10d::send/recv_ are not)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.events.pipeline import pipeline_position
from tracekit.run.pipeline import pipeline_tables, theory_bubble_pct
from tests.pipeline_runs import PG, RANK0_OPS, backward, annotation, write_rank, write_gpipe_run
from tests.tracedata import cpu, step, write_trace



def _gpipe_run(path):
    return tracekit.summarize(write_gpipe_run(path), cache=False, workers=1)


def _row(s, stage):
    return s.pipeline.set_index("stage").loc[stage]


def test_gpipe_two_stages_two_microbatches_by_hand(tmp_path):
    s = _gpipe_run(tmp_path)
    b = s.pipeline_blocks
    assert set(b["source"]) == {"gpipe_annotation"}
    # Stage 1's Forward 0 runs [0,300) but computes only [200,300): the receive's wait is not compute.
    f0 = b[(b["stage"] == 1) & (b["phase"] == "F") & (b["microbatch"] == 0)].iloc[0]
    assert (f0["end_us"] - f0["start_us"], f0["compute_us"]) == (100.0, 100.0)
    r0, r1 = _row(s, 0), _row(s, 1)
    # Stage 0: busy 100+100+100+90 (blocks) + 50 (optimizer) = 440 of 1000; fill [0,10); drain [800,1000) less the
    # optimizer's 50; wait: [10,800) less the blocks' 390.
    assert (r0["fwd_us"], r0["bwd_us"], r0["compute_us"], r0["other_busy_us"]) == (200.0, 190.0, 390.0, 50.0)
    assert (r0["bubble_us"], r0["fill_us"], r0["wait_us"], r0["drain_us"]) == (560.0, 10.0, 400.0, 150.0)
    assert r0["bubble_pct"] == pytest.approx(56.0)
    # Stage 1: F 100+100, B 150+150; fill [0,200); wait [200,730) less 500; drain [730,1000).
    assert (r1["fwd_us"], r1["bwd_us"], r1["bubble_us"]) == (200.0, 300.0, 500.0)
    assert (r1["fill_us"], r1["wait_us"], r1["drain_us"]) == (200.0, 30.0, 270.0)
    assert set(s.pipeline["schedule"]) == {"gpipe"} and set(s.pipeline["microbatches"]) == {2}
    assert "2 stages on 2 pipeline ranks (1 per rank), 2 microbatches" in str(s)
    assert s.pipeline["theory_bubble_pct"].iloc[0] == pytest.approx(100 / 3)  # (p-1)/(m+p-1), p = m = 2
    # A microbatch's cost: per phase the lower quartile of the blocks' compute, summed: stage 0 100 + (90 + 0.25 x 10),
    # stage 1 100 + 150.
    assert (r0["microbatch_compute_us"], r1["microbatch_compute_us"]) == (192.5, 250.0)
    assert r1["imbalance_ratio"] == pytest.approx(250 / 192.5) and r0["imbalance_ratio"] == pytest.approx(192.5 / 250)


def test_findings_name_the_bubble_and_the_heavy_stage(tmp_path):
    found = {f.kind: f for f in _gpipe_run(tmp_path).findings}
    bubble = found["pipeline_bubble"]
    assert bubble.evidence["measured_bubble_pct"] == pytest.approx(53.0)  # (56 + 50) / 2
    assert bubble.evidence["theory_bubble_pct"] == pytest.approx(100 / 3)
    assert "not communication that overlap can hide" in bubble.recommendation
    heavy = found["stage_imbalance"]
    assert heavy.ranks == (1,) and heavy.evidence["stage"] == 1 and heavy.severity == "medium"
    # (v*m + p - 1) slots x the per-microbatch excess: 3 x (250 - 192.5).
    assert heavy.evidence["estimated_saving_us"] == pytest.approx(172.5)
    # The replay of balanced_stages: stage 1's compute scales by 192.5 / 250 = 0.77, its four blocks (100, 100, 150,
    # 150 us) lose 115 us, and nothing on rank 1 waits after its first block, so its step ends 115 us earlier. Rank
    # 0's receives end before their sends in this trace (its waits are host time), so it saves nothing: 115 / 2.
    assert heavy.evidence["scenario"] == "balanced_stages"
    assert heavy.evidence["predicted_saving_us"] == pytest.approx(57.5)
    assert "Predicted by replay" in heavy.message and "estimate" not in heavy.message


def test_1f1b_blocks_inferred_between_p2p_calls(tmp_path):
    write_rank(tmp_path, 0, RANK0_OPS)
    # The last stage of 1F1B: F0 then B0 with no transfer between. The targets' chunking before the first receive
    # [1,3) is busy but no block: the stage has no input yet.
    write_rank(tmp_path, 1, [cpu("aten::tensor_split", 1, 2), cpu("c10d::recv_", 5, 10), cpu("aten::linear", 200, 100),
                         backward(300, 150), cpu("c10d::send", 450, 10), cpu("c10d::recv_", 460, 10),
                         cpu("aten::linear", 500, 100), backward(600, 150), cpu("c10d::send", 750, 10)])
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    b = s.pipeline_blocks
    assert set(b["source"]) == {"inferred"}
    order = b[b["rank"] == 1].sort_values("start_us")
    assert list(order["phase"] + order["microbatch"].astype(str)) == ["F0", "B0", "F1", "B1"]
    assert list(order["start_us"]) == [200.0, 300.0, 500.0, 600.0]
    r0, r1 = _row(s, 0), _row(s, 1)
    assert (r0["fwd_us"], r0["bwd_us"], r0["bubble_us"], r0["wait_us"]) == (200.0, 190.0, 560.0, 400.0)
    assert (r1["fwd_us"], r1["bwd_us"], r1["other_busy_us"]) == (200.0, 300.0, 2.0)
    assert (r1["bubble_us"], r1["fill_us"], r1["wait_us"], r1["drain_us"]) == (498.0, 198.0, 50.0, 250.0)
    assert set(s.pipeline["schedule"]) == {"1f1b"}


def test_pp_actions_give_stages_and_exclude_the_receive_wait(tmp_path):
    # One rank holding stages 0 and 2: PP:0F0 waits [0,60) for its input; SEND/RECV make no block.
    write_trace(tmp_path / "rank-0.pt.trace.json.gz", [
        step(1, 0, 400), annotation("PP:0RECV_F0", 0, 5), cpu("c10d::recv_", 0, 5), annotation("PP:0F0", 5, 95),
        cpu("aten::linear", 60, 40), annotation("PP:0SEND_F0", 100, 0), annotation("PP:2F0", 100, 50),
        cpu("aten::linear", 100, 50), annotation("PP:2B0", 150, 100), backward(170, 80), annotation("PP:0B0", 250, 50),
        backward(250, 50)], rank=None, distributedInfo={"backend": "gloo", "rank": 0, "world_size": 1})
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    b = s.pipeline_blocks.sort_values("start_us")
    assert list(b["stage"].astype(str) + b["phase"] + b["microbatch"].astype(str)) == ["0F0", "2F0", "2B0", "0B0"]
    assert list(b["compute_us"]) == [40.0, 50.0, 80.0, 50.0] and set(b["source"]) == {"pp_action"}
    r = s.pipeline.set_index("stage")
    assert (r.loc[0, "fwd_us"], r.loc[0, "bwd_us"], r.loc[2, "fwd_us"], r.loc[2, "bwd_us"]) == (40.0, 50.0, 50.0, 80.0)
    # The bubble is the rank's, on both its stages' rows: fill [0,60), wait [60,300) less 220, drain [300,400).
    assert (r.loc[0, "fill_us"], r.loc[0, "wait_us"], r.loc[0, "drain_us"], r.loc[2, "bubble_us"]) == (60.0, 20.0, 100.0, 180.0)
    # One microbatch: every forward runs before any backward, as in looped BFS (interleaved 1F1B needs m > 1 to differ).
    assert set(s.pipeline["schedule"]) == {"looped_bfs"} and set(s.pipeline["stages_per_rank"]) == {2}


def test_stage_from_the_pipeline_group():
    mesh = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3]},
            {"pg_name": "1", "pg_desc": "mesh_pp", "ranks": [1, 3]}, {"pg_name": "2", "pg_desc": "mesh_dp", "ranks": [2, 3]}]
    assert pipeline_position(mesh, 3) == (1, 2, "mesh_pp")
    assert pipeline_position(PG, 1) == (1, 2, "default_pg")  # the only group: a pure pipeline run
    assert pipeline_position(mesh[:1] + mesh[2:], 3) is None  # two groups, none named pp: unknown


def test_theory_and_no_closed_form():
    assert theory_bubble_pct("1f1b", 4, 1, 8) == pytest.approx(3 / 11 * 100)
    assert theory_bubble_pct("gpipe", 2, 1, 2) == pytest.approx(100 / 3)
    assert theory_bubble_pct("interleaved", 2, 2, 8) == pytest.approx(1 / 17 * 100)
    assert math.isnan(theory_bubble_pct("zero_bubble", 4, 2, 8))


def _tables(phases, layout=None, compute_us=10.0):
    """A one-rank, one-step pipeline of the given ``[(stage, phase, mb)]`` blocks, in that order, each 10 us apart and
    computing ``compute_us`` (one for all, or one per block)."""
    n = len(phases)
    blocks = pd.DataFrame({"rank": 0, "stage": [p[0] for p in phases], "step": 1, "microbatch": [p[2] for p in phases],
                           "phase": [p[1] for p in phases], "start_ns": np.arange(n) * 10_000,
                           "end_ns": np.arange(n) * 10_000 + 10_000, "compute_us": compute_us,
                           "source": "pp_action"})
    stages = sorted({p[0] for p in phases})
    rows = pd.DataFrame({"rank": 0, "stage": stages, "step": 1, "microbatches": 1, "fwd_us": 10.0, "bwd_us": 0.0,
                         "compute_us": 10.0, "bubble_us": 0.0, "fill_us": 0.0, "drain_us": 0.0,
                         "wait_us": 0.0, "bubble_pct": 0.0, "other_busy_us": 0.0, "step_us": 10.0 * n,
                         "in_window": True})
    return pipeline_tables(rows, blocks, {}, 0, layout)


def test_order_agreement_with_run_json_and_zero_bubble_note():
    intended = {"intended_schedule": {"0": ["0F0", "0SEND_F0", "0F1", "0B0", "0B1"]}, "schedule": "1f1b"}
    rows, _ = _tables([(0, "F", 0), (0, "F", 1), (0, "B", 1), (0, "B", 0)], intended)
    assert rows["order_agreement_pct"].iloc[0] == 50.0  # F0, F1 in place; B1, B0 swapped; SEND not a block
    rows, _ = _tables([(0, "F", 0), (0, "I", 0), (0, "W", 0)], {"schedule": "zbv"})
    assert rows["schedule"].iloc[0] == "zero_bubble" and math.isnan(rows["theory_bubble_pct"].iloc[0])
    assert rows["note"].iloc[0] == "zero bubble schedule: no closed-form bubble to compare with"  # zbv agrees
    assert math.isnan(rows["order_agreement_pct"].iloc[0])
    # Two stages on the rank, every forward first: looped BFS, not interleaved 1F1B (whose formula it does not have).
    rows, _ = _tables([(0, "F", 0), (2, "F", 0), (2, "B", 0), (0, "B", 0)], {"schedule": "interleaved"})
    assert rows["schedule"].iloc[0] == "looped_bfs" and math.isnan(rows["theory_bubble_pct"].iloc[0])
    assert "run.json's schedule is interleaved; the blocks read as looped_bfs" in rows["note"].iloc[0]
    rows, _ = _tables([(0, "F", 0), (2, "F", 0), (0, "B", 0), (2, "B", 0), (0, "F", 1), (2, "F", 1), (2, "B", 1),
                       (0, "B", 1)])
    assert rows["schedule"].iloc[0] == "interleaved"


def test_no_pipeline_no_rows():
    s = tracekit.summarize("sample_traces/gpt-gloo-2rank", cache=False, workers=1)
    assert s.pipeline.empty and s.pipeline_blocks.empty
    assert not {f.kind for f in s.findings} & {"pipeline_bubble", "stage_imbalance"}
    assert "Pipeline:" not in str(s)
    json.loads(s.to_json())  # the empty tables serialise


def test_gpu_rank_blocks_are_the_kernels_each_annotation_launched(tmp_path):
    """A GPU rank's blocks are device time: the kernels launched inside each annotation. The NCCL send/recv kernel
    [400,500) is no one's busy time: it is the bubble's. No pipeline group in the trace: the stage is unknown."""
    from tests.tracedata import kernel, launch

    events = [step(1, 0, 1000), annotation("Forward 0", 0, 100), launch(50, 1), annotation("Forward 1", 100, 50),
              launch(120, 2), cpu("c10d::send", 150, 5), launch(160, 5), annotation("Backward 0", 200, 60),
              launch(210, 3), annotation("Backward 1", 260, 40), launch(270, 4),
              kernel("sm90_gemm", 100, 200, correlation=1), kernel("sm90_gemm", 300, 100, correlation=2),
              kernel("ncclDevKernel_SendRecv", 400, 100, stream=20, correlation=5),
              kernel("sm90_gemm_bwd", 500, 100, correlation=3), kernel("sm90_gemm_bwd", 600, 50, correlation=4)]
    write_trace(tmp_path / "rank-0.pt.trace.json.gz", events, rank=0, world_size=1)
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    b = s.pipeline_blocks.sort_values("start_us")
    assert list(zip(b["phase"], b["start_us"], b["end_us"])) == [("F", 100, 300), ("F", 300, 400), ("B", 500, 600),
                                                                  ("B", 600, 650)]
    r = s.pipeline.iloc[0]
    assert (r["stage"], r["fwd_us"], r["bwd_us"], r["bubble_us"]) == (-1, 300.0, 150.0, 550.0)
    assert (r["fill_us"], r["wait_us"], r["drain_us"]) == (100.0, 100.0, 350.0)
    assert "stage unknown" in r["note"]


def test_dualpipev_overlapped_pair_splits_at_its_backward(tmp_path):
    # PP:(0F1;3B0)OVERLAP_F_B [0,300): stage 0's forward of microbatch 1 [20,120), then stage 3's backward of
    # microbatch 0 from its first autograd op [150,280).
    write_trace(tmp_path / "rank-0.pt.trace.json.gz", [
        step(1, 0, 400), annotation("PP:(0F1;3B0)OVERLAP_F_B", 0, 300), cpu("aten::linear", 20, 100),
        backward(150, 130), annotation("PP:0F0", 300, 50), cpu("aten::linear", 300, 40)],
        rank=None, distributedInfo={"backend": "gloo", "rank": 0, "world_size": 1})
    b = tracekit.summarize(tmp_path, cache=False, workers=1).pipeline_blocks.sort_values("start_us")
    assert list(b["stage"].astype(str) + b["phase"] + b["microbatch"].astype(str)) == ["0F1", "3B0", "0F0"]
    assert list(b["compute_us"]) == [100.0, 130.0, 40.0]


def test_a_trace_without_steps_is_one_window(tmp_path):
    # No ProfilerStep: the window runs from the first compute (10) to the last one's end (850), step -1.
    events = [e for e in RANK0_OPS] + [annotation("Forward 0", 0, 110), annotation("Forward 1", 120, 100),
                                       annotation("Backward 0", 230, 470), annotation("Backward 1", 700, 100)]
    write_trace(tmp_path / "rank-0.pt.trace.json.gz", events, rank=None,
                distributedInfo={"backend": "gloo", "rank": 0, "world_size": 2, "pg_config": PG})
    r = tracekit.summarize(tmp_path, cache=False, workers=1).pipeline.iloc[0]
    assert (r["step"], r["step_us"], r["compute_us"], r["other_busy_us"]) == (-1, 840.0, 390.0, 50.0)
    assert (r["fill_us"], r["wait_us"], r["drain_us"]) == (0.0, 400.0, 0.0)


def test_1f1b_without_pg_config_tells_the_first_stage_by_its_first_transfer(tmp_path):
    """No pg_config (older torch): no group gives the stage. The first stage still ran F0 before its first transfer
    (a send: it has no input to receive); read as a later stage, that forward was taken for chunking and dropped,
    and F1 was numbered F0."""
    write_rank(tmp_path, 0, RANK0_OPS, pg=[])
    write_rank(tmp_path, 1, [cpu("c10d::recv_", 5, 10), cpu("aten::linear", 200, 100), backward(300, 150),
                             cpu("c10d::send", 450, 10), cpu("c10d::recv_", 460, 10), cpu("aten::linear", 500, 100),
                             backward(600, 150), cpu("c10d::send", 750, 10)], pg=[])
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    order = s.pipeline_blocks[s.pipeline_blocks["rank"] == 0].sort_values("start_us")
    assert list(order["phase"] + order["microbatch"].astype(str)) == ["F0", "F1", "B0", "B1"]
    assert list(order["start_us"]) == [10.0, 120.0, 600.0, 710.0]
    r0 = s.pipeline.set_index("rank").loc[0]
    assert (r0["stage"], r0["fwd_us"], r0["bwd_us"]) == (-1, 200.0, 190.0)  # the stage number stays unknown


def test_an_intended_action_that_computed_nothing_does_not_shift_the_order():
    """ZBV's first stage runs ``PP:0I0`` with nothing in it (its input needs no gradient): no block. The blocks that
    ran are in the intended order; compared position by position with the action left in, every later block was
    one place off (pp-zbv-2rank read 21%)."""
    intended = {"intended_schedule": {"0": ["0F0", "0F1", "0I0", "0W0", "0B1"]}}
    rows, _ = _tables([(0, "F", 0), (0, "F", 1), (0, "W", 0), (0, "B", 1)], intended)
    assert rows["order_agreement_pct"].iloc[0] == 100.0
    rows, _ = _tables([(0, "F", 0), (0, "F", 1), (0, "B", 1), (0, "W", 0)], intended)
    assert rows["order_agreement_pct"].iloc[0] == 50.0  # W0 and B1 swapped: 2 of 4 in place
    rows, _ = _tables([(0, "F", 0), (0, "F", 1), (0, "W", 0), (0, "B", 1), (0, "B", 2)], intended)
    assert rows["order_agreement_pct"].iloc[0] == 80.0  # a block the order does not have: 4 of the 5 in place


def test_a_microbatch_costs_one_forward_and_one_backward_however_its_blocks_split_it():
    """DualPipeV runs a stage's backward as B for some microbatches and as I + W for others; a first stage's I
    computes nothing (no block), its W the whole backward. Stage 0: F 30, 30; backward of mb 0 is B0 = 50, of mb 1
    I1 + W1 = 20 + 30 = 50: a microbatch costs 30 + 50 = 80 (summing each phase's quartile, F + B + I + W, read 130).
    Stage 3: F 40, 40; backward W0 = 60 (its I0 computed nothing), B1 = 60: 100. Imbalance 100 / 80 and 80 / 100."""
    phases = [(0, "F", 0), (0, "F", 1), (3, "F", 0), (3, "W", 0), (0, "B", 0), (3, "F", 1), (0, "I", 1),
              (3, "B", 1), (0, "W", 1)]
    rows, _ = _tables(phases, compute_us=[30.0, 30.0, 40.0, 60.0, 50.0, 40.0, 20.0, 60.0, 30.0])
    per_stage = rows.drop_duplicates("stage").set_index("stage")
    assert per_stage["microbatch_compute_us"].to_dict() == {0: 80.0, 3: 100.0}
    assert per_stage["imbalance_ratio"].to_dict() == {0: pytest.approx(0.8), 3: pytest.approx(1.25)}


def test_dualpipev_overlapped_action_counts_as_its_two_actions_in_the_intended_order():
    """run.json lists DualPipeV's overlapped pair as one entry, ``(0F1;3B0)OVERLAP_F_B``; the blocks split it in two
    (forward, then backward). Left out of the order as a non-action, 1 of the 4 blocks was in place (25%)."""
    intended = {"intended_schedule": {"0": ["0F0", "(0F1;3B0)OVERLAP_F_B", "3B1"]}, "schedule": "dualpipev"}
    rows, _ = _tables([(0, "F", 0), (0, "F", 1), (3, "B", 0), (3, "B", 1)], intended)
    assert set(rows["order_agreement_pct"]) == {100.0}
    rows, _ = _tables([(0, "F", 0), (3, "B", 0), (0, "F", 1), (3, "B", 1)], intended)
    assert set(rows["order_agreement_pct"]) == {50.0}  # the pair run backward first: 0F1 and 3B0 out of place


def test_the_report_counts_every_stage_of_an_interleaved_pipeline():
    """Two ranks holding two stages each (0, 2 and 1, 3): p = 2 in the theory, but the pipeline has 4 stages (the
    report said '2 stages (2 per rank)')."""
    from types import SimpleNamespace

    from tracekit.summary.text_pipeline import pipeline_lines

    order = [(0, "F", 0), (2, "F", 0), (2, "B", 0), (0, "B", 0)]
    blocks = pd.concat([pd.DataFrame({"rank": rank, "stage": [s + rank for s, _, _ in order], "step": 1,
                                      "microbatch": 0, "phase": [p for _, p, _ in order],
                                      "start_ns": np.arange(4) * 10_000, "end_ns": np.arange(4) * 10_000 + 10_000,
                                      "compute_us": 10.0, "source": "pp_action"}) for rank in (0, 1)],
                       ignore_index=True)
    rows = pd.DataFrame({"rank": [0, 0, 1, 1], "stage": [0, 2, 1, 3], "step": 1, "microbatches": 1, "fwd_us": 10.0,
                         "bwd_us": 10.0, "compute_us": 20.0, "bubble_us": 0.0, "fill_us": 0.0, "drain_us": 0.0,
                         "wait_us": 0.0, "bubble_pct": 0.0, "other_busy_us": 0.0, "step_us": 40.0, "in_window": True})
    table, grid = pipeline_tables(rows, blocks, {}, 0)
    assert set(table["stages"]) == {2} and set(table["stages_per_rank"]) == {2}
    header = pipeline_lines(SimpleNamespace(pipeline=table, pipeline_blocks=grid, findings=()))[0]
    assert "4 stages on 2 pipeline ranks (2 per rank), 1 microbatches" in header


def _bubble_rows(schedule, v, theory):
    return pd.DataFrame({"stage": [0, 1], "rank": [0, 1], "step": 3, "in_window": True, "bubble_pct": [50.0, 30.0],
                         "theory_bubble_pct": theory, "schedule": schedule, "stages": 2, "stages_per_rank": v,
                         "microbatches": 4, "fill_us": 10.0, "wait_us": 20.0, "drain_us": 30.0, "step_us": 100.0,
                         "compute_us": 50.0, "microbatch_compute_us": [10.0, 10.5], "imbalance_ratio": [0.95, 1.05]})


def test_bubble_advice_follows_the_schedule_that_ran():
    """An interleaved run names its p x v stages on p ranks; a zero-bubble run is not told to use a zero-bubble
    schedule (it is one), a 1F1B run is; the measured bubble is the ranks' mean, (50 + 30) / 2."""
    from tracekit.findings.pipeline_findings import find

    (inter,) = [f for f in find(_bubble_rows("interleaved", 2, 100 / 9)) if f.kind == "pipeline_bubble"]
    assert "4 stages on 2 ranks and 4 microbatches is 11%" in inter.message
    assert inter.evidence["measured_bubble_pct"] == 40.0
    (zb,) = [f for f in find(_bubble_rows("zero_bubble", 2, float("nan"))) if f.kind == "pipeline_bubble"]
    assert "zero-bubble schedule" not in zb.recommendation and "no closed-form bubble" in zb.message
    (plain,) = [f for f in find(_bubble_rows("1f1b", 1, 20.0)) if f.kind == "pipeline_bubble"]
    assert "zero-bubble schedule" in plain.recommendation and "2 stages and 4 microbatches" in plain.message
