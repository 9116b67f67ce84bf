"""Interval maths on hand-checked cases."""

import numpy as np

from tracekit import intervals as iv


def _set(pairs):
    return iv.merge([p[0] for p in pairs], [p[1] for p in pairs])


def _pairs(s):
    return list(zip(s[0].tolist(), s[1].tolist()))


def test_merge_sorts_joins_overlaps_and_drops_empty():
    assert _pairs(_set([(5, 8), (0, 3), (2, 4), (9, 9), (7, 10)])) == [(0, 4), (5, 10)]


def test_touching_intervals_merge_into_one():
    assert _pairs(_set([(0, 2), (2, 5)])) == [(0, 5)]


def test_intersect_and_subtract():
    a, b = _set([(0, 10), (20, 30)]), _set([(5, 25)])
    assert _pairs(iv.intersect(a, b)) == [(5, 10), (20, 25)]
    assert _pairs(iv.subtract(a, b)) == [(0, 5), (25, 30)]
    assert iv.total(*iv.intersect(_set([(0, 2)]), _set([(2, 4)]))) == 0  # touching is not overlapping


def test_complement_inside_bounds():
    assert _pairs(iv.complement(_set([(2, 4), (6, 7)]), 0, 10)) == [(0, 2), (4, 6), (7, 10)]


def test_covered_within_windows():
    a = _set([(0, 10), (20, 30)])
    got = iv.covered_within(a, [0, 5, 10, 25, 40], [10, 25, 20, 100, 50])
    assert got.tolist() == [10, 10, 0, 5, 0]


def test_empty_sets():
    empty = iv.merge([], [])
    assert iv.total(*empty) == 0
    assert iv.total(*iv.intersect(empty, _set([(0, 1)]))) == 0
    assert iv.covered_within(empty, np.array([0]), np.array([5])).tolist() == [0]
