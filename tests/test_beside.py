"""A large rank's operator tables made beside its other stages, in a forked process (``tracekit.rank.beside``):
the same result as in one process, errors raised here, and the stage done here where the child cannot give it."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pandas as pd
import pytest

from tracekit import stageclock
from tracekit.errors import DuplicateRankError, NotJSONError, TraceReadError
from tracekit.events.config import Config
from tracekit.rank import analyze, beside
from tracekit.read import parallel
from frame_equal import assert_frame_equal

RANKS = ["sample_traces/gpt-gloo-2rank/rank-0.pt.trace.json.gz",
         "sample_traces/resnet-gloo-2rank-memory/rank-1.pt.trace.json.gz",
         "../shared/traces/hta/nccl_a100_2rank/rank-0.json.gz"]


@pytest.fixture(autouse=True)
def _fork_as_one_thread(monkeypatch):
    """A pytest-xdist worker runs a thread of its own, so ``parallel.context()`` forks nothing there: these tests
    fork as a single-threaded process does (the child runs only the work it is given). The test of a process with
    another thread puts the real check back."""
    monkeypatch.setattr(beside, "context", lambda: multiprocessing.get_context("fork"))


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


def test_with_another_thread_running_nothing_is_forked(monkeypatch):
    monkeypatch.setattr(beside, "context", parallel.context)
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
            assert_frame_equal(x, y, check_exact=True, obj=f.name)
        else:
            assert x == y, f.name


@pytest.mark.parametrize("path", RANKS)
def test_a_rank_analysed_beside_equals_one_analysed_in_one_process(path, monkeypatch):
    monkeypatch.setattr(analyze, "BESIDE_OPS", 0)  # every rank's ops beside: the samples are small
    forked = []
    real = beside.start
    monkeypatch.setattr(beside, "start", lambda *a: forked.append(real(*a)) or forked[-1])
    apart = analyze.analyze_rank(path, Config(), default_rank=0, decode_workers=2)
    assert len(forked) == 1 and isinstance(forked[0], beside._Pending)  # made in a forked process
    alone = analyze.analyze_rank(path, Config(), default_rank=0, decode_workers=1)
    assert len(forked) == 1  # no spare cores: not forked
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


def _raises_read_error():
    raise NotJSONError("runs/rank-3.json", "not valid JSON (bad byte)", 3)


def test_tracekits_own_errors_come_back_whole_with_where_they_were_raised():
    with pytest.raises(NotJSONError) as caught:
        beside.start(_raises_read_error)()
    err = caught.value
    assert (err.path, err.problem, err.rank) == ("runs/rank-3.json", "not valid JSON (bad byte)", 3)
    assert any("_raises_read_error" in note for note in err.__notes__)
    for made in (NotJSONError("p", "x", 1), TraceReadError("p", "x"), DuplicateRankError(2, "a", "b")):
        again = pickle.loads(pickle.dumps(made))
        assert type(again) is type(made) and str(again) == str(made) and again.__dict__ == made.__dict__


class _HoldsALock(Exception):
    """An error that no pickler can send back: it holds a lock. (An error whose ``__init__`` takes other arguments
    than its ``args`` is not one: once ``distributed`` is imported, tblib's pickling rebuilds it.)"""

    def __init__(self, path, problem):
        super().__init__(f"{path}: {problem}")
        self.lock = threading.Lock()


def _raises_holding_a_lock():
    raise _HoldsALock("rank-0.json", "bad op table")


def test_an_error_that_cannot_come_back_as_itself_comes_back_as_its_text():
    with pytest.raises(RuntimeError, match="_HoldsALock: rank-0.json: bad op table") as caught:
        beside.start(_raises_holding_a_lock)()
    assert "_raises_holding_a_lock" in str(caught.value)  # the child's traceback is in the text


def _big():
    return os.getpid(), b"x" * 20_000_000


def test_a_child_killed_while_it_sends_leaves_the_work_to_this_process():
    pending = beside.start(_big)
    time.sleep(2)  # the child is blocked in its send: nothing reads the pipe yet
    os.kill(pending.child.pid, signal.SIGKILL)
    pid, data = pending()
    assert pid == os.getpid() and len(data) == 20_000_000


def test_a_child_whose_parent_dies_does_not_wait_forever():
    script = textwrap.dedent("""
        import os, signal, time
        from tracekit.rank import beside
        def work():
            time.sleep(1)
            return b"r" * 1_000_000
        pending = beside.start(work)
        print(pending.child.pid, flush=True)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid), "the child outlived its parent, blocked on its send"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


class _NoFork:
    def Pipe(self, duplex):
        return multiprocessing.Pipe(duplex)

    def Process(self, **kwargs):
        raise OSError(12, "Cannot allocate memory")


def test_where_no_fork_can_be_made_the_work_runs_here(monkeypatch):
    monkeypatch.setattr(beside, "context", lambda: _NoFork())
    assert beside.start(_pid_and, 3)() == (os.getpid(), 3)


def _fork_context_in_a_daemon(queue):
    queue.put(parallel.context() is None)


def test_a_daemonic_process_forks_no_children():
    queue = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(target=_fork_context_in_a_daemon, args=(queue,), daemon=True)
    child.start()
    assert queue.get(timeout=30) is True
    child.join()


def test_a_container_limit_lowers_what_is_to_spare(tmp_path):
    with open("/proc/self/cgroup") as f:
        lines = [line.strip().split(":", 2) for line in f]
    v2 = next((p for h, c, p in lines if h == "0" and c == ""), None)
    v1 = next((p for h, c, p in lines if "memory" in c.split(",")), None)
    assert v1 is not None or v2 is not None
    if v2 is not None:
        folder = tmp_path / v2.lstrip("/")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "memory.max").write_text("3000000000\n")
        (folder / "memory.current").write_text("1000000000\n")
        assert beside._cgroup_left(str(tmp_path)) == 2_000_000_000
        (folder / "memory.max").write_text("max\n")
    if v1 is not None:
        folder = tmp_path / "memory" / v1.lstrip("/")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
        (folder / "memory.usage_in_bytes").write_text("500\n")
        assert beside._cgroup_left(str(tmp_path)) is None
        (folder / "memory.limit_in_bytes").write_text("4000\n")
        assert beside._cgroup_left(str(tmp_path)) == 3500
