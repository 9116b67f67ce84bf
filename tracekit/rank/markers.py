"""The marker where a rank's last step ends, in its dependency graph (``tracekit.rank.graph``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

END_MARKER = "ProfilerStep end"  # the name of the marker where the last step ends
END_ROW = -(1 << 62)  # the end marker's ``row``: no events-table row


def end_marker(events: pd.DataFrame, step_of_row: pd.Series, lane_key: np.ndarray, end_ns: np.ndarray,
               nodes: pd.DataFrame) -> tuple[pd.DataFrame, int | None]:
    """A zero-length marker where the last step ends, as if the next step began there (its step is one more than
    any), so that the last step's end moves in a replay; and the ``row`` of the device node it waits for (None:
    none). The last step is the last to start, whatever its number. That end is the annotation's, or later where
    device work launched in the step ends (``metrics.step_breakdown``)."""
    rows = step_of_row.index.to_numpy()
    at = int(np.argmax(events["ts_ns"].to_numpy()[rows]))  # the first of several at one time: as idxmax did
    last_row, last = int(rows[at]), int(step_of_row.iloc[at])
    t, bound = int(end_ns[last_row]), None
    work = nodes[nodes["cat"].isin(["compute", "memory", "comm"]).to_numpy() & (nodes["step"] == last).to_numpy()
                 & ~nodes["is_marker"].to_numpy()]
    if len(work) and int(work["end_ns"].max()) > t:
        at = int(np.argmax(work["end_ns"].to_numpy()))
        t, bound = int(work["end_ns"].iloc[at]), int(work["row"].iloc[at])
    return pd.DataFrame({
        "rank": np.array([events["rank"].iloc[0]], dtype=np.int32), "lane": lane_key[[last_row]],
        "start_ns": [t], "end_ns": [t], "step": int(step_of_row.max()) + 1,
        "cat": pd.Series(["marker"], dtype=nodes["cat"].dtype),
        "name": pd.Categorical([END_MARKER], categories=nodes["name"].cat.categories),
        "row": np.array([END_ROW]), "is_marker": True, "in_data": False}), bound
