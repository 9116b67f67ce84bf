"""Across ranks: the same collective matched on every rank, who waits for whom, and stragglers (clock offsets:
``tracekit.run.clocks``).

Matching: by (process group, ``Seq``) where the trace records it, else by (process group, op, ProfilerStep,
order of issue within that step). For each matched collective the last rank to start is the last arrival;
``wait_us`` = latest start - own start, ``transfer_us`` = own end - latest start (never negative).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd

from tracekit import intervals as iv
from tracekit.commnames import ep_kernel_op
from tracekit.schema import IMBALANCE_COLUMNS, MISMATCH_COLUMNS

# A straggler passes the binomial test: last more often than chance with p < STRAGGLER_P, over MIN_TESTED calls.
STRAGGLER_P = 0.01
MIN_TESTED = 5


def match_keys(coll: pd.DataFrame) -> np.ndarray:
    """A group id per collective row: rows with the same id are one collective seen on different ranks.

    With ``Seq``: (pg, Seq). Without: (pg, op, step, size, order of start among calls of that size). The size is
    part of the key because gloo runs two collectives at once on its threads, so start order alone can pair a
    small broadcast on one rank with a large one on another. An all_to_all's size is its dtype instead
    (``agreed_size``): its ranks send different amounts in one call. An expert-parallel kernel
    (``commnames.EP_KERNELS``) is matched with nothing: it names no group, its EP group is rarely the world, and some
    (pplx's send-only and receive-only halves, DeepEP's low-latency kernels with receive hooks) do not wait for their
    peers, so it gives neither waits nor clock evidence."""
    pg = coll["pg"].astype(object).where(coll["pg"].notna(), "?").astype(str)
    has_seq = coll["seq"].notna().to_numpy()
    size = agreed_size(coll)
    order = coll.groupby([coll["rank"], pg, coll["op"].astype(str), coll["step"], size], sort=False).cumcount()
    keys = pd.DataFrame({
        "pg": pg.to_numpy(),
        "by": np.where(has_seq, "seq", coll["op"].astype(str).to_numpy()),
        "a": np.where(has_seq, coll["seq"].fillna(-1).to_numpy(), coll["step"].to_numpy()).astype(np.int64),
        "size": np.where(has_seq, "", size),
        "b": np.where(has_seq, 0, order.to_numpy()).astype(np.int64),
    })
    alone = _expert_parallel(coll)
    keys.loc[alone, "b"] = -1 - np.flatnonzero(alone)  # a key of its own
    return keys.groupby(["pg", "by", "a", "size", "b"], sort=False).ngroup().to_numpy()


def _expert_parallel(coll: pd.DataFrame) -> np.ndarray:
    """Per row: an expert-parallel kernel (``commnames.ep_kernel_op``), judged once per distinct name."""
    if "name" not in coll or coll.empty:
        return np.zeros(len(coll), dtype=bool)
    codes, names = pd.factorize(coll["name"].astype(object), use_na_sentinel=False)
    return np.array([isinstance(n, str) and ep_kernel_op(n) is not None for n in names], dtype=bool)[codes]


def agreed_size(coll: pd.DataFrame) -> np.ndarray:
    """What every rank's row of one collective agrees on, as text: its bytes ("?" when unknown), but an all_to_all's
    dtype, since ranks send different amounts in one all_to_all (split sizes)."""
    nbytes = coll["bytes"].to_numpy(dtype=float)
    size = np.where(np.isnan(nbytes), "?", np.nan_to_num(nbytes, nan=-1).astype(np.int64).astype(str))
    dtype = "all_to_all " + coll["dtype"].astype(object).where(coll["dtype"].notna(), "?").astype(str)
    return np.where(coll["op"].astype(str).to_numpy() == "all_to_all", dtype.to_numpy(), size).astype(str)


def timing(coll: pd.DataFrame, group: np.ndarray, start_ns: np.ndarray, unreliable=()) -> pd.DataFrame:
    """wait_us, transfer_us and last_arrival per row. NaN where the collective was seen on one rank only, or its
    match is unreliable (listed in ``mismatches``). The last arrival is the rank that started strictly last."""
    end_ns = start_ns + np.rint(coll["dur_us"].to_numpy() * 1e3).astype(np.int64)
    frame = pd.DataFrame({"g": group, "start": start_ns, "rank": coll["rank"].to_numpy()})
    by_group = frame.groupby("g")["start"]
    latest = by_group.transform("max").to_numpy()
    members = frame.groupby("g")["rank"].transform("nunique").to_numpy()
    matched = (members >= 2) & ~np.isin(group, list(unreliable))
    at_latest = frame.assign(at=start_ns == latest).groupby("g")["at"].transform("sum").to_numpy()
    last = (start_ns == latest) & (at_latest == 1) & matched  # a tie has no last arrival
    return pd.DataFrame({
        "match_id": group,
        "matched_ranks": members,
        "matched": matched,
        "wait_us": np.where(matched, (latest - start_ns) / 1e3, np.nan),
        "transfer_us": np.where(matched, np.maximum(end_ns - latest, 0) / 1e3, np.nan),
        "last_arrival": last,
    }, index=coll.index)


def implausible(coll: pd.DataFrame, group: np.ndarray, start_ns: np.ndarray) -> set:
    """Matched groups where some rank would have waited longer than its call lasted: a wrong match, not a wait."""
    frame = pd.DataFrame({"g": group, "start": start_ns, "dur_ns": coll["dur_us"].to_numpy() * 1e3})
    wait = frame.groupby("g")["start"].transform("max") - frame["start"]
    slack = np.maximum(0.05 * frame["dur_ns"], 5_000)  # clock noise on one host
    return set(frame.loc[(wait > frame["dur_ns"] + slack).to_numpy(), "g"].tolist())


def mismatches(coll: pd.DataFrame, group: np.ndarray, expected_ranks, bad_timing=()) -> pd.DataFrame:
    """Collectives that do not line up across ranks: missing on some ranks (never an expert-parallel kernel, which is
    matched with nothing), different sizes or ops at one position, a different op order, or a match whose timing is
    impossible. ``expected_ranks(pg)`` gives the ranks read that belong to a process group."""
    columns = list(MISMATCH_COLUMNS)
    if coll.empty:
        return pd.DataFrame(columns=columns)
    pg = coll["pg"].astype(object).where(coll["pg"].notna(), "?").astype(str)
    frame = coll.assign(g=group, pg_key=pg, agreed=agreed_size(coll))
    by_group = frame.groupby("g", sort=False)
    present = by_group["rank"].nunique()
    wanted = by_group["pg_key"].first().map(lambda key: len(expected_ranks(key)))
    # An expert-parallel kernel is matched with nothing on purpose (``match_keys``): it is not missing elsewhere.
    alone = set(np.unique(group[_expert_parallel(coll)]).tolist())
    odd = set(present.index[present < wanted].difference(list(alone))) | set(bad_timing)
    odd |= set(by_group["agreed"].nunique().pipe(lambda n: n.index[n > 1]))
    odd |= set(by_group["op"].nunique().pipe(lambda n: n.index[n > 1]))
    rows = []
    for g in sorted(odd):
        calls = frame[frame["g"] == g]
        key, op, where = calls["pg_key"].iloc[0], "/".join(sorted(set(calls["op"].astype(str)))), _position(calls.iloc[0])
        missing = sorted(set(expected_ranks(key)) - set(calls["rank"]))
        ranks = sorted(calls["rank"].tolist())
        if missing:
            rows.append({"kind": "missing", "pg": key, "op": op, "position": where, "ranks": missing,
                         "detail": f"{_size(calls)} present on ranks {sorted(set(ranks))} only", "match_id": g})
        if calls["agreed"].nunique() > 1:
            rows.append({"kind": "size", "pg": key, "op": op, "position": where, "ranks": ranks,
                         "detail": ", ".join(f"rank {r}: {b:.0f} B" for r, b in zip(calls["rank"], calls["bytes"])),
                         "match_id": g})
        if calls["op"].astype(str).nunique() > 1:
            rows.append({"kind": "op", "pg": key, "op": op, "position": where, "ranks": ranks,
                         "detail": "different ops at one Seq", "match_id": g})
        if g in bad_timing:
            rows.append({"kind": "timing", "pg": key, "op": op, "position": where, "ranks": ranks,
                         "detail": "a rank would have waited longer than its call lasted: matched wrongly, waits not counted",
                         "match_id": g})
    rows += _order_mismatches(frame) + _size_mismatches(frame[frame["seq"].isna()])
    return pd.DataFrame(rows, columns=columns)


def _size(calls: pd.DataFrame) -> str:
    size = calls["bytes"].iloc[0]
    return "a call of unknown size" if pd.isna(size) else f"a {size:.0f} B call"


def _position(call: pd.Series) -> str:
    if not pd.isna(call["seq"]):
        return f"Seq {int(call['seq'])}"
    return f"step {int(call['step'])}" if call["step"] >= 0 else "outside steps"


def _size_mismatches(frame: pd.DataFrame) -> list[dict]:
    """Without Seq, sizes are part of the match; so compare each step's sizes per op across ranks here."""
    if frame.empty:
        return []
    keys = ["pg_key", "op", "step"]
    # Per (pg, op, step, rank): its calls' agreed sizes, sorted; a group whose ranks' differ is reported.
    sizes = frame.groupby([*keys, "rank"], sort=True, observed=True)["agreed"].agg(lambda v: tuple(sorted(v)))
    differ = sizes.groupby(level=[0, 1, 2], sort=False).nunique()
    rows = []
    for pg, op, step in differ.index[differ.to_numpy() > 1]:
        calls = frame[((frame["pg_key"] == pg) & (frame["op"] == op) & (frame["step"] == step)).to_numpy()]
        sizes = {r: tuple(c.sort_values("start_ns", kind="stable")["bytes"].fillna(-1))
                 for r, c in calls.groupby("rank")}
        detail = "; ".join(f"rank {r}: " + ", ".join("?" if b < 0 else f"{b:.0f}" for b in v) + " B"
                           for r, v in sorted(sizes.items()))
        rows.append({"kind": "size", "pg": pg, "op": str(op), "position": f"step {step}" if step >= 0 else "outside steps",
                     "ranks": sorted(sizes), "detail": detail, "match_id": -1})
    return rows


def _order_mismatches(frame: pd.DataFrame) -> list[dict]:
    """Per process group and step: the first position where ranks issue different ops."""
    if frame.empty:
        return []
    # Each rank's ops per (pg, step) in start order, ties in table order: one pass, not a sort per rank and step.
    ordered = frame[["pg_key", "step", "rank", "start_ns"]].assign(
        op=frame["op"].astype(str).to_numpy(dtype=object)).sort_values("start_ns", kind="stable")
    sequences = ordered.groupby(["pg_key", "step", "rank"], sort=True)["op"].agg(tuple)
    differ = sequences.groupby(level=[0, 1], sort=False).nunique()
    rows = []
    for pg, step in differ.index[differ.to_numpy() > 1]:
        per_rank = sequences.loc[(pg, step)]
        sequences_of = dict(zip(per_rank.index, per_rank.to_numpy()))
        ref_rank = min(sequences_of)
        for rank, ops in sorted(sequences_of.items()):
            ref = sequences_of[ref_rank]
            at = next((i for i, (a, b) in enumerate(zip(ops, ref)) if a != b), None)
            if at is not None:
                rows.append({"kind": "order", "pg": pg, "op": f"{ops[at]} vs {ref[at]}",
                             "position": f"step {step} call {at}", "ranks": [ref_rank, rank],
                             "detail": f"rank {rank} issues {ops[at]} where rank {ref_rank} issues {ref[at]}",
                             "match_id": -1})
    return rows


UNRELIABLE_KINDS = ("size", "op", "timing")


def rank_waits(coll: pd.DataFrame) -> pd.DataFrame:
    """Per rank, over collectives in the window: wall-clock time spent waiting for other ranks and transferring
    (unions, so collectives in flight at once on several threads or streams count once), and how often it arrived last."""
    calls = coll[coll["in_window"].astype(bool) & coll["matched"]]
    rows = []
    for rank, mine in calls.groupby("rank"):
        start, wait = mine["start_us"].to_numpy(), mine["wait_us"].to_numpy()
        latest = start + wait
        rows.append({"rank": rank, "comm_wait_us": _union_us(start, latest),
                     "comm_transfer_us": _union_us(latest, latest + mine["transfer_us"].to_numpy()),
                     "last_arrivals": int(mine["last_arrival"].sum())})
    return pd.DataFrame(rows, columns=["rank", "comm_wait_us", "comm_transfer_us", "last_arrivals"]).astype(
        {"comm_wait_us": np.float64, "comm_transfer_us": np.float64})  # typed with no rows too


def _union_us(start_us: np.ndarray, end_us: np.ndarray) -> float:
    """Covered length (us) of intervals given in float microseconds, merged at ns resolution."""
    return iv.total(*iv.merge(np.rint(start_us * 1e3), np.rint(end_us * 1e3))) / 1e3


def arrival_evidence(coll: pd.DataFrame, steps_in_window: int, alpha: float = STRAGGLER_P) -> pd.DataFrame:
    """Per rank with matched collectives in the window: how often it arrived last against chance, the binomial
    p-value of that, the waiting it caused (per step, the mean over the other ranks of their wall-clock wait in the
    collectives this rank was last to), and a verdict. The bar is twice chance, or three times in four with two ranks
    (where twice chance would mean every call):

    - ``straggler``: over the bar, p < ``alpha`` over at least ``MIN_TESTED`` calls, and others waited for it;
    - ``suspected``: over the bar and others waited for it, but the test does not pass (too few calls, or p too high);
    - ``none``.
    """
    columns = ["rank", "matched", "last_arrivals", "last_share", "expected_share", "p_value", "caused_wait_us_per_step"]
    calls = coll[coll["in_window"].astype(bool) & coll["matched"]]
    if calls.empty:
        return pd.DataFrame(columns=columns + ["verdict"])
    last_of = calls[calls["last_arrival"]].set_index("match_id")["rank"]
    waited_for = calls["match_id"].map(last_of)
    rows = []
    for rank, mine in calls.groupby("rank"):
        n = len(mine)
        k = int(mine["last_arrival"].sum())
        expected = float((1.0 / mine["matched_ranks"]).sum())
        others = calls[(waited_for == rank).to_numpy() & (calls["rank"] != rank).to_numpy()]
        waits = [_union_us(o["start_us"].to_numpy(), (o["start_us"] + o["wait_us"]).to_numpy())
                 for _, o in others.groupby("rank")]
        caused = float(np.mean(waits)) if waits else 0.0
        rows.append({"rank": rank, "matched": n, "last_arrivals": k, "last_share": k / n,
                     "expected_share": expected / n, "p_value": _binomial_tail(n, k, expected / n),
                     "caused_wait_us_per_step": caused / max(steps_in_window, 1)})
    table = pd.DataFrame(rows, columns=columns)
    bar = np.minimum(2 * table["expected_share"], (1 + table["expected_share"]) / 2)
    over = (table["last_share"] >= bar) & (table["caused_wait_us_per_step"] > 0)
    tested = (table["p_value"] < alpha) & (table["matched"] >= MIN_TESTED)
    table["verdict"] = np.where(over & tested, "straggler", np.where(over, "suspected", "none"))
    return table.sort_values("caused_wait_us_per_step", ascending=False, ignore_index=True, kind="stable")


def verdict(evidence: pd.DataFrame, which: str) -> pd.DataFrame:
    """The rows of ``arrival_evidence`` with one verdict (``straggler`` or ``suspected``), without the verdict column."""
    return evidence[evidence["verdict"] == which].drop(columns="verdict").reset_index(drop=True)


def _binomial_tail(n: int, k: int, p: float) -> float:
    """P[X >= k] for X ~ Binomial(n, p), summed in log space."""
    if k <= 0:
        return 1.0
    if p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(p) + (n - i) * math.log1p(-p)
            for i in range(k, n + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(v - top) for v in logs))


def imbalance(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step in the window: slowest and median step time across ranks, their ratio, and the slowest rank."""
    window = steps[steps["in_window"].astype(bool)]
    columns = list(IMBALANCE_COLUMNS)
    if window.empty:
        return pd.DataFrame(columns=columns)
    grouped = window.groupby("step")
    slowest = window.loc[grouped["step_us"].idxmax(), ["step", "rank"]].set_index("step")["rank"]
    out = pd.DataFrame({
        "ranks": grouped["rank"].nunique(),
        "max_step_us": grouped["step_us"].max(),
        "median_step_us": grouped["step_us"].median(),
    })
    out["imbalance"] = out["max_step_us"] / out["median_step_us"]
    out["slowest_rank"] = slowest
    return out.reset_index()[columns]


def expected_ranks(metas) -> Callable[[str], set]:
    """pg -> the ranks read (``metas``: their ``RankMeta``) that belong to it: from distributedInfo.pg_config where it
    lists the group's ranks, else every rank read (the default group, or a group the trace does not describe)."""
    read = {m.rank for m in metas}
    members: dict[str, set] = {}
    for m in metas:
        for c in m.pg_config:
            if isinstance(c, dict) and "pg_name" in c and isinstance(c.get("ranks"), list):
                members.setdefault(str(c["pg_name"]), set()).update(int(x) for x in c["ranks"])
    return lambda pg: (members[pg] & read) if pg in members else read
