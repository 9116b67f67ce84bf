"""Which collective of the rank's table each comm node of its graph is (``tracekit.rank.graph``'s ``coll``)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def collective_rows(nodes: pd.DataFrame, collectives: pd.DataFrame) -> np.ndarray:
    """Each comm node's row position in the rank's collectives table (-1 when it is not a collective call), found by
    the event row both come from (``row``): exact where calls share a start and a name (a rank that records a call
    twice, two streams' kernels in one microsecond), which would otherwise be one collective twice, a node on a
    lane waiting for its own group."""
    coll = np.full(len(nodes), -1, dtype=np.int64)
    comm = np.flatnonzero((nodes["cat"] == "comm").to_numpy())
    if len(comm) == 0 or collectives.empty:
        return coll
    event_row = collectives["row"].to_numpy()
    order = np.argsort(event_row, kind="stable")
    node_row = nodes["row"].to_numpy()[comm]
    at = np.minimum(np.searchsorted(event_row[order], node_row), len(order) - 1)
    hit = event_row[order][at] == node_row
    coll[comm[hit]] = order[at[hit]]
    return coll
