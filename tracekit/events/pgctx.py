"""The process group of a gloo collective, which names none: from the op that enqueued it and the rank's groups.

gloo writes no group on its calls (``gloo:all_reduce`` runs on one of gloo's threads, with shapes only), but the
``c10d::*`` op that enqueued it ran on the training thread inside what asked for it:

  ``Redistribute`` / ``NestedRedistribute`` / ``RedistributeBackward`` (DTensor), or a functional collective
  (``_c10d_functional::*``: DTensor's backward all_reduce runs outside its Redistribute)   context ``tp``
  an ``FSDP::*`` annotation (FSDP2's all_gather, post_backward_reduce, ...)          context ``fsdp``

The call's group is then the rank's one group (``distributedInfo.pg_config``) whose description says that dimension
(``mesh_tp``; for fsdp a data-parallel one: ``mesh_dp``, ``mesh_dp_shard``, ``fsdp_*``), or the rank's only group;
a context whose dimension the rank has no group of gives nothing (a functional collective on a run without TP). The
enqueuing op is the latest ``c10d::*`` op (not a wait) begun at or before the call on its rank, as the graph's
enqueue edges (``tracekit.rank.graph``); for a collective, not a ``c10d::send``/``c10d::recv_``: gloo runs a
collective when one of its threads is free, and while earlier ones hold them the training thread goes on to post a
pipeline's receive, which enqueues no collective. Where nothing says, the group stays unknown (None) and the run's join may
still find it from the ranks the call is matched on (``tracekit.run.pgdims.infer_groups``).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.events.classify import enclosing_span, launch_points
from tracekit.events.collectives import P2P_POSTS
from tracekit.events.p2p import P2P_OPS

_ENQUEUE = re.compile(r"^c10d::(?!wait)")
_CONTEXTS = (("tp", re.compile(r"^(?:Nested)?Redistribute(?:Backward)?$|^_c10d_functional::")),
             ("fsdp", re.compile(r"^FSDP::")))
_DP_LIKE = ("fsdp", "dp", "dp_shard", "dp_replicate")


def _rows_named(events: pd.DataFrame, pattern: re.Pattern) -> pd.DataFrame:
    names = events["name"].cat.categories
    wanted = names[np.fromiter((pattern.search(n) is not None for n in names), dtype=bool, count=len(names))]
    return events[events["name"].isin(wanted).to_numpy() & (events["dur_ns"] >= 0).to_numpy()]


def call_context(events: pd.DataFrame, calls: pd.DataFrame) -> np.ndarray:
    """Per call (rows of ``calls``, a ``collective_table`` with ``row``): ``tp``, ``fsdp`` or None."""
    out = np.full(len(calls), None, dtype=object)
    ops = _rows_named(events, _ENQUEUE).sort_values("ts_ns")
    if ops.empty or calls.empty:
        return out
    posts = ops["name"].isin(_rows_named(ops, P2P_POSTS)["name"].unique()).to_numpy()
    p2p = calls["op"].astype(str).isin(P2P_OPS).to_numpy()
    at_ns = events["ts_ns"].to_numpy()[calls["row"].to_numpy()]
    collective_ops = ops[~posts]
    at = np.searchsorted(ops["ts_ns"].to_numpy(), at_ns, side="right") - 1
    at_collective = np.searchsorted(collective_ops["ts_ns"].to_numpy(), at_ns, side="right") - 1
    found = np.where(p2p, at, at_collective) >= 0
    enqueuers = np.where(p2p, ops.index.to_numpy()[np.maximum(at, 0)] if len(ops) else -1,
                         collective_ops.index.to_numpy()[np.maximum(at_collective, 0)] if len(collective_ops) else -1)
    enqueue_rows = events.index.get_indexer(enqueuers[found])
    points = launch_points(events, enqueue_rows)
    for context, pattern in reversed(_CONTEXTS):  # tp last: a DTensor op inside an FSDP hook is tensor parallel
        spans = _rows_named(events, pattern)
        if spans.empty:
            continue
        inside = enclosing_span(points, spans) >= 0
        out[np.flatnonzero(found)[inside]] = context
    return out


def groups_of(context: np.ndarray, pg_config) -> pd.DataFrame:
    """``pg`` and ``pg_desc`` per call from its context and the rank's ``pg_config`` (see the module docstring);
    None where no one group fits."""
    groups = [(str(c["pg_name"]), str(c.get("pg_desc") or "")) for c in pg_config if isinstance(c, dict) and "pg_name" in c]
    mesh = {name: (re.fullmatch(r"mesh_(\w+)", desc) or re.match(r"(fsdp|tp)_", desc)) for name, desc in groups}
    dim = {name: (m.group(1) if m else None) for name, m in mesh.items()}
    pick = {"tp": [g for g in groups if dim[g[0]] == "tp"],
            "fsdp": [g for g in groups if dim[g[0]] in _DP_LIKE] or [g for g in groups if g[1] == "default_pg"]}
    only = groups if len(groups) == 1 else []
    chosen = [(pick.get(c) if c in pick else only) for c in context]
    return pd.DataFrame({"pg": [g[0][0] if g and len(g) == 1 else None for g in chosen],
                         "pg_desc": [g[0][1] if g and len(g) == 1 else None for g in chosen]})


def with_groups(events: pd.DataFrame, calls: pd.DataFrame, pg_config) -> pd.DataFrame:
    """``calls`` with ``pg_desc`` (and ``pg``, where the rank is in more than one group: only then does it tell calls
    apart for matching) filled for the calls that name no group, and ``context`` (``call_context``; None for calls
    that name their group), evidence for ``tracekit.run.pgdims``."""
    unnamed = calls["pg"].isna().to_numpy()
    context = np.full(len(calls), None, dtype=object)
    if not unnamed.any():
        return calls.assign(context=context)
    context[unnamed] = call_context(events, calls[unnamed])
    calls = calls.assign(context=context)
    if not pg_config:
        return calls
    found = groups_of(context[unnamed], pg_config)
    pg, desc = calls["pg"].astype(object).to_numpy().copy(), calls["pg_desc"].astype(object).to_numpy().copy()
    if sum(isinstance(c, dict) and "pg_name" in c for c in pg_config) > 1:
        pg[unnamed] = found["pg"].to_numpy()
    desc[unnamed] = np.where(pd.isna(desc[unnamed]), found["pg_desc"].to_numpy(), desc[unnamed])
    return calls.assign(pg=pg, pg_desc=desc)
