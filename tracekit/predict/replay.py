"""Replay a run's dependency graph as a discrete-event simulation, with measured durations changed per scenario.

Every node ``i`` of the graph (``tracekit.rank.graph``) starts and ends by these rules, on its lane after node ``i-1``:

    start[i] = max(end[i-1], start[ps[i]], end[pe[i]], anchor[i]) + delay[i]
    end[i]   = max(start[i], latest start among the ranks of its collective, end[dr[i]], start[src[i]]) + tail[i]

(``src``: the other half of a send/recv pair, from the graph's ``pair_src``: the data cannot arrive before it was
sent, nor a send complete before its receiver posted. Its waiting is so never part of ``tail``: no scenario that
shortens communication hides it.)

``delay`` is what the trace measured between the moment a node could start and the moment it did: host work that
no event records (Python between ops, a ``time.sleep``), launch latency. ``tail`` is its own time: the duration,
or for a collective the transfer after the last rank arrived, or for a synchronizing call the time after the device
drained. Both come from the measured times (``measure``), so replaying them unchanged reproduces the trace; a
scenario changes some of them and the replay finds where everything else moves. ``anchor`` pins the first node of a
lane that nothing else starts to its measured start.

The rules make a directed acyclic graph of times (each node's start and end, and each collective's latest arrival),
so the replay is a longest-path pass over it in topological order: linear in nodes plus edges, one visit each
(``tracekit.predict.longest``, compiled with numba). A cycle, which a correctly built graph cannot have, is an error.

Each rank's first step marker is pinned too (``pinned``: its measured start is a lower bound of its start): what ran
before the first step is not part of any step, and a scenario that shortened it must not move the window earlier.

A measured delay or tail may be negative: events of one lane that overlap (a CUDA graph's kernels under
programmatic dependent launch), a collective whose clocks put its end before the last arrival. A scenario that only
removes work cuts the positive part of a time and keeps a negative one as it is (``cut``): zeroing a -5 us delay
would add 5 us to every such kernel of a step. With times that only shrink and edges that are only removed, every
replayed time is at most the measured one (the longest path of a graph with smaller weights).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.errors import TracekitError

_INF = np.inf


class ReplayError(TracekitError):
    """The graph of a run could not be replayed (a dependency cycle: a bug in how the graph was built)."""


@dataclass(frozen=True)
class Model:
    """The graph as arrays, with the delays and tails measured from the trace (ns, float64)."""

    lane: np.ndarray
    lane_bounds: np.ndarray   # lane i's nodes are [lane_bounds[i], lane_bounds[i+1])
    first: np.ndarray         # first node of its lane
    ps: np.ndarray
    pe: np.ndarray
    dr: np.ndarray
    group: np.ndarray         # collective match id (dense, from 0), -1 when not a matched collective
    src: np.ndarray           # the other half of a send/recv pair, -1 none
    n_groups: int
    anchor: np.ndarray        # -inf unless pinned
    pinned: np.ndarray        # each rank's first step marker: pinned at its measured start whatever the edges
    delay: np.ndarray
    busy: np.ndarray          # the part of a positive delay that enclosing compute ops cover (CPU-only ranks)
    tail: np.ndarray
    start: np.ndarray         # measured
    end: np.ndarray


def measure(graph: pd.DataFrame) -> Model:
    """The model of a run graph (``Summary.graph``): measured delays and tails, so that ``simulate`` with them
    unchanged gives back the measured times."""
    start = graph["start_ns"].to_numpy(dtype=np.float64)
    end = graph["end_ns"].to_numpy(dtype=np.float64)
    lane = graph["lane"].to_numpy()
    first = np.ones(len(graph), dtype=bool)
    first[1:] = lane[1:] != lane[:-1]
    bounds = np.append(np.flatnonzero(first), len(graph))
    ps, pe, dr, group = (_ids(graph[c]) for c in ("ps", "pe", "dr", "group"))
    n_groups = int(group.max()) + 1 if len(group) and group.max() >= 0 else 0
    pinned = _first_markers(graph)
    anchor = _anchors(first, ps, pe, pinned, start)
    src = _ids(graph["pair_src"]) if "pair_src" in graph else np.full(len(graph), -1, np.int64)
    ext = _start_inputs(start, end, first, ps, pe, anchor)
    cross = np.maximum(_end_inputs(start, end, group, n_groups, dr), np.where(src >= 0, start[np.maximum(src, 0)], -_INF))
    delay = start - ext
    busy = np.clip(graph["busy_ns"].to_numpy(dtype=np.float64), 0, np.maximum(delay, 0)) if "busy_ns" in graph else (
        np.zeros(len(graph)))
    return Model(lane=lane, lane_bounds=bounds, first=first, ps=ps, pe=pe, dr=dr, group=group, src=src, n_groups=n_groups,
                 anchor=anchor, pinned=pinned, delay=delay, busy=busy, tail=end - np.maximum(start, cross), start=start, end=end)


def _ids(column: pd.Series) -> np.ndarray:
    """A column of node positions as int64: the graph's own data where it is int64 already (no copy of every node),
    read-only, so nothing that holds the model can change the graph through it. The graph is never changed once
    measured (``Summary.graph`` hands out copies), so the model's ids stay the measured ones."""
    return _read_only(np.asarray(column.to_numpy(), dtype=np.int64))


def _read_only(values: np.ndarray) -> np.ndarray:
    """A read-only view of ``values`` (the compiled pass takes its ids so, whether a scenario made them or not)."""
    view = values.view()
    view.flags.writeable = False
    return view


def _first_markers(graph: pd.DataFrame) -> np.ndarray:
    """Per node: whether it is its rank's first step marker in time."""
    out = np.zeros(len(graph), dtype=bool)
    if "cat" not in graph or not len(graph):
        return out
    marker = np.flatnonzero((graph["cat"] == "marker").to_numpy())
    if len(marker):
        frame = pd.DataFrame({"rank": graph["rank"].to_numpy()[marker], "t": graph["start_ns"].to_numpy()[marker],
                              "i": marker}).sort_values(["rank", "t", "i"])
        out[frame.drop_duplicates("rank")["i"].to_numpy()] = True
    return out


def _anchors(first, ps, pe, pinned, start) -> np.ndarray:
    """The measured start of the nodes nothing else starts (first of their lane, no launch or wait) and of the
    pinned ones; -inf for the others."""
    return np.where((first & (ps < 0) & (pe < 0)) | pinned, start, -_INF)


def cut(measured: np.ndarray, changed: np.ndarray) -> np.ndarray:
    """A scenario's times where it removes work: the positive part of each measured time shrunk to ``changed``
    (clipped to [0, measured]), a negative (overlap) kept as measured, never grown."""
    out = np.clip(changed, 0.0, np.maximum(measured, 0.0))  # a new array, whatever ``changed`` is
    np.copyto(out, measured, where=~(measured > 0))  # in place: no third array of every node
    return out


def _prev(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    out = np.empty_like(values)
    out[0] = -_INF
    out[1:] = values[:-1]
    return np.where(first, -_INF, out)


def _start_inputs(start, end, first, ps, pe, anchor) -> np.ndarray:
    t_ps = np.where(ps >= 0, start[np.maximum(ps, 0)], -_INF)
    t_pe = np.where(pe >= 0, end[np.maximum(pe, 0)], -_INF)
    return np.maximum.reduce([_prev(end, first), t_ps, t_pe, anchor])


def _end_inputs(start, end, group, n_groups, dr) -> np.ndarray:
    latest = np.full(max(n_groups, 1), -_INF)
    member = group >= 0
    np.maximum.at(latest, group[member], start[member])
    arrival = np.where(member, latest[np.maximum(group, 0)], -_INF)
    return np.maximum(arrival, np.where(dr >= 0, end[np.maximum(dr, 0)], -_INF))


def simulate(model: Model, delay: np.ndarray | None = None, tail: np.ndarray | None = None,
             ps: np.ndarray | None = None, pe: np.ndarray | None = None, dr: np.ndarray | None = None,
             group: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of every node when the graph is replayed with these delays, tails and edges (default: the
    measured ones)."""
    delay = model.delay if delay is None else delay
    tail = model.tail if tail is None else tail
    ps = model.ps if ps is None else ps
    pe = model.pe if pe is None else pe
    dr = model.dr if dr is None else dr
    group = model.group if group is None else group
    from tracekit.predict.longest import MAX_TIMES, longest_paths  # numba: imported on first use, not with tracekit

    if 2 * len(model.delay) + model.n_groups > MAX_TIMES:
        raise ReplayError(f"the dependency graph has {len(model.delay):,} nodes: over the {MAX_TIMES // 2:,} the "
                          "replay can number")
    anchor = _anchors(model.first, ps, pe, model.pinned, model.start)  # nothing else starts these
    ids = (_read_only(np.ascontiguousarray(a, dtype=np.int64)) for a in (ps, pe, dr, group))  # one compiled signature
    times = (np.ascontiguousarray(a, dtype=np.float64) for a in (anchor, delay, tail))
    start, end, complete = longest_paths(np.ascontiguousarray(model.first, dtype=np.bool_), *ids, model.n_groups,
                                         *times, _read_only(np.ascontiguousarray(model.src, dtype=np.int64)))
    if not complete:
        raise ReplayError("the dependency graph has a cycle: its nodes cannot be replayed in any order")
    return start, end


def warm_up() -> None:
    """Import and load the compiled pass (about 0.6 s the first time in a process: numba and its disk cache), so a
    caller can do it while it waits for other work."""
    tiny = measure(pd.DataFrame({"lane": [0], "start_ns": [0.0], "end_ns": [1.0], "ps": [-1], "pe": [-1], "dr": [-1],
                                 "group": [-1]}))
    simulate(tiny)
