"""Spans that nest per thread (one thread's profiler events form a tree): which span holds a point, which hold
another span's start. Vectorised with sorted arrays; threads are kept apart by offsetting each one's times.

Where the offsets would pass int64 (times far apart: one event at ts 0 in a trace of epoch times, many threads or
deep nesting), the times are replaced by their rank among all the times first: the same order and ties, so the same
answer, in a range as small as the number of times."""

from __future__ import annotations

import numpy as np
import pandas as pd


def innermost(point_tid, point_ns, span_tid, span_start, span_end) -> np.ndarray:
    """For each point, the index of the innermost of the (properly nested, per thread) spans holding it, or -1."""
    point_ns, span_start, span_end = (np.asarray(a, dtype=np.int64) for a in (point_ns, span_start, span_end))
    if len(span_start) == 0 or len(point_ns) == 0:
        return np.full(len(point_ns), -1, dtype=np.int64)
    n_threads, codes = _thread_codes(span_tid, point_tid)
    lo = min(span_start.min(), point_ns.min())
    width = int(max(span_end.max(), point_ns.max()) - lo + 1)
    if n_threads * width >= _KEYS:  # the thread offsets would pass int64
        return _innermost_ranked(point_tid, point_ns, span_tid, span_start, span_end)
    # Each working array is let go as soon as it is used: a rank's ops and launches are millions on a large trace.
    s = codes[:len(span_start)] * width + (span_start - lo)
    e = codes[:len(span_start)] * width + (span_end - lo)
    p = codes[len(span_start):] * width + (point_ns - lo)
    del codes
    order = np.lexsort((-e, s))
    s_sorted = s[order]
    del s
    e_sorted = np.sort(e)
    del e
    level = np.arange(1, len(s_sorted) + 1) - np.searchsorted(e_sorted, s_sorted, side="right")
    depth = np.searchsorted(s_sorted, p, side="right") - np.searchsorted(e_sorted, p, side="right")
    del e_sorted
    # Spans at one level are disjoint, so the last one of the point's level starting at or before it holds it.
    big = n_threads * width
    if (int(level.max()) + 1) * big >= _KEYS:  # deep nesting on a wide range: the level key would pass int64
        return _innermost_ranked(point_tid, point_ns, span_tid, span_start, span_end)
    key = level.astype(np.int64) * big + s_sorted
    del s_sorted
    by_key = np.argsort(key, kind="stable")
    at = np.searchsorted(key[by_key], depth * big + p, side="right") - 1
    del key
    found = (depth > 0) & (at >= 0)
    hit = order[by_key[np.maximum(at, 0)]]
    found &= level[by_key[np.maximum(at, 0)]] == depth
    return np.where(found, hit, -1)


def _innermost_ranked(point_tid, point_ns, span_tid, span_start, span_end) -> np.ndarray:
    point_ns, span_start, span_end = _ranked(point_ns, span_start, span_end)
    return innermost(point_tid, point_ns, span_tid, span_start, span_end)


def count_starts_within(p_tid, p_ns, s_tid, s_start, s_end) -> np.ndarray:
    """For each span, how many points of its thread lie in ``(start, end)``."""
    _, codes = _thread_codes(p_tid, s_tid)
    if len(s_start) == 0:
        return np.zeros(0, dtype=np.int64)
    lo = min(np.min(p_ns, initial=np.iinfo(np.int64).max), s_start.min())
    width = int(max(np.max(p_ns, initial=0), s_end.max()) - lo + 1)
    if _threads(codes) * width >= _KEYS:
        p_ns, s_start, s_end = _ranked(np.asarray(p_ns, dtype=np.int64), s_start, s_end)
        lo, width = 0, int(max(np.max(p_ns, initial=0), s_end.max()) + 1)
    points = np.sort(codes[:len(p_ns)] * width + (np.asarray(p_ns, dtype=np.int64) - lo))
    sc = codes[len(p_ns):] * width
    # strictly after the span's start: an annotation starting with an op at the same time is its parent, not its child
    after_start = np.searchsorted(points, sc + (s_start - lo), side="right")
    return np.searchsorted(points, sc + (s_end - lo), side="left") - after_start


_KEYS = 2**62  # offset keys stay below this: int64 with room


def _ranked(*times: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each array's times as their rank among all the times given (equal times, equal ranks)."""
    _, inverse = np.unique(np.concatenate([np.asarray(t, dtype=np.int64) for t in times]), return_inverse=True)
    bounds = np.cumsum([0] + [len(t) for t in times])
    return tuple(inverse[a:b].astype(np.int64) for a, b in zip(bounds[:-1], bounds[1:]))


def _threads(codes: np.ndarray) -> int:
    return int(codes.max()) + 1 if len(codes) else 1


def _thread_codes(first, second) -> tuple[int, np.ndarray]:
    """(threads, a code per element of ``first`` then ``second``): equal codes for equal text (``str`` of each value),
    by hashing, without converting every element to text; a categorical's codes are used as they are."""
    (c1, labels1), (c2, labels2) = _coded(first), _coded(second)
    text_codes, threads = pd.factorize(np.array(labels1 + labels2, dtype=object))
    codes = np.concatenate([text_codes[:len(labels1)][c1], text_codes[len(labels1):][c2]]).astype(np.int64)
    return len(threads), codes


def _coded(values) -> tuple[np.ndarray, list[str]]:
    """(a code per value, the text of each code)."""
    if isinstance(values, (pd.Series, pd.Index)):
        values = values.array
    if isinstance(values, pd.Categorical):
        codes = values.codes.astype(np.int64)
        labels = [str(c) for c in values.categories] + ["nan"]  # a missing value: code -1, the last label
        return np.where(codes < 0, len(labels) - 1, codes), labels
    codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=False)
    return codes.astype(np.int64), [str(u) for u in uniques]
