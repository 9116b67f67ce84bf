"""Interval maths on sorted numpy arrays: the only place tracekit merges, intersects or subtracts time.

An interval set is a pair ``(starts, ends)`` of int64 arrays. ``merge`` turns any pairs into a canonical set:
sorted, disjoint, non-empty. Every other function takes and returns canonical sets.

>>> s, e = merge([0, 5, 2], [3, 8, 4])
>>> s.tolist(), e.tolist()
([0, 5], [4, 8])
>>> int(total(*intersect((s, e), merge([3], [6]))))
2
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

_EMPTY = np.empty(0, dtype=np.int64)


def merge(starts, ends) -> Intervals:
    """Union of intervals ``[start, end)``; empty and inverted ones are dropped."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return _EMPTY, _EMPTY
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # A new merged interval begins where a start lies beyond everything seen so far.
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], reach[last]


def total(starts: np.ndarray, ends: np.ndarray) -> int:
    """Covered length of a canonical set."""
    return int((ends - starts).sum())


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Time covered by both canonical sets."""
    (as_, ae), (bs, be) = a, b
    if as_.size == 0 or bs.size == 0:
        return _EMPTY, _EMPTY
    # Boundaries of both sets; coverage count 2 means both are on.
    points = np.concatenate([as_, ae, bs, be])
    delta = np.concatenate([np.ones_like(as_), -np.ones_like(ae), np.ones_like(bs), -np.ones_like(be)])
    order = np.lexsort((delta, points))  # at equal times close before open: touching is not overlapping
    points, depth = points[order], np.cumsum(delta[order])
    on = depth == 2
    starts = points[:-1][on[:-1]]
    ends = points[1:][on[:-1]]
    return merge(starts, ends)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Time covered by ``a`` and not by ``b``."""
    lo = min(a[0][:1].tolist() + b[0][:1].tolist(), default=0)
    hi = max(a[1][-1:].tolist() + b[1][-1:].tolist(), default=0)
    return intersect(a, complement(b, lo, hi))


def complement(a: Intervals, lo: int, hi: int) -> Intervals:
    """The gaps of canonical set ``a`` inside ``[lo, hi)``."""
    s, e = clip(a, lo, hi)
    starts = np.concatenate([[lo], e])
    ends = np.concatenate([s, [hi]])
    return merge(starts, ends)


def clip(a: Intervals, lo: int, hi: int) -> Intervals:
    """Canonical set ``a`` cut to ``[lo, hi)``."""
    s = np.clip(a[0], lo, hi)
    e = np.clip(a[1], lo, hi)
    keep = e > s
    return s[keep], e[keep]


def covered_within(a: Intervals, lo, hi) -> np.ndarray:
    """Covered length of canonical set ``a`` inside each window ``[lo[i], hi[i])``, vectorised."""
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    return _covered_upto(a, hi) - _covered_upto(a, lo)


def _covered_upto(a: Intervals, t: np.ndarray) -> np.ndarray:
    s, e = a
    if s.size == 0:
        return np.zeros(t.shape, dtype=np.int64)
    before = np.concatenate([[0], np.cumsum(e - s)])
    i = np.searchsorted(s, t, side="right")  # intervals starting at or before t
    j = np.maximum(i - 1, 0)
    partial = np.where(i > 0, np.clip(t - s[j], 0, e[j] - s[j]), 0)
    return before[j] * (i > 0) + partial
