"""The run's dependency graph: every rank's node table (``tracekit.rank.graph.rank_graph``) joined into one, with the
edges between ranks: a collective's transfer starts when the last member rank has arrived (``group``), and of a
send/recv pair each half ends no earlier than the other started (``pair_src``: the data cannot arrive before it was
sent, nor a send complete before its receiver posted), where the measured times agree (an edge forward in time). A
gloo half starts when its ``c10d::send``/``c10d::recv_`` op posted it: its async span begins only as that op ends,
and posting can take ms on a loaded host, in which the data may already have arrived (``pair_src`` is then the op);
its send span lasts until the work is waited for, and ends here with its recv (``_send_ends``).
Not a collective's group: the two halves' transfers do not start together, and on an interleaved schedule's lane
(a send posted before a recv on each rank) that would close a cycle."""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from tracekit.events.collectives import P2P_POSTS
from tracekit.rank.graph import GRAPH_COLUMNS, NODE_CATS, empty_graph
from tracekit.read.release import release_memory


def run_graph(graphs: list[pd.DataFrame], collectives: pd.DataFrame, shift: dict[int, int], origin_ns: int,
              p2p_calls: pd.DataFrame | None = None, p2p: pd.DataFrame | None = None) -> pd.DataFrame:
    """All ranks' node tables as one (``Summary.graph``): global lanes and edge positions, times in ns from the run's
    origin on the corrected clock, and ``group`` (a dense id per matched collective, -1 otherwise).

    ``graphs`` come in the order the per-rank collectives tables were concatenated into ``collectives``, which
    carries ``match_id`` and ``matched``; and of the run's P2P calls ``p2p_calls`` (``RankResult.p2p`` stacked), whose
    pairs ``p2p`` (``summary.p2p``: ``send_op``/``recv_op``) give ``pair_src``.

    The list is emptied: each rank's table is let go as soon as its rows are copied into the run's, so the join
    never holds the ranks' tables and the run's whole at once (where the caller holds no other reference)."""
    kept = [g for g in graphs if not g.empty]
    graphs.clear()
    if not kept:
        return empty_graph().assign(group=pd.Series(dtype=np.int64), pair_src=pd.Series(dtype=np.int64))
    calls_per_rank = collectives.groupby("rank").size() if len(collectives) else pd.Series(dtype=int)
    p2p_per_rank = p2p_calls.groupby("rank").size() if p2p_calls is not None and len(p2p_calls) else pd.Series(dtype=int)
    numeric = [c for c in GRAPH_COLUMNS if c not in ("name", "cat")]
    # Each column in the dtype that concatenating the ranks' columns would give; filled rank by rank.
    columns = {c: np.empty(sum(len(g) for g in kept), dtype=np.result_type(*(g[c].dtype for g in kept)))
               for c in numeric}
    cat_codes = np.empty(len(columns["rank"]), dtype=np.int8)
    names = []  # each rank's names (codes and categories: small), joined last
    offset, lanes, coll_offset, p2p_offset = 0, 0, 0, 0
    for i in range(len(kept)):
        g, kept[i] = kept[i], None
        rank = int(g["rank"].iloc[0])
        clock = shift.get(rank, 0) + origin_ns
        move = {"ps": offset, "pe": offset, "dr": offset, "coll": coll_offset, "p2p": p2p_offset, "lane": lanes,
                "start_ns": clock, "end_ns": clock}
        rows = slice(offset, offset + len(g))
        for c in numeric:
            columns[c][rows] = _moved(g[c].to_numpy(), c, move)
        cat_codes[rows] = _codes(g["cat"], NODE_CATS)
        names.append(g["name"].astype("category"))
        offset, lanes = offset + len(g), lanes + int(g["lane"].max()) + 1
        coll_offset += int(calls_per_rank.get(rank, 0))
        p2p_offset += int(p2p_per_rank.get(rank, 0))
        del g  # this rank's table goes here, where the caller kept no other reference
    release_memory()  # the ranks' tables' pages, which the allocator would keep rather than return
    nodes = pd.DataFrame(columns, copy=False)  # not consolidated: no column is copied
    nodes.insert(GRAPH_COLUMNS.index("cat"), "cat", pd.Categorical.from_codes(cat_codes, categories=NODE_CATS))
    nodes.insert(GRAPH_COLUMNS.index("name"), "name", union_categoricals(names))
    del columns, cat_codes, names
    coll = nodes["coll"].to_numpy()
    has = coll >= 0
    group = np.full(len(nodes), -1, dtype=np.int64)
    if has.any():
        matched = collectives["matched"].to_numpy(dtype=bool)[coll[has]]
        ids = collectives["match_id"].to_numpy()[coll[has]]
        group[np.flatnonzero(has)[matched]] = pd.factorize(ids[matched])[0]
    nodes["group"] = group
    nodes["pe"] = _checked_waits(nodes)
    s_node, r_node = _pair_nodes(nodes, p2p)
    nodes["end_ns"] = _send_ends(nodes, s_node, r_node)
    # A send that now ends with its recv no longer waits for its thread's last op (``rank.drains.blocked_from``)
    # where that op ended later.
    dr = nodes["dr"].to_numpy()
    later = (dr >= 0) & (nodes["end_ns"].to_numpy()[np.maximum(dr, 0)] > nodes["end_ns"].to_numpy())
    nodes["dr"] = np.where(later, -1, dr)
    nodes["pair_src"] = _pair_sources(nodes, s_node, r_node)
    return nodes


def _pair_nodes(nodes: pd.DataFrame, p2p: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray]:
    """The nodes of each matched pair's send and recv (``p2p``: ``summary.p2p``), where both are in the graph."""
    call = nodes["p2p"].to_numpy()
    none = np.zeros(0, dtype=np.int64)
    if p2p is None or p2p.empty or not (call >= 0).any():
        return none, none
    node_of = np.full(int(call.max()) + 1, -1, dtype=np.int64)
    node_of[call[call >= 0]] = np.flatnonzero(call >= 0)
    pairs = p2p[(p2p["status"] == "matched").to_numpy()]
    s, r = pairs["send_op"].to_numpy(), pairs["recv_op"].to_numpy()
    ok = (s < len(node_of)) & (r < len(node_of))
    s_node, r_node = node_of[np.minimum(s[ok], len(node_of) - 1)], node_of[np.minimum(r[ok], len(node_of) - 1)]
    both = (s_node >= 0) & (r_node >= 0)
    return s_node[both], r_node[both]


def _send_ends(nodes: pd.DataFrame, s_node: np.ndarray, r_node: np.ndarray) -> np.ndarray:
    """Per node, its end; a gloo send's (posted by a ``c10d::send``) no later than its recv's end, nor before its
    own start. gloo's send span lasts until its work is waited for, which can be long after the receiver has the
    data (a pipeline waits for its sends at the step's end): that rest is neither transfer nor anything a later op
    waits for; the op after the wait waited on its own thread. An NCCL send kernel ends as measured."""
    end = nodes["end_ns"].to_numpy().copy()
    start = nodes["start_ns"].to_numpy()
    gloo = _posters(nodes)[s_node] != s_node
    s, r = s_node[gloo], r_node[gloo]
    end[s] = np.minimum(end[s], np.maximum(end[r], start[s]))
    return end


def _pair_sources(nodes: pd.DataFrame, s_node: np.ndarray, r_node: np.ndarray) -> np.ndarray:
    """Per node of a matched pair's half (``_pair_nodes``): the other half's node, whose start its end waits for: its
    posting op where it has one (gloo, ``_posters``), else the node itself (-1 otherwise, and where that start is not
    before this end on the corrected clock: an edge back in time, or a tie)."""
    src = np.full(len(nodes), -1, dtype=np.int64)
    if not len(s_node):
        return src
    start, end = nodes["start_ns"].to_numpy(), nodes["end_ns"].to_numpy()
    posted = _posters(nodes)
    for mine, other in ((r_node, s_node), (s_node, r_node)):
        other = posted[other]
        forward = start[other] < end[mine]
        src[mine[forward]] = other[forward]
    return src


def _posters(nodes: pd.DataFrame) -> np.ndarray:
    """Per node: the ``c10d::send``/``c10d::recv_`` op that posted it (its enqueue edge ``ps``, gloo) where that op
    starts before it, else the node itself. An NCCL kernel's ``ps`` is its launch: the kernel moves no data before
    it runs, so it stays its own."""
    own = np.arange(len(nodes), dtype=np.int64)
    ps = nodes["ps"].to_numpy().astype(np.int64)
    names = nodes["name"].cat.categories.astype(str)
    posts = np.fromiter((P2P_POSTS.search(n) is not None for n in names), dtype=bool, count=len(names))
    codes = nodes["name"].cat.codes.to_numpy()
    by = np.maximum(ps, 0)
    start = nodes["start_ns"].to_numpy()
    use = (ps >= 0) & (codes[by] >= 0) & posts[np.maximum(codes[by], 0)] & (start[by] <= start)
    return np.where(use, ps, own)


def _moved(values: np.ndarray, column: str, move: dict) -> np.ndarray:
    """One rank's ``column`` as the run's: row positions (``ps``, ``pe``, ``dr``, ``coll``, ``p2p``: -1 for none)
    and lanes moved past the ranks before, times moved to the run's corrected clock from its origin."""
    if column in ("ps", "pe", "dr", "coll", "p2p"):
        return np.where(values >= 0, values + move[column], -1)
    if column == "lane":
        return values + move[column]
    if column in move:
        return values - move[column]
    return values


def _codes(cat: pd.Series, categories: tuple) -> np.ndarray:
    """The codes of ``cat`` against ``categories`` (-1 for a value not among them)."""
    return pd.Categorical(cat, categories=list(categories)).codes


def _checked_waits(nodes: pd.DataFrame) -> np.ndarray:
    """Drop a wait on a collective that ended after the waiting node started unless the transfer had already begun
    (every rank arrived) by then: otherwise the edge would point back in time."""
    pe = nodes["pe"].to_numpy().copy()
    start, end, group = nodes["start_ns"].to_numpy(), nodes["end_ns"].to_numpy(), nodes["group"].to_numpy()
    latest = pd.Series(start[group >= 0]).groupby(group[group >= 0]).max()
    arrived = np.where(group >= 0, latest.reindex(np.maximum(group, 0)).to_numpy(), start)
    has = pe >= 0
    src = np.maximum(pe, 0)
    late = has & (end[src] > start) & (np.maximum(arrived[src], start[src]) > start)
    pe[late] = -1
    return pe
