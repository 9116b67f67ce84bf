"""Point-to-point calls (send, recv) of one rank: not collectives, so kept apart from the collectives table.

A send and its recv are a pair between two ranks, matched across ranks by ``tracekit.run.p2p``: they do not wait for a
whole group, and their waiting is a pipeline's bubble, not communication. Each row keeps what the pairing needs: the
peer's global rank where the trace names it (NCCL's ``Dst Rank``/``Src Rank``: ``peer``), else its group-local rank
(gloo's ``c10d::send``/``c10d::recv_`` ``Concrete Inputs``: ``peer_local``), mapped to a global rank at run level
through ``pg_config``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit import intervals as iv

P2P_OPS = ("send", "recv")
P2P_OP_COLUMNS = ["rank", "step", "op", "pg", "pg_desc", "peer", "peer_local", "start_ns", "dur_us", "bytes", "dtype",
                  "name", "row"]
# A gloo P2P annotation (``gloo:send``) begins as the c10d op that posts it ends (posting can take ms on a loaded host):
# the call starts when it was posted, the op's start (``posted_ns``); ``event_ns`` keeps the span's own start (the
# breakdown's communication event).


def split_p2p(calls: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(collectives, p2p ops) of a rank's ``collective_table``: rows of op send/recv leave the first for the second
    (columns ``P2P_OP_COLUMNS``, ``row`` the call's events-table row), in the order they came."""
    p2p = calls["op"].astype(str).isin(P2P_OPS).to_numpy()
    ops = calls.loc[p2p, P2P_OP_COLUMNS].reset_index(drop=True)
    ops["op"] = ops["op"].astype(str)
    posted = calls.loc[p2p, "posted_ns"].to_numpy(dtype=float)
    start = ops["start_ns"].to_numpy()
    earlier = np.isfinite(posted) & (posted < start)
    begin = np.where(earlier, posted, start).astype(np.int64)
    ops["dur_us"] = ops["dur_us"].to_numpy() + (start - begin) / 1e3
    ops["start_ns"] = begin
    ops["event_ns"] = start
    return calls[~p2p].reset_index(drop=True), ops


def overlap_intervals(dev: pd.DataFrame) -> pd.DataFrame:
    """The rank's communication under compute (``comm ∩ compute``, the breakdown's ``overlap_us``) as merged
    intervals (``rank, start_ns, end_ns``): what the run needs to tell a P2P call's waiting that hides nothing
    (``tracekit.run.p2p.wait_accounting``) without every compute event."""
    rank = int(dev["rank"].iloc[0]) if len(dev) else -1
    kind = dev["kind"].astype(str).to_numpy()
    pick = (lambda k: iv.merge(dev["start_ns"].to_numpy()[kind == k], dev["end_ns"].to_numpy()[kind == k]))
    starts, ends = iv.intersect(pick("comm"), pick("compute"))
    return pd.DataFrame({"rank": np.full(len(starts), rank, dtype=np.int64), "start_ns": starts, "end_ns": ends})
