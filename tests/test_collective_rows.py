"""Each comm node of a rank's graph is one collective of the rank's table, by the event both come from.

Two calls with the same start and name (a rank that records a collective twice; two streams' kernels that start in
the same microsecond) were once both mapped to the first: the second node joined the first's group on the same lane,
so its start waited for the group's end and the group's end for its start, and ``summarize`` stopped with
"the dependency graph has a cycle".
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import tracekit
from tests.tracedata import cpu, step, write_trace
from tracekit.rank.collrows import collective_rows

MS = 1000  # trace times are microseconds


def test_rows_by_event_not_by_start_and_name():
    # Comm nodes from event rows 5 and 9 (same start, same name), a compute node from row 2, a marker (row -1).
    nodes = pd.DataFrame({"cat": ["comm", "comm", "compute", "marker"], "row": [5, 9, 2, -1],
                          "start_ns": [10, 10, 0, 0], "name": ["nccl:x", "nccl:x", "mm", "m"]})
    collectives = pd.DataFrame({"row": [9, 5], "start_ns": [10, 10], "name": ["nccl:x", "nccl:x"]})
    np.testing.assert_array_equal(collective_rows(nodes, collectives), [1, 0, -1, -1])
    # A comm node whose event is no collective of the table (a row between two of them) is none.
    nodes.loc[1, "row"] = 7
    np.testing.assert_array_equal(collective_rows(nodes, collectives), [1, -1, -1, -1])
    assert (collective_rows(nodes, collectives.iloc[:0]) == -1).all()


def _rank_events(rank: int, twice: bool = False, flush: bool = False) -> list[dict]:
    """Steps of 100 ms: mm [T, T+20], c10d::allreduce_ [T+20, T+21], gloo:all_reduce [T+21, T+60] on the gloo
    thread (no cat, no args, as some engines write it), add [T+61, T+70]. ``twice``: each gloo call recorded twice;
    ``flush``: a 0 us gloo:all_reduce at T+21 before it, another call that starts in the same microsecond."""
    events = []
    for k in (1, 2, 3):
        t = 100 * (k - 1)
        call = {"ph": "X", "name": "gloo:all_reduce", "pid": 100, "tid": 2, "ts": (t + 21) * MS, "dur": 39 * MS}
        events += [step(k, t * MS, 100 * MS), cpu("aten::mm", t * MS, 20 * MS),
                   cpu("c10d::allreduce_", (t + 20) * MS, 1 * MS), call, cpu("aten::add_", (t + 61) * MS, 9 * MS)]
        if twice:
            events.append(dict(call))
        if flush:
            events.append(dict(call, dur=0))
    return events


def _run(folder, kinds: dict):
    for rank in (0, 1):
        write_trace(folder / f"rank-{rank}.pt.trace.json.gz", _rank_events(rank, **kinds.get(rank, {})), rank=rank,
                    backend="gloo")
    return tracekit.summarize(folder, cache=False, workers=1)


def _comm(summary) -> pd.DataFrame:
    g = summary.graph
    return g[(g["cat"] == "comm").to_numpy()]


def test_a_call_recorded_twice_is_two_nodes_in_at_most_one_group(tmp_path):
    summary = _run(tmp_path, {0: {"twice": True}})
    comm = _comm(summary)
    # Each node is the collective of its own event: same rank, same start, and no two nodes one collective.
    table = summary.collectives.iloc[comm["coll"].to_numpy()]
    assert (table["rank"].to_numpy() == comm["rank"].to_numpy()).all()
    assert comm["coll"].is_unique and len(comm) == 6 + 3
    groups = comm.groupby("rank")["group"].apply(list).to_dict()
    assert groups[1] == [0, 1, 2] and sorted(g for g in groups[0] if g >= 0) == [0, 1, 2]
    assert groups[0].count(-1) == 3  # the second record of each call matches nothing on rank 1
    grouped = comm[comm["group"] >= 0]
    assert not grouped.duplicated(["lane", "group"]).any()  # nothing waits for its own group
    # Replayed as measured: steps of 100 ms.
    assert tracekit.whatif(summary, scenarios=["baseline"])["step_time_us"].iloc[0] == pytest.approx(100 * MS)


def test_two_calls_in_one_microsecond_are_two_collectives(tmp_path):
    summary = _run(tmp_path, {0: {"flush": True}, 1: {"flush": True}})
    comm = _comm(summary)
    groups = comm.groupby("rank")["group"].apply(list).to_dict()
    # On each rank's gloo lane the 0 us call comes first (it ends first), then the 39 ms one; both ranks' k-th
    # calls are one group, and every group is two ranks.
    assert groups == {0: [0, 1, 2, 3, 4, 5], 1: [0, 1, 2, 3, 4, 5]}
    ends = comm.groupby("group")["end_ns"].apply(lambda e: sorted(set(e - e.min())))
    assert (ends.str.len() == 1).all()
    # Both ranks arrive at T+21 ms; the transfer of 39 ms is the step's only comm time. comm_x3 makes it 13 ms:
    # 100 - 39 + 13 = 74 ms a step (the 0 us call stays 0).
    table = tracekit.whatif(summary, scenarios=["baseline", "comm_x3"])
    assert table["step_time_us"].tolist() == pytest.approx([100 * MS, 74 * MS])
