"""The model-parallel join of a run: process groups and ``dim`` on every collective, send/recv paired across ranks
(``tracekit.run.p2p``), and the communication numbers that follow (``tracekit.run.commdims``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.events.p2p import P2P_OP_COLUMNS
from tracekit.run import commdims, p2p as pairs_of, pgdims


@dataclass(frozen=True)
class Joined:
    collectives: pd.DataFrame  # with pg_desc filled where inferred, and dim
    calls: pd.DataFrame        # every rank's P2P calls, stacked in rank order (corrected clock, absolute ns)
    p2p: pd.DataFrame          # summary.p2p
    mismatches: pd.DataFrame   # p2p_unmatched rows
    waits: pd.DataFrame        # rank, p2p_wait_us
    step_waits: pd.DataFrame   # rank, step, p2p_wait_us, covered_wait_us (commdims.step_waits)
    comm_by_dim: pd.DataFrame


def join(results, collectives: pd.DataFrame, steps: pd.DataFrame, shift: dict[int, int], origin_ns: int) -> Joined:
    """``results``: the ranks' ``RankResult``s in rank order; ``collectives`` and ``steps`` on the corrected clock
    (absolute ``start_ns``), ``collectives`` with ``match_id``."""
    groups = pgdims.group_table(r.meta.pg_config for r in results)
    calls = _stacked([r.p2p for r in results], P2P_OP_COLUMNS + ["in_window", "event_ns", "blocked_ns"], shift)
    overlap, overlap_all = (_moved([getattr(r, name) for r in results], shift)
                            for name in ("comm_overlap", "comm_overlap_all"))
    peers = pairs_of.resolve_peers(calls, groups)
    pairs = pairs_of.pair(calls, peers)
    held = steps[["rank", "step"]]
    ranks = [r.meta.rank for r in results]
    table = pairs_of.p2p_table(calls, peers, pairs, held, set(ranks), origin_ns)
    inferred = pgdims.infer_groups(collectives, groups)
    fsdp_run = any(len(r.fsdp) for r in results)
    ddp_run = any(bool(r.breakdown["ddp"].fillna(False).any()) for r in results if "ddp" in r.breakdown)
    hint = pgdims.evidence(collectives["op"], fsdp_run, ddp_run)
    if "context" in collectives:  # what enqueued a gloo call (events.pgctx) is evidence first
        context = collectives["context"].to_numpy(dtype=object)
        hint = np.where(pd.notna(context), context, hint)
        collectives = collectives.drop(columns="context")
    at = collectives.columns.get_loc("pg_desc")
    collectives = collectives.assign(pg_desc=inferred["pg_desc"].to_numpy())
    collectives.insert(at + 1, "dim", pgdims.label_dims(inferred["pg"], inferred["pg_desc"], hint))
    calls = calls.assign(pg=peers["pg"].to_numpy(), pg_desc=peers["pg_desc"].to_numpy(),
                         dim=[pgdims.dim_of_desc(d) or "pp" for d in peers["pg_desc"]])
    arrive = commdims.arrivals(calls, table)
    return Joined(collectives=collectives, calls=calls, p2p=table, mismatches=pairs_of.p2p_mismatches(table, calls),
                  waits=commdims.wait_accounting(calls, arrive, collectives, overlap, ranks),
                  step_waits=commdims.step_waits(calls, arrive, collectives, overlap_all, steps),
                  comm_by_dim=commdims.comm_by_dim(calls, arrive, collectives, overlap, ranks))


def _moved(frames: list[pd.DataFrame], shift: dict[int, int]) -> pd.DataFrame:
    """The ranks' ``comm ∩ compute`` intervals, both ends on the corrected clock."""
    out = _stacked(frames, ["rank", "start_ns", "end_ns"], shift)
    return out.assign(end_ns=out["end_ns"] - out["rank"].map(shift).fillna(0).astype(np.int64)) if len(out) else out


def _stacked(frames: list[pd.DataFrame], columns: list[str], shift: dict[int, int]) -> pd.DataFrame:
    """The ranks' rows in order, ``start_ns`` moved onto the corrected clock; typed and empty without any."""
    parts = [f for f in frames if len(f)]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=np.int64 if c.endswith("_ns") or c in ("rank", "row", "step") else object)
                             for c in columns}).astype({"in_window": bool} if "in_window" in columns else {})
    out = pd.concat(parts, ignore_index=True)
    moved = out["rank"].map(shift).fillna(0).astype(np.int64)
    return out.assign(**{c: out[c] - moved for c in ("start_ns", "event_ns", "blocked_ns") if c in out})
