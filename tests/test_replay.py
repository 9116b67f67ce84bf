"""Replay and what-if on tiny hand-built CPU (gloo) runs whose every replayed time is worked out here by hand.

The run (times in ms; both ranks, step k starts at T = 100 (k - 1), ProfilerStep#1..#3, the window is steps 1-2):
  rank 0, training thread: aten::mm [T, T+20], c10d::allreduce_ [T+20, T+21], copy [T+60, T+61], add [T+61, T+70]
  rank 1, training thread: straggler_sleep [T, T+30], aten::mm [T+30, T+50], c10d::allreduce_ [T+50, T+51],
                           copy [T+60, T+61], add [T+61, T+70]
  gloo thread:             gloo:all_reduce rank 0 [T+21, T+60], rank 1 [T+51, T+60]
So rank 0 waits for rank 1 (the last arrival) 30 ms at every all-reduce, the transfer takes 9 ms, and both ranks
resume when it ends. Each step then ends with 30 ms of unrecorded host time before the next ProfilerStep.
ProfilerStep#3 [200, 210] holds nothing; the graph's end marker sits where it ends.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit import fmt
from tests.tracedata import cpu, step, write_trace
from tracekit.predict import replay
from tracekit.rank.graph import END_MARKER
from tracekit.findings.finding import Finding
from tracekit.predict.predicted import annotate_findings
from tracekit.predict.scenarios import straggler_factors

MS = 1000  # trace times are microseconds


def _rank_events(rank: int) -> list[dict]:
    late = 30 if rank == 1 else 0
    events = []
    for k in (1, 2):
        t = 100 * (k - 1)
        events.append(step(k, t * MS, 100 * MS))
        if late:
            events.append(cpu("straggler_sleep", t * MS, late * MS, cat="user_annotation"))
        events += [cpu("aten::mm", (t + late) * MS, 20 * MS),
                   cpu("c10d::allreduce_", (t + late + 20) * MS, 1 * MS),
                   cpu("gloo:all_reduce", (t + late + 21) * MS, (39 - late) * MS, cat="user_annotation", tid=2),
                   cpu("torch.distributed.ddp.reducer::copy_bucket_to_grad", (t + 60) * MS, 1 * MS),
                   cpu("aten::add_", (t + 61) * MS, 9 * MS)]
    events.append(step(3, 200 * MS, 10 * MS))
    return events


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gloo-straggler")
    for rank in (0, 1):
        write_trace(folder / f"rank-{rank}.pt.trace.json.gz", _rank_events(rank), rank=rank, backend="gloo")
    return tracekit.summarize(folder, cache=False, workers=1)


def test_graph_edges(gloo_run):
    g = gloo_run.graph
    names = g["name"].astype(str)
    gloo = g[names == "gloo:all_reduce"]
    # Each collective starts after the c10d op that enqueued it (from that op's start)...
    assert (names.to_numpy()[gloo["ps"].to_numpy()] == "c10d::allreduce_").all()
    # ... both ranks' calls of one step are one group ...
    assert gloo.groupby("step")["group"].nunique().eq(1).all() and gloo["group"].nunique() == 2
    # ... and the training thread resumes when it ends (the wait the trace does not record).
    copy = g[names.str.contains("copy_bucket")]
    assert (copy["pe"].to_numpy() == gloo.index.to_numpy()).all()
    assert (g.loc[names == "aten::mm", "pe"] == -1).all()  # a short gap after an op is no wait


def test_measured_delays_and_tails(gloo_run):
    model = replay.measure(gloo_run.graph)
    g = gloo_run.graph
    names = g["name"].astype(str).to_numpy()
    gloo = names == "gloo:all_reduce"
    np.testing.assert_allclose(model.tail[gloo], 9 * MS * 1e3)           # transfer after the last arrival
    np.testing.assert_allclose(model.delay[gloo], 1 * MS * 1e3)          # 1 ms after its c10d op began
    markers = (g["cat"] == "marker").to_numpy()
    end = markers & (names == END_MARKER)
    np.testing.assert_allclose(model.delay[markers & ~end & (g["step"] > 1).to_numpy()], 30 * MS * 1e3)  # unrecorded
    # Where ProfilerStep#3 [200, 210] ends: 10 ms after its own marker, as step "4" would begin.
    assert g.loc[end, "step"].tolist() == [4, 4]
    np.testing.assert_allclose(model.delay[end], 10 * MS * 1e3)
    start, end = replay.simulate(model)
    np.testing.assert_array_equal(start, model.start)
    np.testing.assert_array_equal(end, model.end)


@pytest.mark.parametrize("scenario, step_ms", [
    ("baseline", 100.0),
    ("perfect_overlap", 91.0),    # the 9 ms transfer gone; every rank still resumes when rank 1 arrives
    ("comm_x3", 94.0),            # 9 ms -> 3 ms
    ("no_host_gaps", 70.0),       # the 30 ms before each ProfilerStep gone; the recorded sleep stays
    ("no_data_wait", 100.0),      # no DataLoader in this run
])
def test_scenarios(gloo_run, scenario, step_ms):
    table = tracekit.whatif(gloo_run, scenarios=["baseline", scenario])
    got = table.iloc[1]
    assert got["step_time_us"] == pytest.approx(step_ms * MS, abs=1e-6)
    assert got["speedup"] == pytest.approx(100.0 / step_ms)


def test_the_last_step_counts_in_the_all_steps_window(tmp_path):
    """With every step in the window, step 3 (10 ms, to where its ProfilerStep ends) is replayed too:
    baseline (100 + 100 + 10) / 3 = 70 ms; no_host_gaps: steps 1-2 lose their 30 ms and step 3 its 10 ms."""
    for rank in (0, 1):
        write_trace(tmp_path / f"rank-{rank}.pt.trace.json.gz", _rank_events(rank), rank=rank, backend="gloo")
    s = tracekit.summarize(tmp_path, window="all_steps", cache=False, workers=1)
    table = tracekit.whatif(s, ["baseline", "no_host_gaps"]).set_index("scenario")["step_time_us"]
    assert table["baseline"] == pytest.approx(70 * MS) == s.steps["step_us"].mean()
    assert table["no_host_gaps"] == pytest.approx((70 + 70 + 0) / 3 * MS)


def test_a_zero_length_last_step_and_an_event_named_like_the_end_marker(tmp_path):
    """ProfilerStep#3 with no duration holds no event, so only its name says its number: it is replayed as 0 ms,
    and the baseline stays the measured mean ((100 + 100 + 0) / 3). A trace's own event named like the graph's end
    marker (as in a re-read Perfetto export) is read as any other."""
    for rank in (0, 1):
        events = [e for e in _rank_events(rank) if e["name"] != "ProfilerStep#3"] + [step(3, 200 * MS, 0)]
        events.append(cpu(END_MARKER, 150 * MS, 1, cat="user_annotation"))
        write_trace(tmp_path / f"rank-{rank}.pt.trace.json.gz", events, rank=rank, backend="gloo")
    s = tracekit.summarize(tmp_path, window="all_steps", cache=False, workers=1)
    assert s.steps["step_us"].mean() == pytest.approx(200 / 3 * MS)
    assert tracekit.whatif(s, ["baseline"]).loc[0, "step_time_us"] == pytest.approx(200 / 3 * MS)
    markers = s.graph[s.graph["cat"] == "marker"]
    assert sorted(markers.loc[markers["rank"] == 0, "step"]) == [1, 2, 3, 4]


def test_no_straggler(gloo_run):
    """Rank 1 arrives last at both all-reduces. Its time since its previous arrival is cut to rank 0's for the same
    collective, compute and host time each on its own:
      all-reduce 1: host: rank 1 sleep 30 + c10d 1 = 31 ms, rank 0 c10d 1 ms; compute: mm 20 on both
      all-reduce 2: host: rank 1 30 (before ProfilerStep#2) + sleep 30 + c10d 1 = 61 ms, rank 0 31 ms;
                    compute: copy 1 + add 9 + mm 20 = 30 ms on both."""
    h1, h2 = 1 / 31, 31 / 61
    delay_factor, tail_factor, busy_factor = straggler_factors(gloo_run.graph, replay.measure(gloo_run.graph))
    g = gloo_run.graph
    names, rank1 = g["name"].astype(str).to_numpy(), (g["rank"] == 1).to_numpy()
    sleeps = np.flatnonzero(names == "straggler_sleep")
    assert tail_factor[sleeps].tolist() == pytest.approx([h1, h2])
    assert (tail_factor[np.isin(names, ["aten::mm", "aten::add_"])] == 1).all()  # same compute: not cut
    assert (delay_factor[~rank1] == 1).all() and (tail_factor[~rank1] == 1).all()
    # Replay, ms. Step 1: rank 1 hands the collective to gloo 1 ms after its c10d op starts, at 30 h1 + 20.
    arrive1 = 30 * h1 + 20 + 1
    end1 = arrive1 + 9
    marker2 = {0: end1 + 1 + 9 + 30, 1: end1 + 1 + 9 + 30 * h2}
    # Step 2: each rank from its own ProfilerStep#2; rank 1 sleeps 30 h2 ms.
    arrive2 = max(marker2[0] + 20 + 1, marker2[1] + 30 * h2 + 20 + 1)
    marker3 = arrive2 + 9 + 1 + 9 + 30  # copy, add, host: after the last collective nothing is cut
    expected = np.mean([np.mean([marker2[r], marker3 - marker2[r]]) for r in (0, 1)])
    got = tracekit.whatif(gloo_run, scenarios=["no_straggler"]).loc[0, "step_time_us"]
    assert got == pytest.approx(expected * MS, rel=1e-9)
    assert got < 72 * MS  # close to the 70 ms that rank 0 alone needs


def test_compute_scale(gloo_run):
    """Compute nodes (mm, copy, add) of rank 0 twice as slow. Step 1: rank 0 still arrives first (41 < 51), then its
    copy and add take 2 + 18: ProfilerStep#2 at 60 + 20 + 30 = 110 (rank 1: 100). Step 2: both arrive at 151,
    transfer to 160, rank 0 reaches ProfilerStep#3 at 160 + 20 + 30 = 210, rank 1 at 160 + 10 + 30 = 200.
    Rank 0's steps: 110 and 100; rank 1's: 100 and 100."""
    table = tracekit.whatif(gloo_run, scenarios=["baseline"], compute_scale={0: 2.0})
    assert table.loc[0, "step_time_us"] == pytest.approx(np.mean([np.mean([110, 100]), 100]) * MS)


def test_critical_path(gloo_run):
    """Step 1 ends on rank 0 (a tie at 100 ms goes to the lower rank). Walking back: 30 ms of host time, the add
    (9) and the copy (1), the 9 ms transfer after rank 1 arrived; then on rank 1 (rank 0 waiting for it): the 1 ms
    hand-off to gloo, its mm (20) and its sleep (30)."""
    path = gloo_run.critical_path
    one = path[path["step"] == 1].set_index(["rank", "category"])["us"]
    assert one.sum() == pytest.approx(100 * MS)
    assert one[(0, "host")] == pytest.approx(30 * MS)
    assert one[(0, "compute")] == pytest.approx(10 * MS)
    assert one[(0, "comm_transfer")] == pytest.approx(9 * MS)
    assert one[(1, "launch")] == pytest.approx(1 * MS)
    assert one[(1, "compute")] == pytest.approx(20 * MS)
    assert one[(1, "host")] == pytest.approx(30 * MS)
    assert path.loc[path["rank"] == 1, "waiting"].all() and not path.loc[path["rank"] == 0, "waiting"].any()
    events = gloo_run.critical_path_events
    assert list(events.loc[events["step"] == 1, "name"])[:3] == ["straggler_sleep", "aten::mm", "gloo:all_reduce"]
    # Names and kinds are categories of what is on the path (a large trace's path has millions of rows, a few
    # hundred names): a byte or two a row, not a string.
    assert events["name"].dtype == "category" and events["kind"].dtype == "category"
    assert list(events["name"].cat.categories) == sorted(set(events["name"].astype(str)))  # sorts as text does


def test_findings_quote_the_predicted_saving(gloo_run):
    quoted = [f for f in gloo_run.findings if "predicted_saving_us" in f.evidence]
    assert quoted, [f.kind for f in gloo_run.findings]
    for f in quoted:
        row = tracekit.whatif(gloo_run, scenarios=[f.evidence["scenario"]]).iloc[0]
        assert f.evidence["predicted_saving_us"] == pytest.approx(row["saving_us"])
        assert f"-{fmt.ms(row['saving_us'], unit=True)}/step" in f.message


def test_a_fix_that_gains_nothing_says_so(gloo_run):
    """No DataLoader runs here, so removing its waits saves 0 ms: a data-loading finding (made up for the test) keeps
    what it saw and its severity, and says the replay predicts no gain; the straggler's fix (test_no_straggler)
    is quoted as a saving."""
    seen = Finding("data_loading", "high", (0,), "The device waits for the next batch.", "Load data ahead.", {})
    slow = Finding("straggler", "high", (1,), "Rank 1 arrives last.", "Look at rank 1.", {})
    window = gloo_run.steps.loc[gloo_run.steps["in_window"].astype(bool), ["rank", "step"]]
    none, saved = annotate_findings((seen, slow), gloo_run.graph, window)
    assert none.severity == "high" and none.evidence["predicted_saving_us"] == pytest.approx(0.0, abs=1e-6)
    assert none.message == ("The device waits for the next batch. Predicted by replay: removing DataLoader waits: "
                            "no measurable gain (100.00 against 100.00 ms/step): the steps' critical paths do not wait "
                            "on it.")
    gain = tracekit.whatif(gloo_run, ["no_straggler"]).loc[0, "saving_us"]
    assert gain > 20 * MS and saved.message.endswith(f"removing rank 1's delay: -{fmt.ms(gain, unit=True)}/step "
                                                     f"(-{gain / (100 * MS):.0%}).")


def test_unknown_scenario(gloo_run):
    with pytest.raises(ValueError, match="unknown scenario"):
        tracekit.whatif(gloo_run, scenarios=["comm_x0"])


def test_simulate_converges_on_a_chain_across_lanes():
    """Two lanes: a (0-10) -> b on lane 2 waits for a's end, 5 ms later, lasts 10; c after b on lane 2."""
    graph = pd.DataFrame({
        "rank": 0, "lane": [0, 1, 1], "start_ns": [0, 15, 25], "end_ns": [10, 25, 40], "step": 1,
        "cat": pd.Categorical(["compute"] * 3), "name": pd.Categorical(["a", "b", "c"]), "in_data": False,
        "ps": -1, "pe": [-1, 0, -1], "dr": -1, "group": -1})
    model = replay.measure(graph)
    assert model.delay.tolist() == [0, 5, 0] and model.tail.tolist() == [10, 10, 15]
    start, end = replay.simulate(model, tail=np.array([20.0, 10, 15]))  # a twice as long
    assert start.tolist() == [0, 25, 35] and end.tolist() == [20, 35, 50]


def test_enclosing_ops_own_time_is_compute(tmp_path):
    """One CPU rank: aten::linear [T, T+40] holds aten::mm [T+10, T+30]; aten::add_ [T+60, T+70]; steps of 100 ms.
    The graph's nodes are the innermost ops (mm, add_); the 20 ms of linear's own time in the gaps before them is
    ``busy`` (compute), the other 50 ms per step are host time."""
    events = []
    for k in (1, 2):
        t = 100 * (k - 1)
        events += [step(k, t * MS, 100 * MS), cpu("aten::linear", t * MS, 40 * MS), cpu("aten::mm", (t + 10) * MS, 20 * MS),
                   cpu("aten::add_", (t + 60) * MS, 10 * MS)]
    write_trace(tmp_path / "rank-0.pt.trace.json.gz", events + [step(3, 200 * MS, 10 * MS)], rank=0, world_size=1,
                backend="gloo")
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    g = s.graph
    names = g["name"].astype(str)
    assert "aten::linear" not in set(names)
    assert g.loc[names == "aten::mm", "busy_ns"].tolist() == [10 * MS * 1000] * 2
    assert g.loc[names == "aten::add_", "busy_ns"].tolist() == [10 * MS * 1000] * 2
    table = tracekit.whatif(s, ["baseline", "no_host_gaps"], compute_scale=None).set_index("scenario")
    assert table["step_time_us"].tolist() == pytest.approx([100 * MS, 50 * MS])  # only the host time goes
    doubled = tracekit.whatif(s, ["baseline"], compute_scale={0: 2.0}).loc[0, "step_time_us"]
    assert doubled == pytest.approx(150 * MS)  # 50 ms of compute (mm 20, add 10, linear's own 20) twice as long
    one = s.critical_path[s.critical_path["step"] == 1].set_index("category")["us"]
    assert one["compute"] == pytest.approx(50 * MS) and one["host"] == pytest.approx(50 * MS)


def test_no_data_wait_removes_the_whole_loader(tmp_path):
    """One CPU rank, steps of 100 ms: DataLoader __next__ [T, T+20] holding aten::stack [T+5, T+15], then aten::mm
    [T+30, T+50]. Without the loader's 20 ms (the op and the unrecorded time inside it) a step takes 80 ms."""
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    events = []
    for k in (1, 2):
        t = 100 * (k - 1)
        events += [step(k, t * MS, 100 * MS), cpu(loader, t * MS, 20 * MS, cat="user_annotation"),
                   cpu("aten::stack", (t + 5) * MS, 10 * MS), cpu("aten::mm", (t + 30) * MS, 20 * MS)]
    write_trace(tmp_path / "rank-0.pt.trace.json.gz", events + [step(3, 200 * MS, 10 * MS)], rank=0, world_size=1,
                backend="gloo")
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    g = s.graph
    assert g.loc[g["in_data"].to_numpy(), "name"].astype(str).tolist() == ["aten::stack", loader] * 2
    table = tracekit.whatif(s, ["no_data_wait"])
    assert table.loc[0, "step_time_us"] == pytest.approx(80 * MS)
    one = s.critical_path[s.critical_path["step"] == 1].set_index("category")["us"]
    assert one["data"] == pytest.approx(20 * MS)  # stack 10 and the unrecorded 5 + 5 around it inside the loader
    assert one["compute"] == pytest.approx(20 * MS) and one["host"] == pytest.approx(60 * MS)


def test_a_cycle_is_an_error_not_a_hang():
    """b waits for c's end and c follows b on its lane: no order can replay them."""
    graph = pd.DataFrame({
        "rank": 0, "lane": [0, 1, 1], "start_ns": [0, 15, 25], "end_ns": [10, 25, 40], "step": 1,
        "cat": pd.Categorical(["compute"] * 3), "name": pd.Categorical(["a", "b", "c"]), "in_data": False,
        "ps": -1, "pe": [-1, 2, -1], "dr": -1, "group": -1})
    with pytest.raises(replay.ReplayError, match="cycle"):
        replay.simulate(replay.measure(graph))


def test_the_model_reads_the_graphs_edges_without_copying_them_and_cannot_change_them():
    graph = pd.DataFrame({
        "rank": 0, "lane": [0, 1, 1], "start_ns": [0, 15, 25], "end_ns": [10, 25, 40], "step": 1,
        "cat": pd.Categorical(["compute"] * 3), "name": pd.Categorical(["a", "b", "c"]), "in_data": False,
        "ps": -1, "pe": [-1, 0, -1], "dr": -1, "group": -1, "pair_src": -1})
    model = replay.measure(graph)
    for name, column in (("ps", "ps"), ("pe", "pe"), ("dr", "dr"), ("group", "group"), ("src", "pair_src")):
        values = getattr(model, name)
        assert values.dtype == np.int64 and np.shares_memory(values, graph[column].to_numpy()), name
        with pytest.raises(ValueError, match="read-only"):
            values[0] = 1
    assert model.pe.tolist() == [-1, 0, -1]
    # A graph whose ids are another integer type is converted: the model is int64 either way.
    narrow = replay.measure(graph.astype({"pe": np.int32}))
    assert narrow.pe.dtype == np.int64 and narrow.pe.tolist() == [-1, 0, -1]
    assert replay.simulate(narrow)[1].tolist() == replay.simulate(model)[1].tolist() == [10, 25, 40]


def test_a_graph_too_large_to_number_is_a_named_error(monkeypatch):
    from tracekit.predict import longest

    graph = pd.DataFrame({
        "rank": 0, "lane": [0, 0], "start_ns": [0, 15], "end_ns": [10, 25], "step": 1,
        "cat": pd.Categorical(["compute"] * 2), "name": pd.Categorical(["a", "b"]), "in_data": False,
        "ps": -1, "pe": -1, "dr": -1, "group": -1})
    model = replay.measure(graph)
    monkeypatch.setattr(longest, "MAX_TIMES", 3)  # 2 nodes: 4 times
    with pytest.raises(replay.ReplayError, match="2 nodes"):
        replay.simulate(model)
    monkeypatch.setattr(longest, "MAX_TIMES", 4)
    assert replay.simulate(model)[1].tolist() == [10, 25]


def _random_graph(draw, n_lanes, n):
    from hypothesis import strategies as st

    lane = np.sort(np.array(draw(st.lists(st.integers(0, n_lanes - 1), min_size=n, max_size=n))))
    # A node's inputs come from nodes of other lanes that were created earlier, so most graphs are acyclic; the
    # collective groups can still close a cycle, and those draws are discarded below.
    order = np.array(draw(st.permutations(range(n))))
    earlier = [[j for j in range(n) if order[j] < order[i] and lane[j] != lane[i]] for i in range(n)]
    pick = lambda i: draw(st.sampled_from([-1, -1] + earlier[i])) if earlier[i] else -1  # noqa: E731
    ps, pe, dr = (np.array([pick(i) for i in range(n)]) for _ in range(3))
    group = np.array(draw(st.lists(st.sampled_from([-1, -1, -1, 0, 1]), min_size=n, max_size=n)))
    dense = np.unique(group, return_inverse=True)[1] - (1 if (group < 0).any() else 0)  # ids 0, 1, ... in use
    start = np.array(draw(st.lists(st.integers(0, 1000), min_size=n, max_size=n)), dtype=float)
    return pd.DataFrame({"rank": 0, "lane": lane, "start_ns": start, "end_ns": start + 5, "step": 1,
                         "cat": pd.Categorical(["compute"] * n), "name": pd.Categorical(["x"] * n), "in_data": False,
                         "ps": ps, "pe": pe, "dr": dr, "group": dense})


def test_the_linear_pass_equals_the_fixed_point_iteration_it_replaced():
    from hypothesis import HealthCheck, assume, given, settings
    from hypothesis import strategies as st

    from tests.replay_reference import fixed_point

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
    @given(st.data(), st.integers(1, 4), st.integers(1, 14))
    def check(data, n_lanes, n):
        graph = _random_graph(data.draw, n_lanes, n)
        model = replay.measure(graph)
        delay = np.maximum(model.delay, 0) + np.array(data.draw(st.lists(st.floats(0, 50), min_size=n, max_size=n)))
        tail = np.array(data.draw(st.lists(st.floats(0.5, 50), min_size=n, max_size=n)))
        try:
            got = replay.simulate(model, delay=delay, tail=tail)
        except replay.ReplayError:
            # A cycle: with positive tails the iteration never settles, or it settles on times that never start.
            settled = fixed_point(model, delay=delay, tail=tail, max_rounds=4 * n + 4)
            assert settled is None or not np.isfinite(np.concatenate(settled)).all()
            assume(False)
        want = fixed_point(model, delay=delay, tail=tail)
        assert want is not None
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-9)

    check()


def test_seen_device_work_follows_each_lanes_latest_wait_by_hand():
    """``no_host_gaps``'s lane pass: per node, the device node of the latest wait its lane made so far (a tie goes
    to the later node; -inf: no wait). Lanes 0 and 1 interleave, as two lanes of one rank may in a graph.
    lane 0: t 5 (->10), -inf, 3 (->11: earlier than 5, not kept), 5 (->12: a tie, kept); lane 1: -inf, 7 (->13)."""
    from tracekit.predict._lane_kernel import latest_setter

    lane = np.array([0, 1, 0, 0, 1, 0], dtype=np.int64)
    t = np.array([5.0, -np.inf, -np.inf, 3.0, 7.0, 5.0])
    target = np.array([10, -1, -1, 11, 13, 12], dtype=np.int64)
    assert latest_setter(lane, t, target, 2).tolist() == [10, -1, 10, 10, 13, 12]
