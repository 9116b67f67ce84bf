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
    return np.where(measured > 0, np.clip(changed, 0.0, np.maximum(measured, 0.0)), measured)


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


def step_times(graph: pd.DataFrame, start: np.ndarray, end: np.ndarray, window_steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank and window step, its time (us) from one step boundary to the next, at (``start``, ``end``).

    The boundary before step k is its ``ProfilerStep`` marker or, when the device work of earlier steps ends after
    it, where that work ends (``metrics.step_breakdown``: steps tile, each ends on the later of the two clocks). So
    a scenario in which the host gets faster still waits for the device, and no boundary moves later than in the
    baseline where no replayed time does. (On CPU-only ranks the marker's thread is the device.)"""
    frame = boundaries(graph, start, end)
    # No step begins before the one before it: steps annotated on two threads may replay out of order otherwise (a
    # scenario that shortens one thread only). Markers on one lane are in order already: the same times.
    frame["t"] = frame.groupby("rank")["t"].cummax()
    frame["next_t"] = frame.groupby("rank")["t"].shift(-1)
    frame = frame.merge(window_steps[["rank", "step"]], on=["rank", "step"])
    return frame.assign(step_us=(frame["next_t"] - frame["t"]) / 1e3).dropna(subset=["step_us"])[["rank", "step", "step_us"]]


def boundaries(graph: pd.DataFrame, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """Per marker, in each rank's time order: the boundary ``t`` before its step (the later of the marker and
    ``drained``, when the device work of the steps before it ended), the marker's ``node`` and ``drain_node``, the
    device node that ends last among that work (-1: none). Time order, not step number: a trace may number its
    steps out of order (#2 before #1), and the step table's step times are from one start to the next in time."""
    marker = (graph["cat"] == "marker").to_numpy()
    rank, step = graph["rank"].to_numpy(), graph["step"].to_numpy()
    frame = pd.DataFrame({"rank": rank[marker], "step": step[marker], "marker_t": start[marker],
                          "t0": graph["start_ns"].to_numpy()[marker], "node": np.flatnonzero(marker)})
    frame = frame.sort_values(["rank", "t0", "node"], ignore_index=True)
    frame["k"] = frame.groupby("rank").cumcount()  # the marker's place among its rank's, in time
    device = np.flatnonzero(graph["cat"].isin(["compute", "memory", "comm"]).to_numpy() & (step >= 0))
    drained = (pd.DataFrame({"rank": rank[device], "step": step[device], "drained": end[device], "drain_node": device})
               .merge(frame[["rank", "step", "k"]], on=["rank", "step"])  # device work of the steps that have one
               .sort_values(["rank", "k", "drained", "drain_node"]).drop_duplicates(["rank", "k"], keep="last"))
    # Work of earlier steps may end later still: the running latest, with the node that set it.
    latest = drained.groupby("rank")["drained"].cummax()
    drained["drain_node"] = drained["drain_node"].where(drained["drained"] >= latest).groupby(drained["rank"]).ffill()
    drained["drained"] = latest
    drained["k"] = drained["k"] + 1  # the work of the steps before the k-th marker, as it begins
    frame = pd.merge_asof(frame.sort_values("k"), drained[["rank", "k", "drained", "drain_node"]].sort_values("k"),
                          on="k", by="rank", allow_exact_matches=True)
    frame = frame.sort_values(["rank", "k"], ignore_index=True)
    frame["t"] = np.fmax(frame["marker_t"].to_numpy(), frame["drained"].to_numpy())
    frame["drain_node"] = frame["drain_node"].fillna(-1).astype(np.int64)
    return frame[["rank", "step", "t", "marker_t", "drained", "node", "drain_node"]]


def mean_step_us(per_step: pd.DataFrame) -> float:
    """The run's step time: the mean over ranks of each rank's mean step time (NaN without steps)."""
    if per_step.empty:
        return float("nan")
    return float(per_step.groupby("rank")["step_us"].mean().mean())
