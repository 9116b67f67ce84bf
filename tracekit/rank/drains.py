"""Edges by which a node ends after another ended (``dr``, ``tracekit.rank.graph``).

A synchronizing call on a GPU rank returns when the device work that ended inside it has ended (``drains``). gloo
records a send/recv from its post to the return of its ``wait()``, and a pipeline schedule may post a receive,
compute, and wait for it inside its next action: the call holds its thread only from the end of the thread's last op
before the wait returned. ``blocked_from`` gives each such call's node a ``dr`` edge to that op, and
``blocked_since`` the time, for the pairs' waits and transfer (``tracekit.run.p2p``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def blocked_from(nodes: pd.DataFrame, pe: np.ndarray) -> np.ndarray:
    """CPU ranks: each gloo send/recv ends after the last node of its thread that ended before it (``dr``).

    gloo records a P2P call from its post to the return of its ``wait()``, which can come much later (a pipeline
    schedule posts a receive, computes, and waits inside its next action). While the thread ran other ops, the call
    was not what held it: its own time (``tail``) is only the part after the thread's last op, where the thread
    was blocked in the wait; the critical path before that runs through the thread's work. The node is one that
    comes before every thread node that waits for the call (``pe``): those follow the wait, not precede it."""
    dr = np.full(len(nodes), -1, dtype=np.int64)
    thread = nodes["thread_lane"].to_numpy()
    calls = np.flatnonzero(thread >= 0)
    if len(calls) == 0:
        return dr
    start, end, lane = nodes["start_ns"].to_numpy(), nodes["end_ns"].to_numpy(), nodes["lane"].to_numpy()
    real = (nodes["cat"] != "marker").to_numpy()
    first_waiter = np.full(len(nodes), np.iinfo(np.int64).max, dtype=np.int64)
    waits = np.flatnonzero(pe >= 0)
    np.minimum.at(first_waiter, pe[waits], waits)
    for key in np.unique(thread[calls]):
        mine = calls[thread[calls] == key]
        on = np.flatnonzero((lane == key) & real)  # in lane order (positions ascend)
        if len(on) == 0:
            continue
        latest = np.maximum.accumulate(end[on])  # the thread's latest end up to each of its nodes
        holder = on[_running_argmax(end[on])]
        upto = np.searchsorted(latest, end[mine], side="right") - 1  # last node with nothing ending after the call
        limit = np.searchsorted(on, first_waiter[mine], side="left") - 1  # last node before the call's first waiter
        at = np.minimum(upto, limit)
        last = holder[np.maximum(at, 0)]
        ok = (at >= 0) & (end[last] > start[mine]) & (start[last] > start[mine])  # not the op that posted it
        dr[mine[ok]] = last[ok]
    return dr


def _running_argmax(values: np.ndarray) -> np.ndarray:
    """Per position: the index of the largest value up to it (the first of equal ones)."""
    best = np.maximum.accumulate(values)
    new = np.r_[True, best[1:] > best[:-1]]
    return np.maximum.accumulate(np.where(new, np.arange(len(values)), 0))


def blocked_since(graph: pd.DataFrame, n_calls: int) -> np.ndarray:
    """Per P2P call of the rank (``graph["p2p"]`` positions, ``n_calls`` of them): when its thread began waiting
    for it, the end of its ``dr`` node (``blocked_from``); NaN where the call held its thread from its post (no
    such node) or has no node."""
    out = np.full(n_calls, np.nan)
    mine = np.flatnonzero(graph["p2p"].to_numpy() >= 0)
    start, end = graph["start_ns"].to_numpy(dtype=float), graph["end_ns"].to_numpy(dtype=float)
    dr = graph["dr"].to_numpy()[mine]
    since = np.where(dr >= 0, np.maximum(start[mine], end[np.maximum(dr, 0)]), np.nan)
    out[graph["p2p"].to_numpy()[mine]] = since
    return out


def drains(nodes: pd.DataFrame) -> np.ndarray:
    """GPU ranks: a synchronizing call ends after the last device event that ended inside it."""
    dr = np.full(len(nodes), -1, dtype=np.int64)
    syncs = np.flatnonzero((nodes["cat"] == "sync").to_numpy())
    dev = np.flatnonzero(nodes["cat"].isin(["compute", "memory", "comm"]).to_numpy())
    if len(syncs) == 0 or len(dev) == 0:
        return dr
    start, end = nodes["start_ns"].to_numpy(), nodes["end_ns"].to_numpy()
    order = dev[np.argsort(end[dev], kind="stable")]
    at = np.searchsorted(end[order], end[syncs], side="right") - 1
    src = order[np.maximum(at, 0)]
    ok = (at >= 0) & (end[src] >= start[syncs])
    dr[syncs[ok]] = src[ok]
    return dr
