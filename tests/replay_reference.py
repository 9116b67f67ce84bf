"""The replay as it was first written, kept as an independent reference for the linear-time pass: each lane's rules
solved as a max-plus recurrence (a cumulative sum and a cumulative maximum), and all lanes re-solved until no time
changes. It reaches the same fixed point by another road, one round per cross-lane hop of the longest chain.
``tests/test_replay.py`` checks the two agree; ``benchmarks/whatif_cost.py`` times them side by side."""

from __future__ import annotations

import numpy as np

_INF = np.inf


def _prev(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    out = np.empty_like(values)
    out[0] = -_INF
    out[1:] = values[:-1]
    return np.where(first, -_INF, out)


def _segmented_cumsum(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    total = np.cumsum(values)
    before = np.concatenate([[0.0], total])[bounds[:-1]]
    return total - np.repeat(before, np.diff(bounds))


def _segmented_cummax(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    out = np.empty_like(values)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        out[a:b] = np.maximum.accumulate(values[a:b])
    return out


def fixed_point(model, delay=None, tail=None, ps=None, pe=None, dr=None, group=None, max_rounds=100_000):
    """(start, end) as ``tracekit.predict.replay.simulate`` defines them; None if no fixed point within the rounds."""
    delay = model.delay if delay is None else delay
    tail = model.tail if tail is None else tail
    ps = model.ps if ps is None else ps
    pe = model.pe if pe is None else pe
    dr = model.dr if dr is None else dr
    group = model.group if group is None else group
    n = len(delay)
    start, end = np.full(n, -_INF), np.full(n, -_INF)
    anchored = np.flatnonzero(model.first & (ps < 0) & (pe < 0))
    by_ps, by_pe, by_dr = np.flatnonzero(ps >= 0), np.flatnonzero(pe >= 0), np.flatnonzero(dr >= 0)
    member = np.flatnonzero(group >= 0)
    own = delay + tail
    total = _segmented_cumsum(own, model.lane_bounds)
    for _ in range(max_rounds):
        ext = _prev(end, model.first)
        ext[anchored] = np.maximum(ext[anchored], model.start[anchored])
        ext[by_ps] = np.maximum(ext[by_ps], start[ps[by_ps]])
        ext[by_pe] = np.maximum(ext[by_pe], end[pe[by_pe]])
        cross = np.full(n, -_INF)
        if len(member):
            latest = np.full(model.n_groups, -_INF)
            np.maximum.at(latest, group[member], start[member])
            cross[member] = latest[group[member]]
        cross[by_dr] = np.maximum(cross[by_dr], end[dr[by_dr]])
        reach = np.maximum(ext + own, cross + tail) - total
        new_end = total + _segmented_cummax(reach, model.lane_bounds)
        new_start = np.maximum(_prev(new_end, model.first), ext) + delay
        if np.array_equal(new_end, end) and np.array_equal(new_start, start):
            return start, end
        start, end = new_start, new_end
    return None
