"""The parallel, cached, Dask and fsspec paths give exactly the Summary of the plain serial path.

Speed is the benchmark's business (benchmarks/scale.py); these tests only check that every way of mapping the
per-rank work yields the same tables, on real runs: a CPU gloo run with four ranks and the HTA GPU traces.
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit.rank import analyze as rank
from tracekit.read import reader
from tracekit.read.categories import DEVICE_CATEGORIES
from tracekit.cli.main import main
from tracekit.events.config import Config
from tracekit.rank.engine import EngineOptions
from tracekit.read.reader import ReadOptions
from tracedata import kernel, write_trace
from frame_equal import assert_frame_equal

ROOT = Path(__file__).resolve().parents[1]
GLOO_RUN = ROOT / "sample_traces" / "resnet-gloo-4rank"
HTA = ROOT.parent / "shared" / "traces" / "hta"
RUNS = [GLOO_RUN] + [HTA / n for n in ("nccl_a100_2rank", "sampled_128rank", "ns_resolution_1rank")]


def assert_same_summary(a: tracekit.Summary, b: tracekit.Summary, same_paths: bool = True) -> None:
    """Every table equal (values, dtypes, order) and every run fact equal."""
    for f in dataclasses.fields(a):
        left, right = getattr(a, f.name), getattr(b, f.name)
        if isinstance(left, pd.DataFrame):
            assert_frame_equal(left, right, obj=f.name)
        elif f.name == "run" and not same_paths:
            skip = {"source", "files", "skipped", "workload"}  # api.read_run_json reads local folders only
            left, right = _plain(left.to_dict()), _plain(right.to_dict())
            assert {k: v for k, v in left.items() if k not in skip} == {k: v for k, v in right.items() if k not in skip}
            assert [x["rank"] for x in left["files"]] == [x["rank"] for x in right["files"]]
        elif f.name == "run":
            assert _plain(left.to_dict()) == _plain(right.to_dict())
        else:
            assert _plain(left) == _plain(right), f.name


def _plain(value):
    """NaN equal to NaN, for comparing the run facts and findings."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


@pytest.fixture(scope="module")
def plain(summaries):
    """The reference: every rank in this process, no cache."""
    return {run: summaries(run, workers=1, cache=False) for run in RUNS}


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_process_pool_gives_the_plain_summary(plain, run):
    assert_same_summary(plain[run], tracekit.summarize(run, workers=2, cache=False))


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_cached_summary_is_the_plain_summary(plain, run, tmp_path):
    cold = tracekit.summarize(run, workers=2, cache_dir=tmp_path)
    warm = tracekit.summarize(run, workers=2, cache_dir=tmp_path)
    assert_same_summary(plain[run], cold)
    assert_same_summary(plain[run], warm)


@pytest.fixture(scope="module")
def dask_cluster():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)
    with cluster:
        yield cluster


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_dask_engine_gives_the_plain_summary(plain, run, dask_cluster):
    from distributed import Client

    with Client(dask_cluster) as client:
        assert_same_summary(plain[run], tracekit.summarize(run, engine="dask", client=client, cache=False))


def test_dask_engine_takes_a_scheduler_address_and_fills_the_cache(plain, dask_cluster, tmp_path):
    result = tracekit.summarize(GLOO_RUN, engine="dask", client=dask_cluster.scheduler_address, cache_dir=tmp_path)
    assert_same_summary(plain[GLOO_RUN], result)
    assert len(list(tmp_path.glob("*/*/rank.arrow"))) == 0  # entries are folders of tables
    assert len([p for p in tmp_path.glob("??/*") if p.is_dir()]) == 4  # one entry per rank (in shard folders xx/)
    assert_same_summary(plain[GLOO_RUN], tracekit.summarize(GLOO_RUN, cache_dir=tmp_path))


def test_cli_scheduler_flag(dask_cluster, capsys):
    address = dask_cluster.scheduler_address
    assert main(["summarize", str(GLOO_RUN), "--json", "--no-cache", "--scheduler", address]) == 0
    from_dask = capsys.readouterr().out
    assert main(["summarize", str(GLOO_RUN), "--json", "--no-cache", "--workers", "1"]) == 0
    assert from_dask == capsys.readouterr().out


def test_fsspec_url_gives_the_local_summary(plain):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    for file in GLOO_RUN.iterdir():
        fs.pipe(f"/tracekit-test/run/{file.name}", file.read_bytes())
    try:
        remote = tracekit.summarize("memory://tracekit-test/run", workers=1, cache=False)
        assert_same_summary(plain[GLOO_RUN], remote, same_paths=False)
        assert remote.run.files[0].path.startswith("memory://")
        assert [s.path.rsplit("/", 1)[-1] for s in remote.run.skipped] == ["run.json"]
        one = tracekit.summarize("memory://tracekit-test/run/rank-2.pt.trace.json.gz", workers=1, cache=False)
        assert one.ranks["rank"].tolist() == [2]
    finally:
        fs.rm("/tracekit-test", recursive=True)


def test_progress_is_reported_once_per_rank(tmp_path):
    seen = []
    tracekit.summarize(GLOO_RUN, workers=2, cache=False, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(i, 5) for i in range(1, 6)]  # four ranks and run.json, which is read and skipped
    seen.clear()
    tracekit.summarize(GLOO_RUN, cache_dir=tmp_path)
    tracekit.summarize(GLOO_RUN, cache_dir=tmp_path, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (5, 5)


def test_the_engine_says_when_this_process_only_waits_on_its_workers():
    import multiprocessing

    from tracekit.rank.engine import map_ranks

    files = sorted(GLOO_RUN.glob("rank-*"))[:3]
    workers_then = []  # the pool's live workers at each call
    map_ranks(files, Config(), None, EngineOptions(workers=2),
              waiting=lambda: workers_then.append(len(multiprocessing.active_children())))
    assert workers_then == [2]  # once, with every worker started
    workers_then.clear()
    map_ranks(files, Config(), None, EngineOptions(workers=1), waiting=lambda: workers_then.append(-1))
    assert workers_then == []  # the ranks ran in this process: it never only waited


def test_the_replay_loads_while_the_workers_analyse_the_ranks(monkeypatch):
    """summarize starts loading the compiled replay before its engine has every rank back, not after."""
    import tracekit.api as api

    returned, loaded_then = [], []
    real_map = api.map_ranks

    def map_ranks(*args, **kwargs):
        out = real_map(*args, **kwargs)
        returned.append(True)
        return out

    monkeypatch.setattr(api, "map_ranks", map_ranks)
    monkeypatch.setattr(api.replay, "warm_up", lambda: loaded_then.append(bool(returned)))
    tracekit.summarize(GLOO_RUN, workers=2, cache=False)
    assert loaded_then == [False]  # once, while the ranks were still being analysed
    loaded_then.clear()
    returned.clear()
    tracekit.summarize(GLOO_RUN, workers=1, cache=False)
    assert loaded_then == [True]  # serial: beside the run's own stages, once


_FORKSERVER_SCRIPT = """
import multiprocessing.forkserver as fs, sys, threading
import tracekit
from tracekit.rank import engine
threading.Thread(target=threading.Event().wait, daemon=True).start()  # a thread alive: fork is not safe, as in Jupyter
fs.set_forkserver_preload(["json"])  # a list the program set stays as it is
assert engine._context().get_start_method() == "forkserver" and fs._forkserver._preload_modules == ["json"]
fs.set_forkserver_preload(["__main__"])  # Python's own list: the server imports tracekit before it forks workers
engine._context()
assert fs._forkserver._preload_modules == ["__main__", "tracekit.rank.engine"], fs._forkserver._preload_modules
pooled = tracekit.summarize(sys.argv[1], workers=2, cache=False)
assert fs._forkserver._forkserver_pid is not None  # the pool's workers came from the server
assert pooled.to_json("all") == tracekit.summarize(sys.argv[1], workers=1, cache=False).to_json("all")
print("ok")
"""


def test_a_pool_started_beside_threads_forks_its_workers_from_a_server_that_imported_tracekit():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FORKSERVER_SCRIPT, str(GLOO_RUN)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_read_errors_in_workers_name_the_file(tmp_path):
    for file in GLOO_RUN.glob("rank-[01]*"):
        shutil.copy(file, tmp_path / file.name)
    broken = tmp_path / "rank-2.pt.trace.json.gz"
    broken.write_bytes(gzip.compress(b'{"traceEvents": []}' * 100)[:-20])
    (tmp_path / "notes.json").write_text('{"not": "a trace"}')
    with pytest.raises(tracekit.TruncatedTraceError, match="rank-2.pt.trace.json.gz"):
        tracekit.summarize(tmp_path, workers=2, cache=False, strict=True)
    # Not strict: the truncated rank is skipped, named with its reason, and the others are read.
    skipped = {Path(s.path).name: s for s in tracekit.summarize(tmp_path, workers=2, cache=False).run.skipped}
    assert sorted(skipped) == ["notes.json", "rank-2.pt.trace.json.gz"]
    assert "truncated" in skipped["rank-2.pt.trace.json.gz"].reason and skipped["rank-2.pt.trace.json.gz"].rank == 2
    broken.unlink()
    result = tracekit.summarize(tmp_path, workers=2, cache=False)
    assert result.ranks["rank"].tolist() == [0, 1]
    assert [s.path.endswith("notes.json") for s in result.run.skipped] == [True]


@pytest.mark.parametrize("bad", [dict(kind="spark"), dict(workers=0), dict(kind="dask"),
                                 dict(client="tcp://x:1"), dict(progress=3)])
def test_engine_options_are_validated(bad):
    with pytest.raises(ValueError):
        EngineOptions(**bad)


# --- the reader's fast paths read exactly what its general path reads ------------------------------------------

# Every bundled sample's ranks and every shared trace.
READER_FILES = sorted(GLOO_RUN.parent.glob("*/rank-*")) + sorted(HTA.glob("*/*.json.gz"))
CHUNKED = ReadOptions(chunk_above_bytes=0, chunk_events=997)  # every trace streamed in chunks of a prime size


def _no_whole_read(path, *args, **kwargs):
    raise AssertionError(f"{path} was read whole")


def _same_read(a, b) -> None:
    assert a[0] == b[0]
    assert_frame_equal(a[1], b[1])
    assert_frame_equal(a[2], b[2])


@pytest.mark.parametrize("path", READER_FILES, ids=lambda p: p.parent.name + "/" + p.name[:12])
def test_chunked_and_general_decoding_read_the_same(path, monkeypatch):
    fast = reader.read_rank(path, default_rank=0)
    with monkeypatch.context() as patched:  # streamed, with no fall-back to reading the whole file
        patched.setattr(reader, "load_bytes", _no_whole_read)
        patched.setattr(reader, "_read", _no_whole_read)
        _same_read(fast, reader.read_rank(path, default_rank=0, options=CHUNKED))

    def refuse(data):
        raise reader._Refused

    monkeypatch.setattr(reader, "_decode_fast", refuse)
    _same_read(fast, reader.read_rank(path, default_rank=0))


@pytest.mark.parametrize("path", READER_FILES, ids=lambda p: p.parent.name + "/" + p.name[:12])
def test_host_ops_left_out_of_a_gpu_rank_change_no_result(path):
    """analyze_rank reads a GPU trace without the CPU ops its analysis never looks at; every result is the same.
    Each file is read whole and streamed in chunks; the reduction of every op read whole is the reference of both."""
    first = reader.read_tables(path, default_rank=0)
    full = rank.reduce_rank(first.meta, first.events, first.comm_args, Config(), first.ops, first.memory)
    analyzed = rank.analyze_rank(path, Config(), default_rank=0)  # reads whole, leaving host ops out
    for chunked in (False, True):
        options = CHUNKED if chunked else ReadOptions()
        whole = reader.read_tables(path, default_rank=0, options=options) if chunked else first
        if chunked:  # the same tables as read whole, so the same reduction
            assert whole.meta == first.meta
            for name in ("events", "comm_args", "ops", "memory"):
                assert_frame_equal(getattr(whole, name), getattr(first, name), obj=name, check_exact=True)
        lean_tables = reader.read_tables(path, default_rank=0, host_ops=rank.reads_host_op, options=options)
        meta, events, comm_args = whole.meta, whole.events, whole.comm_args  # read_rank's three
        lean = lean_tables.meta, lean_tables.events, lean_tables.comm_args
        assert lean[0] == meta  # dropped events and the first usable start count every event

        cpu_op = (events["cat"] == "cpu_op").to_numpy()
        unread = cpu_op & ~events["name"].astype(str).map(rank.reads_host_op).to_numpy()
        unread[comm_args["row"].to_numpy()] = False
        cpu_only = not events["cat"].isin(DEVICE_CATEGORIES).any()
        if cpu_only:  # a CPU-only trace's ops are its device work: all kept, every value exactly
            assert lean[0] == meta
            assert_frame_equal(events, lean[1], check_exact=True)
            assert_frame_equal(comm_args, lean[2], check_exact=True)
        else:  # ops in chunks before the first device event's are kept; after it, every unread op is left out
            assert 0 < len(events) - len(lean[1]) <= unread.sum()

        # The ops table is read before the host-op filter: the same with it or without.
        assert_frame_equal(whole.ops, lean_tables.ops, check_exact=True)
        if chunked and cpu_only:  # every table streamed is, exactly, the one read whole: its reduction is ``full``
            assert_frame_equal(whole.memory, lean_tables.memory, obj="memory", check_exact=True)
            continue
        # Whole: analyze_rank's own lean read; chunked: the lean tables streamed here.
        result = rank.reduce_rank(*lean, Config(), lean_tables.ops, lean_tables.memory) if chunked else analyzed
        for f in dataclasses.fields(full):
            left, right = getattr(full, f.name), getattr(result, f.name)
            if isinstance(left, pd.DataFrame):
                assert_frame_equal(left, right, obj=f.name)
            else:
                assert left == right, f.name


@pytest.mark.parametrize("top", ['{"traceEvents": []}', "[]"])
def test_a_trace_without_events_reads_the_same_whole_and_chunked(top, tmp_path):
    # An empty trace holds nothing to analyse: the same named error, whole or chunked.
    path = tmp_path / "rank0.json"
    path.write_text(top)
    with pytest.raises(tracekit.EmptyTraceError, match="empty trace"):
        tracekit.summarize(path, workers=1, cache=False)
    for options in (ReadOptions(), ReadOptions(chunk_above_bytes=0)):
        with pytest.raises(tracekit.EmptyTraceError, match="empty trace"):
            reader.read_rank(path, default_rank=0, options=options)


@pytest.mark.parametrize("bad", [{"chunk_above_bytes": -1}, {"chunk_events": 0}])
def test_read_options_are_validated(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        ReadOptions(**bad)


def test_progress_names_the_stages_after_the_ranks():
    class Recorder:
        def __init__(self):
            self.seen = []

        def __call__(self, done, total):
            self.seen.append(("ranks", done, total))

        def stage(self, name):
            self.seen.append(name)

    recorder = Recorder()
    tracekit.summarize(GLOO_RUN, workers=1, cache=False, progress=recorder)
    ticks, stages = recorder.seen[:-3], recorder.seen[-3:]
    total = ticks[0][2]
    assert ticks == [("ranks", i, total) for i in range(1, total + 1)]
    assert stages == ["joining ranks", "replaying", "done"]


def test_the_cli_progress_line_shows_each_stage_on_a_terminal():
    import io

    from tracekit.cli.options import ProgressBar

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal()
    bar = ProgressBar(out)
    for done in range(1, 9):
        bar(done, 8)
    for name in ("joining ranks", "replaying", "done"):
        bar.stage(name)
    text = out.getvalue()
    assert "tracekit: joining ranks ..." in text and "tracekit: replaying ..." in text
    assert text.endswith("\r\x1b[K")  # cleared at the end: the report starts on a clean line
    quiet = Terminal()
    small = ProgressBar(quiet)
    small(1, 2)
    small.stage("replaying")
    assert quiet.getvalue() == ""  # a run of few ranks shows nothing


def test_the_cli_names_the_reading_of_a_large_run_of_few_files(tmp_path):
    """One file of 1 GiB or more (``ProgressBar.LARGE_BYTES``) gets the stage lines from its reading on, where a run
    of few small files shows nothing; summarize tells it how many files it reads and their bytes on disk."""
    import io

    from tracekit.cli.options import ProgressBar

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    big = ProgressBar(out := Terminal())
    big.reading(1, 10_300_000_000)
    big(1, 1)
    big.stage("joining ranks")
    big.stage("done")
    assert out.getvalue() == ("\r\x1b[Ktracekit: reading 1 trace file (10.3 GB) ...\r\x1b[Ktracekit: joining ranks ..."
                              "\r\x1b[K")
    small = ProgressBar(quiet := Terminal())
    small.reading(2, ProgressBar.LARGE_BYTES - 1)
    small.stage("replaying")
    assert quiet.getvalue() == ""

    class Recorder:
        def __init__(self):
            self.read = None

        def __call__(self, done, total):
            pass

        def reading(self, files, total_bytes):
            self.read = (files, total_bytes)

    folder = tmp_path / "run"
    for rank in (0, 1):
        write_trace(folder / f"rank{rank}.json", [kernel("k", 0, 5)], rank=rank, gz=False)
    recorder = Recorder()
    tracekit.summarize(folder, workers=1, cache=False, progress=recorder)
    sizes = sum((folder / f"rank{rank}.json").stat().st_size for rank in (0, 1))
    assert recorder.read == (2, sizes)
