"""FSDP per unit: one row per rank x step x unit x phase, from the FSDP hooks' annotations and the collectives.

Units and requests (a unit's pre-hook: when it needs its parameters) are read off the hooks' annotations by
``tracekit.events.fsdp_hooks``. Each collective is tied to the FSDP annotation around the host call that issued it: on GPU
ranks the kernel's launch, on CPU (gloo) ranks the ``c10d::*`` op matched to the ``gloo:*`` event by order of issue
within its op family (all-gathers; reductions, since gloo runs a reduce-scatter as an all-reduce of the full buffer).
An all-gather annotation belongs to the next request of its unit (the one it sits in, or the first after it); a
reduction to the latest backward request of its unit.

Compute here is the device's compute minus host ops that enclose an FSDP annotation: on CPU ranks an autograd
``evaluate_function`` around a pre-backward hook spends that time waiting for the all-gather, not computing.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit import intervals as iv
from tracekit.events.collectives import dtype_bytes, normalize_op
from tracekit.events.fsdp_hooks import PHASES, annotations, requests
from tracekit.nesting import count_starts_within, innermost
from tracekit.read.categories import DEVICE_CATEGORIES

VERDICTS = ("prefetched", "on_demand", "no_gather")
_C10D = re.compile(r"^c10d::")
# Collective op -> the FSDP side it serves: gathers of parameters, reductions of gradients (gloo: an all-reduce).
_FAMILY = pd.Series({"all_gather": "gather", "all_reduce": "reduce", "reduce_scatter": "reduce"})


def unit_table(events: pd.DataFrame, calls: pd.DataFrame, comm_args: pd.DataFrame, on_gpu: bool) -> pd.DataFrame:
    """The FSDP rows of one rank (columns ``schema.FSDP_COLUMNS``, times as absolute ``start_ns``); empty without FSDP.

    ``events`` is classified; ``calls`` is ``collectives.collective_table`` with its ``row`` column.
    """
    ann = annotations(events)
    req = requests(ann) if len(ann) else pd.DataFrame()
    if req.empty:
        return _empty()
    req = req.sort_values("start_ns", ignore_index=True)
    compute = _compute(events, ann)
    col = _tie_collectives(events, calls, comm_args, ann)
    busy = iv.merge(compute["start_ns"].to_numpy(), compute["end_ns"].to_numpy())
    col["exposed_ns"] = col["dur_ns"] - iv.covered_within(busy, col["start_ns"], col["end_ns"])
    gathers = ann[ann["hook"] == "all_gather"].assign(prefetch=False, id=lambda a: a.index.to_numpy())
    if (ann["api"] == "fsdp1").any():  # FSDP1 has no all-gather annotation: the innermost hook around the call
        fsdp1, col = _fsdp1_gathers(ann, col)
        gathers = pd.concat([gathers, fsdp1], ignore_index=True)
    gathers = gathers.assign(request=_gather_request(gathers, req))
    reduces = ann[ann["hook"].isin(["post_backward_reduce", "_post_backward_hook"])]
    reduces = reduces.assign(id=reduces.index.to_numpy())
    reduces = reduces.assign(request=_reduce_request(reduces, req))

    ag = _per_annotation(gathers, col[col["family"] == "gather"])
    rs = _per_annotation(reduces, col[col["family"] == "reduce"])
    out = req[["api", "unit", "phase", "step"]].copy()
    out.insert(0, "rank", events["rank"].iloc[0] if len(events) else -1)
    out["order"] = out.groupby(["step", "phase"]).cumcount()
    out["start_ns"] = req["start_ns"].to_numpy()
    out["compute_us"] = _own_compute(req, compute) / 1e3
    g = ag.groupby("request")
    n = len(req)
    out["gathers"] = g.size().reindex(range(n), fill_value=0).to_numpy()
    out = out.assign(**_sums(g, n, "allgather"))
    out["allgather_dtype"] = g["dtype"].first().reindex(range(n)).to_numpy()
    ag_end = g["end_ns"].max().reindex(range(n)).to_numpy()
    out["wait_us"] = _wait(req, ag_end, compute, on_gpu) / 1e3
    issued = g["start_ns"].min().reindex(range(n)).to_numpy()
    early = np.where(issued < req["start_ns"].to_numpy(), "prefetched", "on_demand")
    verdict = np.where(out["gathers"] == 0, "no_gather", early)
    out["prefetch"] = pd.Categorical(verdict, categories=list(VERDICTS))
    r = rs.groupby("request")
    out["reduces"] = r.size().reindex(range(n), fill_value=0).to_numpy()
    out = out.assign(**_sums(r, n, "reduce"))
    none = out["gathers"] == 0
    out.loc[none, ["allgather_us", "allgather_exposed_us", "allgather_bytes", "wait_us"]] = 0.0
    out.loc[out["reduces"] == 0, ["reduce_us", "reduce_exposed_us", "reduce_bytes"]] = 0.0
    out["phase"] = pd.Categorical(out["phase"], categories=list(PHASES))
    return out


def _sums(groups, n: int, prefix: str) -> dict:
    """Per request: the calls' summed duration, exposed part (us) and bytes. A call tied to no collective, or of unknown
    size, makes its request's value unknown (NaN), not 0."""
    out = {}
    for name, src, scale in (("us", "dur_ns", 1e3), ("exposed_us", "exposed_ns", 1e3), ("bytes", "bytes", 1)):
        total = groups[src].sum(min_count=1).reindex(range(n)).to_numpy() / scale
        unknown = (groups[src].count() < groups.size()).reindex(range(n), fill_value=False).to_numpy()
        out[f"{prefix}_{name}"] = np.where(unknown, np.nan, total)
    return out


def _empty() -> pd.DataFrame:
    from tracekit.schema import FSDP_COLUMNS

    cols = ["start_ns" if c == "start_us" else c for c in FSDP_COLUMNS if c != "in_window"]
    text = ("api", "unit", "phase", "prefetch", "allgather_dtype")
    return pd.DataFrame({c: pd.Series(dtype=object if c in text else float) for c in cols})


def _compute(events: pd.DataFrame, ann: pd.DataFrame) -> pd.DataFrame:
    """Compute events (start_ns, end_ns, issue_ns: launch, else own start), less host ops enclosing an FSDP
    annotation."""
    comp = events[(events["kind"] == "compute").to_numpy() & (events["dur_ns"] >= 0).to_numpy()]
    start = comp["ts_ns"].to_numpy()
    end = start + comp["dur_ns"].to_numpy()
    tid = comp["tid"].astype(str).to_numpy()
    # An op that an FSDP annotation starts inside, on the same thread, encloses it (one thread's events nest).
    encloses = count_starts_within(ann["tid"].to_numpy(dtype=str), ann["start_ns"].to_numpy(), tid, start, end) > 0
    keep = ~encloses | comp["cat"].isin(DEVICE_CATEGORIES).to_numpy()  # kernels run on streams, never around hooks
    launch = comp["launch_ns"].to_numpy()
    return pd.DataFrame({"start_ns": start[keep], "end_ns": end[keep],
                         "issue_ns": np.where(launch >= 0, launch, start)[keep]})


def _tie_collectives(events, calls, comm_args, ann) -> pd.DataFrame:
    """Per collective: family (gather / reduce / other), start_ns, end_ns, dur_ns, bytes, and ``ann``: the index in
    ``ann`` of the innermost FSDP annotation around the host call that issued it (-1 when none)."""
    family = _FAMILY.reindex(calls["op"].astype(str)).fillna("other").to_numpy(dtype=object)
    launch = events["launch_row"].to_numpy()[calls["row"].to_numpy()] if len(calls) else np.zeros(0, dtype=np.int64)
    tid = np.where(launch >= 0, events["tid"].iloc[np.maximum(launch, 0)].astype(str).to_numpy(), "")
    issue = np.where(launch >= 0, events["ts_ns"].to_numpy()[np.maximum(launch, 0)], -1)
    # CPU ranks: the k-th gloo call of a family was issued by the k-th c10d op of that family on the rank.
    names = events["name"].cat.categories.astype(str)
    name_family = _FAMILY.reindex([normalize_op(n) if _C10D.match(n) else "" for n in names]).fillna("other")
    codes = events["name"].cat.codes.to_numpy()
    op_family = np.append(name_family.to_numpy(dtype=object), "other")[codes]
    issuers = (op_family != "other") & (events["dur_ns"] >= 0).to_numpy()
    c10d = events[issuers].assign(family=op_family[issuers]).sort_values("ts_ns")
    c10d_family = c10d["family"].to_numpy()
    order = np.argsort(calls["start_ns"].to_numpy(), kind="stable")
    for fam in ("gather", "reduce"):
        mine = order[(family[order] == fam) & (launch[order] < 0)]
        ops = c10d[c10d_family == fam]
        k = min(len(mine), len(ops))
        tid[mine[:k]] = ops["tid"].astype(str).to_numpy()[:k]
        issue[mine[:k]] = ops["ts_ns"].to_numpy()[:k]
    has = issue >= 0
    where = np.full(len(calls), -1, dtype=np.int64)
    where[has] = innermost(tid[has], issue[has], ann["tid"].to_numpy(dtype=str), ann["start_ns"].to_numpy(),
                           ann["end_ns"].to_numpy())
    start = calls["start_ns"].to_numpy()
    dur = np.round(calls["dur_us"].to_numpy() * 1e3).astype(np.int64)
    return pd.DataFrame({"family": family, "start_ns": start, "end_ns": start + dur, "dur_ns": dur.astype(float),
                         "bytes": _gather_bytes(calls, comm_args, family), "ann": where, "issue_ns": issue,
                         "dtype": _dtype(calls, comm_args)})


def _dtype(calls, comm_args) -> np.ndarray:
    """Element type as written in the trace: the call's, else its Input type (gloo)."""
    args = comm_args.drop_duplicates("row").set_index("row").reindex(calls["row"].to_numpy())
    own = calls["dtype"].astype(object)
    return own.where(own.notna().to_numpy(), args["input_type"].to_numpy()).to_numpy()


def _gather_bytes(calls, comm_args, family) -> np.ndarray:
    """The collective's bytes; a gloo all-gather records only its input shard, so output = shard x group size."""
    nbytes = calls["bytes"].to_numpy(dtype=float).copy()
    args = comm_args.drop_duplicates("row").set_index("row").reindex(calls["row"].to_numpy())
    size = np.array([dtype_bytes(t) for t in args["input_type"]], dtype=float)  # per call, as collectives.py
    shard = args["input_nelems"].to_numpy(dtype=float) * size
    fill = (family == "gather") & np.isnan(nbytes)
    nbytes[fill] = (shard * calls["group_size"].to_numpy(dtype=float))[fill]
    return nbytes


def _fsdp1_gathers(ann: pd.DataFrame, col: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """FSDP1: each all-gather issued inside an FSDP1 hook is its own gather, prefetched when the hook is a prefetch.

    Returns those gathers and ``col`` with each such call tied to its own gather (a copy; ``col`` is not changed)."""
    mine = col[(col["family"] == "gather") & (col["ann"] >= 0)]
    mine = mine[ann["api"].to_numpy()[mine["ann"].to_numpy()] == "fsdp1"]
    hook = ann["hook"].to_numpy()[mine["ann"].to_numpy()]
    ids = len(ann) + mine.index.to_numpy()
    col = col.copy()
    col.loc[mine.index, "ann"] = ids  # re-tie each call to its own gather
    return pd.DataFrame({"api": "fsdp1", "hook": "all_gather", "unit": None,
                         "tid": ann["tid"].to_numpy()[mine["ann"].to_numpy()],
                         "step": -1, "start_ns": mine["issue_ns"].to_numpy(), "end_ns": mine["issue_ns"].to_numpy(),
                         "prefetch": np.char.find(hook.astype(str), "prefetch") >= 0, "id": ids}), col


def _gather_request(gathers: pd.DataFrame, req: pd.DataFrame) -> np.ndarray:
    """Index in ``req`` of the request each gather serves: its unit's request around it, else the next one
    (FSDP1: the request around it, or the next request of any unit for a prefetch)."""
    out = np.full(len(gathers), -1, dtype=np.int64)
    if gathers.empty:
        return out
    g = gathers.assign(_i=np.arange(len(gathers)), k=gathers["unit"].fillna("").astype(str).where(
        gathers["api"] == "fsdp2", "|fsdp1")).sort_values("start_ns")
    r = req.assign(_r=np.arange(len(req)), k=req["unit"].astype(str).where(req["api"] == "fsdp2", "|fsdp1"),
                   req_ns=req["start_ns"]).sort_values("start_ns")
    cols = ["k", "start_ns", "_r", "hook_end_ns", "req_ns"]
    back = pd.merge_asof(g, r[cols], on="start_ns", by="k", direction="backward")
    fwd = pd.merge_asof(g, r[cols], on="start_ns", by="k", direction="forward", allow_exact_matches=False)
    around = (back["hook_end_ns"] >= back["start_ns"]).fillna(False).to_numpy(dtype=bool)
    inside = around & ~g["prefetch"].fillna(False).to_numpy(dtype=bool)
    pick = np.where(inside, back["_r"].fillna(-1), fwd["_r"].fillna(-1)).astype(np.int64)
    out[g["_i"].to_numpy()] = pick
    return out


def _reduce_request(reduces: pd.DataFrame, req: pd.DataFrame) -> np.ndarray:
    """Index in ``req`` of the backward request each reduction annotation closes (the unit's latest before it)."""
    out = np.full(len(reduces), -1, dtype=np.int64)
    bwd = req[req["phase"] == "backward"]
    if reduces.empty or bwd.empty:
        return out
    g = reduces.assign(_i=np.arange(len(reduces)), k=reduces["unit"].fillna("|fsdp1").astype(str))
    r = bwd.assign(_r=bwd.index.to_numpy(), k=bwd["unit"].astype(str).where(bwd["api"] == "fsdp2", "|fsdp1"))
    g, r = g.sort_values("start_ns"), r.sort_values("start_ns")
    back = pd.merge_asof(g, r[["k", "start_ns", "_r"]], on="start_ns", by="k", direction="backward")
    out[g["_i"].to_numpy()] = back["_r"].fillna(-1).to_numpy(dtype=np.int64)
    return out


def _per_annotation(anns: pd.DataFrame, col: pd.DataFrame) -> pd.DataFrame:
    """One row per collective tied to an annotation (NaN times for an annotation with none): request, start_ns
    (the annotation's: when it was issued), end_ns, dur_ns, exposed_ns, bytes, dtype."""
    table = pd.DataFrame({"ann": anns["id"].to_numpy(dtype=np.int64), "request": anns["request"].to_numpy(),
                          "start_ns": anns["start_ns"].to_numpy()})
    table = table[table["request"] >= 0]
    return table.merge(col.drop(columns=["start_ns"]), on="ann", how="left")


def _own_compute(req: pd.DataFrame, compute: pd.DataFrame) -> np.ndarray:
    """Compute time (ns, union) issued in each request's window and not in a nested unit's; NaN without a window end."""
    has_end = req["end_ns"].to_numpy() > req["start_ns"].to_numpy()
    out = np.full(len(req), np.nan)
    idx = np.flatnonzero(has_end)
    if len(idx) == 0:
        return out
    owner = innermost(np.zeros(len(compute), dtype=str), compute["issue_ns"].to_numpy(), np.zeros(len(idx), dtype=str),
                      req["start_ns"].to_numpy()[idx], req["end_ns"].to_numpy()[idx])
    mine = owner >= 0
    lo = int(compute["start_ns"].min()) if len(compute) else 0
    width = int(compute["end_ns"].max() - lo + 1) if len(compute) else 1
    s, e = iv.merge(owner[mine] * width + (compute["start_ns"].to_numpy()[mine] - lo),
                    owner[mine] * width + (compute["end_ns"].to_numpy()[mine] - lo))
    totals = np.bincount(s // width, weights=(e - s), minlength=len(idx)) if len(s) else np.zeros(len(idx))
    out[idx] = totals
    return out


def _wait(req, ag_end, compute, on_gpu) -> np.ndarray:
    """Time with no compute between the moment a unit could start (its pre-hook on CPU ranks; on GPU ranks the end of
    the compute launched before the pre-hook) and the end of its last all-gather."""
    ready = req["start_ns"].to_numpy().astype(np.int64)
    if on_gpu and len(compute):
        by_issue = compute.sort_values("issue_ns")
        done = np.maximum.accumulate(by_issue["end_ns"].to_numpy())
        at = np.searchsorted(by_issue["issue_ns"].to_numpy(), ready, side="right") - 1
        ready = np.where(at >= 0, done[np.maximum(at, 0)], ready)
    busy = iv.merge(compute["start_ns"].to_numpy(), compute["end_ns"].to_numpy())
    known = ~np.isnan(ag_end)
    end = np.maximum(np.where(known, ag_end, 0).astype(np.int64), ready)
    waited = (end - ready) - iv.covered_within(busy, ready, end)
    return np.where(known, waited, np.nan).astype(float)


def rank_totals(fsdp: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank, per step (the mean over the window's steps): exposed all-gather, exposed reduction and wait (us),
    the step time, and the exposed times as % of the step time."""
    rows = fsdp[fsdp["in_window"].astype(bool)] if len(fsdp) else fsdp
    cols = ["allgather_exposed_us", "reduce_exposed_us", "wait_us"]
    grouped = rows.groupby("rank")[cols]
    sums = grouped.sum().where(grouped.count() == grouped.size().to_numpy()[:, None])  # one unknown row: unknown
    kept = steps[steps["in_window"].astype(bool) & steps["rank"].isin(sums.index)]
    step_us = kept.groupby("rank")["step_us"].sum(min_count=1).reindex(sums.index)
    count = kept.groupby("rank")["step"].nunique().reindex(sums.index)  # NaN without steps: per step unknown
    out = sums.div(count, axis=0)
    out.insert(0, "steps", count)
    out["step_us"] = step_us / count
    out["allgather_exposed_pct"] = sums["allgather_exposed_us"] / step_us * 100
    out["reduce_exposed_pct"] = sums["reduce_exposed_us"] / step_us * 100
    return out.reset_index()
