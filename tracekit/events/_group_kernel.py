"""The compiled per-group reductions of ``tracekit.events.grouping`` (numba, cached on disk): one pass over the rows
in table order each, a row of group -1 skipped. ``group_sum`` adds as pandas' grouped kernel does (compensated, row
by row), so its results are pandas' to the last bit where pandas runs that kernel (``Groups.sum`` says where)."""

import numpy as np
from numba import njit


@njit(cache=True)
def group_sum(gid, values, n, min_count):  # pragma: no cover (compiled)
    """Per group: the sum of its known (not NaN) values, NaN where fewer than ``min_count`` are known."""
    total = np.zeros(n, dtype=np.float64)
    compensation = np.zeros(n, dtype=np.float64)
    known = np.zeros(n, dtype=np.int64)
    for i in range(len(gid)):
        g = gid[i]
        v = values[i]
        if g < 0 or v != v:
            continue
        known[g] += 1
        y = v - compensation[g]
        t = total[g] + y
        compensation[g] = t - total[g] - y
        if not np.isfinite(compensation[g]):  # an infinite value or total: the sum stays infinite, not NaN
            compensation[g] = 0.0
        total[g] = t
    for g in range(n):
        if known[g] < min_count:
            total[g] = np.nan
    return total


@njit(cache=True)
def group_int_sum(gid, values, n):  # pragma: no cover (compiled)
    """Per group: the sum of its integer values (int64, wrapping as NumPy's and pandas' do)."""
    total = np.zeros(n, dtype=np.int64)
    for i in range(len(gid)):
        if gid[i] >= 0:
            total[gid[i]] += values[i]
    return total


@njit(cache=True)
def group_any(gid, flags, n):  # pragma: no cover (compiled)
    """Per group: whether any of its rows' flags is set."""
    out = np.zeros(n, dtype=np.bool_)
    for i in range(len(gid)):
        if gid[i] >= 0 and flags[i]:
            out[gid[i]] = True
    return out


@njit(cache=True)
def group_code_spread(gid, codes, n):  # pragma: no cover (compiled)
    """Per group: whether its codes (-1: missing, not counted) hold two different values."""
    low = np.full(n, 2**62, dtype=np.int64)  # above every code
    high = np.full(n, -1, dtype=np.int64)
    for i in range(len(gid)):
        g = gid[i]
        c = codes[i]
        if g < 0 or c < 0:
            continue
        if c < low[g]:
            low[g] = c
        if c > high[g]:
            high[g] = c
    return high > low
