"""Device events without a correlation id: launched before profiling only when they start before the first launch call.

Shaped like a real MTIA trace, where DMA requests and event records carry no id and run on streams whose first
linked event comes later: judged by their stream's first linked event, they were dropped (idle 7.99% against
HTA's 4.34%); judged by the trace's first launch call, an independent recount gives 5.89%. The same rule holds on
a GPU trace (a memset without an id). Times in us; every expected number is worked out in the comments.
"""

from __future__ import annotations

import pytest

import tracekit
from tracedata import step, write_trace


def x(cat, name, ts, dur, pid=0, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


MTIA = {"runtime": "mtia_runtime", "launch": "runFunction", "device": "mtia_ccp_events", "work": "fused_linear_relu",
        "unlinked": [("mtia_ccp_events", "dma_request"), ("mtia_ccp_events", "event_record"),
                     ("mtia_ccp_events", "event_wait")]}
CUDA = {"runtime": "cuda_runtime", "launch": "cudaLaunchKernel", "device": "kernel",
        "work": "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8",
        "unlinked": [("gpu_memset", "Memset (Device)"), ("gpu_memcpy", "Memcpy DtoD (Device -> Device)"),
                     ("gpu_memset", "Memset (Device)")]}


def rank_with_unlinked_events(d):
    """Steps [0, 1000), [1000, 2000), [2000, 2100) (the last is out of the window). The trace's first launch call is
    at 10 (id 1). Linked: id 1 runs [100, 400) on stream 9; id 2 (call at 1010) [1100, 1400) on stream 10, that
    stream's first linked event; id 3 (1020) [1500, 1800) on stream 9; id 4 (2010) [2020, 2050) in the last step.
    Without an id, on stream 10: [0, 5) (before the first launch call), [450, 750) and [800, 900) (after it, but
    before stream 10's first linked event at 1100), [1450, 1480) (after both)."""
    events = [step(1, 0, 1000), step(2, 1000, 1000), step(3, 2000, 100)]
    for cid, (at, start, dur, stream) in enumerate([(10, 100, 300, 9), (1010, 1100, 300, 10), (1020, 1500, 300, 9),
                                                   (2010, 2020, 30, 9)], 1):
        events += [x(d["runtime"], d["launch"], at, 5, pid=100, correlation=cid),
                   x(d["device"], d["work"], start, dur, pid=2, tid=stream, device=0, stream=stream, correlation=cid)]
    (c0, n0), (c1, n1), (c2, n2) = d["unlinked"]
    for cat, name, start, dur in [(c0, n0, 0, 5), (c0, n0, 450, 300), (c1, n1, 800, 100), (c2, n2, 1450, 30)]:
        events.append(x(cat, name, start, dur, pid=2, tid=10, device=0, stream=10))
    return events


@pytest.mark.parametrize("device", [MTIA, CUDA], ids=["mtia", "cuda"])
def test_unlinked_events_after_the_first_launch_call_stay(tmp_path, device):
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json.gz", rank_with_unlinked_events(device)), cache=False)
    r = s.ranks.iloc[0]
    # Left out: [0, 5) only. The window (steps 1 and 2) holds [100, 400), [450, 750), [800, 900), [1100, 1400),
    # [1450, 1480), [1500, 1800): span 1700, busy 300 + 300 + 100 + 300 + 30 + 300 = 1330, idle 370 = 21.76%.
    # (The old rule, "before its stream's first linked event", also left out [450, 750) and [800, 900): busy 930,
    # idle 770 = 45.29% over the same span.)
    assert (r["span_us"], r["busy_us"], r["idle_us"]) == (1700, 1330, 370)
    assert r["idle_pct"] == pytest.approx(370 / 1700 * 100)
    q = s.data_quality.iloc[0]
    assert (q["pre_trace_events"], q["pre_trace_device_us"]) == (1, 5)


def test_an_unlinked_event_before_the_first_launch_call_is_left_out_even_after_a_linked_one(tmp_path):
    # Stream 10's first linked event would not help here: [3, 8) starts before the first launch call (10), so it
    # was launched before profiling, while [12, 20) starts after it and stays. Window: the one step [0, 1000)
    # holds [12, 20) and [100, 400): span 388, busy 308, idle 80.
    events = [step(1, 0, 1000), x("mtia_runtime", "runFunction", 10, 5, pid=100, correlation=1),
              x("mtia_ccp_events", "fused_linear_relu", 100, 300, pid=2, tid=9, correlation=1),
              x("mtia_ccp_events", "dma_request", 3, 5, pid=2, tid=9),
              x("mtia_ccp_events", "dma_request", 12, 8, pid=2, tid=9)]
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json.gz", events), cache=False)
    r = s.ranks.iloc[0]
    assert (r["span_us"], r["busy_us"], r["idle_us"]) == (388, 308, 80)
    assert s.data_quality.iloc[0]["pre_trace_events"] == 1
