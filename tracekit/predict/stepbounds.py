"""Step boundaries of a replayed run: where each step begins, at the replay's times, and the step times that follow.

The boundary before step k is its ``ProfilerStep`` marker or, when the device work of earlier steps ends after it,
where that work ends (``metrics.step_breakdown``: steps tile, each ends on the later of the two clocks). So a
scenario in which the host gets faster still waits for the device, and no boundary moves later than in the baseline
where no replayed time does. (On CPU-only ranks the marker's thread is the device.)

What no scenario changes (which nodes are markers, their order, the device nodes of each marker's step) is found
once per graph (``Marks``); each scenario's times are then reduced over it with a few array passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

BOUNDARY_COLUMNS = ["rank", "step", "t", "marker_t", "drained", "node", "drain_node"]
_DEVICE = ["compute", "memory", "comm"]


@dataclass(frozen=True)
class Marks:
    """A graph's step markers in each rank's time order (rank, then the marker's start, then its node), and the
    device nodes of the step each marker begins: ``pair_node[j]`` belongs to marker ``pair_row[j]`` (a device node
    is paired with every marker of its rank and step; a trace may number two markers alike)."""

    rank: np.ndarray
    step: np.ndarray
    node: np.ndarray
    pair_row: np.ndarray
    pair_node: np.ndarray


def marks(graph: pd.DataFrame) -> Marks:
    marker = (graph["cat"] == "marker").to_numpy()
    rank, step = graph["rank"].to_numpy(), graph["step"].to_numpy()
    node = np.flatnonzero(marker)
    order = np.lexsort((node, graph["start_ns"].to_numpy()[marker], rank[marker]))
    node = node[order]
    device = np.flatnonzero(graph["cat"].isin(_DEVICE).to_numpy() & (step >= 0))
    keys = pd.MultiIndex.from_arrays([rank[node], step[node]])
    # Each device node against the markers of its (rank, step): one pair per marker, in marker order.
    pairs = pd.DataFrame({"rank": rank[device], "step": step[device], "pair_node": device}).merge(
        pd.DataFrame({"rank": keys.get_level_values(0), "step": keys.get_level_values(1),
                      "pair_row": np.arange(len(node))}), on=["rank", "step"])
    return Marks(rank=rank[node], step=step[node], node=node, pair_row=pairs["pair_row"].to_numpy(np.int64),
                 pair_node=pairs["pair_node"].to_numpy(np.int64))


def boundaries(graph: pd.DataFrame, start: np.ndarray, end: np.ndarray, at: Marks | None = None) -> pd.DataFrame:
    """Per marker, in each rank's time order: the boundary ``t`` before its step (the later of the marker and
    ``drained``, when the device work of the steps before it ended), the marker's ``node`` and ``drain_node``, the
    device node that ends last among that work (-1: none). Time order, not step number: a trace may number its
    steps out of order (#2 before #1), and the step table's step times are from one start to the next in time.
    ``at``: ``marks(graph)``, when the caller has it (it is the same for every scenario of a graph)."""
    at = marks(graph) if at is None else at
    drained, drain_node = _drained(at, np.asarray(end, dtype=np.float64))
    marker_t = np.asarray(start)[at.node]
    return pd.DataFrame({"rank": at.rank, "step": at.step, "t": np.fmax(marker_t, drained), "marker_t": marker_t,
                         "drained": drained, "node": at.node, "drain_node": drain_node})


def _drained(at: Marks, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per marker: when the device work of its rank's earlier steps ended (the running latest over the markers
    before it; NaN: none), and the node that set that time (the latest end; of equal ends, the highest node)."""
    n = len(at.node)
    drained, drain_node = np.full(n, np.nan), np.full(n, -1, dtype=np.int64)
    if len(at.pair_row) == 0:
        return drained, drain_node
    ends = end[at.pair_node]
    # Per marker with device work: its latest end (a NaN end sorts last, so is its step's latest, as in a sort).
    order = np.lexsort((at.pair_node, ends, at.pair_row))
    row = at.pair_row[order]
    last = np.append(row[1:] != row[:-1], True)
    row, value, node = row[last], ends[order][last], at.pair_node[order][last]
    rank = at.rank[row]
    # The running latest of each rank's markers so far (a NaN step skipped, as cummax skips it), and its node.
    running = pd.Series(value).groupby(rank, sort=False).cummax().to_numpy()
    setter = np.flatnonzero(value >= running)  # a NaN (its own or the running one) sets nothing
    held = np.full(len(row), -1, dtype=np.int64)
    held[setter] = setter
    held = np.maximum.accumulate(held)
    first = np.flatnonzero(np.append(True, rank[1:] != rank[:-1]))  # each rank's first marker with device work
    held[held < np.repeat(first, np.diff(np.append(first, len(row))))] = -1  # none of this rank's set it yet
    # Each marker takes what its rank's markers before it reached: the last such marker with device work.
    before = np.searchsorted(row, np.arange(n), side="left") - 1
    mine = before >= 0
    mine[mine] = rank[before[mine]] == at.rank[mine]
    drained[mine] = running[before[mine]]
    known = mine.copy()
    known[mine] = held[before[mine]] >= 0
    drain_node[known] = node[held[before[known]]]
    return drained, drain_node


def step_times(graph: pd.DataFrame, start: np.ndarray, end: np.ndarray, window_steps: pd.DataFrame,
               at: Marks | None = None) -> pd.DataFrame:
    """Per rank and window step (``window_steps``: rank, step), its time (us) from one step boundary to the next, at
    (``start``, ``end``); in the markers' order, the last of each rank (no next boundary) left out."""
    at = marks(graph) if at is None else at
    t = boundaries(graph, start, end, at)["t"]
    # No step begins before the one before it: steps annotated on two threads may replay out of order otherwise (a
    # scenario that shortens one thread only). Markers on one lane are in order already: the same times.
    t = t.groupby(at.rank, sort=False).cummax().to_numpy()
    next_t = np.full(len(t), np.nan)
    next_t[:-1] = t[1:]
    next_t[:-1][at.rank[1:] != at.rank[:-1]] = np.nan  # each rank's last marker: no next boundary
    window = pd.MultiIndex.from_frame(window_steps[["rank", "step"]])
    keep = pd.MultiIndex.from_arrays([at.rank, at.step]).isin(window)
    if not window.is_unique:  # a window step listed twice counts twice, as a join of the two tables would
        keep = np.repeat(np.flatnonzero(keep), window.value_counts().reindex(
            pd.MultiIndex.from_arrays([at.rank[keep], at.step[keep]])).to_numpy())
    step_us = (next_t[keep] - t[keep]) / 1e3
    known = ~np.isnan(step_us)
    return pd.DataFrame({"rank": at.rank[keep][known], "step": at.step[keep][known], "step_us": step_us[known]},
                        index=np.flatnonzero(known))


def mean_step_us(per_step: pd.DataFrame) -> float:
    """The run's step time: the mean over ranks of each rank's mean step time (NaN without steps)."""
    if per_step.empty:
        return float("nan")
    return float(per_step.groupby("rank")["step_us"].mean().mean())
