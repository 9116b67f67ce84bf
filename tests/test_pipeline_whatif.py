"""The pipeline what-ifs: the schedules' orders, the simulated span worked by hand, the microbatch prediction on
hand-made tables, and the balanced stage's node factors."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

import tracekit
from tests.pipeline_runs import write_gpipe_run
from tracekit.predict import pipeline_whatif, pipesim

# Two stages, two microbatches: stage 0 forward 10, backward 20; stage 1 forward 5, backward 8; each hop 1.
COST = {(0, "F"): 10.0, (0, "B"): 20.0, (1, "F"): 5.0, (1, "B"): 8.0}


def _span(schedule, m, cost=COST, hop=1.0):
    orders = pipesim.rank_orders(schedule, 2, 1, m)
    return pipesim.makespan(orders, lambda s, ph: cost[(s, ph)], lambda a, b: hop, 2)


def test_gpipe_span_by_hand():
    # Rank 0: F0 0-10, F1 10-20. Rank 1: F0 11-16, F1 21-26, B0 26-34, B1 34-42.
    # Rank 0: B0 waits for 34 + 1: 35-55, B1 55-75.
    assert _span("gpipe", 2) == 75.0


def test_1f1b_span_by_hand():
    # Rank 1 (last stage) alternates: F0 11-16, B0 16-24, F1 (arrived 21) 24-29, B1 29-37.
    # Rank 0 (warm-up 2 forwards): F0 0-10, F1 10-20, B0 (arrived 25) 25-45, B1 (arrived 38) 45-65.
    assert _span("1f1b", 2) == 65.0


def test_1f1b_order_by_hand():
    orders = pipesim.rank_orders("1f1b", 2, 1, 3)
    assert orders[0] == [(0, "F", 0), (0, "F", 1), (0, "B", 0), (0, "F", 2), (0, "B", 1), (0, "B", 2)]
    assert orders[1] == [(1, "F", 0), (1, "B", 0), (1, "F", 1), (1, "B", 1), (1, "F", 2), (1, "B", 2)]


def test_a_schedule_without_an_order_is_none():
    assert pipesim.rank_orders("zero_bubble", 2, 2, 4) is None
    assert pipesim.rank_orders("1f1b", 2, 2, 4) is None  # 1F1B holds one stage per rank


def test_a_circular_order_is_an_error():
    orders = {0: [(0, "B", 0), (0, "F", 0)], 1: [(1, "F", 0), (1, "B", 0)]}  # a backward before its forward
    with pytest.raises(pipesim.ScheduleError, match="cannot run"):
        pipesim.makespan(orders, lambda s, ph: 1.0, lambda a, b: 0.0, 2)


@pytest.mark.parametrize("schedule, cls, v", [("gpipe", "ScheduleGPipe", 1), ("1f1b", "Schedule1F1B", 1),
                                               ("interleaved", "ScheduleInterleaved1F1B", 2),
                                               ("interleaved", "ScheduleInterleaved1F1B", 3)])
def test_orders_are_torchs(schedule, cls, v):
    """Each rank's F/B order is the one torch's schedule object lists (its private visualizer), for several sizes.
    (torch's visualizer lists the last 1F1B rank's microbatches one off, F1 ... F5 for 0 ... 4: that rank is checked
    by hand in ``test_1f1b_order_by_hand`` and against the traces' blocks in ``test_orders_match_the_traces``.)"""
    pytest.importorskip("torch")
    from torch.distributed.pipelining import schedules
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    checked = 0
    for p in (2, 3, 4):
        for m in (2, 3, 4, 6, 8, 12):
            try:
                ops = get_schedule_ops(getattr(schedules, cls), p, m, v)
            except Exception:  # a size the schedule refuses (interleaved: m a multiple of its rounds)
                continue
            mine = pipesim.rank_orders(schedule, p, v, m)
            for rank, row in enumerate(ops):
                if schedule == "1f1b" and rank == p - 1:
                    continue
                theirs = [str(a) for a in row if a is not None and re.fullmatch(r"\d+[FB]\d+", str(a))]
                assert [f"{s}{ph}{i}" for s, ph, i in mine[rank]] == theirs, (p, v, m, rank)
                checked += 1
    assert checked >= 12


@pytest.mark.parametrize("run", ["pp-1f1b-4rank", "pp-gpipe-2rank", "pp-interleaved-2rank"])
def test_orders_match_the_traces(run, summaries):
    """The simulated order of each rank is the order its blocks ran in (every window step)."""
    s = summaries(f"sample_traces/{run}")
    rows = pipeline_whatif.window_rows(s.pipeline)
    facts = rows.iloc[0]
    orders = pipesim.rank_orders(facts["schedule"], int(facts["stages"]), int(facts["stages_per_rank"]),
                                 int(rows["microbatches"].median()))
    stage_rank = rows.groupby("stage")["rank"].first()
    for step in rows["step"].unique():
        blocks = s.pipeline_blocks[s.pipeline_blocks["step"] == step].sort_values("start_us")
        for order in orders.values():
            rank = int(stage_rank[order[0][0]])
            ran = [(int(b.stage), b.phase, int(b.microbatch)) for b in blocks[blocks["rank"] == rank].itertuples()]
            assert ran == order


def _tables(f0=10.0, b0=20.0, f1=5.0, b1=8.0, hop=1.0):
    """A 1F1B pipeline of two stages on ranks 0 and 1, two microbatches, one window step, the costs above."""
    rows = pd.DataFrame({"stage": [0, 1], "rank": [0, 1], "step": [3, 3], "microbatches": [2, 2],
                         "schedule": "1f1b", "stages": 2, "stages_per_rank": 1, "in_window": True})
    blocks = pd.DataFrame([(r, r, 3, i, ph, c) for r, costs in ((0, (f0, b0)), (1, (f1, b1)))
                           for i in (0, 1) for ph, c in zip("FB", costs)],
                          columns=["rank", "stage", "step", "microbatch", "phase", "compute_us"])
    # Each rank's blocks one after the other, 2 us apart, each spanning its compute: rank 0's end at 66 us.
    blocks["start_us"] = blocks.groupby("rank")["compute_us"].cumsum() - blocks["compute_us"] + 2.0 * (blocks.index % 4)
    blocks["end_us"] = blocks["start_us"] + blocks["compute_us"]
    p2p = pd.DataFrame({"src_rank": [0.0, 1.0], "dst_rank": [1.0, 0.0], "step": [3, 3], "status": "matched",
                        "transfer_us": [hop, hop]})
    return rows, blocks, p2p


def test_microbatch_prediction_by_hand():
    # m = 2 at the costs: 65 (test_1f1b_span_by_hand). m = 4 at half of them: stage 0 F 5, B 10; stage 1 F 2.5,
    # B 4; hop 0.5; rank 0 runs F0 F1 B0 F2 B1 F3 B2 B3, rank 1 F0 B0 F1 B1 F2 B2 F3 B3.
    rows, blocks, p2p = _tables()
    predicted, facts, why = pipeline_whatif.microbatch_prediction(rows, blocks, p2p, base_step_us=1000.0)
    assert why == "" and facts["simulated_span_us"] == 65.0
    # Rank 0: F0 0-5, F1 5-10, B0 12.5-22.5, F2 22.5-27.5, B1 27.5-37.5, F3 37.5-42.5, B2 42.5-52.5, B3 52.5-62.5.
    # Rank 1: F0 5.5-8, B0 8-12, F1 12-14.5, B1 14.5-18.5, F2 28-30.5, B2 30.5-34.5, F3 43-45.5, B3 45.5-49.5.
    # B3 on rank 0 needs 49.5 + .5 = 50, rank 0 is free at 52.5: the span is 62.5.
    assert facts["simulated_span_more_us"] == 62.5
    assert predicted == 1000.0 + 62.5 - 65.0


def test_microbatch_prediction_scales_compute_per_rank():
    rows, blocks, p2p = _tables()
    _, facts, _ = pipeline_whatif.microbatch_prediction(rows, blocks, p2p, 1000.0, compute_scale={0: 2.0})
    # Rank 0 twice as slow: F0 0-20, F1 20-40; rank 1 F0 21-26, B0 26-34, F1 (arrived 41) 41-46, B1 46-54;
    # rank 0 B0 (arrived 35) 40-80, B1 (arrived 55) 80-120.
    assert facts["simulated_span_us"] == 120.0


def test_microbatch_prediction_says_why_not():
    rows, blocks, p2p = _tables()
    # Simulated at the measured costs the schedule spans 65 us; rank 0 stalled 40 us before its last block, which no
    # dependency explains: the blocks span 106 us.
    def stalled(us):
        return blocks.assign(start_us=blocks["start_us"] + us * (blocks.index == 3),
                             end_us=blocks["end_us"] + us * (blocks.index == 3))

    predicted, facts, why = pipeline_whatif.microbatch_prediction(rows, stalled(40.0), p2p, 1.0)
    assert math.isnan(predicted) and facts["measured_span_us"] == 106.0 and why.startswith(
        "the 1f1b schedule simulated at the measured costs spans 0.07 ms against the 0.11 ms the blocks measured")
    assert pipeline_whatif.microbatch_prediction(rows, stalled(15.0), p2p, 1.0)[2] == ""  # 65 against 81: within 25%
    assert pipeline_whatif.microbatch_prediction(rows.assign(schedule="zero_bubble"), blocks, p2p, 1.0)[2] \
        .startswith("no simulated order for the zero_bubble schedule")
    assert "no matched send/recv from stage 1's rank to stage 0's" in \
        pipeline_whatif.microbatch_prediction(rows, blocks, p2p.iloc[:1], 1.0)[2]
    assert pipeline_whatif.microbatch_prediction(rows.iloc[:0], blocks, p2p, 1.0)[2] == pipeline_whatif.NOT_PIPELINE


def test_balanced_scale_marks_the_slowest_stages_compute():
    """Stage 1 costs 40 us a microbatch, stage 0 10: its compute nodes inside its blocks scale by 10/40; its host
    nodes, nodes outside its blocks and the other stage's nodes keep 1."""
    pipeline = pd.DataFrame({"stage": [0, 1], "rank": [0, 1], "step": [3, 3], "in_window": True,
                             "microbatch_compute_us": [10.0, 40.0]})
    blocks = pd.DataFrame({"rank": [1, 1], "stage": [1, 1], "start_us": [100.0, 300.0], "end_us": [200.0, 400.0]})
    graph = pd.DataFrame({"rank": [1, 1, 1, 1, 0], "start_ns": [150e3, 250e3, 310e3, 320e3, 150e3]})
    cat = np.array(["compute", "compute", "compute", "launch", "compute"], dtype=object)
    scale, why = pipeline_whatif.balanced_scale(graph, pipeline, blocks, cat)
    assert why == "" and scale.tolist() == [0.25, 1.0, 0.25, 1.0, 1.0]


def test_balanced_stages_on_a_tiny_run(tmp_path):
    """Two GPipe stages (``tests/pipeline_runs.py``): the scenario is listed for a pipeline run, shortens the
    step, and names why on a run without stages."""
    run = tracekit.summarize(write_gpipe_run(tmp_path), cache=False, workers=1)
    table = tracekit.whatif(run).set_index("scenario")
    assert {"balanced_stages", "microbatches_x2"} <= set(table.index)
    assert table.loc["balanced_stages", "step_time_us"] <= table.loc["baseline", "step_time_us"]
    plain = tracekit.whatif(tracekit.summarize("sample_traces/gpt-gloo-2rank", cache=False, workers=1),
                            ["baseline", "balanced_stages", "microbatches_x2"]).set_index("scenario")
    assert math.isnan(plain.loc["balanced_stages", "step_time_us"])
    assert plain.loc["microbatches_x2", "reason"] == pipeline_whatif.NOT_PIPELINE
    assert "balanced_stages" not in tracekit.whatif(tracekit.summarize("sample_traces/gpt-gloo-2rank"))["scenario"].tolist()


def test_between_blocks_by_hand():
    """Rank 0's blocks [0, 10) and [15, 25) us; between them its thread runs a host op 12-14 (1 us of an enclosing op
    before it: 3 us, 1.5 a block) and a loss 10-11 (compute: 1 us, 0.5 a block). Its host op inside a block, its P2P
    span and step marker, and rank 1's node outside its block's span do not count."""
    blocks = pd.DataFrame({"rank": [0, 0, 1], "step": 3, "start_us": [0.0, 15.0, 0.0], "end_us": [10.0, 25.0, 10.0],
                           "compute_us": [10.0, 10.0, 10.0]})
    graph = pd.DataFrame({"rank": [0, 0, 0, 0, 0, 0, 0, 1, 1],
                          "start_ns": [0, 12e3, 15e3, 11e3, 0, 16e3, 10e3, 0, 50e3],
                          "end_ns": [10e3, 14e3, 25e3, 24e3, 0, 17e3, 11e3, 10e3, 60e3],
                          "busy_ns": [0, 1e3, 0, 0, 0, 0, 0, 0, 0],
                          "cat": ["compute", "launch", "compute", "comm", "marker", "launch", "compute", "compute",
                                  "compute"],
                          "name": ["mm", "aten::copy_", "mm", "gloo:send", "ProfilerStep#3", "aten::copy_", "nll_loss",
                                   "mm", "mm"]})
    assert pipeline_whatif.between_blocks(graph, blocks, {3}) == {0: (0.5, 1.5), 1: (0.0, 0.0)}


def test_between_blocks_leaves_out_send_and_receive_calls():
    """Rank 0 (blocks [0, 10) and [20, 30)) posts a send 10-11, a receive 11-18 and a send 18-19.5, and runs a host op
    19.5-20: only that op counts (0.25 a block). A call's time lies inside its transfer (from both posted to the
    receive's end), which the simulation pays as the hop; counting it here too would pay it twice."""
    blocks = pd.DataFrame({"rank": [0, 0], "step": 3, "start_us": [0.0, 20.0], "end_us": [10.0, 30.0],
                           "compute_us": [10.0, 10.0]})
    graph = pd.DataFrame({"rank": 0, "start_ns": [0, 10e3, 11e3, 18e3, 19.5e3, 20e3],
                          "end_ns": [10e3, 11e3, 18e3, 19.5e3, 20e3, 30e3], "busy_ns": 0.0,
                          "cat": ["compute", "launch", "launch", "launch", "launch", "compute"],
                          "name": ["mm", "c10d::send", "c10d::recv_", "c10d::send", "aten::copy_", "mm"]})
    assert pipeline_whatif.between_blocks(graph, blocks, {3}) == {0: (0.0, 0.25)}


def test_dispatch_by_hand():
    """Rank 0's block [0, 30) runs ops 0-5 (with a nested op 1-2), 7-10, 11-20 and 26-30: gaps 2, 1 and 6. Its
    block [40, 50) runs 40-44 and 47-50: gap 3. The rank's median gap is 2.5, so the first block dispatches 2 + 1 +
    2.5 = 5.5 us (the rest of its 6 us gap is a stall) and the second 2.5. A host op is no compute, and rank 1's
    ops do not count."""
    blocks = pd.DataFrame({"rank": [0, 0], "stage": 0, "step": 3, "microbatch": [0, 1], "phase": "F",
                           "start_us": [0.0, 40.0], "end_us": [30.0, 50.0], "compute_us": [25.0, 7.0]})
    starts = [0, 1, 7, 11, 26, 40, 47, 21, 5]
    ends = [5, 2, 10, 20, 30, 44, 50, 25, 6]
    graph = pd.DataFrame({"rank": [0] * 8 + [1], "start_ns": np.array(starts) * 1e3, "end_ns": np.array(ends) * 1e3,
                          "cat": ["compute"] * 7 + ["launch", "compute"]})
    assert pipeline_whatif.dispatch_per_block(graph, blocks).tolist() == [5.5, 2.5]
    assert pipeline_whatif.dispatch_per_block(graph, blocks.set_axis([7, 7])).tolist() == [5.5, 2.5]  # any labels
    assert pipeline_whatif.dispatch_per_block(None, blocks).tolist() == [0.0, 0.0]


def test_microbatch_prediction_keeps_each_actions_dispatch():
    # Each of stage 1's blocks spans 2 us of compute events apart by a 2 us gap, the rank's median: its dispatch. m = 2
    # at stage 1 F 7, B 10 (span 69): rank 0 F0 0-10, F1 10-20; rank 1 F0 11-18, B0 18-28, F1 28-35, B1 35-45; rank
    # 0 B0 29-49, B1 49-69. m = 4, work and hops halved but dispatch kept (stage 0 F 5, B 10; stage 1 F 4.5, B 6;
    # hop .5): rank 0 F0 0-5, F1 5-10; rank 1 F0 5.5-10, B0 10-16; rank 0 B0 16.5-26.5, F2 26.5-31.5; rank 1 F1
    # 16-20.5, B1 20.5-26.5; rank 0 B1 31.5-41.5, F3 41.5-46.5; rank 1 F2 32-36.5, B2 36.5-42.5; rank 0 B2
    # 46.5-56.5; rank 1 F3 47-51.5, B3 51.5-57.5; rank 0 B3 58-68. Without dispatch the spans are 65 and 62.5
    # (test_microbatch_prediction_by_hand).
    rows, blocks, p2p = _tables()
    mine = blocks["rank"] == 1
    blocks.loc[mine, "end_us"] += 2.0
    starts = np.concatenate([blocks.loc[mine, "start_us"], blocks.loc[mine, "start_us"] + 3.0])
    ends = np.concatenate([blocks.loc[mine, "start_us"] + 1.0, blocks.loc[mine, "end_us"]])
    graph = pd.DataFrame({"rank": 1, "start_ns": starts * 1e3, "end_ns": ends * 1e3, "busy_ns": 0.0,
                          "cat": "compute", "name": "mm"})
    predicted, facts, _ = pipeline_whatif.microbatch_prediction(rows, blocks, p2p, base_step_us=1000.0, graph=graph)
    assert facts["dispatch_us"] == {(0, "B"): 0.0, (0, "F"): 0.0, (1, "B"): 2.0, (1, "F"): 2.0}
    assert (facts["simulated_span_us"], facts["simulated_span_more_us"]) == (69.0, 68.0)
    assert predicted == 999.0


def test_microbatch_prediction_pays_each_actions_overhead():
    # Rank 0 busy 8 us from the end of its first block, 2 us an action. m = 2: F0 0-12, F1 12-24 on rank 0; rank 1 F0
    # 13-18, B0 18-26, F1 (arrived 25) 26-31, B1 31-39; rank 0 B0 (arrived 27) 27-49, B1 (arrived 40) 49-71.
    rows, blocks, p2p = _tables()
    graph = pd.DataFrame({"rank": [0], "start_ns": [10e3], "end_ns": [18e3], "busy_ns": [0.0],
                          "cat": ["launch"], "name": ["aten::copy_"]})
    _, facts, _ = pipeline_whatif.microbatch_prediction(rows, blocks, p2p, 1000.0, graph=graph)
    assert facts["between_blocks_us"] == {0: (0.0, 2.0), 1: (0.0, 0.0)}
    assert facts["simulated_span_us"] == 71.0


def test_microbatch_prediction_halves_the_compute_between_blocks():
    # Rank 1 computes 2 us between its blocks twice (a loss, say): 1 us an action, which halves with the microbatch.
    # m = 2 at stage 1 F 6, B 9: rank 0 F0 0-10, F1 10-20; rank 1 F0 11-17, B0 17-26; rank 0 B0 27-47; rank 1 F1
    # 26-32, B1 32-41; rank 0 B1 47-67. m = 4 (stage 0 F 5, B 10; stage 1 F 3, B 4.5; hop .5): rank 0 F0 0-5, F1
    # 5-10; rank 1 F0 5.5-8.5, B0 8.5-13; rank 0 B0 13.5-23.5, F2 23.5-28.5; rank 1 F1 13-16, B1 16-20.5; rank 0 B1
    # 28.5-38.5, F3 38.5-43.5; rank 1 F2 29-32, B2 32-36.5; rank 0 B2 43.5-53.5; rank 1 F3 44-47, B3 47-51.5; rank 0
    # B3 53.5-63.5.
    rows, blocks, p2p = _tables()
    graph = pd.DataFrame({"rank": 1, "start_ns": [15e3, 22e3], "end_ns": [17e3, 24e3], "busy_ns": 0.0,
                          "cat": "compute", "name": "nll_loss"})
    predicted, facts, why = pipeline_whatif.microbatch_prediction(rows, blocks, p2p, 1000.0, graph=graph)
    assert why == "" and facts["between_blocks_us"] == {0: (0.0, 0.0), 1: (1.0, 0.0)}
    assert (facts["simulated_span_us"], facts["simulated_span_more_us"]) == (67.0, 63.5)
    assert predicted == 996.5


def test_a_data_parallel_replica_is_not_added_to_its_stage():
    """The same pipeline run twice side by side (ranks 2 and 3 a replica of ranks 0 and 1): each action costs what
    one replica's does, and the prediction is the single pipeline's."""
    rows, blocks, p2p = _tables()
    replica = pd.concat([blocks, blocks.assign(rank=blocks["rank"] + 2)], ignore_index=True)
    rows2 = pd.concat([rows, rows.assign(rank=rows["rank"] + 2)], ignore_index=True)
    pairs = pd.concat([p2p, p2p.assign(src_rank=p2p["src_rank"] + 2, dst_rank=p2p["dst_rank"] + 2)], ignore_index=True)
    single = pipeline_whatif.microbatch_prediction(rows, blocks, p2p, 1000.0)
    both = pipeline_whatif.microbatch_prediction(rows2, replica, pairs, 1000.0)
    assert single[0] == both[0] == 997.5 and both[2] == ""


def test_the_span_check_is_made_at_the_measured_costs_whatever_the_compute_scale():
    """Scaled compute moves both simulated spans, not the measured one: the check against the measured blocks is
    made at the costs as measured (65 against 66 us), so a scale never refuses the prediction."""
    rows, blocks, p2p = _tables()
    for scale in ({0: 2.0}, {0: 0.5, 1: 0.5}):
        predicted, facts, why = pipeline_whatif.microbatch_prediction(rows, blocks, p2p, 1000.0, compute_scale=scale)
        assert why == "" and np.isfinite(predicted), (scale, why)
