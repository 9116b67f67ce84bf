"""A what-if that only removes work never predicts a later step end or a longer window.

For ``no_host_gaps``, ``no_data_wait``, ``perfect_overlap``, ``no_straggler`` and ``comm_x<k>`` (k >= 1): every
replayed event starts and ends no later than measured, so does every step boundary, and the window's mean step is
never longer (one step may grow when the one before it shrinks more). Checked on random graphs shaped like a run's
(host lanes of markers, launches, syncs and host ops; device lanes of kernels that may overlap; collectives across
ranks whose clocks may disagree) and on every sample, shared and synthetic golden trace (tests/golden_runs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracekit.predict import replay, scenarios, stepbounds
from tracekit.rank.graph import NODE_CATS

REMOVING = ("no_host_gaps", "no_data_wait", "perfect_overlap", "no_straggler", "comm_x1", "comm_x2", "comm_x1.5")
ROOT = Path(__file__).resolve().parents[1]
RUNS = sorted(p for p in (ROOT / "sample_traces").iterdir() if p.is_dir()) + sorted(
    p for p in (ROOT.parent / "shared" / "traces" / "hta").glob("*") if p.is_dir()) + sorted(
    p for p in (ROOT / "tests" / "golden_runs").iterdir() if p.is_dir() and p.name.startswith("synth-"))
EPS_NS = 1e-6


def check_monotone(graph: pd.DataFrame, window: pd.DataFrame) -> None:
    model = replay.measure(graph)
    base_start, base_end = replay.simulate(model)
    np.testing.assert_allclose(base_end, model.end, atol=1e-3)  # the baseline replays the trace
    at = stepbounds.marks(graph)
    base_t = stepbounds.boundaries(graph, base_start, base_end, at)
    base_mean = stepbounds.mean_step_us(stepbounds.step_times(graph, base_start, base_end, window, at))
    for name in REMOVING:
        start, end = scenarios.replayed(graph, model, name)
        late = np.flatnonzero((end > base_end + EPS_NS) | (start > base_start + EPS_NS))
        assert len(late) == 0, (name, graph.iloc[late[:5]].to_dict("records"), end[late[:5]], base_end[late[:5]])
        t = stepbounds.boundaries(graph, start, end, at)
        assert (t["t"].to_numpy() <= base_t["t"].to_numpy() + EPS_NS).all(), name
        mean = stepbounds.mean_step_us(stepbounds.step_times(graph, start, end, window, at))
        assert not mean > base_mean + 1e-9, (name, mean, base_mean)


def _random_run(draw) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A run graph whose edges agree with its measured times, as a trace's do (an input ends, or for a launch
    starts, before the node it binds starts), with overlapping kernels and skewed collectives."""
    from hypothesis import strategies as st

    ints = lambda lo, hi: draw(st.integers(lo, hi))  # noqa: E731
    rows = []
    for rank in range(ints(1, 2)):
        t = 0
        for k in range(ints(3, 10)):  # the host lane: a marker first, then host nodes one after another
            cat = "marker" if k == 0 else draw(st.sampled_from(["marker", "launch", "launch", "host", "sync", "data"]))
            t += ints(0, 30)
            dur = 0 if cat == "marker" else ints(1, 40)
            rows.append(dict(rank=rank, lane=3 * rank, start_ns=t, end_ns=t + dur, cat=cat))
            t += dur
        for lane in (3 * rank + 1, 3 * rank + 2)[:ints(1, 2)]:  # device lanes: kernels may overlap (-delays)
            t = ints(0, 40)
            kinds = ["compute", "compute", "memory"] + (["comm"] if lane == 3 * rank + 1 else [])  # one comm stream
            for _ in range(ints(1, 8)):
                dur = ints(1, 50)
                rows.append(dict(rank=rank, lane=lane, start_ns=t, end_ns=t + dur, cat=draw(st.sampled_from(kinds))))
                t += max(dur - ints(0, 10), 0) + ints(0, 20)
    g = pd.DataFrame(rows).sort_values(["lane", "start_ns", "end_ns"], kind="stable", ignore_index=True)
    n = len(g)
    start, end, cat, rank = (g[c].to_numpy() for c in ("start_ns", "end_ns", "cat", "rank"))
    device = np.isin(cat, ["compute", "memory", "comm"])
    ps, pe, dr = (np.full(n, -1) for _ in range(3))
    for i in range(n):
        if device[i]:
            launches = np.flatnonzero((cat == "launch") & (rank == rank[i]) & (start <= start[i]))
            if len(launches) and draw(st.booleans()):
                ps[i] = draw(st.sampled_from(list(launches)))
        # A wait within the rank, on work that is not a collective (whose end may precede its last arrival).
        ended = np.flatnonzero(device & (cat != "comm") & (rank == rank[i]) & (g["lane"].to_numpy() != g["lane"].iloc[i])
                               & (end <= start[i]))
        if len(ended) and draw(st.integers(0, 3)) == 0:
            pe[i] = draw(st.sampled_from(list(ended)))
        if cat[i] == "sync":
            inside = np.flatnonzero(device & (rank == rank[i]) & (end <= end[i]))
            if len(inside) and draw(st.booleans()):
                dr[i] = draw(st.sampled_from(list(inside)))
    group = np.full(n, -1)
    comm = [np.flatnonzero((cat == "comm") & (rank == r)) for r in (0, 1)]
    for g_id, (a, b) in enumerate(zip(*comm)):  # the k-th collective of each rank: one call (clocks may disagree)
        group[[a, b]] = g_id
    marker = cat == "marker"
    step = np.full(n, -1)
    for r in np.unique(rank):
        mine = np.flatnonzero(marker & (rank == r))
        step[mine] = np.arange(1, len(mine) + 1)
        at = np.searchsorted(start[mine], start, side="right") - 1
        own = (rank == r) & ~marker & (at >= 0)
        step[own] = step[mine][at[own]]
    graph = g.assign(step=step, cat=pd.Categorical(cat, categories=list(NODE_CATS)),
                     name=pd.Categorical(np.where(device, "k", "h")), ps=ps, pe=pe, dr=dr, group=group,
                     in_data=(cat == "data") | ((cat == "host") & np.array(draw(st.lists(st.booleans(), min_size=n,
                                                                                          max_size=n)))),
                     busy_ns=0)
    steps = graph.loc[marker, ["rank", "step"]]
    window = steps[steps["step"] < steps.groupby("rank")["step"].transform("max")]
    return graph, window


def test_removing_work_never_lengthens_a_random_run():
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def check(data):
        graph, window = _random_run(data.draw)
        check_monotone(graph, window)

    check()


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_removing_work_never_lengthens_a_real_run(run, summaries):
    summary = summaries(run)
    if summary.graph.empty:
        pytest.skip("no dependency graph")
    check_monotone(summary.graph, scenarios._window(summary.steps))
