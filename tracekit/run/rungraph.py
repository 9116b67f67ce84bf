"""The run's dependency graph: every rank's node table (``tracekit.rank.graph.rank_graph``) joined into one, with the
edges between ranks: a collective's transfer starts when the last member rank has arrived (``group``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from tracekit.rank.graph import GRAPH_COLUMNS, NODE_CATS, empty_graph


def run_graph(graphs: list[pd.DataFrame], collectives: pd.DataFrame, shift: dict[int, int], origin_ns: int) -> pd.DataFrame:
    """All ranks' node tables as one (``Summary.graph``): global lanes and edge positions, times in ns from the run's
    origin on the corrected clock, and ``group`` (a dense id per matched collective, -1 otherwise).

    ``graphs`` come in the order the per-rank collectives tables were concatenated into ``collectives``, which
    carries ``match_id`` and ``matched``."""
    parts, offset, lanes, coll_offset = [], 0, 0, 0
    calls_per_rank = collectives.groupby("rank").size() if len(collectives) else pd.Series(dtype=int)
    for g in graphs:
        if g.empty:
            continue
        rank = int(g["rank"].iloc[0])
        moved = {c: np.where(g[c].to_numpy() >= 0, g[c].to_numpy() + offset, -1) for c in ("ps", "pe", "dr")}
        coll = g["coll"].to_numpy()
        delta = shift.get(rank, 0) + origin_ns
        parts.append(g.assign(lane=g["lane"].to_numpy() + lanes, start_ns=g["start_ns"] - delta,
                              end_ns=g["end_ns"] - delta, coll=np.where(coll >= 0, coll + coll_offset, -1), **moved))
        offset, lanes = offset + len(g), lanes + int(g["lane"].max()) + 1
        coll_offset += int(calls_per_rank.get(rank, 0))
    if not parts:
        return empty_graph().assign(group=pd.Series(dtype=np.int64))
    names = union_categoricals([p["name"].astype("category") for p in parts])
    nodes = pd.concat([p.drop(columns=["name"]) for p in parts], ignore_index=True)
    nodes.insert(GRAPH_COLUMNS.index("name"), "name", names)
    nodes["cat"] = nodes["cat"].astype(pd.CategoricalDtype(NODE_CATS))
    coll = nodes["coll"].to_numpy()
    has = coll >= 0
    group = np.full(len(nodes), -1, dtype=np.int64)
    if has.any():
        matched = collectives["matched"].to_numpy(dtype=bool)[coll[has]]
        ids = collectives["match_id"].to_numpy()[coll[has]]
        group[np.flatnonzero(has)[matched]] = pd.factorize(ids[matched])[0]
    nodes["group"] = group
    nodes["pe"] = _checked_waits(nodes)
    return nodes


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
