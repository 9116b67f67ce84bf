"""Process groups as a dimension: which group each collective and P2P call ran in, and its parallelism label ``dim``.

The groups come from every rank's ``distributedInfo.pg_config`` (``pg_name``, ``pg_desc``, ``ranks``). A call's group
is the one its args name (NCCL: ``Process Group Name``/``Description``); on gloo, whose calls name none, the one
group whose ranks are exactly the ranks the call was matched on (``tracekit.run.crossrank``), when exactly one is.

``dim`` of a group, first that applies:
  1. its description: ``mesh_<d>`` (DeviceMesh) gives ``d`` (``dp_shard`` -> fsdp, ``dp_replicate`` -> dp),
     ``fsdp_*`` fsdp, ``pp_*`` pp, ``tp_*``/``ep_*``/``cp_*``/``dp_*`` theirs; any other description but
     ``default_pg``/``undefined`` is its own label;
  2. what its calls do, as evidence beside that: send/recv -> pp; all_gather/reduce_scatter on a run with FSDP's
     units -> fsdp; all_reduce on a DDP run -> dp (``evidence``); a generic data-parallel group (``mesh_dp``) takes
     these labels when its calls give any;
  3. else ``unknown``.
A group whose calls show two purposes carries both, joined by ``+`` in name order (``dp+fsdp``): every call of that
group then has that label.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

DIMS = ("dp", "fsdp", "tp", "pp", "ep", "cp")
_MESH = {"dp_shard": "fsdp", "dp_replicate": "dp", "dp": "dp"}
_NO_PURPOSE = ("default_pg", "undefined", "")


def group_table(pg_configs) -> pd.DataFrame:
    """One row per process group named in any rank's ``pg_config``: ``pg`` (its name), ``pg_desc``, ``ranks``
    (a sorted tuple of global ranks; empty when not listed)."""
    rows = {}
    for configs in pg_configs:
        for c in configs:
            if isinstance(c, dict) and "pg_name" in c:
                ranks = tuple(sorted(int(r) for r in c["ranks"])) if isinstance(c.get("ranks"), list) else ()
                rows.setdefault(str(c["pg_name"]), (str(c.get("pg_desc") or ""), ranks))
    return pd.DataFrame([(k, d, r) for k, (d, r) in rows.items()], columns=["pg", "pg_desc", "ranks"])


def dim_of_desc(desc) -> str | None:
    """The label a group's description gives (None: it names no purpose)."""
    if not isinstance(desc, str) or desc in _NO_PURPOSE:
        return None
    mesh = re.fullmatch(r"mesh_(\w+)", desc)
    if mesh:
        return _MESH.get(mesh.group(1), mesh.group(1))
    head = re.match(r"(fsdp|pp|tp|ep|cp|dp)(?:_|$)", desc)
    return head.group(1) if head else desc


def infer_groups(calls: pd.DataFrame, groups: pd.DataFrame) -> pd.DataFrame:
    """``pg`` and ``pg_desc`` per call where the trace names none: the one group of ``groups`` whose ranks are the
    ranks of the call's match (``match_id``); the call's own where it has them. Rows in ``calls``' order."""
    pg = calls["pg"].astype(object)
    desc = calls["pg_desc"].astype(object)
    named = pg.notna() & pg.isin(groups["pg"])
    desc = desc.where(desc.notna() | ~named, pg.map(dict(zip(groups["pg"], groups["pg_desc"]))))
    if "match_id" not in calls or groups.empty:
        return pd.DataFrame({"pg": pg, "pg_desc": desc}, index=calls.index)
    members = calls.groupby("match_id")["rank"].agg(lambda r: tuple(sorted(set(int(x) for x in r))))
    by_ranks = groups[groups["ranks"].map(len) > 0].groupby("ranks")
    unique = by_ranks["pg"].agg(lambda p: p.iloc[0] if len(p) == 1 else None)
    found = calls["match_id"].map(members).map(unique)
    guess = pg.isna() & found.notna()
    pg = pg.where(~guess, found)
    desc = desc.where(~guess, found.map(dict(zip(groups["pg"], groups["pg_desc"]))))
    return pd.DataFrame({"pg": pg, "pg_desc": desc}, index=calls.index)


def evidence(op: pd.Series, fsdp_run: bool, ddp_run: bool) -> np.ndarray:
    """The label a call's own op gives on this run (None where none): send/recv pp, FSDP's gathers and
    reduce-scatters fsdp, DDP's all_reduce dp."""
    op = op.astype(str).to_numpy()
    out = np.full(len(op), None, dtype=object)
    out[np.isin(op, ("send", "recv"))] = "pp"
    if fsdp_run:
        out[np.isin(op, ("all_gather", "reduce_scatter"))] = "fsdp"
    if ddp_run:
        out[op == "all_reduce"] = "dp"
    return out


def label_dims(pg: pd.Series, pg_desc: pd.Series, hint: np.ndarray) -> np.ndarray:
    """``dim`` per call (see the module docstring): its group's description's label, else the labels its group's
    calls' ``hint`` (``evidence``) give, joined by ``+``; a call without a group takes its own hint; else unknown."""
    own = np.array([dim_of_desc(d) for d in pg_desc.astype(object)], dtype=object)
    key = pg.astype(object).where(pg.notna(), None)
    frame = pd.DataFrame({"pg": key.to_numpy(), "hint": hint})
    per_group = (frame.dropna(subset=["pg", "hint"]).groupby("pg")["hint"]
                 .agg(lambda h: "+".join(sorted(set(h)))))
    from_group = key.map(per_group).to_numpy(dtype=object)
    # Generic data parallelism (mesh_dp) is refined by what its calls do: FSDP's gathers make it fsdp.
    refined = np.where((own == "dp") & pd.notna(from_group), from_group, own)
    out = np.where(pd.notna(refined), refined, np.where(pd.notna(from_group), from_group, hint))
    return np.where(pd.isna(out), "unknown", out).astype(object)
