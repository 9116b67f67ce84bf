"""Step boundaries of a replay (``tracekit.predict.stepbounds``): hand-worked values, and the array passes over a
graph's ``Marks`` equal to the DataFrame merges they replace (``_reference_boundaries`` below), on random graphs
(NaN ends and steps numbered twice included) and on every replayed scenario of the sample and shared runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from tracekit.predict import replay, scenarios, stepbounds
from test_whatif_monotone import RUNS, _random_run


def _reference_boundaries(graph: pd.DataFrame, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """The boundaries by DataFrame merges: the device work of each marker's step by (rank, step), the running
    latest by ``cummax`` and ``ffill``, and each marker's by ``merge_asof`` on the marker before it."""
    marker = (graph["cat"] == "marker").to_numpy()
    rank, step = graph["rank"].to_numpy(), graph["step"].to_numpy()
    frame = pd.DataFrame({"rank": rank[marker], "step": step[marker], "marker_t": start[marker],
                          "t0": graph["start_ns"].to_numpy()[marker], "node": np.flatnonzero(marker)})
    frame = frame.sort_values(["rank", "t0", "node"], ignore_index=True)
    frame["k"] = frame.groupby("rank").cumcount()
    device = np.flatnonzero(graph["cat"].isin(["compute", "memory", "comm"]).to_numpy() & (step >= 0))
    drained = (pd.DataFrame({"rank": rank[device], "step": step[device], "drained": end[device], "drain_node": device})
               .merge(frame[["rank", "step", "k"]], on=["rank", "step"])
               .sort_values(["rank", "k", "drained", "drain_node"]).drop_duplicates(["rank", "k"], keep="last"))
    latest = drained.groupby("rank")["drained"].cummax()
    drained["drain_node"] = drained["drain_node"].where(drained["drained"] >= latest).groupby(drained["rank"]).ffill()
    drained["drained"] = latest
    drained["k"] = drained["k"] + 1
    frame = pd.merge_asof(frame.sort_values("k"), drained[["rank", "k", "drained", "drain_node"]].sort_values("k"),
                          on="k", by="rank", allow_exact_matches=True)
    frame = frame.sort_values(["rank", "k"], ignore_index=True)
    frame["t"] = np.fmax(frame["marker_t"].to_numpy(), frame["drained"].to_numpy())
    frame["drain_node"] = frame["drain_node"].fillna(-1).astype(np.int64)
    return frame[["rank", "step", "t", "marker_t", "drained", "node", "drain_node"]]


def _reference_step_times(graph, start, end, window_steps) -> pd.DataFrame:
    """The step times by ``groupby`` and a join with the window's steps."""
    frame = _reference_boundaries(graph, start, end)
    frame["t"] = frame.groupby("rank")["t"].cummax()
    frame["next_t"] = frame.groupby("rank")["t"].shift(-1)
    frame = frame.merge(window_steps[["rank", "step"]], on=["rank", "step"])
    frame = frame.assign(step_us=(frame["next_t"] - frame["t"]) / 1e3)
    return frame.dropna(subset=["step_us"])[["rank", "step", "step_us"]]


def _same(graph, start, end, window=None):
    at = stepbounds.marks(graph)
    assert_frame_equal(stepbounds.boundaries(graph, start, end, at), _reference_boundaries(graph, start, end),
                       check_dtype=False)  # an empty reference's columns are objects
    markers = graph.loc[(graph["cat"] == "marker").to_numpy(), ["rank", "step"]]
    for steps in ([markers] if window is None else [markers, window]):
        expected = _reference_step_times(graph, start, end, steps)
        assert_frame_equal(stepbounds.step_times(graph, start, end, steps, at), expected,
                           check_dtype=len(expected) > 0, check_index_type="equiv" if len(expected) else False)


def _graph(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["rank", "step", "cat", "start_ns", "end_ns"])


def test_hand_worked_boundaries_and_step_times():
    # One rank, markers at 0, 100, 200, 300. Step 1's work ends at 150 (node 1) and 120 (node 2): the boundary
    # before step 2 is 150 (node 1). Step 2's work ends at 260 (node 4), after the marker of step 3 at 200: that
    # boundary is 260. Step 3's work ends at 240 (node 6), before 260: the running latest stays node 4's 260, and
    # the marker of step 4 (300) is later still.
    graph = _graph([(0, 1, "marker", 0, 0), (0, 1, "compute", 10, 150), (0, 1, "memory", 20, 120),
                    (0, 2, "marker", 100, 100), (0, 2, "comm", 160, 260),
                    (0, 3, "marker", 200, 200), (0, 3, "compute", 210, 240), (0, 4, "marker", 300, 300)])
    start, end = graph["start_ns"].to_numpy(float), graph["end_ns"].to_numpy(float)
    frame = stepbounds.boundaries(graph, start, end)
    assert frame["node"].tolist() == [0, 3, 5, 7]
    assert frame["t"].tolist() == [0.0, 150.0, 260.0, 300.0]
    assert frame["drained"].tolist()[1:] == [150.0, 260.0, 260.0] and np.isnan(frame["drained"].iloc[0])
    assert frame["drain_node"].tolist() == [-1, 1, 4, 4]
    window = pd.DataFrame({"rank": [0, 0, 0], "step": [1, 2, 3]})
    times = stepbounds.step_times(graph, start, end, window)
    assert times["step_us"].tolist() == [0.15, 0.11, 0.04]  # 150 - 0, 260 - 150, 300 - 260 ns
    assert stepbounds.mean_step_us(times) == pytest.approx(0.1)


def test_a_step_never_begins_before_the_one_before_it():
    # Markers measured at 0, 100, 200 on two threads; a scenario replays the third at 120, before the second's 150.
    # Step 2 then begins and ends at 150 (0 us), not -30 us.
    graph = _graph([(0, 1, "marker", 0, 0), (0, 2, "marker", 100, 100), (0, 3, "marker", 200, 200),
                    (0, 4, "marker", 300, 300)])
    start = np.array([0.0, 150.0, 120.0, 300.0])
    window = pd.DataFrame({"rank": [0, 0, 0], "step": [1, 2, 3]})
    assert stepbounds.step_times(graph, start, start, window)["step_us"].tolist() == [0.15, 0.0, 0.15]
    _same(graph, start, start, window)


def test_markers_in_time_order_and_a_step_numbered_twice():
    # Rank 1's markers are numbered out of time order (#5 at 0, #4 at 50), and #4 twice: the work of step 4 belongs to
    # both of its markers, and the boundary of each marker is the work of the markers before it in time.
    graph = _graph([(1, 4, "marker", 50, 50), (1, 5, "marker", 0, 0), (1, 5, "compute", 5, 70),
                    (1, 4, "compute", 55, 90), (1, 4, "marker", 80, 80), (1, 6, "marker", 120, 120)])
    start, end = graph["start_ns"].to_numpy(float), graph["end_ns"].to_numpy(float)
    frame = stepbounds.boundaries(graph, start, end)
    assert frame["step"].tolist() == [5, 4, 4, 6] and frame["node"].tolist() == [1, 0, 4, 5]
    # Before #4 (50): #5's work (70, node 2). Before the second #4 (80): #4's work as well (90, node 3) - the work of a
    # step counts for each of its markers. Before #6: both #4s' work, 90.
    assert frame["t"].tolist() == [0.0, 70.0, 90.0, 120.0]
    assert frame["drain_node"].tolist() == [-1, 2, 3, 3]
    _same(graph, start, end)


def test_a_nan_end_is_as_the_merges_have_it():
    graph = _graph([(0, 1, "marker", 0, 0), (0, 1, "compute", 10, 150), (0, 2, "marker", 100, 100),
                    (0, 2, "compute", 110, 130), (0, 3, "marker", 200, 200), (0, 4, "marker", 300, 300)])
    start, end = graph["start_ns"].to_numpy(float), graph["end_ns"].to_numpy(float)
    end[3] = np.nan
    _same(graph, start, end)
    frame = stepbounds.boundaries(graph, start, end)
    assert np.isnan(frame["drained"].iloc[2]) and frame["drain_node"].tolist() == [-1, 1, 1, 1]


def test_equal_to_the_merges_on_random_graphs():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=60, deadline=None)
    @given(st.data())
    def check(data):
        graph, _ = _random_run(data.draw)
        if data.draw(st.booleans()):  # steps numbered twice: a marker takes another's number
            markers = np.flatnonzero((graph["cat"] == "marker").to_numpy())
            if len(markers) > 1:
                step = graph["step"].to_numpy().copy()
                step[markers[-1]] = step[markers[0]]
                graph = graph.assign(step=step)
        start = graph["start_ns"].to_numpy(float)
        end = graph["end_ns"].to_numpy(float) + np.array(data.draw(st.lists(st.integers(-20, 20), min_size=len(graph),
                                                                             max_size=len(graph))))
        if data.draw(st.booleans()):
            end[data.draw(st.integers(0, len(graph) - 1))] = np.nan
        markers = graph.loc[(graph["cat"] == "marker").to_numpy(), ["rank", "step"]]
        # A window of some of the steps, one of them possibly listed twice
        window = markers[np.array(data.draw(st.lists(st.booleans(), min_size=len(markers), max_size=len(markers))),
                                  dtype=bool)]
        if len(window) and data.draw(st.booleans()):
            window = pd.concat([window, window.iloc[:1]])
        _same(graph, start, end, window)

    check()


@pytest.mark.parametrize("run", RUNS, ids=[p.name for p in RUNS])
def test_equal_to_the_merges_on_every_scenario_of_a_real_run(run, summaries):
    graph = summaries(run).graph
    if graph.empty:
        pytest.skip("no dependency graph")
    model = replay.measure(graph)
    window = scenarios._window(summaries(run).steps)
    _same(graph, model.start, model.end, window)
    for name in ("no_host_gaps", "perfect_overlap", "no_straggler", "comm_x2"):
        _same(graph, *scenarios.replayed(graph, model, name), window)
