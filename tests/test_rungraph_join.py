"""The run graph's join of the ranks' node tables (``tracekit.run.rungraph.run_graph``): positions, lanes and times
moved as a concatenation would, worked by hand, and each rank's table let go as it is joined."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pandas as pd

from tracekit.rank.graph import GRAPH_COLUMNS
from tracekit.run.rungraph import run_graph

NO_CALLS = pd.DataFrame({"rank": pd.Series(dtype=np.int64), "matched": pd.Series(dtype=bool),
                         "match_id": pd.Series(dtype=object)})


def _rank(rank: int, starts: list[int], ps: list[int], lanes: list[int], step_dtype=np.int64) -> pd.DataFrame:
    n = len(starts)
    frame = pd.DataFrame({
        "rank": np.full(n, rank, dtype=np.int32), "lane": np.array(lanes, dtype=np.int32),
        "start_ns": np.array(starts, dtype=np.int64), "end_ns": np.array(starts, dtype=np.int64) + 10,
        "step": np.ones(n, dtype=step_dtype), "cat": pd.Categorical(["compute"] * n),
        "name": pd.Categorical([f"k{rank}"] * n), "in_data": np.zeros(n, dtype=bool),
        "coll": np.full(n, -1, dtype=np.int64), "ps": np.array(ps, dtype=np.int64),
        "pe": np.full(n, -1, dtype=np.int64), "dr": np.full(n, -1, dtype=np.int64),
        "busy_ns": np.zeros(n, dtype=np.int64), "p2p": np.full(n, -1, dtype=np.int64),
    })
    return frame[GRAPH_COLUMNS]


def test_positions_lanes_and_times_move_past_the_ranks_before():
    # Rank 0: 3 nodes on lanes 0-1; rank 1: 2 nodes on lane 0, its clock 1,000 ns ahead; the run's origin at 100 ns.
    graphs = [_rank(0, [100, 200, 300], ps=[-1, 0, 1], lanes=[0, 1, 1]),
              _rank(1, [1150, 1250], ps=[-1, 0], lanes=[0, 0], step_dtype=np.int32)]
    out = run_graph(graphs, NO_CALLS, shift={1: 1000}, origin_ns=100)
    assert out["ps"].tolist() == [-1, 0, 1, -1, 3]  # rank 1's node 0 is the run's node 3
    assert out["lane"].tolist() == [0, 1, 1, 2, 2]  # past rank 0's two lanes
    assert out["start_ns"].tolist() == [0, 100, 200, 50, 150]  # from the origin, rank 1 on rank 0's clock
    assert out["end_ns"].tolist() == [10, 110, 210, 60, 160]
    assert out["name"].tolist() == ["k0", "k0", "k0", "k1", "k1"]
    assert out["group"].tolist() == [-1] * 5 and out["pair_src"].tolist() == [-1] * 5
    # The dtypes a concatenation gives: rank and lane stay int32, an int32 step beside an int64 one becomes int64.
    assert (out["rank"].dtype, out["lane"].dtype, out["step"].dtype) == (np.int32, np.int32, np.int64)
    assert list(out.columns) == [*GRAPH_COLUMNS, "group", "pair_src"]


def test_the_ranks_tables_are_let_go():
    """The caller's list is emptied and nothing of the join keeps a rank's table: its memory can go as the join
    proceeds, before the replays."""
    graphs = [_rank(0, [100, 200], ps=[-1, 0], lanes=[0, 0]), _rank(1, [150], ps=[-1], lanes=[0])]
    refs = [weakref.ref(g) for g in graphs]
    out = run_graph(graphs, NO_CALLS, shift={}, origin_ns=100)
    gc.collect()
    assert graphs == [] and all(r() is None for r in refs)
    assert len(out) == 3
