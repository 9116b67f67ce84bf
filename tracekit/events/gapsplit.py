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
    vocab = _thread_vocab(events, ops)
    thread, launched_before = _gap_threads(gs, ge, dev, events, ops, on_gpu, vocab)
    axis = _Axis(gs, ge, thread)
    split = _split_on_threads(gs, ge, thread, _host_spans(events, ops, vocab, np.unique(thread[thread != 0]), axis),
                              axis)
    other = launched_before | (thread == 0)  # no host thread to read: the trace does not say why
    split[other] = 0
    split[other, causes.CAUSES.index("other")] = (ge - gs)[other]
    out = pd.DataFrame(split / 1e3, columns=columns)
    out.insert(0, "cause", np.asarray(causes.CAUSES, dtype=object)[np.argmax(split, axis=1)])
    return out


class _Axis:
    """Every gap's thread on one time axis: thread k's time t sits at k * period + (t - lo), cut to [lo, hi] (the
    gaps' extent), so one interval set holds the spans of every thread."""

    def __init__(self, gs: np.ndarray, ge: np.ndarray, thread: np.ndarray) -> None:
        self.lo, self.hi = int(gs.min()), int(ge.max())
        self.threads = np.unique(thread)
        self.period = self.hi - self.lo + 1
        _, self.a0, self.a1 = self.place(thread, gs, ge)  # the gaps, each on its thread
        self.windows = iv.merge(self.a0, self.a1)

    def place(self, thread: np.ndarray, start: np.ndarray, end: np.ndarray):
        """(whether each span's thread is on the axis, its start and end there)."""
        at = np.searchsorted(self.threads, thread)
        on = self.threads[np.minimum(at, len(self.threads) - 1)] == thread
        offset = at.astype(np.int64) * self.period - self.lo
        return on, np.clip(start, self.lo, self.hi) + offset, np.clip(end, self.lo, self.hi) + offset

    def reaching(self, thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Per span, whether it lies on a gap's thread and reaches into a gap there. Only such a span can add to
        a gap; whatever holds it reaches there too, so the nesting of the spans kept is the nesting of all."""
        on, s, e = self.place(thread, start, end)
        return on & (e > s) & _reaches_into(s, e, *self.windows)


def _split_on_threads(gs: np.ndarray, ge: np.ndarray, thread: np.ndarray, spans: pd.DataFrame,
                      axis: _Axis) -> np.ndarray:
    """ns per gap (rows) and cause (``CAUSES`` columns) from the spans on each gap's thread (codes of
    ``_thread_vocab``; 0: none); ``axis``: the gaps' ``_Axis``."""
    out = np.zeros((len(gs), len(causes.CAUSES)), dtype=np.int64)
    span_thread, raw_start, raw_end = (spans[c].to_numpy() for c in ("thread", "start_ns", "end_ns"))
    keep = axis.reaching(span_thread, raw_start, raw_end)
    _, start, end = axis.place(span_thread[keep], raw_start[keep], raw_end[keep])
    code = spans["code"].to_numpy()[keep]
    # Nesting from the spans as recorded: cut to [lo, hi), a call and the one it holds can become equal spans.
    depth = _depths(span_thread[keep], raw_start[keep], raw_end[keep], code)
    del keep, spans, span_thread, raw_start, raw_end
    won = _innermost(start, end, code, depth)
    claimed = iv.merge(np.concatenate([s for s, _ in won]), np.concatenate([e for _, e in won]))
    work = iv.subtract(iv.merge(start[code == _GENERIC], end[code == _GENERIC]), claimed)
    for c, covered in zip(SPECIFIC, won):
        out[:, causes.CAUSES.index(c)] = iv.covered_within(covered, axis.a0, axis.a1)
    out[:, causes.CAUSES.index("host")] = iv.covered_within(work, axis.a0, axis.a1)
    out[:, causes.CAUSES.index("host_unrecorded")] = (ge - gs) - out.sum(axis=1)
    return out


def _reaches_into(start: np.ndarray, end: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Per span [start, end), whether it overlaps one of the disjoint sorted windows [w0, w1)."""
    if len(w0) == 0:
        return np.zeros(len(start), dtype=bool)
    i = np.searchsorted(w1, start, side="right")  # the first window ending after the span starts
    return (i < len(w0)) & (w0[np.minimum(i, len(w0) - 1)] < end)


def _depths(thread: np.ndarray, start: np.ndarray, end: np.ndarray, code: np.ndarray) -> np.ndarray:
    """Per span, how many spans of ``SPECIFIC`` causes on its thread hold it (-1 for plain host work)."""
    mine = code < _GENERIC
    depth = np.full(len(code), -1, dtype=np.int64)
    if mine.any():
        tid = pd.factorize(thread[mine])[0]
        depth[mine] = op_tree(tid, start[mine], end[mine])[1]
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


def _host_spans(events: pd.DataFrame, ops: pd.DataFrame | None, vocab: pd.Index,
                threads: np.ndarray | None, axis: _Axis | None = None) -> pd.DataFrame:
    """Every recorded host span with a cause on ``threads`` (codes of ``vocab``, ``_thread_vocab``; None: all)
    and, given the gaps' ``axis``, reaching into a gap (a large trace has millions of spans, most in none):
    thread (its code), start_ns, end_ns, code
    (index of ``SPECIFIC``, or ``_GENERIC`` for plain host work). From the events table (runtime calls, the host ops
    it keeps, annotations) and, for the operators it leaves out on a GPU rank, the ops table's ``cpu_op`` rows (a
    row in both tables counts once: equal spans of one cause nest)."""
    host = (events["kind"].isna() & (events["dur_ns"] >= 0) & ~events["cat"].isin(DEVICE_CATEGORIES)).to_numpy()
    code = _name_codes(events["name"])
    code = np.where(code < 0, np.where(events["cat"].isin(_WORK_CATEGORIES).to_numpy(), _GENERIC, -1), code)
    parts = [_spans(events, host & (code >= 0) & _on(events["tid"], vocab, threads), code, vocab, axis)]
    if ops is not None and len(ops):
        op_rows = (ops["cpu_op"].to_numpy(dtype=bool) & (ops["dur_ns"].to_numpy() >= 0)
                   & _on(ops["tid"], vocab, threads))
        op_code = _name_codes(ops["name"])
        parts.append(_spans(ops, op_rows, np.where(op_code < 0, _GENERIC, op_code), vocab, axis))
    return pd.concat(parts, ignore_index=True)


def _spans(table: pd.DataFrame, keep: np.ndarray, code: np.ndarray, vocab: pd.Index,
           axis: _Axis | None) -> pd.DataFrame:
    rows = np.flatnonzero(keep)
    thread, start = _tid_codes(table["tid"], vocab)[rows], table["ts_ns"].to_numpy()[rows]
    end = start + table["dur_ns"].to_numpy()[rows]
    if axis is not None:
        reach = axis.reaching(thread, start, end)
        rows, thread, start, end = rows[reach], thread[reach], start[reach], end[reach]
    return pd.DataFrame({"thread": thread, "start_ns": start, "end_ns": end, "code": code[rows].astype(np.int8)})


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


def _thread_vocab(events: pd.DataFrame, ops: pd.DataFrame | None) -> pd.Index:
    """Every thread id of the rank as text, '' (no thread) first: a thread is its position here, so the split works
    on small integers, never on a string per span."""
    texts = [_categorical(t).cat.categories.astype(str) for t in
             (events["tid"], *(() if ops is None else (ops["tid"],)))]
    return pd.Index([""]).append(texts).unique()


def _tid_codes(tid: pd.Series, vocab: pd.Index) -> np.ndarray:
    """Per row, its thread's position in ``vocab`` (0 for none)."""
    tid = _categorical(tid)
    per_category = np.append(vocab.get_indexer(tid.cat.categories.astype(str)), 0).astype(np.int32)
    return per_category[tid.cat.codes.to_numpy()]  # code -1 (missing) reads the appended 0


def _on(tid: pd.Series, vocab: pd.Index, threads: np.ndarray | None) -> np.ndarray:
    """Per row, whether its thread is one of ``threads`` (codes of ``vocab``; None: every row)."""
    if threads is None:
        return np.ones(len(tid), dtype=bool)
    tid = _categorical(tid)
    codes = vocab.get_indexer(tid.cat.categories.astype(str))
    wanted = np.append(np.isin(codes, threads), False)
    return wanted[tid.cat.codes.to_numpy()]


def _gap_threads(gs, ge, dev, events, ops, on_gpu, vocab) -> tuple[np.ndarray, np.ndarray]:
    """(the host thread each gap is split on, as its code in ``vocab``, 0 where none is known; whether its next
    work was launched before it began)."""
    main = _main_thread(dev, events, ops, on_gpu, vocab)
    if not on_gpu:
        return np.full(len(gs), main, dtype=np.int32), np.zeros(len(gs), dtype=bool)
    nxt = causes.next_work(dev, ge)
    launch_row = dev["launch_row"].to_numpy()[nxt]
    linked = launch_row >= 0
    thread = np.where(linked, _tid_codes(events["tid"], vocab)[np.maximum(launch_row, 0)], main).astype(np.int32)
    # Launched before the gap: its launch call had returned when the gap began, or the call (a graph launch) had
    # already started some of its work on the device before it. A call still running at the gap's start is the
    # host's launch: its time in the gap is the launching thread's.
    call_end = dev["launch_ns"].to_numpy()[nxt] + np.maximum(events["dur_ns"].to_numpy()[np.maximum(launch_row, 0)], 0)
    rows = dev["launch_row"].to_numpy()
    first_start = pd.Series(dev["start_ns"].to_numpy()[rows >= 0]).groupby(rows[rows >= 0]).min()
    delivering = first_start.reindex(launch_row).to_numpy() < gs
    return thread, linked & ((call_end <= gs) | delivering)


def _main_thread(dev: pd.DataFrame, events: pd.DataFrame, ops: pd.DataFrame | None, on_gpu: bool,
                 vocab: pd.Index) -> int:
    """A GPU rank's thread that launches the most device events, a CPU rank's thread that runs the most operators
    (the training thread); without either, the thread with the most recorded host work; 0 (none) without any. As
    its code in ``vocab``; a tie goes to the thread whose id comes first as text."""
    if on_gpu:
        rows = dev["launch_row"].to_numpy()
        picked = _tid_codes(events["tid"], vocab)[rows[rows >= 0]]
    else:
        picked = _tid_codes(events["tid"], vocab)[np.flatnonzero((events["kind"] == "compute").to_numpy())]
    if len(picked):
        return _first_by_text(np.bincount(picked, minlength=len(vocab)), vocab)
    spans = _host_spans(events, ops, vocab, None)
    work = spans[spans["code"] == _GENERIC]
    if work.empty:
        return 0
    threads = work["thread"].to_numpy()
    busy = np.bincount(threads, weights=(work["end_ns"] - work["start_ns"]).to_numpy(), minlength=len(vocab))
    busy[np.bincount(threads, minlength=len(vocab)) == 0] = -1  # only a thread with recorded work competes
    return _first_by_text(busy, vocab)


def _first_by_text(score: np.ndarray, vocab: pd.Index) -> int:
    """The code with the highest score; among equals, the one whose text sorts first."""
    best = np.flatnonzero(score == score.max())
    return int(best[np.argsort(vocab[best].to_numpy(dtype=str), kind="stable")[0]])
