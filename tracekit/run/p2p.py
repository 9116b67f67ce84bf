"""Send/recv across ranks: each send paired with its recv, and each pair's time split into transfer and waiting.

Peers: a call's peer is the global rank its args name (NCCL's ``Dst Rank``/``Src Rank``), else its group-local peer
(gloo's ``Concrete Inputs``) mapped through a process group of ``pg_config`` that holds the rank (``resolve_peers``).
Pairing (``pair``): the k-th send from rank a to rank b in step n is the k-th recv on b from a in step n (steps are
ProfilerStep numbers, the same on every rank; calls outside steps pair among themselves). Clock-corrected times:

    arrive        = max(send start, recv start)       both sides posted
    blocked       = when a call began to hold its thread (``blocked_ns``, ``rank.drains.blocked_since``): its start,
                    or for a gloo call posted early and waited for later, the end of the thread's last op before
                    its wait returned (the thread computed until then, so the call held nothing)
    recv_wait_us  = recv blocked -> send start, if the sender was late (clipped to the recv)
    send_wait_us  = send blocked -> recv start, if the receiver was late (clipped to the send)
    transfer_us   = max(arrive, recv blocked) -> recv end   the receiver's blocked time once both had posted

A call without its other half is ``cut`` where the peer's trace does not hold that step (it was not profiled then), or
the peer's trace was not read; else ``unmatched`` and listed in ``mismatches`` (kind ``p2p_unmatched``, with the reason).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.run.pgdims import dim_of_desc
from tracekit.schema import MISMATCH_COLUMNS

# summary.p2p: one row per send/recv pair or lone call (tracekit.run.p2p).
P2P_COLUMNS = {
    "src_rank": "sender (NaN: unknown)", "dst_rank": "receiver (NaN: unknown)", "step": "ProfilerStep (-1 outside)",
    "pg": "process group", "dim": "its label (run.pgdims; pp for P2P whose group names none)",
    "pair_index": "order on its (src_rank, dst_rank)", "bytes": "payload (the recv's, else the send's)",
    "send_start_us": "send call start, from the run's origin on the corrected clock (NaN: no send)",
    "send_end_us": "send call end", "recv_start_us": "recv call start (NaN: no recv)", "recv_end_us": "recv call end",
    "transfer_us": "both posted and the receiver blocked -> recv end", "recv_wait_us": "receiver waiting for a late sender",
    "send_wait_us": "sender waiting for a late receiver", "status": "matched, unmatched or cut (the trace's edge)",
    "in_window": "its step is in the window", "send_op": "internal: the send's row among the run's P2P calls (-1)",
    "recv_op": "internal: the recv's row among the run's P2P calls (-1)",
}


def resolve_peers(ops: pd.DataFrame, groups: pd.DataFrame) -> pd.DataFrame:
    """Per call: ``peer_rank`` (global; NaN where unknown), ``pg`` and ``pg_desc`` of the group it was resolved in.

    A local peer is mapped through the call's own group where the trace names it, else through the groups that hold
    the rank: a pipeline group (``dim_of_desc`` pp) first, else any group if all of them agree on that local rank,
    else the default group (``default_pg``). A trace without ``pg_config`` (older torch) knows only the world group,
    whose local ranks are the global ones."""
    peer = ops["peer"].to_numpy(dtype=float).copy()
    pg, desc = ops["pg"].astype(object).copy(), ops["pg_desc"].astype(object).copy()
    need = np.isnan(peer) & ops["peer_local"].notna().to_numpy()
    keys = ops.loc[need, ["rank", "pg", "peer_local"]].astype(object).drop_duplicates()
    by_name = {p: (d, r) for p, d, r in zip(groups["pg"], groups["pg_desc"], groups["ranks"])}
    if not by_name:  # no pg_config: the world group only
        peer[need] = ops["peer_local"].to_numpy(dtype=float)[need]
        return pd.DataFrame({"peer_rank": peer, "pg": pg.to_numpy(), "pg_desc": desc.to_numpy()}, index=ops.index)
    for rank, name, local in keys.itertuples(index=False):  # one per distinct (rank, group, peer): a handful
        found = _through_groups(int(rank), name, int(local), by_name)
        if found is None:
            continue
        at = need & (ops["rank"].to_numpy() == rank) & (ops["peer_local"].to_numpy() == local) & (
            (ops["pg"].astype(object) == name).to_numpy() if pd.notna(name) else ops["pg"].isna().to_numpy())
        peer[at] = found[0]
        pg[at], desc[at] = found[1], found[2]
    return pd.DataFrame({"peer_rank": peer, "pg": pg.to_numpy(), "pg_desc": desc.to_numpy()}, index=ops.index)


def _through_groups(rank: int, name, local: int, by_name: dict):
    if pd.notna(name) and name in by_name:
        desc, ranks = by_name[name]
        return (ranks[local], name, desc) if 0 <= local < len(ranks) else None
    mine = [(p, d, r) for p, (d, r) in by_name.items() if rank in r and 0 <= local < len(r)]
    pipeline = [m for m in mine if dim_of_desc(m[1]) == "pp"]
    if len(pipeline) == 1:
        return pipeline[0][2][local], pipeline[0][0], pipeline[0][1]
    if mine and len({r[local] for _, _, r in mine}) == 1:
        default = [m for m in mine if m[1] == "default_pg"] or mine
        return default[0][2][local], default[0][0], default[0][1]
    default = [m for m in mine if m[1] == "default_pg"]
    return (default[0][2][local], default[0][0], default[0][1]) if default else None


def pair(ops: pd.DataFrame, peers: pd.DataFrame) -> pd.DataFrame:
    """One row per send/recv pair or lone call: ``src_rank, dst_rank, step, k`` (order in that step on that pair),
    ``send``/``recv`` (row positions in ``ops``, -1 where that half is absent)."""
    is_send = (ops["op"].astype(str) == "send").to_numpy()
    rank, peer = ops["rank"].to_numpy(dtype=float), peers["peer_rank"].to_numpy(dtype=float)
    frame = pd.DataFrame({"src_rank": np.where(is_send, rank, peer), "dst_rank": np.where(is_send, peer, rank),
                          "step": ops["step"].to_numpy(), "t": ops["start_ns"].to_numpy(), "i": np.arange(len(ops)),
                          "is_send": is_send})
    frame = frame.sort_values(["t", "i"], kind="stable")
    frame["k"] = frame.groupby(["is_send", "src_rank", "dst_rank", "step"], dropna=False).cumcount()
    frame.loc[np.isnan(frame["src_rank"]) | np.isnan(frame["dst_rank"]), "k"] = -1 - frame["i"]  # no peer: alone
    key = ["src_rank", "dst_rank", "step", "k"]
    sends = frame[frame["is_send"]].rename(columns={"i": "send"})[key + ["send"]]
    recvs = frame[~frame["is_send"]].rename(columns={"i": "recv"})[key + ["recv"]]
    out = sends.merge(recvs, on=key, how="outer")
    out[["send", "recv"]] = out[["send", "recv"]].fillna(-1).astype(np.int64)
    return out.reset_index(drop=True)


def p2p_table(ops: pd.DataFrame, peers: pd.DataFrame, pairs: pd.DataFrame, held_steps: pd.DataFrame, read_ranks: set,
              origin_ns: int) -> pd.DataFrame:
    """``summary.p2p`` (``P2P_COLUMNS``) from ``pair``'s rows; ``held_steps``: the (rank, step) each trace
    holds; times in us from ``origin_ns`` on the corrected clock. ``send_op``/``recv_op`` keep ``pair``'s positions."""
    s, r = pairs["send"].to_numpy(), pairs["recv"].to_numpy()
    start, dur_ns = ops["start_ns"].to_numpy(dtype=float), ops["dur_us"].to_numpy(dtype=float) * 1e3

    def at(values, i):
        return np.where(i >= 0, values[np.maximum(i, 0)], np.nan)

    s0, s1 = at(start, s), at(start + dur_ns, s)
    r0, r1 = at(start, r), at(start + dur_ns, r)
    blocked = ops["blocked_ns"].to_numpy(dtype=float) if "blocked_ns" in ops else start
    blocked = np.where(np.isnan(blocked), start, np.clip(blocked, start, start + dur_ns))
    sb, rb = at(blocked, s), at(blocked, r)
    both = (s >= 0) & (r >= 0)
    arrive = np.fmax(s0, r0)
    either = np.where(s >= 0, s, r)
    pg, desc = peers["pg"].to_numpy(dtype=object), peers["pg_desc"].to_numpy(dtype=object)
    dims = np.array([dim_of_desc(d) or "pp" for d in desc[either]], dtype=object)
    lone_peer = np.where(s >= 0, pairs["dst_rank"].to_numpy(), pairs["src_rank"].to_numpy())
    step = pairs["step"].to_numpy()
    held = pd.MultiIndex.from_frame(held_steps[["rank", "step"]].astype(np.int64))
    peer_steps = pd.MultiIndex.from_arrays([np.nan_to_num(lone_peer, nan=-1).astype(np.int64), step.astype(np.int64)])
    peer_known = ~np.isnan(lone_peer)
    cut = ~both & peer_known & (~np.isin(np.nan_to_num(lone_peer, nan=-1), list(read_ranks))
                                | ((step >= 0) & ~peer_steps.isin(held)))
    table = pd.DataFrame({
        "src_rank": pairs["src_rank"].to_numpy(), "dst_rank": pairs["dst_rank"].to_numpy(), "step": step,
        "pg": pg[either], "dim": dims, "pair_index": 0,
        "bytes": np.where(r >= 0, at(ops["bytes"].to_numpy(dtype=float), r), at(ops["bytes"].to_numpy(dtype=float), s)),
        "send_start_us": (s0 - origin_ns) / 1e3, "send_end_us": (s1 - origin_ns) / 1e3,
        "recv_start_us": (r0 - origin_ns) / 1e3, "recv_end_us": (r1 - origin_ns) / 1e3,
        "transfer_us": np.where(both, np.maximum(r1 - np.fmin(np.fmax(arrive, rb), r1), 0) / 1e3, np.nan),
        "recv_wait_us": np.where(both, np.clip(s0 - rb, 0, r1 - rb) / 1e3, np.nan),
        "send_wait_us": np.where(both, np.clip(r0 - sb, 0, s1 - sb) / 1e3, np.nan),
        "status": np.where(both, "matched", np.where(cut, "cut", "unmatched")),
        "in_window": at(ops["in_window"].to_numpy(dtype=float), either).astype(bool),
        "send_op": s, "recv_op": r,
    })
    order = np.fmin(table["send_start_us"].to_numpy(), table["recv_start_us"].to_numpy())
    table = table.assign(_t=order).sort_values(["src_rank", "dst_rank", "_t"], kind="stable", ignore_index=True)
    table["pair_index"] = table.groupby(["src_rank", "dst_rank"], dropna=False).cumcount()
    table = table.drop(columns="_t").sort_values(["step", "src_rank", "dst_rank", "pair_index"], ignore_index=True)
    return table[list(P2P_COLUMNS)]


def p2p_mismatches(table: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """The unmatched calls of ``p2p_table`` as ``mismatches`` rows (kind ``p2p_unmatched``), each with its reason."""
    lone = table[(table["status"] == "unmatched").to_numpy()]
    send = (lone["send_op"] >= 0).to_numpy()
    row = np.where(send, lone["send_op"].to_numpy(), lone["recv_op"].to_numpy())
    peer = pd.Series(np.where(send, lone["dst_rank"], lone["src_rank"]))
    known = peer.notna().to_numpy()
    peer_text = peer.fillna(-1).astype(np.int64).astype(str)
    index = lone["pair_index"].astype(str).to_numpy()
    said = np.where(send, "no recv on rank " + peer_text + " for its send #" + index + " to rank " + peer_text,
                    "no send on rank " + peer_text + " for its recv #" + index + " from rank " + peer_text)
    step = lone["step"].to_numpy()
    return pd.DataFrame({
        "kind": "p2p_unmatched", "pg": lone["pg"].astype(object).where(lone["pg"].notna(), "?").astype(str).to_numpy(),
        "op": np.where(send, "send", "recv"),
        "position": np.where(step >= 0, "step " + pd.Series(step).astype(str), "outside steps"),
        "ranks": [[int(r)] for r in ops["rank"].to_numpy()[row]],
        "detail": np.where(known, said, "its peer is unknown (no Dst/Src Rank, and no group maps its Concrete Inputs "
                           "peer)"),
        "match_id": -1}, columns=list(MISMATCH_COLUMNS))
