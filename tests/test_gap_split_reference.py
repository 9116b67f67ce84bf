"""The gap split (``tracekit.events.gapsplit``) against a brute-force reference on random nested host traces:
microsecond by microsecond, the innermost open named-cause call on the thread that launched the gap's next work
(``alloc``/``sync``/``comm_wait``/``data``), else ``host`` where any other recorded call (an op, a launch) is open,
else ``host_unrecorded``; ``other`` whole where the next work's launch call had returned before the gap began."""

from __future__ import annotations

import random

import numpy as np
import pytest

import tracekit
from tracekit.events.causes import CAUSES
from tracedata import cpu, kernel, launch, step, write_trace

CALLS = [("cudaMalloc", "cuda_runtime", "alloc"), ("cudaStreamSynchronize", "cuda_runtime", "sync"),
         ("c10d::allreduce_", "cpu_op", "comm_wait"), ("enumerate(DataLoader)#_X.__next__", "user_annotation", "data"),
         ("aten::mm", "cpu_op", "host"), ("aten::add", "cpu_op", "host")]
SPAN_US = 3000


def _nested(rng, lo, hi, depth, tid, out):
    """Calls that nest as a profiler records them: siblings in order, each holding a random subtree."""
    t = lo
    while t < hi - 4 and depth < 4:
        a = t + rng.randint(0, 40)
        b = a + rng.randint(2, 200)
        if b > hi:
            return
        out.append((rng.choice(CALLS), a, b, tid))
        _nested(rng, a + 1, b - 1, depth + 1, tid, out)
        t = b + rng.randint(0, 30)


def _trace(seed):
    rng = random.Random(seed)
    calls, kernels, launches = [], [], []
    for tid in (1, 2):
        _nested(rng, 0, SPAN_US, 0, tid, calls)
    t = 20
    while t < SPAN_US - 50:
        dur = rng.randint(5, 100)
        launches.append((max(0, t - rng.randint(1, 150)), rng.randint(1, 8), rng.choice((1, 2))))
        kernels.append((t, dur))
        t += dur + rng.choice([0, 0, rng.randint(1, 300)])
    events = [step(1, 0, SPAN_US), step(2, SPAN_US, 10)]
    events += [cpu(name, a, b - a, cat=cat, tid=tid) for (name, cat, _), a, b, tid in calls]
    events += [launch(at, i + 1, tid=tid, dur=dur) for i, (at, dur, tid) in enumerate(launches)]
    events += [kernel("k", at, dur, correlation=i + 1) for i, (at, dur) in enumerate(kernels)]
    return events, calls, kernels, launches


def _reference(calls, kernels, launches) -> list[dict]:
    busy = np.zeros(SPAN_US + 500, dtype=bool)
    for at, dur in kernels:
        busy[at:at + dur] = True
    out, t, end = [], kernels[0][0], max(at + dur for at, dur in kernels)
    while t < end:
        if busy[t]:
            t += 1
            continue
        gs = t
        while not busy[t]:
            t += 1
        at, dur, tid = launches[[k for k, (start, _) in enumerate(kernels) if start == t][0]]
        row = dict.fromkeys(CAUSES, 0.0)
        if at + dur <= gs:
            row["other"] = float(t - gs)
        for x in range(gs, t) if at + dur > gs else ():
            named = [(a, -b, c) for (_, _, c), a, b, th in calls if th == tid and a <= x < b and c != "host"]
            work = any(a <= x < b for (_, _, c), a, b, th in calls if th == tid) or any(
                s <= x < s + d for s, d, th in launches if th == tid)
            row[max(named)[2] if named else "host" if work else "host_unrecorded"] += 1
        out.append(row)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_the_split_matches_a_brute_force_reading(tmp_path, seed):
    events, calls, kernels, launches = _trace(seed)
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json.gz", events), window="all_steps", cache=False)
    got = [{c: round(r[f"idle_{c}_us"], 6) for c in CAUSES} for r in s.gaps.to_dict("records")]
    assert got == _reference(calls, kernels, launches)
