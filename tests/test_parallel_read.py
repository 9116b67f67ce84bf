"""A streamed trace decoded by helper processes (tracekit.read.parallel) reads exactly what one process reads.

Most tests run the helpers' work in this process (``helpers``: each chunk is made when it is sent, and sent before
the earlier ones are taken back, as real helpers get it), since a test process may have threads, where no helper is
forked; one test forks real helpers from a fresh interpreter."""

from __future__ import annotations

import glob
import multiprocessing
import subprocess
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

from tracekit.events.hostops import reads_host_op
from tracekit.rank import engine
from tracekit.read import parallel, reader
from tracekit.read.reader import ReadOptions
from tests.tracedata import cpu, kernel, step, write_trace
from frame_equal import assert_frame_equal

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces" / "hta"


@pytest.fixture
def helpers(monkeypatch):
    """Helpers stood in for by this process, whatever threads it has; the list of pools started (max_workers)."""
    started = []

    class Pool(_InProcess):
        def __init__(self, max_workers, mp_context=None):
            started.append(max_workers)

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", Pool)
    monkeypatch.setattr(parallel, "context", lambda: multiprocessing.get_context("fork"))
    return started


def _tables(path, workers, host_ops=reads_host_op, chunk_events=2):
    return reader.read_tables(path, default_rank=0, host_ops=host_ops,
                              options=ReadOptions(chunk_above_bytes=0, chunk_events=chunk_events,
                                                  decode_workers=workers))


def _assert_same(a, b):
    assert a.meta == b.meta
    for table in ("events", "comm_args", "ops", "memory"):
        assert_frame_equal(getattr(a, table), getattr(b, table), check_exact=True, obj=table)


def test_cpu_ops_are_left_out_from_the_chunk_with_the_first_device_event_on(tmp_path, helpers):
    # Chunks of 2 events: [relu, relu] [kernel, relu] [relu, relu]. One process keeps the CPU ops of chunk 1 (no
    # device event seen yet: it could be a CPU-only trace) and leaves out aten::relu (not a host op the analysis
    # reads) from chunk 2 on: rows relu@0, relu@10, k@20. Two helpers get all three chunks before any is back, so
    # chunk 3 was sent as if no device event had been seen: it must be made again, and its ops left out.
    path = write_trace(tmp_path / "rank0.json", [cpu("aten::relu", 0, 5), cpu("aten::relu", 10, 5),
                                                 kernel("k", 20, 5), cpu("aten::relu", 30, 5),
                                                 cpu("aten::relu", 40, 5), cpu("aten::relu", 50, 5)], gz=False)
    for workers in (1, 2):
        events = _tables(path, workers).events
        assert list(events["name"].astype(str)) == ["aten::relu", "aten::relu", "k"], workers
        assert list(events["ts_ns"]) == [0, 10_000, 20_000]
    _assert_same(_tables(path, 1), _tables(path, 2))
    assert helpers == [2, 2]


def test_a_cpu_only_trace_keeps_every_op_in_every_chunk(tmp_path, helpers):
    path = write_trace(tmp_path / "rank0.json", [step(1, 0, 100)] + [cpu("aten::relu", 10 * i, 5) for i in range(1, 8)],
                       gz=False)
    helped = _tables(path, 2)
    assert len(helped.events) == 8 and len(helped.ops) == 8  # no device event: nothing left out
    _assert_same(_tables(path, 1), helped)
    assert helpers == [2]


def test_a_chunk_the_fast_decoder_refuses_in_a_helper_reads_the_file_whole(tmp_path, helpers):
    # An unknown phase ("Z") in the third chunk: the fast decoders refuse it, in the helper that decodes it, and
    # the whole file is read by the general decoder, which skips it: the five complete events remain.
    events = [cpu("aten::relu", 0, 5), kernel("k", 10, 5), cpu("aten::mm", 20, 5), step(1, 0, 100),
              {"ph": "Z", "name": "odd", "pid": 0, "tid": 0, "ts": 30}, cpu("aten::relu", 40, 5)]
    path = write_trace(tmp_path / "rank0.json", events, gz=False)
    whole = reader.read_tables(path, default_rank=0, host_ops=reads_host_op)
    _assert_same(_tables(path, 2), whole)
    assert len(whole.ops) == 4 and helpers == [2]


@pytest.mark.parametrize("name", ["nccl_a100_2rank", "amd_mi250", "alexnet_1gpu", "cpu_only_gloo"])
@pytest.mark.parametrize("host_ops", [reads_host_op, None])
def test_real_traces_read_the_same_with_helpers(name, host_ops, helpers):
    files = sorted(glob.glob(str(SHARED / name / "*.json*")))
    if not files:
        pytest.skip(f"{SHARED / name} is not beside the project")
    _assert_same(_tables(files[0], 1, host_ops, chunk_events=300), _tables(files[0], 3, host_ops, chunk_events=300))
    assert helpers == [3]


_FORKED = """
import sys
import pandas as pd
from concurrent.futures import ProcessPoolExecutor
from tracekit.events.hostops import reads_host_op
from tracekit.read import parallel, reader
from tracekit.read.reader import ReadOptions

pools = []
class Counted(ProcessPoolExecutor):
    def __init__(self, *args, **kwargs):
        pools.append(kwargs["mp_context"].get_start_method())
        super().__init__(*args, **kwargs)
parallel.ProcessPoolExecutor = Counted
for path in sys.argv[1:]:
    one, two = (reader.read_tables(path, default_rank=0, host_ops=reads_host_op, options=ReadOptions(
        chunk_above_bytes=0, chunk_events=2 if path.endswith("rank0.json") else 300, decode_workers=w)) for w in (1, 2))
    assert one.meta == two.meta
    for table in ("events", "comm_args", "ops", "memory"):
        pd.testing.assert_frame_equal(getattr(one, table), getattr(two, table), check_exact=True)
print("pools", pools)
"""


def test_forked_helpers_read_the_same_in_a_fresh_process(tmp_path):
    # A fresh interpreter has one thread, so real helpers are forked: one pool per two-helper read.
    paths = [str(_late_device_trace(tmp_path))] + sorted(glob.glob(str(SHARED / "nccl_a100_2rank" / "*.json*")))[:1]
    done = subprocess.run([sys.executable, "-c", _FORKED, *paths], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[-2] == "pools " + str(["fork"] * len(paths))


class _Unhashable:
    """A host_ops that can be pickled but not hashed (it defines __eq__ only)."""

    def __call__(self, name):
        return name.startswith("ProfilerStep")

    def __eq__(self, other):
        return isinstance(other, _Unhashable)


def _late_device_trace(tmp_path):
    return write_trace(tmp_path / "rank0.json", [cpu("aten::relu", 0, 5), cpu("aten::relu", 10, 5),
                                                 kernel("k", 20, 5), cpu("aten::relu", 30, 5),
                                                 cpu("aten::relu", 40, 5), step(1, 0, 100)], gz=False)


@pytest.mark.parametrize("host_ops", [lambda name: name.startswith("ProfilerStep"), _Unhashable()],
                         ids=["lambda", "unhashable"])
def test_any_host_ops_reads_the_same_with_helpers(tmp_path, host_ops, helpers):
    # A lambda cannot be sent to a helper (the chunks are made here); an unhashable one is sent but not kept.
    # Either way: relu@0, relu@10 (before the kernel), k@20, and the step, which host_ops keeps.
    path = _late_device_trace(tmp_path)
    helped = _tables(path, 2, host_ops)
    assert list(helped.events["name"].astype(str)) == ["aten::relu", "aten::relu", "k", "ProfilerStep#1"]
    _assert_same(_tables(path, 1, host_ops), helped)
    assert helpers == ([] if isinstance(host_ops, types.FunctionType) else [2])


def test_helpers_are_forked_from_a_single_thread_only_and_at_most_max_helpers(tmp_path, monkeypatch):
    """Another thread running: no helper (a forkserver or spawned one would import the caller's main module again).
    One thread, ten asked for: MAX_HELPERS (4) forked."""
    started = []

    class Pool(_InProcess):
        def __init__(self, max_workers, mp_context=None):
            started.append((max_workers, mp_context.get_start_method()))

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", Pool)
    path = _late_device_trace(tmp_path)
    monkeypatch.setattr(parallel, "threading", types.SimpleNamespace(active_count=lambda: 1))
    alone = _tables(path, 10)
    assert started == [(parallel.MAX_HELPERS, "fork")] and parallel.MAX_HELPERS == 4
    monkeypatch.setattr(parallel, "threading", types.SimpleNamespace(active_count=lambda: 2))
    threaded = _tables(path, 10)
    assert started == [(4, "fork")]  # none started with a second thread
    _assert_same(alone, threaded)


def test_decode_workers_must_be_positive():
    with pytest.raises(ValueError, match="decode_workers"):
        ReadOptions(decode_workers=0)


@pytest.mark.parametrize("files, workers, decode", [(1, 4, 4), (2, 4, 2), (3, 4, 1), (1, 1, 1)])
def test_the_engine_gives_each_file_the_cores_left(tmp_path, monkeypatch, files, workers, decode):
    # workers // files helpers per file, at least 1 (1 file of 4 cores: 4; 3 files: 1 each, as 4 // 3 is 1).
    seen = []
    monkeypatch.setattr(engine, "analyze_rank", lambda path, config, default_rank, n=1: seen.append(n) or n)
    paths = [write_trace(tmp_path / f"rank{i}.json", [kernel("k", 0, 5)], rank=i) for i in range(files)]
    monkeypatch.setattr(engine, "ProcessPoolExecutor", _InProcess)
    outcomes = [None] * files
    engine._run_local(paths, None, None, engine.EngineOptions(workers=workers), list(range(files)), outcomes,
                      lambda: None, None, [None] * files)
    assert seen == [decode] * files


@pytest.mark.parametrize("workers, can_fork, bytes_from, gz, pool", [
    (None, False, 10_000, False, False),  # threads here, default workers, a small run: read here, no pool
    (2, False, 10_000, False, True),  # workers asked for: the pool, whatever the size
    (None, True, 10_000, False, True),  # a forked pool starts in milliseconds: always used
    (None, False, 300, False, True),  # more JSON than the start-up costs: the pool
    (None, False, 3_000, True, True),  # the same files gzipped count 12x their size on disk
    (None, False, 3_000, "in a .json name", True),  # gzip known by its bytes, not its name
    (None, False, 3_000, False, False),  # ... and as plain JSON they are small
])
def test_a_pool_that_cannot_fork_starts_only_for_a_run_worth_its_start(tmp_path, monkeypatch, workers, can_fork,
                                                                       bytes_from, gz, pool):
    suffix = ".gz" if gz is True else ""
    paths = [write_trace(tmp_path / f"rank{i}.json{suffix}", [kernel("k", 0, 5)], rank=i, gz=bool(gz))
             for i in range(2)]
    json_bytes = sum(p.stat().st_size * (engine.GZIP_RATIO if gz else 1) for p in paths)
    assert (json_bytes >= bytes_from) == (pool and workers is None and not can_fork)  # each case on the side it names
    assert _pools_started(monkeypatch, paths, workers, can_fork, bytes_from) == ([2] if pool else [])


@pytest.mark.parametrize("workers", [None, 2])
def test_a_daemonic_process_starts_no_pool_whatever_the_run(tmp_path, monkeypatch, workers):
    # multiprocessing refuses a daemon children ("daemonic processes are not allowed to have children").
    paths = [write_trace(tmp_path / f"rank{i}.json", [kernel("k", 0, 5)], rank=i) for i in range(2)]
    monkeypatch.setattr(engine, "_daemonic", lambda: True)
    assert _pools_started(monkeypatch, paths, workers, can_fork=False, bytes_from=1) == []


def _pools_started(monkeypatch, paths, workers, can_fork, bytes_from) -> list[int]:
    """The pools ``engine._run_local`` starts for ``paths`` (their sizes), each as its number of workers; every
    rank is read either way."""
    started = []

    class Pool(_InProcess):
        def __init__(self, max_workers, mp_context=None, initializer=None):
            started.append(max_workers)

    monkeypatch.setattr(engine, "UNFORKED_POOL_FROM_BYTES", bytes_from)
    monkeypatch.setattr(engine, "ProcessPoolExecutor", Pool)
    monkeypatch.setattr(engine, "fork_context", lambda: multiprocessing.get_context("fork") if can_fork else None)
    outcomes = [None] * len(paths)
    engine._run_local(paths, engine.Config(), None, engine.EngineOptions(workers=workers), list(range(len(paths))),
                      outcomes, lambda: None, None, [None] * len(paths))
    assert [o.meta.rank for o in outcomes] == list(range(len(paths)))
    return started


class _InProcess:
    """A ProcessPoolExecutor stand-in that runs each task at once, here (so the test can see its arguments)."""

    def __init__(self, max_workers, mp_context=None, initializer=None):
        pass  # no worker to initialise: the tasks run here

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, fn, *args):
        from concurrent.futures import Future

        future = Future()
        try:
            future.set_result(fn(*args))
        except Exception as err:  # as a pool hands it back: from result()
            future.set_exception(err)
        return future

    def shutdown(self, *args, **kwargs):
        pass
