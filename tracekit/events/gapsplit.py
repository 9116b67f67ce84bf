"""How each idle gap's time splits between causes: what the host thread that launches the device's next work was
doing over it, interval by interval.

Every recorded host span of a rank gets a cause from its name and category (``causes``):

  alloc      an allocation call (``causes.ALLOC_CALL``: cudaMalloc, cudaMallocAsync, cudaHostAlloc, hipMalloc, ...)
  sync       a call that blocks until the device drains (``causes.SYNC_CALL``; allocation calls are ``alloc``)
  comm_wait  a host-side collective call or a wait for one (``causes.COMM_CALL``)
  data       a DataLoader ``__next__`` (``causes.DATA_LOADER``)
  host       any other operator (``cpu_op``), runtime or driver call, or Python function: recorded host work
Other annotations (``ProfilerStep#N``, ``record_function`` ranges) are labels, not work: they explain nothing.

At each instant the innermost open span among the first four causes wins (two open at one depth: in that order);
a plain host op inside one is that call's work (the collate ops inside a DataLoader ``__next__`` are data loading,
the copy inside ``.item()`` is the sync). Where none is open the time is ``host`` if some host work is recorded
there, else ``host_unrecorded`` (Python between ops, or what the profiler did not record): never a neighbour's.

Which thread: on a GPU rank, the one whose runtime call launched the device event that ends the gap (where that
link is unknown, the rank's main launching thread). A gap whose next work was launched before the gap began (its
launch call had returned, or a graph launch had already started some of its kernels) did not wait on the host: it is
``other`` whole (a cross-stream dependency, a wait on an event), as is a gap on a rank where
no host thread is known (no launch links, no host work recorded). On a CPU-only rank the
training thread is the device and its own launcher: a gap is time it runs no operator, split by the annotations and
Python functions open on it (nothing open: ``host_unrecorded``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit import intervals as iv
from tracekit.events import causes
from tracekit.events.optree import op_tree
from tracekit.read.categories import DEVICE_CATEGORIES, RUNTIME_CATEGORIES

SPECIFIC = ("alloc", "sync", "comm_wait", "data")  # the causes a call names; innermost wins, then this order
_GENERIC = len(SPECIFIC)                            # the code of plain recorded host work
_WORK_CATEGORIES = ("cpu_op", "python_function", *RUNTIME_CATEGORIES)
_PATTERNS = (causes.ALLOC_CALL, causes.SYNC_CALL, causes.COMM_CALL, causes.DATA_LOADER)


def split_gaps(gaps: pd.DataFrame, dev: pd.DataFrame, events: pd.DataFrame, ops: pd.DataFrame | None,
               on_gpu: bool) -> pd.DataFrame:
    """Per gap (gaps: start_ns, dur_us), its time (us) per cause (``idle_<cause>_us`` for ``causes.CAUSES``, adding
    up to ``dur_us``) and ``cause``, the largest (ties: the first in ``CAUSES``). ``dev``: the window's device events
    (start_ns, launch_ns, launch_row); ``events``: the rank's classified events; ``ops``: its ops table (the host ops
    the events table leaves out on a GPU rank), None for none."""
    columns = [f"idle_{c}_us" for c in causes.CAUSES]
    if gaps.empty:
        return pd.DataFrame({"cause": pd.Series(dtype=object), **{c: pd.Series(dtype=np.float64) for c in columns}})
    gs = gaps["start_ns"].to_numpy().astype(np.int64)
    ge = gs + np.rint(gaps["dur_us"].to_numpy() * 1e3).astype(np.int64)
    thread, launched_before = _gap_threads(gs, ge, dev, events, ops, on_gpu)
    split = _split_on_threads(gs, ge, thread, _host_spans(events, ops, set(thread) - {""}))
    other = launched_before | (thread == "")  # no host thread to read: the trace does not say why
    split[other] = 0
    split[other, causes.CAUSES.index("other")] = (ge - gs)[other]
    out = pd.DataFrame(split / 1e3, columns=columns)
    out.insert(0, "cause", np.asarray(causes.CAUSES, dtype=object)[np.argmax(split, axis=1)])
    return out


def _split_on_threads(gs: np.ndarray, ge: np.ndarray, thread: np.ndarray, spans: pd.DataFrame) -> np.ndarray:
    """ns per gap (rows) and cause (``CAUSES`` columns) from the spans on each gap's thread ('' : none)."""
    out = np.zeros((len(gs), len(causes.CAUSES)), dtype=np.int64)
    spans = spans[spans["thread"].isin(np.unique(thread))]
    lo, hi = int(gs.min()), int(ge.max())
    start, end = np.clip(spans["start_ns"].to_numpy(), lo, hi), np.clip(spans["end_ns"].to_numpy(), lo, hi)
    keep = end > start
    spans, start, end = spans[keep], start[keep], end[keep]
    # Nesting from the spans as recorded: cut to [lo, hi), a call and the one it holds can become equal spans.
    depth = _depths(spans)
    # Every thread on one axis: thread k's time t sits at k * period + (t - lo), so one interval set holds them all.
    codes, names = pd.factorize(pd.Index(np.concatenate([thread, spans["thread"].to_numpy()]).astype(str)))
    period = hi - lo + 1
    gap_at = codes[:len(gs)].astype(np.int64) * period - lo
    span_at = codes[len(gs):].astype(np.int64) * period - lo
    start, end, code = start + span_at, end + span_at, spans["code"].to_numpy()
    won = _innermost(start, end, code, depth)
    claimed = iv.merge(np.concatenate([s for s, _ in won]), np.concatenate([e for _, e in won]))
    work = iv.subtract(iv.merge(start[code == _GENERIC], end[code == _GENERIC]), claimed)
    a0, a1 = gs + gap_at, ge + gap_at
    for c, covered in zip(SPECIFIC, won):
        out[:, causes.CAUSES.index(c)] = iv.covered_within(covered, a0, a1)
    out[:, causes.CAUSES.index("host")] = iv.covered_within(work, a0, a1)
    out[:, causes.CAUSES.index("host_unrecorded")] = (ge - gs) - out.sum(axis=1)
    return out


def _depths(spans: pd.DataFrame) -> np.ndarray:
    """Per span, how many spans of ``SPECIFIC`` causes on its thread hold it (-1 for plain host work)."""
    mine = (spans["code"] < _GENERIC).to_numpy()
    depth = np.full(len(spans), -1, dtype=np.int64)
    if mine.any():
        tid = pd.factorize(spans["thread"].to_numpy()[mine])[0]
        depth[mine] = op_tree(tid, spans["start_ns"].to_numpy()[mine], spans["end_ns"].to_numpy()[mine])[1]
    return depth


def _innermost(start: np.ndarray, end: np.ndarray, code: np.ndarray, depth: np.ndarray) -> list[iv.Intervals]:
    """Per cause of ``SPECIFIC``, the time where it is the innermost open span of its code (disjoint sets); ``depth``:
    ``_depths``."""
    mine = code < _GENERIC
    s, e, c, depth = start[mine], end[mine], code[mine], depth[mine]
    won = [[] for _ in SPECIFIC]
    claimed = iv.merge([], [])
    for d in range(int(depth.max(initial=0)), -1, -1):  # deepest first: what it holds is no longer its parent's
        for i in range(len(SPECIFIC)):
            at = (depth == d) & (c == i)
            if at.any():
                part = iv.subtract(iv.merge(s[at], e[at]), claimed)
                won[i].append(part)
                claimed = iv.merge(np.concatenate([claimed[0], part[0]]), np.concatenate([claimed[1], part[1]]))
    return [iv.merge(np.concatenate([p[0] for p in parts] + [np.empty(0, np.int64)]),
                     np.concatenate([p[1] for p in parts] + [np.empty(0, np.int64)])) for parts in won]


def _host_spans(events: pd.DataFrame, ops: pd.DataFrame | None, threads: set | None) -> pd.DataFrame:
    """Every recorded host span with a cause on ``threads`` (None: all): thread (text), start_ns, end_ns, code
    (index of ``SPECIFIC``, or ``_GENERIC`` for plain host work). From the events table (runtime calls, the host ops
    it keeps, annotations) and, for the operators it leaves out on a GPU rank, the ops table's ``cpu_op`` rows (a
    row in both tables counts once: equal spans of one cause nest)."""
    host = (events["kind"].isna() & (events["dur_ns"] >= 0) & ~events["cat"].isin(DEVICE_CATEGORIES)).to_numpy()
    code = _name_codes(events["name"])
    code = np.where(code < 0, np.where(events["cat"].isin(_WORK_CATEGORIES).to_numpy(), _GENERIC, -1), code)
    parts = [_spans(events, host & (code >= 0) & _on(events["tid"], threads), code)]
    if ops is not None and len(ops):
        op_rows = ops["cpu_op"].to_numpy(dtype=bool) & (ops["dur_ns"].to_numpy() >= 0) & _on(ops["tid"], threads)
        op_code = _name_codes(ops["name"])
        parts.append(_spans(ops, op_rows, np.where(op_code < 0, _GENERIC, op_code)))
    return pd.concat(parts, ignore_index=True)


def _spans(table: pd.DataFrame, keep: np.ndarray, code: np.ndarray) -> pd.DataFrame:
    rows = np.flatnonzero(keep)
    start = table["ts_ns"].to_numpy()[rows]
    return pd.DataFrame({"thread": _tid_text(table["tid"], rows), "start_ns": start,
                         "end_ns": start + table["dur_ns"].to_numpy()[rows], "code": code[rows].astype(np.int8)})


def _name_codes(name: pd.Series) -> np.ndarray:
    """Per row, the index in ``SPECIFIC`` of the first pattern its name matches, -1 for none (asked once per
    distinct name)."""
    names = name.astype("category") if not isinstance(name.dtype, pd.CategoricalDtype) else name
    distinct = names.cat.categories.astype(str)
    per_name = np.full(len(distinct) + 1, -1, dtype=np.int8)  # the last: no name (code -1)
    for i in range(len(_PATTERNS) - 1, -1, -1):  # the first pattern that matches wins
        per_name[:-1][[_PATTERNS[i].search(n) is not None for n in distinct]] = i
    return per_name[names.cat.codes.to_numpy()]


def _categorical(tid: pd.Series) -> pd.Series:
    return tid if isinstance(tid.dtype, pd.CategoricalDtype) else tid.astype(str).astype("category")


def _tid_text(tid: pd.Series, rows: np.ndarray) -> np.ndarray:
    """The thread id of rows ``rows`` as text, '' for none (no per-row string is made for the other rows)."""
    tid = _categorical(tid)
    texts = np.append(tid.cat.categories.astype(str).to_numpy(dtype=object), "")
    return texts[tid.cat.codes.to_numpy()[rows]]


def _on(tid: pd.Series, threads: set | None) -> np.ndarray:
    """Per row, whether its thread (as text) is one of ``threads`` (None: every row)."""
    if threads is None:
        return np.ones(len(tid), dtype=bool)
    tid = _categorical(tid)
    wanted = np.append(np.isin(tid.cat.categories.astype(str).to_numpy(dtype=object), list(threads)), False)
    return wanted[tid.cat.codes.to_numpy()]


def _gap_threads(gs, ge, dev, events, ops, on_gpu) -> tuple[np.ndarray, np.ndarray]:
    """(the host thread each gap is split on, '' where none is known; whether its next work was launched before
    it began)."""
    main = _main_thread(dev, events, ops, on_gpu)
    if not on_gpu:
        return np.full(len(gs), main, dtype=object), np.zeros(len(gs), dtype=bool)
    nxt = causes.next_work(dev, ge)
    launch_row = dev["launch_row"].to_numpy()[nxt]
    linked = launch_row >= 0
    thread = np.where(linked, _tid_text(events["tid"], np.maximum(launch_row, 0)), main)
    # Launched before the gap: its launch call had returned when the gap began, or the call (a graph launch) had
    # already started some of its work on the device before it. A call still running at the gap's start is the
    # host's launch: its time in the gap is the launching thread's.
    call_end = dev["launch_ns"].to_numpy()[nxt] + np.maximum(events["dur_ns"].to_numpy()[np.maximum(launch_row, 0)], 0)
    rows = dev["launch_row"].to_numpy()
    first_start = pd.Series(dev["start_ns"].to_numpy()[rows >= 0]).groupby(rows[rows >= 0]).min()
    delivering = first_start.reindex(launch_row).to_numpy() < gs
    return thread.astype(object), linked & ((call_end <= gs) | delivering)


def _main_thread(dev: pd.DataFrame, events: pd.DataFrame, ops: pd.DataFrame | None, on_gpu: bool) -> str:
    """A GPU rank's thread that launches the most device events, a CPU rank's thread that runs the most operators
    (the training thread); without either, the thread with the most recorded host work; '' without any."""
    if on_gpu:
        rows = dev["launch_row"].to_numpy()
        picked = _tid_text(events["tid"], rows[rows >= 0])
    else:
        picked = _tid_text(events["tid"], np.flatnonzero((events["kind"] == "compute").to_numpy()))
    if len(picked):
        return str(pd.Series(picked).mode().iloc[0])
    spans = _host_spans(events, ops, None)
    work = spans[spans["code"] == _GENERIC]
    if work.empty:
        return ""
    return str((work["end_ns"] - work["start_ns"]).groupby(work["thread"]).sum().idxmax())
