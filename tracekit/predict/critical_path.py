"""The critical path of each step across ranks: the chain of events that ends the step, walked back through the graph.

A step ends on the rank whose next step boundary comes last (``stepbounds.boundaries``: the next ``ProfilerStep``
marker or, when the device work of the steps so far ends later, that work's end: steps tile, and a device-bound
step's path runs through its kernels). From there the walk follows, at each node,
the input that bound it in the measured run (``tracekit.predict.replay``): its lane predecessor, its launch, the event it
waited for, or, for a collective, the last rank to arrive. Each piece of time on the path gets a category:

  compute        device work (on CPU-only ranks, the training thread's ops)
  comm_transfer  a collective moving data after the last rank arrived (exposed: nothing else ends the step then)
  launch         launch calls, the latency from a launch to its kernel, a gloo collective's hand-off
  host           host time no event records, between calls (Python, a sleep); on GPU ranks, launch overhead
  data           DataLoader ``__next__``
  sync           a synchronizing call waiting for the device to drain (a gloo send/recv's wait once its thread
                 blocked in it is comm_transfer)
  other          anything else (a wake-up after a wait, a host op that is none of the above)
  unknown        from the step's start to the first event the walk reached that the trace links to nothing
                 earlier (e.g. a collective recorded without the op that enqueued it): what bound it is not recorded

``waiting`` marks time spent on another rank than the one that ends the step: that rank was waiting for this one,
and the category says what this one was doing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.predict.replay import Model
from tracekit.predict.stepbounds import boundaries
from tracekit.schema import CRITICAL_PATH_COLUMNS, CRITICAL_PATH_EVENT_COLUMNS

CATEGORIES = ("compute", "comm_transfer", "launch", "host", "data", "sync", "other", "unknown")
PATH_COLUMNS = list(CRITICAL_PATH_COLUMNS)
EVENT_COLUMNS = list(CRITICAL_PATH_EVENT_COLUMNS)
_OWN = {"compute": "compute", "memory": "compute", "comm": "comm_transfer", "launch": "launch", "sync": "sync",
        "data": "data", "host": "host", "marker": "other"}


def bindings(graph: pd.DataFrame, model: Model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node, in the measured run: which input bound its start (0 lane, 1 launch/enqueue, 2 wait, 3 anchor),
    and the node whose end bound its end (-1: its own start)."""
    return (start_bindings(model), *_end_bindings(model))


def start_bindings(model: Model) -> np.ndarray:
    """Per node, in the measured run: which input bound its start (0 lane, 1 launch/enqueue, 2 wait, 3 anchor)."""
    start, end, first = model.start, model.end, model.first
    # The latest of the four inputs, the first of them on a tie (as argmax over them stacked), one input at a
    # time: no four-row copy of every node's inputs.
    latest = np.where(first, -np.inf, np.concatenate([[-np.inf], end[:-1]]))
    start_by = np.zeros(len(start), dtype=np.int64)
    for by, values in ((1, lambda: np.where(model.ps >= 0, start[np.maximum(model.ps, 0)], -np.inf)),
                       (2, lambda: np.where(model.pe >= 0, end[np.maximum(model.pe, 0)], -np.inf)),
                       (3, lambda: model.anchor)):
        value = values()
        later = value > latest
        latest[later], start_by[later] = value[later], by
        del value, later
    return start_by


def _end_bindings(model: Model) -> tuple[np.ndarray, np.ndarray]:
    """Per node, in the measured run: the node whose end bound its end (-1: its own start), and how (1 the last
    arrival of its collective or its pair's other half, 2 a drain, 0 none)."""
    start, end = model.start, model.end
    group = model.group
    member = np.flatnonzero(group >= 0)
    last = np.full(len(start), -1, dtype=np.int64)
    if len(member):
        frame = pd.DataFrame({"g": group[member], "t": start[member], "i": member}).sort_values(["g", "t"])
        last_of = frame.groupby("g")["i"].last()
        last[member] = last_of.reindex(group[member]).to_numpy()
    t_last = np.where(last >= 0, start[np.maximum(last, 0)], -np.inf)
    t_src = np.where(model.src >= 0, start[np.maximum(model.src, 0)], -np.inf)  # bound by its pair's other half
    last = np.where(t_src > t_last, model.src, last)
    t_last = np.maximum(t_last, t_src)
    t_dr = np.where(model.dr >= 0, end[np.maximum(model.dr, 0)], -np.inf)
    end_by = np.where((t_last >= t_dr) & (t_last > start), last, np.where(t_dr > start, model.dr, -1))
    return end_by, np.where(end_by == last, 1, np.where(end_by >= 0, 2, 0))


def critical_paths(graph: pd.DataFrame, model: Model, window_steps: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(critical_path, critical_path_events) of every window step that has a next step to end it."""
    if not (graph["cat"] == "marker").any():
        return pd.DataFrame(columns=PATH_COLUMNS), pd.DataFrame(columns=EVENT_COLUMNS)
    frame = boundaries(graph, model.start, model.end)
    # The node that ends the step: the next marker, or the device node whose end is the later boundary.
    by_device = (frame["drained"] > frame["marker_t"]).to_numpy() & (frame["drain_node"] >= 0).to_numpy()
    frame["end_node"] = np.where(by_device, frame["drain_node"], frame["node"])
    frame["end_phase"] = np.where(by_device, "end", "start")
    frame["t"] = frame.groupby("rank")["t"].cummax()  # as the replay's step times
    for column in ("end_node", "end_phase", "t"):
        frame[f"next_{column}"] = frame.groupby("rank")[column].shift(-1)
    frame = frame.dropna(subset=["next_end_node"]).merge(window_steps[["rank", "step"]], on=["rank", "step"])
    # Each step ends on the rank whose next boundary is latest (the lowest rank of a tie).
    ends = frame.sort_values(["next_t", "rank"], ascending=[False, True]).drop_duplicates("step")
    start_by, end_by, end_kind = bindings(graph, model)
    host_lane = _host_lanes(graph)
    walk = _Walker(graph, model, start_by, end_by, end_kind, host_lane)
    events = walk.events([(walk.pieces(int(r.next_end_node), float(r.t), r.next_end_phase), int(r.step), int(r.rank))
                          for r in ends.itertuples()])
    if events.empty:
        return pd.DataFrame(columns=PATH_COLUMNS), pd.DataFrame(columns=EVENT_COLUMNS)
    path = (events.assign(us=events["end_us"] - events["start_us"])
            .groupby(["rank", "step", "category", "waiting", "ends_on_rank"], observed=True)["us"].sum().reset_index())
    path["category"] = pd.Categorical(path["category"], categories=list(CATEGORIES))
    return path[PATH_COLUMNS].sort_values(["step", "rank", "category"], ignore_index=True), events[EVENT_COLUMNS]


def _host_lanes(graph: pd.DataFrame) -> np.ndarray:
    """Per node: whether its lane is a host thread (it holds no device event or collective)."""
    device = graph["cat"].isin(["compute", "memory", "comm"]).to_numpy() & (graph["ps"].to_numpy() >= 0)
    device |= (graph["cat"] == "comm").to_numpy()
    device_lanes = np.unique(graph["lane"].to_numpy()[device])
    return ~np.isin(graph["lane"].to_numpy(), device_lanes)


class _Walker:
    """Walks back from a node's start through the binding inputs, one piece of time per step of the walk
    (``_walk_kernel.walk``, compiled: a path has a piece per event it crosses, tens of thousands a step)."""

    def __init__(self, graph, model, start_by, end_by, end_kind, host_lane) -> None:
        self.start, self.end, self.first = model.start, model.end, np.ascontiguousarray(model.first, dtype=np.bool_)
        self.ps, self.pe = (np.ascontiguousarray(a, dtype=np.int64) for a in (model.ps, model.pe))
        self.busy = np.ascontiguousarray(model.busy, dtype=np.float64)
        self.start_by, self.end_by, self.end_kind = (np.ascontiguousarray(a, dtype=np.int64)
                                                     for a in (start_by, end_by, end_kind))
        self.rank = graph["rank"].to_numpy()
        self.cat_codes = graph["cat"].cat.codes.to_numpy().astype(np.int64)
        cats = list(graph["cat"].cat.categories)
        self.own = np.array([CATEGORIES.index(_OWN[c]) if c in _OWN else -1 for c in cats], dtype=np.int64)
        self.comm = cats.index("comm") if "comm" in cats else -2
        # A kind code indexes this: the graph's categories, then "unlinked" (-2) and "delay" (-1) from the end.
        self.kinds = np.array(cats + ["unlinked", "delay"], dtype=object)
        self.name = graph["name"]
        self.in_data = np.ascontiguousarray(graph["in_data"].to_numpy(dtype=bool))
        self.host = np.ascontiguousarray(host_lane, dtype=np.bool_)

    def pieces(self, node: int, t0: float, phase: str = "start") -> tuple[np.ndarray, ...]:
        """The path's pieces from ``node``'s start (``phase`` "start") or end ("end") back to ``t0``, in time order:
        (node, start ns, end ns, kind code, category code), as ``_walk_kernel.walk`` gives them."""
        from tracekit.predict._walk_kernel import NO_CATEGORY, walk  # numba: imported on first use

        *pieces, error = walk(
            int(node), float(t0), phase == "end", self.start, self.end, self.first, self.ps, self.pe, self.busy,
            self.start_by, self.end_by, self.end_kind, self.cat_codes, self.own, self.comm, self.in_data, self.host)
        if error == NO_CATEGORY:
            raise KeyError(f"no critical-path category for graph category {sorted(set(self.kinds[:-2]) - set(_OWN))}")
        return tuple(a[::-1] for a in pieces)

    def events(self, walks: list[tuple[tuple[np.ndarray, ...], int, int]]) -> pd.DataFrame:
        """The ``critical_path_events`` rows of each step's ``(pieces, step, rank it ends on)``. Names and kinds
        repeat on a large path (millions of rows, a few hundred names): kept as categories of the names and kinds
        on it, not a string per row."""
        if not walks:
            return pd.DataFrame(columns=EVENT_COLUMNS)
        if any(len(pieces[0]) == 0 for pieces, _, _ in walks):
            return self._events_of_frames(walks)
        nodes, lo, hi, kind, category = (np.concatenate(parts) for parts in zip(*(pieces for pieces, _, _ in walks)))
        counts = [len(pieces[0]) for pieces, _, _ in walks]
        ends_on = np.repeat(np.array([r for _, _, r in walks], dtype=np.int64), counts)
        rank = self.rank[nodes]
        used = np.unique(kind)
        labels = self.kinds[used]
        order = np.argsort(labels.astype(str), kind="stable")  # text order, as the strings sort
        code_of = np.empty(len(self.kinds), dtype=np.int64)
        code_of[used[order]] = np.arange(len(used))
        names = pd.Series(self.name.array.take(nodes)).astype("category").cat.remove_unused_categories()
        return pd.DataFrame({
            "rank": rank, "step": np.repeat(np.array([s for _, s, _ in walks], dtype=np.int64), counts),
            "start_us": lo / 1e3, "end_us": hi / 1e3,
            "name": names.cat.reorder_categories(sorted(names.cat.categories)),
            "kind": pd.Categorical.from_codes(code_of[kind], categories=list(labels[order])),
            "category": pd.Categorical.from_codes(category, categories=list(CATEGORIES)),
            "waiting": rank != ends_on, "ends_on_rank": ends_on,
        })

    def _events_of_frames(self, walks) -> pd.DataFrame:
        """``events`` where a step's walk found no piece: a frame per step, concatenated (a step of no rows makes
        the numeric columns object, as it always has)."""
        frames = []
        for (nodes, lo, hi, kind, category), step, ends_on in walks:
            if len(nodes):
                frame = pd.DataFrame({"rank": self.rank[nodes], "start_ns": lo, "end_ns": hi, "node": nodes,
                                      "kind": self.kinds[kind],
                                      "category": np.array(CATEGORIES, dtype=object)[category]})
            else:
                frame = pd.DataFrame([], columns=["rank", "start_ns", "end_ns", "node", "kind", "category"])
            frames.append(pd.DataFrame({
                "rank": frame["rank"].to_numpy(), "step": step, "start_us": frame["start_ns"].to_numpy() / 1e3,
                "end_us": frame["end_ns"].to_numpy() / 1e3, "name": self.name.array.take(frame["node"].to_numpy()),
                "kind": frame["kind"].to_numpy(), "category": frame["category"].to_numpy(),
                "waiting": frame["rank"].to_numpy() != ends_on, "ends_on_rank": ends_on,
            }))
        events = pd.concat(frames, ignore_index=True)
        events["category"] = pd.Categorical(events["category"], categories=list(CATEGORIES))
        names = events["name"].astype("category").cat.remove_unused_categories()
        events["name"] = names.cat.reorder_categories(sorted(names.cat.categories))
        events["kind"] = pd.Categorical(events["kind"], categories=sorted(set(events["kind"])))
        return events
