"""A large rank's operator tables made beside its other stages, in a forked process (``tracekit.rank.beside``):
the same result as in one process, errors raised here, and the stage done here where the child cannot give it."""

from __future__ import annotations

import dataclasses
import os
import threading

import pandas as pd
import pytest

from tracekit import stageclock
from tracekit.events.config import Config
from tracekit.rank import analyze, beside

RANKS = ["sample_traces/gpt-gloo-2rank/rank-0.pt.trace.json.gz",
         "sample_traces/resnet-gloo-2rank-memory/rank-1.pt.trace.json.gz",
         "../shared/traces/hta/nccl_a100_2rank/rank-0.json.gz"]


def _pid_and(value):
    return os.getpid(), value


def test_the_work_runs_in_another_process_and_its_result_comes_back():
    pid, value = beside.start(_pid_and, {"a": [1, 2]})()
    assert pid != os.getpid() and value == {"a": [1, 2]}


def _fails():
    raise ValueError("the stage's own error")


def test_an_error_in_the_child_is_raised_here():
    with pytest.raises(ValueError, match="the stage's own error"):
        beside.start(_fails)()


def test_a_result_that_does_not_pickle_is_named():
    with pytest.raises(RuntimeError, match="could not send back"):
        beside.start(lambda: threading.Lock())()


def test_a_child_that_dies_without_a_result_leaves_the_work_to_this_process():
    here = os.getpid()

    def dies_there(x):
        if os.getpid() != here:
            os._exit(9)  # as a child killed for memory
        return os.getpid(), x * 2

    assert beside.start(dies_there, 21)() == (here, 42)


def _sleeps():
    import time
    time.sleep(600)


def test_a_result_never_asked_for_ends_its_child_when_dropped():
    pending = beside.start(_sleeps)
    pid = pending.child.pid
    os.kill(pid, 0)  # running
    del pending  # the caller failed before asking: nothing waits for the child any more
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_with_another_thread_running_nothing_is_forked():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        pid, value = beside.start(_pid_and, 5)()
    finally:
        stop.set()
        thread.join()
    assert (pid, value) == (os.getpid(), 5)


def _same(a, b) -> None:
    for f in dataclasses.fields(a):
        if f.name == "stage_times":
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, pd.DataFrame):
            pd.testing.assert_frame_equal(x, y, check_exact=True, obj=f.name)
        else:
            assert x == y, f.name


@pytest.mark.parametrize("path", RANKS)
def test_a_rank_analysed_beside_equals_one_analysed_in_one_process(path, monkeypatch):
    monkeypatch.setattr(analyze, "BESIDE_OPS", 0)  # every rank's ops beside: the samples are small
    forked = []
    real = beside.start
    monkeypatch.setattr(beside, "start", lambda *a: forked.append(1) or real(*a))
    apart = analyze.analyze_rank(path, Config(), default_rank=0, decode_workers=2)
    assert forked == [1]
    alone = analyze.analyze_rank(path, Config(), default_rank=0, decode_workers=1)
    assert forked == [1]  # no spare cores: not forked
    _same(apart, alone)
    assert len(apart.ops)  # the tables compared are not empty


def test_beside_the_stages_say_where_the_time_went(monkeypatch):
    monkeypatch.setattr(analyze, "BESIDE_OPS", 0)
    stageclock.enable()
    try:
        result = analyze.analyze_rank(RANKS[0], Config(), decode_workers=2)
    finally:
        stageclock.enable(False)
        stageclock.take()
    names = [t.stage for t in result.stage_times]
    assert names == ["read", "classify and steps", "collectives, p2p, fsdp", "step breakdown, pipeline, gaps",
                     "rank breakdown, kernels", "graph", "ops, flops, memory (beside)",
                     "waiting for ops, flops, memory", "quality"]
    child = result.stage_times[names.index("ops, flops, memory (beside)")]
    assert child.rank == result.meta.rank and child.cpu_s > 0


def test_without_memory_to_spare_the_stage_runs_here(monkeypatch):
    assert beside.memory_allows(0) and not beside.memory_allows(1e18)  # no machine has an exabyte spare
    monkeypatch.setattr(analyze, "BESIDE_OPS", 0)
    monkeypatch.setattr(analyze, "BESIDE_MEMORY", 1e15)  # the child would need more than any machine has
    monkeypatch.setattr(beside, "start", lambda *a: pytest.fail("forked without memory to spare"))
    result = analyze.analyze_rank(RANKS[0], Config(), decode_workers=2)
    assert len(result.ops)
