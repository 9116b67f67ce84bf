"""Replay a run's dependency graph as a discrete-event simulation, with measured durations changed per scenario.

Every node ``i`` of the graph (``tracekit.rank.graph``) starts and ends by these rules, on its lane after node ``i-1``:

    start[i] = max(end[i-1], start[ps[i]], end[pe[i]], anchor[i]) + delay[i]
    end[i]   = max(start[i], latest start among the ranks of its collective, end[dr[i]]) + tail[i]

``delay`` is what the trace measured between the moment a node could start and the moment it did: host work that
no event records (Python between ops, a ``time.sleep``), launch latency. ``tail`` is its own time: the duration,
or for a collective the transfer after the last rank arrived, or for a synchronizing call the time after the device
drained. Both come from the measured times (``measure``), so replaying them unchanged reproduces the trace; a
scenario changes some of them and the replay finds where everything else moves. ``anchor`` pins the first node of a
lane that nothing else starts to its measured start.

The simulation is exact and vectorised: the rules of one lane are a max-plus recurrence solved with a cumulative
sum and a cumulative maximum, and lanes are re-solved until no time changes (one round per cross-lane hop on the
longest dependency chain).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.errors import TracekitError

MAX_ROUNDS = 100_000
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
    n_groups: int
    anchor: np.ndarray        # -inf unless pinned
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
    ps, pe, dr = (graph[c].to_numpy().astype(np.int64) for c in ("ps", "pe", "dr"))
    group = graph["group"].to_numpy().astype(np.int64)
    n_groups = int(group.max()) + 1 if len(group) and group.max() >= 0 else 0
    anchor = np.where(first & (ps < 0) & (pe < 0), start, -_INF)
    ext = _start_inputs(start, end, first, ps, pe, anchor)
    cross = _end_inputs(start, end, group, n_groups, dr)
    delay = start - ext
    busy = np.clip(graph["busy_ns"].to_numpy(dtype=np.float64), 0, np.maximum(delay, 0)) if "busy_ns" in graph else (
        np.zeros(len(graph)))
    return Model(lane=lane, lane_bounds=bounds, first=first, ps=ps, pe=pe, dr=dr, group=group, n_groups=n_groups,
                 anchor=anchor, delay=delay, busy=busy, tail=end - np.maximum(start, cross), start=start, end=end)


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
    n = len(delay)
    start, end = np.full(n, -_INF), np.full(n, -_INF)
    # Sparse inputs: each kind of edge touches only the nodes that have one.
    anchored = np.flatnonzero(model.first & (ps < 0) & (pe < 0))  # nothing else starts these: measured start
    by_ps, by_pe, by_dr = np.flatnonzero(ps >= 0), np.flatnonzero(pe >= 0), np.flatnonzero(dr >= 0)
    member = np.flatnonzero(group >= 0)
    own = delay + tail
    total = _segmented_cumsum(own, model.lane_bounds)
    for _ in range(MAX_ROUNDS):
        ext = _prev(end, model.first)
        ext[anchored] = np.maximum(ext[anchored], model.start[anchored])
        ext[by_ps] = np.maximum(ext[by_ps], start[ps[by_ps]])
        ext[by_pe] = np.maximum(ext[by_pe], end[pe[by_pe]])
        cross = np.full(n, -_INF)
        if len(member):
            latest = np.full(model.n_groups, -_INF)
            np.maximum.at(latest, group[member], start[member])
            cross[member] = latest[group[member]]
        cross[by_dr] = np.maximum(cross[by_dr], end[dr[by_dr]])
        # end[i] = max(end[i-1] + delay + tail, inputs + delay + tail, cross + tail): a running maximum per lane.
        reach = np.maximum(ext + own, cross + tail) - total
        new_end = total + _segmented_cummax(reach, model.lane_bounds)
        new_start = np.maximum(_prev(new_end, model.first), ext) + delay
        if np.array_equal(new_end, end) and np.array_equal(new_start, start):
            return start, end
        start, end = new_start, new_end
    raise ReplayError(f"the dependency graph did not settle in {MAX_ROUNDS} rounds: it has a cycle")


def _segmented_cumsum(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    total = np.cumsum(values)
    before = np.concatenate([[0.0], total])[bounds[:-1]]
    return total - np.repeat(before, np.diff(bounds))


def _segmented_cummax(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    out = np.empty_like(values)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):  # one call per lane, not per event
        out[a:b] = np.maximum.accumulate(values[a:b])
    return out


def step_times(graph: pd.DataFrame, model: Model, start: np.ndarray, end: np.ndarray,
               window_steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank and window step, its time (us) from one step boundary to the next, at (``start``, ``end``).

    The boundary before step k is its ``ProfilerStep`` marker, unless the device is then further behind on the
    work of earlier steps than it was in the trace: the host may run ahead of the device by as much as it did
    (a queue of launches that deep), no more. So the baseline's boundaries are the markers, and a scenario in
    which the host gets faster still waits for the device. (On CPU-only ranks the marker's thread is the device.)"""
    now = _boundaries(graph, start, end)
    then = _boundaries(graph, model.start, model.end)
    ahead = np.maximum(then["drained"].to_numpy() - then["t"].to_numpy(), 0)
    frame = now.assign(t=np.fmax(now["t"].to_numpy(), now["drained"].to_numpy() - np.nan_to_num(ahead)))
    frame["next_t"] = frame.groupby("rank")["t"].shift(-1)
    frame = frame.merge(window_steps[["rank", "step"]], on=["rank", "step"])
    return frame.assign(step_us=(frame["next_t"] - frame["t"]) / 1e3).dropna(subset=["step_us"])[["rank", "step", "step_us"]]


def _boundaries(graph: pd.DataFrame, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """Per marker (rank, step order): its time ``t`` and ``drained``, when the device work of earlier steps ended."""
    marker = (graph["cat"] == "marker").to_numpy()
    rank, step = graph["rank"].to_numpy(), graph["step"].to_numpy()
    frame = pd.DataFrame({"rank": rank[marker], "step": step[marker], "t": start[marker]})
    device = graph["cat"].isin(["compute", "memory", "comm"]).to_numpy() & (step >= 0)
    drained = (pd.DataFrame({"rank": rank[device], "step": step[device], "drained": end[device]})
               .groupby(["rank", "step"])["drained"].max().reset_index().sort_values(["rank", "step"]))
    drained["drained"] = drained.groupby("rank")["drained"].cummax()
    drained["step"] = drained["step"] + 1  # the work of steps before k, as step k begins
    frame = pd.merge_asof(frame.sort_values("step"), drained.sort_values("step"), on="step", by="rank",
                          allow_exact_matches=True)
    return frame.sort_values(["rank", "step"], ignore_index=True)


def mean_step_us(per_step: pd.DataFrame) -> float:
    """The run's step time: the mean over ranks of each rank's mean step time (NaN without steps)."""
    if per_step.empty:
        return float("nan")
    return float(per_step.groupby("rank")["step_us"].mean().mean())
