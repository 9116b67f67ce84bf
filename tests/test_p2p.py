"""Send/recv paired across ranks (tracekit.run.p2p), their waits kept out of communication (run.commdims), process
groups and their dims (run.pgdims): tiny hand-worked traces, and the real pipeline runs where they are."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.run import pgdims
from tracedata import cpu, kernel, step, write_trace

F32 = {"Input Dims": [[1000]], "Input type": ["float"]}  # 4000 bytes


def gloo_p2p(op, posted, post_dur, span_end, peer_local):
    """gloo's P2P as torch writes it: the c10d op that posts it (peer in Concrete Inputs), then the async annotation
    that begins as the op ends."""
    name = "c10d::send" if op == "send" else "c10d::recv_"
    return [cpu(name, posted, post_dur, **{"Concrete Inputs": ["", "", str(peer_local), "0"]}),
            cpu(f"gloo:{op}", posted + post_dur, span_end - posted - post_dur, cat="user_annotation", **F32)]


def write_rank(path, events, rank, groups, world_size=2):
    info = {"backend": "gloo", "rank": rank, "world_size": world_size,
            "pg_config": [{"pg_name": n, "pg_desc": d, "pg_size": len(r), "ranks": r} for n, d, r in groups]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, "distributedInfo": info}))


DEFAULT = [("0", "default_pg", [0, 1])]


def test_two_stages_two_microbatches_by_hand(tmp_path):
    # mb0: rank 1 posts its recv at 70, rank 0 its send at 100 (sender late by 30): recv_wait 30, transfer 100..200.
    # mb1: rank 0 posts at 300, rank 1 at 400 (receiver late by 100): send_wait 100, transfer 400..450.
    r0 = [step(1, 0, 1000), cpu("aten::mm", 0, 90), cpu("aten::mm", 120, 170),
          *gloo_p2p("send", 100, 10, 400, 1), *gloo_p2p("send", 300, 10, 460, 1)]
    r1 = [step(1, 0, 1000), *gloo_p2p("recv", 70, 10, 200, 0), cpu("aten::mm", 210, 180),
          *gloo_p2p("recv", 400, 10, 450, 0)]
    write_rank(tmp_path / "rank-0.json", r0, 0, DEFAULT)
    write_rank(tmp_path / "rank-1.json", r1, 1, DEFAULT)
    s = tracekit.summarize(tmp_path, cache=False, window="all_steps")
    assert s.collectives.empty and s.mismatches.empty  # send/recv are not collectives
    p = s.p2p
    assert p["status"].tolist() == ["matched", "matched"]
    assert p[["src_rank", "dst_rank", "pair_index", "bytes"]].values.tolist() == [[0, 1, 0, 4000], [0, 1, 1, 4000]]
    assert p["recv_wait_us"].tolist() == [30, 0]
    assert p["send_wait_us"].tolist() == [0, 100]
    assert p["transfer_us"].tolist() == [100, 50]
    assert p["dim"].tolist() == ["pp", "pp"]
    ranks = s.ranks.set_index("rank")
    # rank 1: waiting 70..100, of which 80..100 in its gloo:recv span (70..80 is c10d::recv_ posting it: no
    # communication event of the breakdown). rank 0: its spans 110..460 less the transfers (110..200, 400..450)
    # = 200..400 and 450..460; less its compute under them (200..290): 290..400 and 450..460 = 120.
    assert ranks.loc[1, "p2p_wait_us"] == 20
    assert ranks.loc[0, "p2p_wait_us"] == 120
    # rank 0 before: comm 110..460 = 350, overlap 120..290 = 170, exposed 180. The waiting under compute (90)
    # leaves comm and overlap; the rest (120) leaves comm and exposed.
    assert ranks.loc[0, ["comm_us", "overlap_us", "exposed_comm_us"]].tolist() == [140, 80, 60]
    by_dim = s.comm_by_dim.set_index("rank")
    assert by_dim.loc[1, "dim"] == "pp" and by_dim.loc[1, "bytes"] == 8000 and by_dim.loc[1, "comm_us"] == 140  # 100..200, 410..450
    # The run's graph: each half of a pair ends after the other started; the replay and the critical path run.
    g = s.graph
    recvs, sends = g[(g["name"] == "gloo:recv").to_numpy()], g[(g["name"] == "gloo:send").to_numpy()]
    assert (recvs["pair_src"] >= 0).all() and (sends["pair_src"] >= 0).all()
    # A gloo half starts when its c10d op posted it (the span begins only as that op ends): the edge leaves the op.
    assert set(g.loc[recvs["pair_src"], "name"]) == {"c10d::send"}
    assert set(g.loc[sends["pair_src"], "name"]) == {"c10d::recv_"}
    # gloo's spans are async (rank 0's first send lasts 110..400 while its thread computes 120..290): each has a
    # lane of its own, so the thread's ops do not wait in the graph for a span to end.
    spans = g[g["name"].isin(["gloo:send", "gloo:recv"]).to_numpy()]
    assert spans["lane"].is_unique and not spans["lane"].isin(g.loc[g["name"] == "aten::mm", "lane"]).any()


def test_critical_path_crosses_to_the_sender_whose_slow_post_already_delivered(tmp_path):
    """Rank 0 computes 0..290, then its c10d::send posts the activation 300..500 (a loaded host: gloo's span
    begins only at 500, 500..700), but rank 1's recv (posted 100, span 110..350) has its data at 350: the data left
    while the op was posting. Rank 1 then computes 360..990; its step 2 (at 1000) is the last boundary.
    Walking back from 1000 on rank 1: host 990..1000, compute 360..990 (630), the wake-up after its recv 350..360
    (other), the transfer 300..350 from rank 0's post, then rank 0: host 290..300, compute 0..290. Had the edge
    left the span's start (500, after the recv ended) it would point back in time and be dropped: the path would
    stay on rank 1, as its own recv's 'transfer' and launch, and an unknown start."""
    r0 = [step(1, 0, 950), step(2, 950, 150), cpu("aten::mm", 0, 290), *gloo_p2p("send", 300, 200, 700, 1)]
    r1 = [step(1, 0, 1000), step(2, 1000, 100), *gloo_p2p("recv", 100, 10, 350, 0), cpu("aten::mm", 360, 630)]
    write_rank(tmp_path / "rank-0.json", r0, 0, DEFAULT)
    write_rank(tmp_path / "rank-1.json", r1, 1, DEFAULT)
    s = tracekit.summarize(tmp_path, cache=False, window="all_steps")
    assert s.p2p[["recv_wait_us", "transfer_us"]].values.tolist() == [[200, 50]]
    path = s.critical_path[s.critical_path["step"] == 1]
    got = {(int(r), str(c)): round(us, 3) for r, c, us in path[["rank", "category", "us"]].itertuples(index=False)}
    assert got == {(0, "compute"): 290, (0, "host"): 10, (1, "comm_transfer"): 50, (1, "other"): 10,
                   (1, "compute"): 630, (1, "host"): 10}
    assert path.loc[path["rank"] == 0, "waiting"].all() and path["ends_on_rank"].eq(1).all()


def test_a_gloo_send_waited_for_late_is_not_transfer_on_the_critical_path(tmp_path):
    """Rank 0 posts a send at 100 (span 110..900: gloo's span lasts until the work is waited for) and computes
    120..500; its thread then runs unrecorded Python until 900, waits on the send (already done) and computes
    905..990. Rank 1's recv (posted 50, span 60..200) had the data at 200. The send ends with its recv (200), so the
    op at 905 did not wait for it: the path on rank 0 is host 0..100 (before the send), the post (launch 100..110),
    host 110..120, compute 120..500, unrecorded host 500..905, compute 905..990 and host 990..1000. With the span's
    own end the op at 905 seemed to wait for it, and 110..900 read as 790 us of transfer."""
    r0 = [step(1, 0, 1000), step(2, 1000, 100), *gloo_p2p("send", 100, 10, 900, 1), cpu("aten::mm", 120, 380),
          cpu("aten::add", 905, 85)]
    r1 = [step(1, 0, 1000), step(2, 1000, 100), *gloo_p2p("recv", 50, 10, 200, 0), cpu("aten::mm", 210, 770)]
    write_rank(tmp_path / "rank-0.json", r0, 0, DEFAULT)
    write_rank(tmp_path / "rank-1.json", r1, 1, DEFAULT)
    s = tracekit.summarize(tmp_path, cache=False, window="all_steps")
    assert s.p2p[["transfer_us", "send_end_us"]].values.tolist() == [[100, 900]]  # the pair's own times as measured
    path = s.critical_path[s.critical_path["step"] == 1]
    got = {(int(r), str(c)): round(us, 3) for r, c, us in path[["rank", "category", "us"]].itertuples(index=False)}
    assert got == {(0, "host"): 100 + 10 + 405 + 10, (0, "launch"): 10, (0, "compute"): 380 + 85}
    send = s.graph[(s.graph["name"] == "gloo:send").to_numpy()].iloc[0]
    assert (send["start_ns"], send["end_ns"]) == (110_000, 200_000)


def test_both_ranks_send_before_they_receive_replays_without_a_cycle(tmp_path):
    """A batched exchange: each rank posts a send, then a recv, on one thread. Matched as a collective, the two
    sends waited for each other and each recv for the other rank's send: a cycle (ReplayError)."""
    for rank in (0, 1):
        events = [step(1, 0, 1000), step(2, 1000, 1000), cpu("aten::mm", 600, 300), cpu("aten::mm", 1600, 300)]
        for base in (0, 1000):
            events += gloo_p2p("send", base + 100 + 20 * rank, 10, base + 500, 1 - rank)
            events += gloo_p2p("recv", base + 150, 10, base + 400 + 30 * rank, 1 - rank)
        write_rank(tmp_path / f"rank-{rank}.json", events, rank, DEFAULT)
    s = tracekit.summarize(tmp_path, cache=False, window="all_steps")
    assert (s.p2p["status"] == "matched").all() and len(s.p2p) == 4
    per_step = s.critical_path.groupby("step")["us"].sum()
    assert per_step.loc[1] == pytest.approx(1000)


def test_gloo_peer_is_mapped_through_the_pipeline_group(tmp_path):
    """Ranks 0 and 2 of 3 in a pipeline group [0, 2]: rank 2 sends to its local peer 0 (= global 0); rank 0 receives
    from local 1 (= global 2). Through the default group, local 1 would be rank 1."""
    groups = [("0", "default_pg", [0, 1, 2]), ("7", "mesh_pp", [0, 2])]
    write_rank(tmp_path / "rank-0.json", [step(1, 0, 1000), *gloo_p2p("recv", 50, 10, 300, 1)], 0, groups, 3)
    write_rank(tmp_path / "rank-2.json", [step(1, 0, 1000), *gloo_p2p("send", 100, 10, 350, 0)], 2, groups, 3)
    s = tracekit.summarize(tmp_path, cache=False, window="all_steps")
    assert s.p2p[["src_rank", "dst_rank", "status", "pg", "dim"]].values.tolist() == [[2, 0, "matched", "7", "pp"]]
    assert s.p2p["recv_wait_us"].tolist() == [50]


NCCL_SR = "ncclDevKernel_SendRecv"


def nccl_p2p(op, ts, dur, peer, **extra):
    args = {"Collective name": op, "In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "Float",
            "Process Group Name": "3", "Process Group Description": "pp_p2p_downstream", **extra}
    args["Dst Rank" if op == "send" else "Src Rank"] = peer
    return kernel(NCCL_SR, ts, dur, stream=20, **args)


def tp_all_reduce(ts, dur, seq):
    return kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", ts, dur, stream=21, **{
        "Collective name": "allreduce", "In msg nelems": 10, "Out msg nelems": 10, "dtype": "Float", "Group size": 2,
        "Process Group Name": "5", "Process Group Description": "mesh_tp", "Seq": seq})


def test_nccl_peers_from_dst_and_src_rank_and_a_cut_and_an_unmatched(tmp_path):
    # step 1: rank 0 sends twice, rank 1 receives once: the second send is unmatched. step 2: rank 0 sends, but
    # rank 1's trace ends with step 1: cut, not unmatched.
    r0 = [step(1, 0, 1000), step(2, 1000, 1000), nccl_p2p("send", 100, 50, 1), nccl_p2p("send", 600, 50, 1),
          nccl_p2p("send", 1100, 50, 1), tp_all_reduce(300, 20, 1)]
    r1 = [step(1, 0, 1000), nccl_p2p("recv", 60, 90, 0), tp_all_reduce(310, 10, 1)]
    write_trace(tmp_path / "rank0.json", r0, rank=0)
    write_trace(tmp_path / "rank1.json", r1, rank=1)
    s = tracekit.summarize(tmp_path, cache=False, window="all_steps")
    p = s.p2p.sort_values("send_start_us")
    assert p["status"].tolist() == ["matched", "unmatched", "cut"]
    first = p.iloc[0]
    assert (first["recv_wait_us"], first["transfer_us"], first["send_wait_us"]) == (40, 50, 0)
    assert first["pg"] == "3" and first["dim"] == "pp" and first["bytes"] == 4000
    assert s.mismatches["kind"].tolist() == ["p2p_unmatched"]
    assert "no recv on rank 1" in s.mismatches["detail"].iloc[0]
    assert s.collectives["op"].astype(str).tolist() == ["all_reduce", "all_reduce"]
    assert s.collectives[["pg_desc", "dim"]].drop_duplicates().values.tolist() == [["mesh_tp", "tp"]]


def test_dims_from_descriptions_and_from_what_a_group_carries():
    assert [pgdims.dim_of_desc(d) for d in ("mesh_tp", "mesh_dp_shard", "mesh_dp_replicate", "fsdp_reduce_scatter",
                                            "pp_p2p_upstream", "default_pg", "undefined", "my_group")] == [
        "tp", "fsdp", "dp", "fsdp", "pp", None, None, "my_group"]
    op = pd.Series(["all_gather", "all_reduce", "all_reduce", "send"])
    hint = pgdims.evidence(op, fsdp_run=True, ddp_run=True)
    assert hint.tolist() == ["fsdp", "dp", "dp", "pp"]
    # The default group carries FSDP's gathers and DDP's all_reduce: both labels, on every call of it.
    dims = pgdims.label_dims(pd.Series(["0", "0", "5", None]), pd.Series(["default_pg", "default_pg", "mesh_tp", None]),
                             hint)
    assert dims.tolist() == ["dp+fsdp", "dp+fsdp", "tp", "pp"]
    # gloo names no group: the one group whose ranks are the call's matched ranks.
    groups = pgdims.group_table([[{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3]},
                                  {"pg_name": "2", "pg_desc": "mesh_tp", "ranks": [0, 1]}]])
    calls = pd.DataFrame({"rank": [0, 1, 0, 1, 2, 3], "match_id": [4, 4, 9, 9, 9, 9], "pg": [None] * 6,
                          "pg_desc": [None] * 6})
    assert pgdims.infer_groups(calls, groups)["pg_desc"].tolist() == ["mesh_tp"] * 2 + ["default_pg"] * 4


RUNS = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.mark.parametrize("run", ["pp-gpipe-2rank", "pp-interleaved-2rank", "pp-1f1b-4rank"])
def test_real_pipeline_runs_pair_every_send_and_carry_the_activations(run, summaries):
    layout = json.loads((RUNS / run / "run.json").read_text())["layout"]
    s = summaries(RUNS / run, cache=False)
    p = s.p2p
    assert (p["status"] == "matched").all() and len(p)
    boundaries = layout["num_stages"] - 1
    expected = layout["activation_bytes_per_microbatch"] * layout["microbatches"] * 2 * boundaries
    assert set(p.groupby("step")["bytes"].sum()) == {expected}
    assert s.collectives.empty or not s.collectives["op"].astype(str).isin(["send", "recv"]).any()
    # Each step's critical path adds up to that step on the rank it ends on, and crosses ranks (stages).
    cp = s.critical_path
    path = cp.groupby("step")["us"].sum()
    ends = cp.groupby("step")["ends_on_rank"].first()
    step_us = s.steps.set_index(["rank", "step"])["step_us"]
    assert len(path) and np.allclose(path, [step_us[(r, n)] for n, r in ends.items()], rtol=0, atol=1.0)
    assert (cp.groupby("step")["rank"].nunique() == 2).all() if layout["num_stages"] == 2 else cp["rank"].nunique() > 1


def test_gloo_collectives_take_their_group_from_what_enqueued_them(tmp_path):
    """gloo names no group: a c10d op under DTensor's Redistribute runs in the rank's mesh_tp group, one under an
    FSDP:: annotation in its data-parallel group (mesh_dp, whose FSDP use makes it fsdp); a broadcast under neither
    stays unknown: its ranks 0, 1, 2 are no group's (rank 3, in the default group, was not read). Ranks 0, 1 share tp group 3; ranks 0, 2 dp group 1; so the two calls match on different ranks."""
    groups = {0: [("0", "default_pg", [0, 1, 2, 3]), ("1", "mesh_dp", [0, 2]), ("3", "mesh_tp", [0, 1])],
              1: [("0", "default_pg", [0, 1, 2, 3]), ("2", "mesh_dp", [1, 3]), ("3", "mesh_tp", [0, 1])],
              2: [("0", "default_pg", [0, 1, 2, 3]), ("1", "mesh_dp", [0, 2]), ("4", "mesh_tp", [2, 3])]}
    for rank, mine in groups.items():
        events = [step(1, 0, 1000), cpu("Redistribute", 100, 100), cpu("c10d::allreduce_", 110, 20),
                  cpu("gloo:all_reduce", 120, 50, cat="user_annotation", tid=9, **F32),
                  cpu("FSDP::all_gather (blocks.0)", 300, 100, cat="user_annotation"),
                  cpu("c10d::_allgather_base_", 310, 20),
                  cpu("gloo:all_gather", 320, 50, cat="user_annotation", tid=9, **F32),
                  cpu("c10d::broadcast_", 500, 20), cpu("gloo:broadcast", 510, 20, cat="user_annotation", tid=9, **F32)]
        write_rank(tmp_path / f"rank-{rank}.json", events, rank, mine, world_size=4)
    s = tracekit.summarize(tmp_path, cache=False, window="all_steps")
    c = s.collectives.sort_values(["rank", "start_us"])
    assert c[["rank", "op", "pg", "pg_desc", "dim"]].fillna("-").astype(str).values.tolist() == [
        ["0", "all_reduce", "3", "mesh_tp", "tp"], ["0", "all_gather", "1", "mesh_dp", "fsdp"],
        ["0", "broadcast", "-", "-", "unknown"],
        ["1", "all_reduce", "3", "mesh_tp", "tp"], ["1", "all_gather", "2", "mesh_dp", "fsdp"],
        ["1", "broadcast", "-", "-", "unknown"],
        ["2", "all_reduce", "4", "mesh_tp", "tp"], ["2", "all_gather", "1", "mesh_dp", "fsdp"],
        ["2", "broadcast", "-", "-", "unknown"]]
    # Matched within their groups: the tp call of ranks 0 and 1, the gather of ranks 0 and 2.
    assert c.groupby("match_id")["rank"].agg(lambda r: tuple(sorted(r))).value_counts().to_dict() == {
        (0, 1): 1, (0, 2): 1, (0, 1, 2): 1, (1,): 1, (2,): 1}


def test_a_queued_gloo_collective_keeps_its_group_past_a_pipeline_receive(tmp_path):
    """pp x dp: ranks 0 and 2 are one dp group (mesh_dp [0, 2]), each in its own pp group. Both gather inside
    FSDP::all_gather [100, 200) (c10d::_allgather_base_ at 110), then post a pipeline receive (c10d::recv_ at 300).
    On rank 2 gloo's thread starts the gather at 290; on rank 0 gloo's threads were busy until 320, so it starts then,
    after the receive was posted. The receive enqueues no collective: rank 0's gather is still FSDP's, in mesh_dp,
    and matches rank 2's (taken for the receive's, it had no group: two calls unmatched on different groups)."""
    groups = {0: [("0", "default_pg", [0, 1, 2, 3]), ("1", "mesh_pp", [0, 1]), ("3", "mesh_dp", [0, 2])],
              2: [("0", "default_pg", [0, 1, 2, 3]), ("2", "mesh_pp", [2, 3]), ("3", "mesh_dp", [0, 2])]}
    for rank, gather_at in ((0, 320), (2, 290)):
        events = [step(1, 0, 1000), cpu("FSDP::all_gather", 100, 100, cat="user_annotation"),
                  cpu("c10d::_allgather_base_", 110, 20),
                  cpu("gloo:all_gather", gather_at, 50, cat="user_annotation", tid=9, **F32),
                  cpu("c10d::recv_", 300, 10, **{"Concrete Inputs": ["", "", "1", "0"]})]
        write_rank(tmp_path / f"rank-{rank}.json", events, rank, groups[rank], world_size=4)
    s = tracekit.summarize(tmp_path, cache=False, window="all_steps")
    c = s.collectives.sort_values("rank")
    assert c[["rank", "pg", "pg_desc", "dim"]].astype(str).values.tolist() == [["0", "3", "mesh_dp", "fsdp"],
                                                                              ["2", "3", "mesh_dp", "fsdp"]]
    assert c["matched"].all() and c["match_id"].nunique() == 1 and s.mismatches.empty


def test_real_tensor_parallel_counts_per_step_are_commdebugmode_s(summaries):
    layout = json.loads((RUNS / "tp-fsdp-4rank" / "run.json").read_text())["layout"]
    s = summaries(RUNS / "tp-fsdp-4rank", cache=False)
    c = s.collectives[s.collectives["in_window"]]
    per_step = c.groupby(["rank", "step", "dim", "op"], observed=True).size().groupby(["dim", "op"]).agg(set)
    assert per_step[("tp", "all_reduce")] == {layout["comm_debug_counts"]["tp"]["all_reduce"]}
    assert per_step[("fsdp", "all_gather")] == {layout["comm_debug_counts"]["fsdp"]["all_gather"]}
    # gloo runs FSDP2's reduce-scatter as an all_reduce (annotated gloo:all_reduce)
    assert per_step[("fsdp", "all_reduce")] == {layout["comm_debug_counts"]["fsdp"]["reduce_scatter"]}
    assert s.mismatches.empty


def test_exposed_communication_finding_names_the_pipeline_and_not_its_waits():
    from tracekit.findings.comm_dims import by_dimension
    from tracekit.findings.finding import Finding

    found = (Finding("exposed_comm", "high", (1,), "Communication not hidden under compute takes up to 30%.",
                     "Overlap communication with compute and prefer fewer, larger collectives.",
                     {"op_shares": {}}),)
    dims = pd.DataFrame({"rank": [1, 1, 2], "dim": ["pp", "tp", "pp"], "calls": [8, 4, 8],
                         "comm_us": [300.0, 100.0, 50.0], "exposed_us": [300.0, 100.0, 50.0], "bytes": [1.0, 1, 1]})
    (f,) = by_dimension(found, dims)
    assert "pp 75%, tp 25% of the exposed communication" in f.message and "bubble, p2p_wait_us" in f.message
    assert f.recommendation.startswith("send / recv (pipeline stages)")
    # A data-parallel run's finding stays as it was.
    ddp = dims.assign(dim=["dp", "unknown", "dp"])
    assert by_dimension(found, ddp) == found


def test_communication_page_shows_dims_and_pairs(tmp_path, monkeypatch):
    """The viewer's Communication page on a pipeline run without collectives: the dims table and the pairs."""
    pytest.importorskip("streamlit")
    import sys

    from streamlit.testing.v1 import AppTest
    from viewer_runs import REPO

    run = tmp_path / "runs" / "pp"
    r0 = [step(1, 0, 1000), cpu("aten::mm", 0, 90), *gloo_p2p("send", 100, 10, 400, 1)]
    r1 = [step(1, 0, 1000), *gloo_p2p("recv", 70, 10, 200, 0), cpu("aten::mm", 210, 180)]
    write_rank(run / "rank-0.json", r0, 0, DEFAULT)
    write_rank(run / "rank-1.json", r1, 1, DEFAULT)
    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(tmp_path / "runs")])
    at = AppTest.from_file(str(REPO / "app" / "main.py"), default_timeout=60)
    at.query_params.update({"run": "runs/pp", "page": "communication"})
    at.run()
    assert not at.exception, at.exception[0].value if at.exception else ""
    tables = [d.value for d in at.dataframe]
    assert "dim" in tables[0].columns and set(tables[0]["dim"]) == {"pp"}
    assert tables[1]["status"].tolist() == ["matched"] and tables[1]["recv_wait_ms"].tolist() == [0.03]


def test_without_pg_config_the_local_peer_is_the_global_rank(tmp_path):
    write_rank(tmp_path / "rank-0.json", [step(1, 0, 1000), *gloo_p2p("send", 100, 10, 300, 1)], 0, [])
    write_rank(tmp_path / "rank-1.json", [step(1, 0, 1000), *gloo_p2p("recv", 50, 10, 250, 0)], 1, [])
    s = tracekit.summarize(tmp_path, cache=False, window="all_steps")
    assert s.p2p[["src_rank", "dst_rank", "status", "recv_wait_us"]].values.tolist() == [[0, 1, "matched", 50]]


def test_steps_split_p2p_waiting_out_as_the_ranks_do(tmp_path):
    """The steps table takes a P2P call's waiting out of communication as the rank table does, step by step: the
    step after the window too (its waiting is against every step's compute, not only the window's)."""
    r0 = [step(1, 0, 1000), step(2, 1000, 1000), cpu("aten::mm", 0, 90), cpu("aten::mm", 120, 170),
          *gloo_p2p("send", 100, 10, 400, 1), *gloo_p2p("send", 300, 10, 460, 1),
          cpu("aten::mm", 1000, 90), *gloo_p2p("send", 1100, 10, 1500, 1)]
    r1 = [step(1, 0, 1000), step(2, 1000, 1000), *gloo_p2p("recv", 70, 10, 200, 0), cpu("aten::mm", 210, 180),
          *gloo_p2p("recv", 400, 10, 450, 0), *gloo_p2p("recv", 1300, 10, 1400, 0)]
    write_rank(tmp_path / "rank-0.json", r0, 0, DEFAULT)
    write_rank(tmp_path / "rank-1.json", r1, 1, DEFAULT)
    s = tracekit.summarize(tmp_path, cache=False)  # window: step 1
    steps = s.steps.set_index(["rank", "step"])
    cols = ["compute_us", "overlap_us", "exposed_comm_us", "p2p_wait_us", "other_us", "comm_us"]
    # rank 0, step 1 (as the test above): comm 110..460 = 350, compute 0..90 + 120..290 = 260, overlap 170; waiting
    # 290..400 + 450..460 = 120 exposed, 200..290 = 90 under compute (which becomes compute not overlapped).
    # Before: compute 90, overlap 170, exposed 180, other 1000 - 260 - 350 + 170 = 560.
    assert steps.loc[(0, 1), cols].tolist() == [180, 80, 60, 120, 560, 140]
    # rank 0, step 2: send posted 1100 (span 1110..1500), recv posted 1300 (span 1310..1400): transfer 1300..1400,
    # waiting 1110..1300 + 1400..1500 = 290; comm 390, compute 1000..1090, other 1000 - 90 - 390 = 520.
    assert steps.loc[(0, 2), cols].tolist() == [90, 0, 100, 290, 520, 100]
    # rank 1, step 1: waiting 80..100 (its first recv's span before the send was posted); comm 80..200 + 410..450.
    assert steps.loc[(1, 1), cols].tolist() == [180, 0, 140, 20, 660, 140]
    assert steps.loc[(1, 2), cols].tolist() == [0, 0, 90, 0, 910, 90]
    parts = steps[["compute_us", "overlap_us", "exposed_comm_us", "p2p_wait_us", "other_us"]].sum(axis=1)
    assert parts.tolist() == steps["step_us"].tolist()
    window = s.steps[s.steps["in_window"]].groupby("rank")[["p2p_wait_us", "comm_us", "exposed_comm_us"]].sum()
    ranks = s.ranks.set_index("rank")
    assert window.values.tolist() == ranks.loc[window.index, ["p2p_wait_us", "comm_us", "exposed_comm_us"]].values.tolist()


def test_a_receive_posted_early_holds_its_thread_only_while_it_waits(tmp_path):
    """A runtime pipeline schedule posts a receive, computes, then waits for it inside its next action: gloo's span
    runs from the post (20) to the wait's return (400), but the thread computed until 300. Rank 0 posts its send at
    100: the sender was not late for a receiver that began waiting at 300 (recv_wait 0), and the transfer is the
    blocked part, 300..400 (not 100..400). The critical path through the receive counts those 100 us as transfer
    and the 270 us of compute before it as compute."""
    r0 = [step(1, 0, 1000), *gloo_p2p("send", 100, 10, 150, 1)]
    # Rank 1's step ends last (1100), so the step's critical path ends on it.
    r1 = [step(1, 0, 1100), *gloo_p2p("recv", 10, 10, 400, 0), cpu("aten::mm", 30, 270), cpu("aten::mm", 400, 100)]
    write_rank(tmp_path / "rank-0.json", r0, 0, DEFAULT)
    write_rank(tmp_path / "rank-1.json", r1, 1, DEFAULT)
    s = tracekit.summarize(tmp_path, cache=False, window="all_steps")
    p = s.p2p.iloc[0]
    assert (p["status"], p["recv_wait_us"], p["send_wait_us"], p["transfer_us"]) == ("matched", 0, 0, 100)
    g = s.graph
    recv = g.index[(g["name"] == "gloo:recv").to_numpy()][0]
    assert g.loc[int(g.loc[recv, "dr"]), "start_ns"] == 30_000  # its end waits on the first mm, not on its own post
    events = s.critical_path_events
    mine = events[(events["rank"] == 1) & (events["name"] == "gloo:recv")]
    assert mine["category"].astype(str).tolist() == ["comm_transfer"]
    assert (mine["end_us"] - mine["start_us"]).sum() == pytest.approx(100)
    mm = events[(events["rank"] == 1) & (events["name"] == "aten::mm") & (events["category"] == "compute")]
    assert (mm["end_us"] - mm["start_us"]).sum() == pytest.approx(370)
