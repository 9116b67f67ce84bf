"""Communication per parallelism dimension, and the waiting part of P2P calls taken out of communication.

A P2P call is waiting until both sides have posted (``tracekit.run.p2p``: ``arrive``), transfer after until the data
has arrived (the recv's end; a send's call may last longer: gloo's async send span ends when its work is waited for,
up to the step's end, and that rest is not transfer either). The waiting is
the pipeline's bubble, not communication: per rank, ``p2p_wait_us`` is the window's P2P call time that is waiting
and that nothing else covers (no transfer of another P2P call, no collective, no compute):

    p2p_wait_us = | P2P calls \\ (P2P transfers ∪ collectives ∪ (comm ∩ compute)) |

It lies inside the rank's exposed communication, so ``comm_us`` and ``exposed_comm_us`` both drop by it; the waiting
under compute leaves ``comm_us`` and ``overlap_us`` (it hides nothing either). Exposed communication then counts only
P2P transfers, and the DDP/FSDP runs, with no P2P
call, keep their numbers. A lone call (unmatched or cut) has no known wait: all of it stays communication.

``comm_by_dim``: per rank and ``dim`` (``tracekit.run.pgdims``) in the window, ``comm_us`` (union of the calls,
P2P calls by their transfer part only), ``exposed_us`` (of that, what no compute covers) and ``bytes`` (NaN when
any call's size is unknown).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit import intervals as iv

COMM_BY_DIM_COLUMNS = {  # summary.comm_by_dim (tracekit.run.commdims), the window only
    "rank": "rank", "dim": "parallelism label", "calls": "calls", "comm_us": "union of its calls (P2P: transfer part)",
    "exposed_us": "of that, not under compute", "bytes": "sum of sizes (NaN if any unknown)",
}


def arrivals(ops: pd.DataFrame, table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per P2P call (row of ``ops``, corrected clock ns): (when its transfer began: both sides of its pair had
    posted and the receiver's thread was blocked in its recv (``blocked_ns``), when it ended: the recv's end); its
    own start (or blocked time) and end when it has no other half."""
    start = ops["start_ns"].to_numpy(dtype=np.int64)
    end = start + np.rint(ops["dur_us"].to_numpy(dtype=float) * 1e3).astype(np.int64)
    blocked = ops["blocked_ns"].to_numpy(dtype=float) if "blocked_ns" in ops else np.full(len(ops), np.nan)
    since = np.clip(np.where(np.isnan(blocked), start, blocked), start, end).astype(np.int64)
    arrive, done = since.copy(), end.copy()
    both = table[(table["send_op"] >= 0) & (table["recv_op"] >= 0)]
    s, r = both["send_op"].to_numpy(), both["recv_op"].to_numpy()
    latest = np.maximum(np.maximum(start[s], start[r]), since[r])
    arrive[s], arrive[r] = latest, latest
    done[s] = np.minimum(end[s], end[r])
    return arrive, done


def _set(start, end) -> iv.Intervals:
    return iv.merge(np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64))


def _calls(collectives: pd.DataFrame, rank, window: bool = True) -> pd.DataFrame:
    keep = (collectives["rank"] == rank).to_numpy()
    mine = collectives[keep & collectives["in_window"].astype(bool).to_numpy() if window else keep]
    start = mine["start_ns"].to_numpy(dtype=np.int64)
    return mine.assign(_s=start, _e=start + np.rint(mine["dur_us"].to_numpy() * 1e3).astype(np.int64))


def _p2p(ops: pd.DataFrame, arrive: tuple[np.ndarray, np.ndarray], rank, window: bool = True) -> pd.DataFrame:
    """The rank's P2P calls in the window (all of them: ``window`` False): ``_s``/``_e`` the call's communication
    event (a gloo span begins after the op that posted it: that op is no communication event of the breakdown),
    ``_a``/``_d`` its transfer (``arrivals``)."""
    keep = (ops["rank"] == rank).to_numpy()
    keep = keep & ops["in_window"].astype(bool).to_numpy() if window else keep
    mine = ops[keep]
    end = mine["start_ns"].to_numpy(dtype=np.int64) + np.rint(mine["dur_us"].to_numpy(dtype=float) * 1e3).astype(np.int64)
    start = mine["event_ns"].to_numpy(dtype=np.int64) if "event_ns" in mine else mine["start_ns"].to_numpy(np.int64)
    a = np.minimum(np.maximum(arrive[0][keep], start), end)
    return mine.assign(_s=start, _e=end, _a=a, _d=np.clip(arrive[1][keep], a, end))


def _waiting(ops, arrive, collectives, overlap, rank, window: bool = True) -> tuple[iv.Intervals, iv.Intervals]:
    """The rank's P2P waiting that no transfer or collective covers: (all of it, the part not under compute)."""
    p2p, calls = _p2p(ops, arrive, rank, window), _calls(collectives, rank, window)
    covered = overlap[overlap["rank"] == rank]
    waiting = iv.subtract(_set(p2p["_s"], p2p["_e"]), _set(p2p["_a"], p2p["_d"]))
    waiting = iv.subtract(waiting, _set(calls["_s"], calls["_e"]))
    return waiting, iv.subtract(waiting, _set(covered["start_ns"], covered["end_ns"]))


def wait_accounting(ops: pd.DataFrame, arrive: np.ndarray, collectives: pd.DataFrame,
                    overlap: pd.DataFrame, ranks) -> pd.DataFrame:
    """``rank, p2p_wait_us`` (see the module docstring); 0 on a rank without P2P calls in the window."""
    rows = []
    for rank in ranks:  # one pass per rank
        waiting, exposed = _waiting(ops, arrive, collectives, overlap, rank)
        rows.append({"rank": rank, "p2p_wait_us": iv.total(*exposed) / 1e3, "covered_wait_us": iv.total(*waiting) / 1e3})
    return pd.DataFrame(rows, columns=["rank", "p2p_wait_us", "covered_wait_us"]).astype(np.float64).astype({"rank": int})


def step_waits(ops: pd.DataFrame, arrive: np.ndarray, collectives: pd.DataFrame, overlap_all: pd.DataFrame,
               steps: pd.DataFrame) -> pd.DataFrame:
    """``rank, step, p2p_wait_us, covered_wait_us`` per step (``start_ns`` to ``start_ns + step_us``), as the rank's
    but over all its P2P calls, collectives and ``comm ∩ compute`` (``overlap_all``: every step's, not the window's),
    as ``metrics.step_breakdown`` splits every step's device events."""
    parts = []
    for rank, mine in steps.groupby("rank", sort=True):
        waiting, exposed = _waiting(ops, arrive, collectives, overlap_all, rank, window=False)
        lo = mine["start_ns"].to_numpy(dtype=np.int64)
        hi = lo + np.rint(mine["step_us"].to_numpy(dtype=float) * 1e3).astype(np.int64)
        parts.append(pd.DataFrame({"rank": rank, "step": mine["step"].to_numpy(),
                                   "p2p_wait_us": iv.covered_within(exposed, lo, hi) / 1e3,
                                   "covered_wait_us": iv.covered_within(waiting, lo, hi) / 1e3}))
    cols = ["rank", "step", "p2p_wait_us", "covered_wait_us"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)


def with_step_p2p_wait(steps: pd.DataFrame, waits: pd.DataFrame) -> pd.DataFrame:
    """The steps table split as the rank's (``with_p2p_wait``): ``p2p_wait_us`` out of ``comm_us`` and
    ``exposed_comm_us``; the waiting under compute out of ``comm_us`` and ``overlap_us`` and into ``compute_us``
    (compute not overlapped by communication). ``other_us`` is unchanged, so ``compute + overlap + exposed_comm +
    p2p_wait + other = step_us``."""
    keyed = waits.set_index(["rank", "step"])
    at = pd.MultiIndex.from_arrays([steps["rank"], steps["step"]])
    wait = keyed["p2p_wait_us"].reindex(at).fillna(0.0).to_numpy(dtype=float)
    under = keyed["covered_wait_us"].reindex(at).fillna(0.0).to_numpy(dtype=float) - wait
    ns = (lambda us: np.round(us, 3))  # the times are whole ns: no -3e-11 left by the subtraction
    out = steps.assign(compute_us=ns(steps["compute_us"] + under), overlap_us=ns(steps["overlap_us"] - under),
                       exposed_comm_us=ns(steps["exposed_comm_us"] - wait), comm_us=ns(steps["comm_us"] - wait - under))
    out.insert(out.columns.get_loc("comm_us") + 1, "p2p_wait_us", np.where(steps["comm_us"].isna(), np.nan, wait))
    return out


def with_p2p_wait(ranks: pd.DataFrame, waits: pd.DataFrame) -> pd.DataFrame:
    """The rank table with ``p2p_wait_us`` set, taken out of ``comm_us`` and
    ``exposed_comm_us`` (``overlap_pct`` again over what is left)."""
    wait = ranks["rank"].map(waits.set_index("rank")["p2p_wait_us"]).fillna(0.0).to_numpy()
    under = ranks["rank"].map(waits.set_index("rank")["covered_wait_us"]).fillna(0.0).to_numpy() - wait
    ns = (lambda us: np.round(us, 3))  # the times are whole ns: no -3e-11 overlap (and negative %) from the subtraction
    out = ranks.assign(comm_us=ns(ranks["comm_us"] - wait - under), overlap_us=ns(ranks["overlap_us"] - under),
                       exposed_comm_us=ns(ranks["exposed_comm_us"] - wait),
                       p2p_wait_us=np.where(ranks["comm_us"].isna(), np.nan, wait))
    with np.errstate(divide="ignore", invalid="ignore"):
        out["overlap_pct"] = np.where(out["comm_us"] > 0, out["overlap_us"] / out["comm_us"] * 100, np.nan)
    return out


def comm_by_dim(ops: pd.DataFrame, arrive: np.ndarray, collectives: pd.DataFrame, overlap: pd.DataFrame,
                ranks) -> pd.DataFrame:
    """``summary.comm_by_dim``: one row per rank and dim with communication in the window."""
    rows = []
    for rank in ranks:
        p2p, calls = _p2p(ops, arrive, rank), _calls(collectives, rank)
        covered = overlap[overlap["rank"] == rank]
        cover = _set(covered["start_ns"], covered["end_ns"])
        parts = pd.concat([calls[["dim", "_s", "_e", "bytes"]], p2p[["dim", "_a", "_d", "bytes"]].rename(
            columns={"_a": "_s", "_d": "_e"})], ignore_index=True)
        for dim, mine in parts.groupby("dim", sort=True):
            spans = _set(mine["_s"], mine["_e"])
            nbytes = mine["bytes"].to_numpy(dtype=float)
            rows.append({"rank": rank, "dim": dim, "calls": len(mine), "comm_us": iv.total(*spans) / 1e3,
                         "exposed_us": iv.total(*iv.subtract(spans, cover)) / 1e3,
                         "bytes": float(nbytes.sum()) if not np.isnan(nbytes).any() else np.nan})
    return pd.DataFrame(rows, columns=list(COMM_BY_DIM_COLUMNS))
