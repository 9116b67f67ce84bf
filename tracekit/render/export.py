"""A run as one Trace Event Format document for ui.perfetto.dev: every rank its own process on the corrected clock.

``export_trace(summary, events)`` is pure: the Summary and each rank's events table (``rank_events`` reads them again
from the files the Summary lists) in, a JSON-ready dict out. Writing the file is the CLI's (``tracekit export``).

Per rank (``pid`` = rank, named by ``M`` metadata events), times in us from the run's origin on the corrected clock
(``Summary.clock_shift_ns`` and ``run.origin_ns``, as every Summary table):
  - every complete event of the rank's trace (host ops, runtime calls, kernels, memcpys, gloo calls), one thread
    (``tid``) per trace thread or GPU stream, with the args tracekit reads (correlation, External id, stream and the
    collective's name, group, Seq, sizes), so the reader reads the export back (one process per file, see below);
  - ``collectives`` threads: each collective as a slice with its ``wait`` and ``transfer`` parts (matched ones),
    and flow arrows (``s``/``f``, ``bp: "e"``) from each rank's call to the next rank to arrive at the same call;
  - ``critical path`` threads: the path's events (``summary.critical_path_events``), flow arrows from each to the
    next along the path of its step (across ranks);
    (overlapping slices, such as concurrent gloo calls, go to numbered sub-threads: Perfetto needs them to nest);
  - counters (``C``): ``idle`` by cause (1 while a gap of that cause lasts, else 0) and ``exposed comm`` (us per
    step, at the step's start). Unknown values (NaN) are left out, never written as 0.
The reader takes one rank per file: ``split_ranks`` gives one document per process for that.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tracekit.read.categories import DEVICE_CATEGORIES
from tracekit.read.reader import read_rank
from tracekit.summary.model import Summary

COLLECTIVES_TID = 1_000_000  # the synthetic threads (+ a sub-thread number), above any dense trace thread number
CRITICAL_PATH_TID = 2_000_000
_COMM_ARGS = {"collective": "Collective name", "pg": "Process Group Name", "seq": "Seq", "in_nelems": "In msg nelems",
              "out_nelems": "Out msg nelems", "dtype": "dtype", "group_size": "Group size"}


def rank_events(summary: Summary) -> dict[int, tuple[pd.DataFrame, pd.DataFrame]]:
    """Each rank's (events, comm_args) read again from the trace files the Summary lists (``run.files``)."""
    out = {}
    for f in summary.run.files:
        meta, events, comm_args = read_rank(f.path, default_rank=f.rank)
        out[meta.rank] = (events, comm_args)
    return out


def export_trace(summary: Summary, events: dict[int, tuple[pd.DataFrame, pd.DataFrame]]) -> dict:
    """The Trace Event Format document (``traceEvents``, ``displayTimeUnit``, and ``tracekit``: per rank its
    backend, world size and host, which the reader needs when a rank is read back from its own file)."""
    origin = int(summary.run.origin_ns)
    out: list[dict] = []
    for rank in sorted(events):
        ev, comm_args = events[rank]
        out += _metadata(rank, summary)
        out += _trace_events(ev, comm_args, rank, summary.clock_shift_ns(rank) + origin)
    out += _collectives(summary.collectives)
    out += _critical_path(summary.critical_path_events)
    out += _counters(summary)
    return {"traceEvents": out, "displayTimeUnit": "ms", "tracekit": {"ranks": _rank_facts(summary, events)}}


def split_ranks(trace: dict) -> dict[int, dict]:
    """One Kineto-like document per process of an export (its ``distributedInfo`` from the export's facts): the
    trace's own events, without tracekit's derived ones (``cat`` ``tracekit.*``: collectives, critical path, flows),
    which would otherwise be read back as events of the rank."""
    facts = {r["rank"]: r for r in trace.get("tracekit", {}).get("ranks", [])}
    docs: dict[int, dict] = {}
    for e in trace["traceEvents"]:
        if not str(e.get("cat", "")).startswith("tracekit."):
            docs.setdefault(int(e["pid"]), []).append(e)
    return {rank: {"schemaVersion": 1, "traceEvents": evs, "host_name": facts.get(rank, {}).get("host_name"),
                   "distributedInfo": {"rank": rank, "backend": facts.get(rank, {}).get("backend"),
                                       "world_size": facts.get(rank, {}).get("world_size")}}
            for rank, evs in docs.items()}


def _rank_facts(summary: Summary, events) -> list[dict]:
    offsets = summary.run.clock_offsets
    hosts = dict(zip(offsets["rank"].tolist(), offsets["host"].tolist()))
    return [{"rank": int(r), "backend": summary.run.backend, "world_size": summary.run.world_size,
             "host_name": hosts.get(r)} for r in sorted(events)]


def _metadata(rank: int, summary: Summary) -> list[dict]:
    def m(name, tid, args):
        return {"ph": "M", "name": name, "pid": rank, "tid": tid, "ts": 0, "args": args}

    return [m("process_name", 0, {"name": f"rank {rank}"}), m("process_sort_index", 0, {"sort_index": rank})]


def _trace_events(ev: pd.DataFrame, comm_args: pd.DataFrame, rank: int, delta_ns: int) -> list[dict]:
    """The rank's complete events with usable durations, one dense ``tid`` per (pid, tid) lane, host threads first."""
    ok = ev["dur_ns"].to_numpy() >= 0
    ev = ev.loc[ok]
    device = ev["cat"].astype(str).isin(DEVICE_CATEGORIES).to_numpy()
    lane_pid, lane_tid = ev["pid"].astype(str).to_numpy(), ev["tid"].astype(str).to_numpy()
    lanes = pd.DataFrame({"device": device, "pid": lane_pid, "tid": lane_tid})
    keys = lanes.drop_duplicates().sort_values(["device", "pid", "tid"], ignore_index=True)
    keys["lane"] = np.arange(1, len(keys) + 1)
    lane = lanes.merge(keys, on=["device", "pid", "tid"], how="left")["lane"].to_numpy()
    names = [{"ph": "M", "name": "thread_name", "pid": rank, "tid": int(t), "ts": 0,
              "args": {"name": f"{'stream' if d else 'thread'} {tid} (pid {pid})"}}
             for t, d, pid, tid in zip(keys["lane"], keys["device"], keys["pid"], keys["tid"])]
    ts = np.round((ev["ts_ns"].to_numpy() - delta_ns) / 1e3, 3).tolist()
    cols = (ev["cat"].astype(str).tolist(), ev["name"].astype(str).tolist(), lane.tolist(), ts,
            (ev["dur_ns"].to_numpy() / 1e3).tolist(), _args(ev, comm_args, np.flatnonzero(ok)))
    return names + [{"ph": "X", "cat": c, "name": n, "pid": rank, "tid": t, "ts": s, "dur": d, "args": a}
                    for c, n, t, s, d, a in zip(*cols)]


def _args(ev: pd.DataFrame, comm_args: pd.DataFrame, rows: np.ndarray) -> list[dict]:
    """Per event the args the reader reads: ids where known (>= 0), a device event's stream, a call's collective."""
    cols = {"correlation": ev["correlation"].to_numpy(), "External id": ev["external_id"].to_numpy(),
            "stream": np.where(ev["cat"].astype(str).isin(DEVICE_CATEGORIES).to_numpy(), ev["stream"].to_numpy(), -1)}
    obj = {k: pd.Series(v).astype(object).where(v >= 0, None).tolist() for k, v in cols.items()}
    if len(comm_args):
        at = pd.Series(np.arange(len(comm_args)), index=comm_args["row"].to_numpy())
        pos = at.reindex(rows).to_numpy()
        has = ~np.isnan(pos)
        for col, key in _COMM_ARGS.items():
            values = np.full(len(rows), None, dtype=object)
            src = comm_args[col].astype(object).where(comm_args[col].notna(), None).to_numpy()
            values[has] = src[pos[has].astype(int)]
            obj[key] = values.tolist()
    keys = list(obj)
    return [{k: v for k, v in zip(keys, vals) if v is not None} for vals in zip(*obj.values())]


def _collectives(coll: pd.DataFrame) -> list[dict]:
    """Each call as a slice with its wait and transfer parts; flows from each rank's call to the next arrival's."""
    if coll.empty:
        return []
    c = coll.reset_index(drop=True)
    start, dur = c["start_us"].to_numpy(float), c["dur_us"].to_numpy(float)
    wait, rank = c["wait_us"].to_numpy(float), c["rank"].to_numpy()
    tid = COLLECTIVES_TID + _sublanes(rank, start, start + dur)
    base = {"ph": "X", "cat": "tracekit.collective"}
    out = [{**base, "name": str(op), "pid": int(r), "tid": int(t), "ts": float(s), "dur": float(d),
            "args": {"match_id": int(m), "wait_us": None if np.isnan(w) else float(w)}}
           for op, r, t, s, d, m, w in zip(c["op"], rank, tid, start, dur, c["match_id"], wait)]
    part = np.flatnonzero(c["matched"].to_numpy(dtype=bool) & ~np.isnan(wait))
    for name, s, d in (("wait", start[part], np.minimum(wait[part], dur[part])),
                       ("transfer", start[part] + np.minimum(wait[part], dur[part]),
                        np.maximum(dur[part] - wait[part], 0))):
        out += [{**base, "name": name, "pid": int(r), "tid": int(t), "ts": float(a), "dur": float(b)}
                for r, t, a, b in zip(rank[part], tid[part], s, d)]
    m = pd.DataFrame({"g": c["match_id"], "rank": rank, "tid": tid, "t": start}).loc[c["matched"].to_numpy(dtype=bool)]
    m = m.sort_values(["g", "t"], kind="stable")
    return (out + _thread_names(rank, tid, "collectives (wait | transfer)")
            + _flows(m["g"].to_numpy(), m["rank"].to_numpy(), m["tid"].to_numpy(), m["t"].to_numpy(), "collective", 0))


def _critical_path(path: pd.DataFrame) -> list[dict]:
    if path.empty:
        return []
    p = path.sort_values(["step", "start_us", "end_us"], kind="stable", ignore_index=True)
    start, end, rank = p["start_us"].to_numpy(float), p["end_us"].to_numpy(float), p["rank"].to_numpy()
    tid = CRITICAL_PATH_TID + _sublanes(rank, start, np.maximum(end, start))
    out = [{"ph": "X", "cat": "tracekit.critical_path", "name": str(n), "pid": int(r), "tid": int(t), "ts": float(s),
            "dur": float(max(e - s, 0)), "args": {"step": int(st), "kind": str(k), "category": str(cat)}}
           for n, r, t, s, e, st, k, cat in zip(p["name"], rank, tid, start, end, p["step"], p["kind"], p["category"])]
    return (out + _thread_names(rank, tid, "critical path")
            + _flows(p["step"].to_numpy(), rank, tid, start, "critical path", 1))


def _sublanes(rank: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per row, a sub-thread (0, 1, ...) of its rank on which no two slices overlap: Perfetto keeps slices of one
    thread only when they nest, and concurrent collectives (gloo's threads) or a kernel that starts before its
    launch call ends would not. Greedy interval partitioning: a loop over these derived rows (collectives, path
    events), not over the trace's events."""
    import heapq

    lane = np.zeros(len(start), dtype=np.int64)
    free: dict[int, list] = {}  # per rank: heap of (end, sub-thread) of the last slice on each sub-thread
    for i in np.lexsort((end, start, rank)):
        heap = free.setdefault(int(rank[i]), [])
        if heap and heap[0][0] <= start[i]:
            _, k = heapq.heappop(heap)
        else:
            k = len(heap)
        lane[i] = k
        heapq.heappush(heap, (end[i], k))
    return lane


def _thread_names(rank: np.ndarray, tid: np.ndarray, name: str) -> list[dict]:
    used = pd.DataFrame({"pid": rank, "tid": tid}).drop_duplicates()
    base = int(tid.min()) - int(tid.min()) % 1_000_000 if len(tid) else 0
    return [{"ph": "M", "name": "thread_name", "pid": int(p), "tid": int(t), "ts": 0,
             "args": {"name": name if t == base else f"{name} ({t - base + 1})"}}
            for p, t in zip(used["pid"], used["tid"])]


def _flows(group: np.ndarray, rank: np.ndarray, tid: np.ndarray, ts: np.ndarray, name: str, kind: int) -> list[dict]:
    """A flow (``s`` then ``f``) from each row to the next of the same group (rows sorted by group, then time).
    Ids: 2 x (row index) + kind, unique across the two kinds."""
    link = np.flatnonzero(group[1:] == group[:-1])
    out = []
    for i in link:
        common = {"cat": f"tracekit.{name}", "name": name, "id": int(2 * i + kind), "bp": "e"}
        out += [{**common, "ph": "s", "pid": int(rank[i]), "tid": int(tid[i]), "ts": float(ts[i])},
                {**common, "ph": "f", "pid": int(rank[i + 1]), "tid": int(tid[i + 1]), "ts": float(ts[i + 1])}]
    return out


def _counters(summary: Summary) -> list[dict]:
    """``idle``: per cause, 1 from a gap's start to its end; ``exposed comm``: us per step at the step's start."""
    out = []
    g = summary.gaps
    if not g.empty:
        for value, at in ((1, g["start_us"]), (0, g["start_us"] + g["dur_us"])):
            out += [{"ph": "C", "name": "idle", "pid": r, "tid": 0, "ts": t, "args": {c: value}}
                    for r, t, c in zip(g["rank"].astype(int).tolist(), at.to_numpy(float).tolist(),
                                       g["cause"].astype(str).tolist())]
    s = summary.steps
    if not s.empty:
        known = s[s["exposed_comm_us"].notna()]
        out += [{"ph": "C", "name": "exposed comm", "pid": int(r), "tid": 0, "ts": float(t), "args": {"us": float(v)}}
                for r, t, v in zip(known["rank"], known["start_us"], known["exposed_comm_us"])]
    return out


def write(trace: dict, path: str | Path, force: bool = False) -> None:
    """Write the document as JSON; an existing file is replaced only with ``force`` (else ``FileExistsError``)."""
    import msgspec

    with open(path, "wb" if force else "xb") as f:
        f.write(msgspec.json.encode(trace))
