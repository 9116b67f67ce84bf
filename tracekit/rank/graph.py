"""The dependency graph of a run: one node per event that takes time, and what must finish before each can start.

Built per rank in the worker (``rank_graph``: one small node table, the within-rank edges as columns), then joined
across ranks by ``tracekit.run.rungraph.run_graph`` (collective transfers wait for the last rank to arrive).

Nodes: device events (kernels, memcpys, memsets; on CPU-only ranks the training thread's innermost ops and gloo's
collectives), the host calls that matter for time (launches, synchronizations, the DataLoader, the innermost ops of
the training thread), one zero-length marker per step start (``ProfilerStep``, or the step annotations
``tracekit.events.steps`` finds) and one where the last step ends (``tracekit.rank.markers``). Each node lies on one
*lane* (a host thread, a GPU stream, a gloo thread) and lanes run their nodes in order; a gloo send/recv span (async,
overlapping its thread's later ops) has a lane of its own.

Edges (node columns, -1 when absent):
  lane order   implicit: a node starts after the one before it on its lane ends
  ``ps``       start after this node *started*: a device event after its launch call (``correlation``), a gloo
               collective after the ``c10d::*`` op that enqueued it
  ``pe``       start after this node *ended*: a device event on one stream waiting for another stream (inferred: it
               started within ``STREAM_WAIT_NS`` of that event's end, later than its own stream and launch allowed),
               or, on a CPU-only rank, the training thread resuming when the collective it waited for ended (a gap of
               at least ``MIN_WAIT_GAP_NS`` that ends within 10% of its length of a collective's end), or the end
               marker waiting for the last step's device work when that ends after the step's annotation
  ``dr``       end after this node ended: a synchronizing host call (``cudaStreamSynchronize``, blocking copy, ...)
               returns when the last device event that ended inside it has ended; a gloo send/recv ends after its
               thread's last op before its wait returned (``tracekit.rank.drains``)
  spin-waits   (GPU ranks) host time that waits on the device with no sync recorded (``tracekit.rank.spinwait``):
               a ``pe`` edge for unrecorded time before a node, a ``dr`` edge for a call's own time
  collectives  (run level) a collective's transfer starts when the last member rank arrives (``group``)
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.events.causes import DATA_LOADER, SYNC_CALL
from tracekit.events.steps import step_table
from tracekit.rank.drains import blocked_from, drains
from tracekit.rank.collrows import collective_rows
from tracekit.rank.spinwait import spin_waits
from tracekit.rank.markers import END_MARKER, END_ROW as _END_ROW, end_marker as _end_marker
from tracekit.events.hostops import reads_host_op
from tracekit import intervals as iv
from tracekit import schema
from tracekit.read.categories import DEVICE_CATEGORIES

NODE_CATS = ("compute", "memory", "comm", "launch", "sync", "data", "host", "marker")
STREAM_WAIT_NS = 20_000
MIN_WAIT_GAP_NS = 100_000
WAIT_TOLERANCE = 0.10
_ENQUEUE = re.compile(r"^c10d::(?!wait)")
_HOST_CATS = ("cpu_op", "user_annotation", "python_function")
GRAPH_COLUMNS = [c for c in schema.GRAPH_COLUMNS if c not in ("group", "pair_src")]  # the run graph adds these


def rank_graph(events: pd.DataFrame, collectives: pd.DataFrame, steps: pd.DataFrame | None = None,
               p2p: pd.DataFrame | None = None) -> pd.DataFrame:
    """One rank's node table (``GRAPH_COLUMNS``; edges as local row positions) from its classified events, its
    collectives (``collective_table``, with ``row``; ``coll`` a row position in it), its steps (``steps.step_table``;
    None: the trace's own) and its P2P calls (``p2p.split_p2p``; ``p2p`` a row position)."""
    if events.empty:
        return empty_graph()
    rank = int(events["rank"].iloc[0])
    cats = events["cat"].astype("category")
    name = events["name"].astype("category")
    names = name.cat.categories
    ts, dur = events["ts_ns"].to_numpy(), events["dur_ns"].to_numpy()
    valid = dur >= 0
    lane_key = _lane_keys(events)
    kind = events["kind"].array  # categorical: comparisons without a Python string per event
    is_dev = cats.isin(DEVICE_CATEGORIES).to_numpy() & events["kind"].notna().to_numpy() & valid
    on_gpu = bool(is_dev.any())
    steps = step_table(events) if steps is None else steps
    step_of_row = pd.Series(steps["step"].to_numpy(), index=steps["row"].to_numpy())
    is_step = np.isin(np.arange(len(events)), steps["row"].to_numpy())
    is_comm_cpu = ~on_gpu & (kind == "comm") & valid
    cat_names = cats.cat.categories.astype(str)
    runtime = cats.isin(cat_names[cat_names.str.endswith("_runtime") | cat_names.str.endswith("_driver")]).to_numpy()
    launch_rows = events["launch_row"].to_numpy()
    launches = np.zeros(len(events), dtype=bool)
    launches[launch_rows[is_dev & (launch_rows >= 0)]] = True
    sync = name.isin(names[[SYNC_CALL.search(n) is not None for n in names]]).to_numpy()
    host_lanes = set(lane_key[is_step | launches])
    if not on_gpu and not host_lanes:  # no ProfilerStep: the thread with the most compute ops trains
        compute = lane_key[(events["kind"] == "compute").to_numpy()]
        host_lanes = {pd.Series(compute).mode().iloc[0]} if len(compute) else set()
    on_host_lane = np.isin(lane_key, list(host_lanes))
    host_op = cats.isin(_HOST_CATS).to_numpy().copy()
    if on_gpu:  # only the host ops a GPU rank's reading keeps: the graph must not depend on what it leaves out
        kept = np.fromiter((reads_host_op(n) for n in names), dtype=bool, count=len(names))
        host_op &= (cats != "cpu_op").to_numpy() | (kept[name.cat.codes.to_numpy()] & (name.cat.codes.to_numpy() >= 0))
    candidate = on_host_lane & valid & ~is_step & ~is_dev & ~is_comm_cpu & (host_op | (runtime & (launches | sync)))
    host = np.flatnonzero(candidate)
    host = host[_leaves(lane_key[host], ts[host], ts[host] + dur[host])]

    dev = np.flatnonzero(is_dev | is_comm_cpu)
    steps = np.flatnonzero(is_step)  # one row per step: a step recorded twice is one row of the step table
    rows = np.concatenate([dev, host, steps])
    node_cat = np.select(
        [np.isin(rows, steps), np.isin(rows, dev) & (kind[rows] == "comm"), np.isin(rows, dev) & (kind[rows] == "memory"),
         np.isin(rows, dev), sync[rows] & on_gpu, launches[rows] | name.isin(names[names.str.match(_ENQUEUE.pattern)]).to_numpy()[rows],
         (kind[rows] == "compute")],
        [NODE_CATS.index(c) for c in ("marker", "comm", "memory", "compute", "sync", "launch", "compute")],
        default=NODE_CATS.index("host")).astype(np.int8)  # codes of NODE_CATS: a byte a node, not a string
    if len(steps) and END_MARKER not in names:  # a trace may hold an event of that name (a re-read export)
        names = names.append(pd.Index([END_MARKER]))  # appended: every code of ``name`` still names the same
    codes = name.cat.codes.to_numpy()
    nodes = pd.DataFrame({  # the arrays as they are (copy=False): a large trace has millions of nodes
        "rank": np.full(len(rows), rank, dtype=np.int32), "lane": lane_key[rows],
        "start_ns": ts[rows], "end_ns": np.where(np.isin(rows, steps), ts[rows], ts[rows] + dur[rows]),
        "step": np.where(np.isin(rows, steps), step_of_row.reindex(rows).fillna(-1).to_numpy(dtype=np.int64),
                         events["step"].to_numpy()[rows]),
        "cat": pd.Categorical.from_codes(node_cat, categories=list(NODE_CATS)),
        "name": pd.Categorical.from_codes(codes[rows], categories=names),
        "row": rows, "is_marker": np.isin(rows, steps),
    }, copy=False)
    del node_cat, is_dev, is_step, is_comm_cpu, runtime, launches, sync, host_op, candidate, dev, host, rows
    loader = name.isin(names[names.str.match(DATA_LOADER.pattern)]).to_numpy() & valid
    nodes["in_data"] = _inside(nodes, lane_key[loader], ts[loader], ts[loader] + dur[loader]) & ~nodes["is_marker"]
    # A zero-length node where each DataLoader __next__ ends: the unrecorded time before it is data loading too.
    ends = np.flatnonzero(loader & on_host_lane)
    added = [pd.DataFrame({
        "rank": np.full(len(ends), rank, dtype=np.int32), "lane": lane_key[ends], "start_ns": ts[ends] + dur[ends],
        "end_ns": ts[ends] + dur[ends], "step": events["step"].to_numpy()[ends],
        "cat": pd.Categorical.from_codes(np.full(len(ends), NODE_CATS.index("data")), categories=list(NODE_CATS)),
        "name": pd.Categorical.from_codes(codes[ends], categories=names),
        "row": -1 - np.arange(len(ends)), "is_marker": False, "in_data": True})]
    end_bound = None
    if len(steps):  # the DataLoader ends are not device work: the marker is the same with or without them
        marker, end_bound = _end_marker(events, step_of_row, lane_key, ts + dur, nodes)
        added.append(marker)
    nodes = pd.concat([nodes, *added], ignore_index=True)
    del added
    nodes["thread_lane"] = -1
    if not on_gpu and p2p is not None and len(p2p):  # gloo's async P2P spans overlap the thread's later ops
        own = np.flatnonzero(np.isin(nodes["row"].to_numpy(), p2p["row"].to_numpy()))
        nodes.loc[own, "thread_lane"] = nodes["lane"].to_numpy()[own]
        nodes.loc[own, "lane"] = -2 - nodes["row"].to_numpy()[own]  # a lane of its own each
    nodes["name"] = nodes["name"].cat.remove_unused_categories()
    nodes.loc[nodes["in_data"].to_numpy() & (nodes["cat"] == "host").to_numpy(), "cat"] = "data"
    nodes = nodes.sort_values(["lane", "start_ns", "is_marker", "end_ns"], ascending=[True, True, False, True],
                              kind="stable", ignore_index=True)
    node_rows = nodes["row"].to_numpy()
    position = _positions(node_rows, len(events))
    ps = np.full(len(nodes), -1, dtype=np.int64)
    launch_of = np.where(node_rows >= 0, launch_rows[np.maximum(node_rows, 0)], -1)
    launched = nodes["cat"].isin(["compute", "memory", "comm"]).to_numpy() & (launch_of >= 0)
    ps[np.flatnonzero(launched)] = position[launch_of[launched]]
    del launch_of, launched
    if not on_gpu:
        _enqueue_edges(nodes, events[name.isin(names[names.str.match(_ENQUEUE.pattern)]).to_numpy() & valid], ps)
    busy = np.zeros(len(nodes), dtype=np.int64)
    if not on_gpu:  # the own time of enclosing ops between two innermost ones is compute, not idle host time
        prev_end = np.nan_to_num(_lane_prev_end(nodes), neginf=0).astype(np.int64)
        for lane in host_lanes:  # one per training thread
            ops = (kind == "compute") & (lane_key == lane)
            mine = np.flatnonzero((nodes["lane"] == lane).to_numpy() & (nodes["cat"] != "comm").to_numpy())
            busy[mine] = iv.covered_within(iv.merge(ts[ops], ts[ops] + dur[ops]), prev_end[mine],
                                           nodes["start_ns"].to_numpy()[mine])
    pe = _waits(nodes, on_gpu, ps)
    if end_bound is not None:  # the last step ends when its device work does: the end marker waits for it
        pe[int(np.flatnonzero(node_rows == _END_ROW)[0])] = int(position[end_bound])
    del position, node_rows
    dr = drains(nodes) if on_gpu else blocked_from(nodes, pe)
    if on_gpu:  # host time that waited on the device with no sync recorded (``tracekit.rank.spinwait``)
        pe, dr = spin_waits(nodes, pe, dr)
    out = nodes.assign(ps=ps, pe=pe, dr=dr,
                       coll=collective_rows(nodes, collectives), busy_ns=np.maximum(busy, 0),
                       p2p=collective_rows(nodes, p2p) if p2p is not None else -1)
    del nodes, ps, pe, busy  # ``out`` holds what is kept; the columns replaced below end with it
    out["lane"] = pd.factorize(out["lane"])[0].astype(np.int32)
    out["cat"] = pd.Categorical(out["cat"], categories=list(NODE_CATS))
    return out[GRAPH_COLUMNS]


def empty_graph() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype=np.int64) for c in GRAPH_COLUMNS})
    return frame.assign(cat=pd.Categorical([], categories=list(NODE_CATS)), name=pd.Categorical([]),
                        in_data=pd.Series(dtype=bool), rank=pd.Series(dtype=np.int32), lane=pd.Series(dtype=np.int32))


def _leaves(lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Which intervals hold no other interval of their lane starting inside them (the innermost calls)."""
    order = np.lexsort((-end, start, lane))
    s, e, ln = start[order], end[order], lane[order]
    nested = np.zeros(len(order), dtype=bool)
    nested[:-1] = (ln[1:] == ln[:-1]) & (s[1:] < e[:-1])
    keep = np.zeros(len(order), dtype=bool)
    keep[order] = ~nested
    return keep


def _positions(node_rows: np.ndarray, n_events: int) -> np.ndarray:
    """Per events-table row, its node's position (-1: none): an array over the events, not a hashed index."""
    position = np.full(n_events, -1, dtype=np.int64)
    own = np.flatnonzero(node_rows >= 0)
    position[node_rows[own]] = own
    return position


def _lane_keys(events: pd.DataFrame) -> np.ndarray:
    """One integer per row, equal exactly when pid and tid are (a thread, or a GPU stream)."""
    pid = events["pid"].astype("category").cat.codes.to_numpy().astype(np.int64)
    tid = events["tid"].astype("category").cat.codes.to_numpy().astype(np.int64)
    return (pid + 1) * (int(tid.max(initial=0)) + 2) + tid + 1


def _inside(nodes: pd.DataFrame, lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Whether each node starts inside one of the spans (lane, start, end) on its lane (the spans themselves count)."""
    if len(lane) == 0 or nodes.empty:
        return np.zeros(len(nodes), dtype=bool)
    right = pd.DataFrame({"lane": lane, "t": start, "span_end": end}).sort_values("t")
    left = pd.DataFrame({"lane": nodes["lane"].to_numpy(), "t": nodes["start_ns"].to_numpy(),
                         "i": np.arange(len(nodes))}).sort_values("t")
    joined = pd.merge_asof(left, right, on="t", by="lane")
    hit = (joined["t"] < joined["span_end"]).fillna(False).to_numpy(dtype=bool)
    out = np.zeros(len(nodes), dtype=bool)
    out[joined["i"].to_numpy()[hit]] = True
    return out


def _enqueue_edges(nodes: pd.DataFrame, enqueues: pd.DataFrame, ps: np.ndarray) -> None:
    """CPU ranks: each gloo collective starts after the latest ``c10d::*`` op begun before it; the edge comes from
    the first training-thread node at or after that op's start."""
    comm = np.flatnonzero((nodes["cat"] == "comm").to_numpy())
    host = np.flatnonzero(~nodes["cat"].isin(["comm", "marker"]).to_numpy())
    if enqueues.empty or len(comm) == 0 or len(host) == 0:
        return
    op_start = np.sort(enqueues["ts_ns"].to_numpy())
    c_start = nodes["start_ns"].to_numpy()[comm]
    at = np.searchsorted(op_start, c_start, side="right") - 1
    ok = at >= 0
    h_start = nodes["start_ns"].to_numpy()[host]
    order = np.argsort(h_start, kind="stable")
    first = np.searchsorted(h_start[order], op_start[np.maximum(at, 0)], side="left")
    ok &= first < len(host)
    src = host[order[np.minimum(first, len(host) - 1)]]
    ok &= h_start[order[np.minimum(first, len(host) - 1)]] <= c_start
    ps[comm[ok]] = src[ok]


def _lane_prev_end(nodes: pd.DataFrame) -> np.ndarray:
    end = nodes["end_ns"].to_numpy().astype(np.float64)
    prev = np.concatenate([[-np.inf], end[:-1]])
    lane = nodes["lane"].to_numpy()
    first = np.concatenate([[True], lane[1:] != lane[:-1]])
    return np.where(first, -np.inf, prev)


def _waits(nodes: pd.DataFrame, on_gpu: bool, ps: np.ndarray) -> np.ndarray:
    """Inferred start-after-end edges (see the module docstring)."""
    pe = np.full(len(nodes), -1, dtype=np.int64)
    start, end = nodes["start_ns"].to_numpy(), nodes["end_ns"].to_numpy()
    prev_end = _lane_prev_end(nodes)
    is_dev = (nodes["cat"].isin(["compute", "memory", "comm"]) if on_gpu else nodes["cat"] == "comm").to_numpy()
    if on_gpu:
        known = np.maximum(prev_end, np.where(ps >= 0, start[np.maximum(ps, 0)], -np.inf))
        lanes = nodes["lane"].to_numpy()
        for lane in np.unique(lanes[is_dev]):
            mine = np.flatnonzero(is_dev & (lanes == lane))
            other = np.flatnonzero(is_dev & (lanes != lane))
            if len(other) == 0:
                continue
            order = other[np.argsort(end[other], kind="stable")]
            at = np.searchsorted(end[order], start[mine], side="right") - 1
            src = order[np.maximum(at, 0)]
            ok = (at >= 0) & (end[src] > known[mine]) & (start[mine] - end[src] <= STREAM_WAIT_NS)
            pe[mine[ok]] = src[ok]
        return pe
    comm = np.flatnonzero(is_dev)
    waiting = np.flatnonzero(~is_dev & (start - prev_end >= MIN_WAIT_GAP_NS))
    if len(comm) == 0 or len(waiting) == 0:
        return pe
    order = comm[np.argsort(end[comm], kind="stable")]
    at = np.searchsorted(end[order], start[waiting], side="left")
    gap = start[waiting] - prev_end[waiting]
    best, best_lag = np.full(len(waiting), -1), np.full(len(waiting), np.inf)
    for candidate in (at - 1, at):  # the collectives ending just before and just after the node starts
        inside = (candidate >= 0) & (candidate < len(order))
        c = order[np.clip(candidate, 0, len(order) - 1)]
        lag = np.abs(start[waiting] - end[c])
        ok = inside & (start[c] < start[waiting]) & (end[c] > prev_end[waiting]) & (
            lag <= WAIT_TOLERANCE * gap) & (lag < best_lag)
        best, best_lag = np.where(ok, c, best), np.where(ok, lag, best_lag)
    pe[waiting] = best
    return pe
