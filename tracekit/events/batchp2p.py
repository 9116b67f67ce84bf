"""NCCL's batched send/recv (``torch.distributed.batch_isend_irecv``): one kernel for many P2P ops, split back into
one call per op.

What torch records (``distributed_c10d.batch_isend_irecv`` runs each ``P2POp`` inside ``_coalescing_manager``):
each op is a ``c10d::send`` / ``c10d::recv_`` host op (peer: the group-local rank, third of its ``Concrete Inputs``)
with a ``record_param_comms`` inside it (``Collective name`` send/recv, ``In msg nelems``, ``dtype``, the group, and
in newer torch ``Dst Rank`` / ``Src Rank``: the peer's global rank), but NCCL only queues the op there: the one
``ncclDevKernel_SendRecv`` kernel of the whole batch is launched when the block ends, inside a ``nccl:coalesced``
annotation and outside every op's ``record_param_comms``, so the kernel names no op, peer or size.

Here each such kernel (a comm kernel launched inside ``nccl:coalesced``/``rccl:coalesced``) becomes one call per
``c10d::send``/``c10d::recv_`` of its block: the ops on its launching thread that launched no kernel themselves and
ended after the thread's previous comm launch. Each call keeps the kernel's time and row (the batch's ops run in that
one kernel; the pairing splits each into waiting and transfer) and takes its op, group, size and peer from its own
``c10d`` op and ``record_param_comms``: ``peer`` the global rank where the args name it, else ``peer_local`` from
``Concrete Inputs``, mapped through the group at run level (``tracekit.run.p2p.resolve_peers``). A coalesced kernel
without such ops (coalesced collectives) stays as it was. The run's graph keeps one node per kernel, and the node
stands for the first call of its batch (``tracekit.rank.collrows``): the send->recv edges of its other calls are not
drawn.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.events.classify import enclosing_span, launch_points

_COALESCED = re.compile(r"^(?:nccl|rccl):coalesced$")
_POSTS = re.compile(r"^c10d::(?:send|recv_)$")
_PARAMS = re.compile(r"^record_param_comms$")
_FILLED = ("op", "pg", "pg_desc", "peer", "peer_local", "seq", "bytes", "dtype", "group_size")


def _named(events: pd.DataFrame, pattern: re.Pattern) -> pd.DataFrame:
    names = events["name"].cat.categories
    wanted = names[np.fromiter((pattern.search(n) is not None for n in names), dtype=bool, count=len(names))]
    return events[events["name"].isin(wanted).to_numpy() & (events["dur_ns"] >= 0).to_numpy()]


def split_batches(events: pd.DataFrame, comm_args: pd.DataFrame, calls: pd.DataFrame, bytes_of) -> pd.DataFrame:
    """``calls`` (a ``collective_table``, with ``row``) with each batched P2P kernel replaced by one row per op of
    its batch (see the module docstring), in the order the ops were posted; the table unchanged without any.
    ``bytes_of(dtype) -> bytes per element`` (``collectives.dtype_bytes``)."""
    posts = _named(events, _POSTS)
    coalesced = _named(events, _COALESCED)
    launched = calls["row"].to_numpy()
    launch_row = events["launch_row"].to_numpy()[events.index.get_indexer(launched)]
    has_launch = launch_row >= 0
    if posts.empty or coalesced.empty or not has_launch.any():
        return calls
    points = launch_points(events, launch_row[has_launch])
    batched = np.zeros(len(calls), dtype=bool)
    batched[has_launch] = enclosing_span(points, coalesced) >= 0
    # c10d ops that launched their own kernel (a plain send/recv) are no batch's.
    own = enclosing_span(points, posts)
    queued = posts[~posts.index.isin(own[own >= 0])]
    owner = _owners(queued, points.assign(call=np.flatnonzero(has_launch)), batched)
    queued, owner = queued[owner >= 0], owner[owner >= 0]
    if queued.empty:
        return calls
    fields = _op_fields(events, comm_args, queued, bytes_of)
    rows = calls.iloc[owner].reset_index(drop=True)
    for f in _FILLED:
        rows[f] = fields[f].to_numpy() if f != "op" else pd.Categorical(fields["op"], categories=calls["op"].cat.categories)
    rows["posted_ns"] = np.nan  # the kernel is the call: the host op only queued it
    rows["algbw_gbps"] = rows["busbw_gbps"] = np.nan  # one kernel's time carries the whole batch
    rows["_posted"] = queued["ts_ns"].to_numpy()
    split = np.unique(owner)
    kept = calls.drop(index=calls.index[split]).assign(_posted=-1)
    out = pd.concat([kept, rows], ignore_index=True).sort_values(["rank", "start_ns", "_posted"], kind="stable")
    return out.drop(columns="_posted").reset_index(drop=True)


def _owners(queued: pd.DataFrame, points: pd.DataFrame, batched: np.ndarray) -> np.ndarray:
    """Per queued op: the call (row position in the calls table) of the first comm launch on its rank and thread
    after it ends, where that launch is a batched kernel's; -1 otherwise."""
    owner = np.full(len(queued), -1, dtype=np.int64)
    key = lambda r, t: pd.Series(r).astype(str).to_numpy() + "/" + pd.Series(t).astype(str).to_numpy()
    point_key, op_key = key(points["rank"], points["tid"]), key(queued["rank"], queued["tid"])
    op_end = (queued["ts_ns"] + queued["dur_ns"]).to_numpy()
    for thread in np.unique(op_key):  # one pass per launching thread: a handful
        mine = np.flatnonzero(point_key == thread)
        if len(mine) == 0:
            continue
        order = mine[np.argsort(points["ts_ns"].to_numpy()[mine], kind="stable")]
        at_ops = np.flatnonzero(op_key == thread)
        nxt = np.searchsorted(points["ts_ns"].to_numpy()[order], op_end[at_ops], side="left")
        found = nxt < len(order)
        call = points["call"].to_numpy()[order[np.minimum(nxt, len(order) - 1)]]
        ok = found & batched[call]
        owner[at_ops[ok]] = call[ok]
    return owner


def _op_fields(events, comm_args, queued, bytes_of) -> pd.DataFrame:
    """Per queued op: op, group, global and local peer, seq, size, from its own args and the ``record_param_comms``
    inside it."""
    args = comm_args.set_index("row")
    own = args.reindex(queued.index)
    params = _named(events, _PARAMS)
    inner = pd.DataFrame(index=queued.index, columns=args.columns, dtype=object)
    if len(params):
        holder = enclosing_span(launch_points(events, events.index.get_indexer(params.index)), queued)
        found = holder >= 0
        inner.loc[holder[found]] = args.reindex(params.index[found]).to_numpy()
    first = lambda f: inner[f].where(inner[f].notna(), own[f]) if f in own else inner[f]
    nelems = pd.to_numeric(first("in_nelems"), errors="coerce").to_numpy(dtype=float)
    dtype = first("dtype").to_numpy(dtype=object)
    sizes = np.array([bytes_of(d) for d in dtype], dtype=float)
    op = np.where(queued["name"].astype(str).to_numpy() == "c10d::send", "send", "recv")
    return pd.DataFrame({
        "op": op, "pg": first("pg").to_numpy(dtype=object), "pg_desc": first("pg_desc").to_numpy(dtype=object),
        "peer": pd.to_numeric(inner["peer"], errors="coerce").to_numpy(dtype=float),
        "peer_local": pd.to_numeric(own["peer_local"], errors="coerce").to_numpy(dtype=float),
        "seq": pd.to_numeric(inner["seq"], errors="coerce").to_numpy(dtype=float),
        "bytes": nelems * sizes, "dtype": dtype,
        "group_size": pd.to_numeric(first("group_size"), errors="coerce").to_numpy(dtype=float)})
