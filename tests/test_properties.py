"""Property tests (hypothesis): interval maths against a brute-force count on a microsecond grid, and the per-rank
and per-step breakdowns of random device-event tables against the identities that define them."""

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit import intervals as iv
from tracekit.events import metrics

GRID = 64  # microseconds where intervals start; ends lie on the grid too
SIZE = GRID + 32  # the brute-force grid: room for events that end past GRID
US = 1000  # ns per grid point: the sets are built in ns, as tracekit keeps time

pairs = st.lists(st.tuples(st.integers(0, GRID), st.integers(0, GRID)), max_size=12)
FAST = settings(max_examples=150, deadline=None)


def to_set(raw):
    """Arbitrary (start, end) pairs, some empty or inverted, as a canonical set in ns."""
    return iv.merge([s * US for s, _ in raw], [e * US for _, e in raw])


def mask(raw) -> np.ndarray:
    """Brute force: which grid microseconds [t, t+1) the pairs cover."""
    covered = np.zeros(SIZE, dtype=bool)
    for s, e in raw:
        covered[s:e] = True  # an inverted pair covers nothing, as merge drops it
    return covered


def set_mask(intervals) -> np.ndarray:
    starts, ends = intervals
    return mask(zip((starts // US).tolist(), (ends // US).tolist()))


def canonical(intervals) -> bool:
    s, e = intervals
    return bool((e > s).all() and (s[1:] > e[:-1]).all() and (s % US == 0).all() and (e % US == 0).all())


@FAST
@given(pairs)
def test_merge_is_the_union(a):
    merged = to_set(a)
    assert canonical(merged)
    assert (set_mask(merged) == mask(a)).all()
    assert iv.total(*merged) == mask(a).sum() * US


@FAST
@given(pairs, pairs)
def test_intersect_and_subtract(a, b):
    both, only_a = iv.intersect(to_set(a), to_set(b)), iv.subtract(to_set(a), to_set(b))
    assert canonical(both) and canonical(only_a)
    assert (set_mask(both) == (mask(a) & mask(b))).all()
    assert (set_mask(only_a) == (mask(a) & ~mask(b))).all()


@FAST
@given(pairs, st.integers(0, GRID), st.integers(0, GRID))
def test_complement_and_clip(a, lo, hi):
    lo, hi = min(lo, hi), max(lo, hi)
    inside = np.zeros(SIZE, dtype=bool)
    inside[lo:hi] = True
    gaps = iv.complement(to_set(a), lo * US, hi * US)
    assert canonical(gaps) and (set_mask(gaps) == (inside & ~mask(a))).all()
    assert (set_mask(iv.clip(to_set(a), lo * US, hi * US)) == (inside & mask(a))).all()


@FAST
@given(pairs, st.lists(st.tuples(st.integers(0, GRID), st.integers(0, GRID)), min_size=1, max_size=6),
       st.integers(0, US - 1))
def test_covered_within_windows(a, windows, sub):
    # Window edges anywhere in ns, also between grid points: the covered ns are counted exactly.
    lo = np.array([min(x, y) * US + (sub if min(x, y) < GRID else 0) for x, y in windows])
    hi = np.array([max(x, y) * US for x, y in windows])
    hi = np.maximum(hi, lo)
    ns = np.repeat(mask(a), US)  # one entry per ns
    expected = [int(ns[low:high].sum()) for low, high in zip(lo, hi)]
    assert iv.covered_within(to_set(a), lo, hi).tolist() == expected


kinds = st.sampled_from(["compute", "comm", "memory"])
events = st.lists(st.tuples(kinds, st.integers(0, GRID - 1), st.integers(0, 20)), min_size=1, max_size=15)


def device_table(rows, rank=0) -> pd.DataFrame:
    # step -1: no event was launched inside a step, so the last step ends at its annotation (metrics.step_breakdown)
    return pd.DataFrame({"rank": rank, "kind": [k for k, _, _ in rows], "step": -1,
                         "start_ns": [s * US for _, s, _ in rows], "end_ns": [(s + d) * US for _, s, d in rows]})


def kind_mask(rows, kind) -> np.ndarray:
    return mask((s, s + d) for k, s, d in rows if k == kind)


@FAST
@given(events)
def test_rank_breakdown_identities(rows):
    b = metrics.rank_breakdown(device_table(rows)).iloc[0]
    cover = {k: kind_mask(rows, k) for k in ("compute", "comm", "memory")}
    busy = cover["compute"] | cover["comm"] | cover["memory"]
    span = max(s + d for _, s, d in rows) - min(s for _, s, _ in rows)
    assert b["span_us"] == span and b["busy_us"] == busy.sum()
    assert b["busy_us"] + b["idle_us"] == b["span_us"]
    assert b["compute_us"] == cover["compute"].sum() and b["comm_us"] == cover["comm"].sum()
    assert b["memory_us"] == cover["memory"].sum()
    assert b["overlap_us"] == (cover["comm"] & cover["compute"]).sum()
    assert 0 <= b["overlap_us"] <= b["comm_us"] and b["overlap_us"] <= b["compute_us"]
    assert b["exposed_comm_us"] == b["comm_us"] - b["overlap_us"] >= 0
    if b["comm_us"] > 0:
        assert 0 <= b["overlap_pct"] <= 100
    gaps = metrics.gap_table(device_table(rows))
    assert gaps["dur_us"].sum() == b["idle_us"] and (gaps["dur_us"] > 0).all()


@FAST
@given(events, st.lists(st.integers(1, 30), min_size=1, max_size=4))
def test_step_breakdown_tiles_each_step(rows, lengths):
    starts = np.cumsum([0] + lengths[:-1]) * US
    ends = starts + np.array(lengths) * US
    steps = pd.DataFrame({"rank": 0, "step": np.arange(1, len(lengths) + 1), "start_ns": starts, "end_ns": ends})
    out = metrics.step_breakdown(device_table(rows), steps)
    parts = out["compute_us"] + out["overlap_us"] + out["exposed_comm_us"] + out["other_us"]
    assert np.allclose(parts, out["step_us"]) and (out["other_us"] >= -1e-9).all()
    assert (out["overlap_us"] <= out["comm_us"] + 1e-9).all() and (out["exposed_comm_us"] >= 0).all()
    comm = np.concatenate([kind_mask(rows, "comm"), np.zeros(200, bool)])
    for start, end, comm_us in zip(starts // US, ends // US, out["comm_us"]):
        assert comm_us == comm[start:end].sum()
