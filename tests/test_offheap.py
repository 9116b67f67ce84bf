"""A Summary's event tables off the heap (``tracekit.summary.offheap``): Arrow IPC files in the cache or in a
temporary folder, mapped when the Summary is made, read on first access, and every read the DataFrame the analysis
made (compared with the same analysis holding its tables in memory, on every sample and shared run). The folder's
life: removed with a temporary Summary, counted and removed by the cache's info, trim and clear, not needed by a
live Summary or a pickle once gone; where it cannot be written the tables stay in memory, with a warning."""

from __future__ import annotations

import errno
import gc
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.events.config import Config
from tracekit.rank import cache, keys
from tracekit.read.files import find_trace_files
from tracekit.summary import arrowframe, offheap
from tracekit.summary.model import EVENT_TABLES, Summary
from frame_equal import assert_frame_equal

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces" / "hta"
RUNS = sorted(p for p in (ROOT / "sample_traces").iterdir() if p.is_dir()) + \
    (sorted(p for p in SHARED.iterdir() if p.is_dir()) if SHARED.is_dir() else [])
MEMORY_RUN = ROOT / "sample_traces" / "resnet-gloo-2rank-memory"  # every event table has rows


@pytest.fixture(scope="module")
def in_memory():
    """``in_memory(run, **options)``: the same analysis with its event tables held as DataFrames (the reference)."""
    memo = {}

    def get(run, **options):
        key = (run, tuple(sorted(options.items())))
        if key not in memo:
            memo[key] = tracekit.summarize(run, _tables_in_memory=True, **options)
        return memo[key]

    return get


def assert_tables_equal(off: Summary, reference: Summary) -> None:
    for name in EVENT_TABLES:
        left, right = getattr(off, name), getattr(reference, name)
        assert_frame_equal(left, right, check_exact=True, obj=name)
        assert left.columns.dtype == right.columns.dtype and list(left.dtypes) == list(right.dtypes), name


def mapped(summary: Summary) -> dict[str, offheap.MappedTable]:
    """The event tables the Summary holds as mapped files (not as DataFrames)."""
    values = {name: object.__getattribute__(summary, name) for name in EVENT_TABLES}
    return {name: v for name, v in values.items() if isinstance(v, offheap.MappedTable)}


def test_every_sample_and_shared_run_is_here():
    assert len([r for r in RUNS if r.parent.name == "sample_traces"]) >= 17
    if not SHARED.is_dir():
        pytest.skip("../shared/traces/hta is not beside this checkout")
    assert len([r for r in RUNS if r.parent == SHARED]) == 6


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_the_off_heap_tables_are_the_in_memory_ones(run, summaries, in_memory):
    off = summaries(run)  # the shared Summary (cache off): its tables are files in a temporary folder
    assert sorted(mapped(off)) == sorted(EVENT_TABLES)
    assert_tables_equal(off, in_memory(run))
    assert all(t.loaded for t in mapped(off).values())
    assert not mapped(in_memory(run)) and offheap.folder_of(in_memory(run)) is None


def test_the_tables_are_arrow_files_in_the_cache_keyed_on_the_run(tmp_path, in_memory):
    run = tmp_path / "run"
    shutil.copytree(MEMORY_RUN, run)
    before = sorted(p.name for p in run.iterdir())
    s = tracekit.summarize(run, workers=1, cache_dir=tmp_path / "cache")
    key = keys.run_key(find_trace_files(run), Config(), None, Summary)
    entry = tmp_path / "cache" / "tables" / key
    assert offheap.folder_of(s) == entry
    assert sorted(p.name for p in entry.iterdir()) == sorted(f"{name}.arrow" for name in EVENT_TABLES)
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written beside the traces
    assert not any(t.loaded for t in mapped(s).values())  # nothing read yet
    s.graph
    assert [name for name, t in mapped(s).items() if t.loaded] == ["graph"]  # read on first access, one by one
    assert_tables_equal(s, in_memory(MEMORY_RUN))

    # A second Summary of the same run maps the files already there: they are written once.
    stamps = {p.name: p.stat().st_mtime_ns for p in entry.iterdir()}
    again = tracekit.summarize(run, workers=1, cache_dir=tmp_path / "cache")
    assert offheap.folder_of(again) == entry and {p.name: p.stat().st_mtime_ns for p in entry.iterdir()} == stamps
    assert_tables_equal(again, in_memory(MEMORY_RUN))

    # A changed file is another run: another folder.
    os.utime(run / "rank-1.pt.trace.json.gz", ns=(1, 1))
    assert offheap.folder_of(tracekit.summarize(run, workers=1, cache_dir=tmp_path / "cache")) != entry
    assert cache.info(tmp_path / "cache").run_tables == 2


def test_without_cache_the_temporary_folder_goes_with_the_summary(in_memory):
    s = tracekit.summarize(MEMORY_RUN, workers=1, cache=False)
    folder = offheap.folder_of(s)
    assert folder.is_dir() and folder.parent == Path(tempfile.gettempdir())
    assert folder.name.startswith("tracekit-tables-")
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{name}.arrow" for name in EVENT_TABLES)
    assert_tables_equal(s, in_memory(MEMORY_RUN))
    del s
    gc.collect()
    assert not folder.exists()


def test_a_process_that_ends_without_its_exit_handlers_leaves_a_folder_the_next_one_removes(tmp_path, monkeypatch):
    """A killed process (or one ending with os._exit, as here) cannot remove its temporary
    folders; the next temporary Summary on the machine removes those whose process is gone.
    The test's temporary folder is its own (TMPDIR), so the folders it plants are seen by no other process."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    leave = ("import os, tracekit; from tracekit.summary import offheap; "
             f"s = tracekit.summarize({str(MEMORY_RUN)!r}, workers=1, cache=False); "
             "print(offheap.folder_of(s), flush=True); os._exit(0)")
    left = Path(subprocess.run([sys.executable, "-c", leave], capture_output=True, text=True, check=True, cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)}).stdout.strip())
    assert left.is_dir() and left.parent == temp and left.name.startswith("tracekit-tables-")
    alive = temp / f"tracekit-tables-{os.getpid()}-test"  # this process's: kept
    alive.mkdir()
    other = tmp_path / "tracekit-tables-1-x"  # not in the temporary folder: not looked at
    other.mkdir()
    # Names this module does not make: left alone, and none stops a Summary
    # (a number beyond any pid made os.kill raise OverflowError; a non-ASCII digit made int() raise).
    strays = [temp / f"tracekit-tables-{name}" for name in ("99999999999999999999-x", "\u00b2-x", "12345678", "abc-x")]
    for stray in strays:
        stray.mkdir()
    s = tracekit.summarize(MEMORY_RUN, workers=1, cache=False)
    assert not left.exists() and alive.is_dir() and other.is_dir()
    assert all(stray.is_dir() for stray in strays)
    assert offheap.folder_of(s).parent == temp
    assert offheap.folder_of(s).name.startswith(f"tracekit-tables-{os.getpid()}-")


def test_a_read_table_stays_frozen(in_memory):
    s = tracekit.summarize(MEMORY_RUN, workers=1, cache=False)
    graph, gaps = s.graph, s.gaps
    graph.loc[0, "rank"] = 99
    gaps["extra"] = 0
    steps = s.op_steps
    steps.iloc[0, 0] = -5
    assert_tables_equal(s, in_memory(MEMORY_RUN))
    assert s.graph.loc[0, "rank"] != 99 and "extra" not in s.gaps and s.graph is not s.graph


def test_a_live_summary_outlives_a_cleared_cache(tmp_path, in_memory):
    """The decision: a live Summary keeps working when its folder is removed (cache clear, trim): each file is
    mapped when the Summary is made, and the mapping keeps the data of a removed file."""
    s = tracekit.summarize(MEMORY_RUN, workers=1, cache_dir=tmp_path)
    s.gaps  # one read before the clear, the others after
    removed = cache.clear(tmp_path)
    assert removed.run_tables == 1 and not (tmp_path / "tables").exists()
    assert not offheap.folder_of(s).exists()
    assert_tables_equal(s, in_memory(MEMORY_RUN))


def test_a_temporary_summary_outlives_its_removed_folder(in_memory):
    s = tracekit.summarize(MEMORY_RUN, workers=1, cache=False)
    shutil.rmtree(offheap.folder_of(s))  # a cleaner of temporary files
    assert_tables_equal(s, in_memory(MEMORY_RUN))


def test_a_pickle_carries_the_tables_into_another_process(tmp_path, in_memory):
    s = tracekit.summarize(MEMORY_RUN, workers=1, cache=False)
    folder = offheap.folder_of(s)
    blob = pickle.dumps(s)
    assert b"tracekit-tables-" not in blob and all(t.loaded for t in mapped(s).values())  # the data, no path
    del s
    gc.collect()
    assert not folder.exists()
    here = pickle.loads(blob)
    assert offheap.folder_of(here) is None
    assert_tables_equal(here, in_memory(MEMORY_RUN))
    (tmp_path / "summary.pickle").write_bytes(blob)
    read = "import pickle, sys; print(pickle.loads(open(sys.argv[1], 'rb').read()).to_json(tables='all'))"
    there = subprocess.run([sys.executable, "-c", read, str(tmp_path / "summary.pickle")], capture_output=True,
                           text=True, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert there.stdout.strip() == in_memory(MEMORY_RUN).to_json(tables="all")


def test_to_dict_and_to_json_of_every_table_are_the_same(in_memory):
    s = tracekit.summarize(MEMORY_RUN, workers=1, cache=False)
    reference = in_memory(MEMORY_RUN)
    assert s.to_dict(tables="all") == reference.to_dict(tables="all")
    assert s.to_json(tables="all") == reference.to_json(tables="all") and s.to_json() == reference.to_json()
    assert str(s) == str(reference)


def test_the_dask_engine_keeps_the_tables_off_the_heap(tmp_path, in_memory):
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)
    with cluster, distributed.Client(cluster) as client:
        no_cache = tracekit.summarize(MEMORY_RUN, engine="dask", client=client, cache=False)
        cached = tracekit.summarize(MEMORY_RUN, engine="dask", client=client, cache_dir=tmp_path)
    for s in (no_cache, cached):
        assert sorted(mapped(s)) == sorted(EVENT_TABLES)
        assert_tables_equal(s, in_memory(MEMORY_RUN))
    assert offheap.folder_of(cached).parent == tmp_path / "tables"


def test_an_unwritable_cache_keeps_the_tables_in_memory_with_a_warning(tmp_path, in_memory):
    (tmp_path / "tables").write_text("")  # no folder can be made there
    with pytest.warns(UserWarning, match="event tables are kept in memory: they could not be written to"):
        s = tracekit.summarize(MEMORY_RUN, workers=1, cache_dir=tmp_path)
    assert offheap.folder_of(s) is None and not mapped(s)
    assert cache.info(tmp_path).entries == 2  # the ranks' entries are written as before
    assert_tables_equal(s, in_memory(MEMORY_RUN))


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_cache_folder_keeps_the_tables_in_memory(tmp_path, in_memory):
    tracekit.summarize(MEMORY_RUN, workers=1, cache_dir=tmp_path)  # the ranks' entries
    cache.clear(tmp_path)
    tmp_path.chmod(0o555)
    try:
        with pytest.warns(UserWarning, match="event tables are kept in memory"):
            s = tracekit.summarize(MEMORY_RUN, workers=1, cache_dir=tmp_path)
    finally:
        tmp_path.chmod(0o755)
    assert offheap.folder_of(s) is None
    assert_tables_equal(s, in_memory(MEMORY_RUN))


def test_a_full_disk_keeps_the_tables_in_memory_and_leaves_no_half_folder(tmp_path, in_memory, monkeypatch):
    def full(folder, frames):
        (folder / "gaps.arrow").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(offheap, "_write", full)
    with pytest.warns(UserWarning, match="No space left on device"):
        cached = tracekit.summarize(MEMORY_RUN, workers=1, cache_dir=tmp_path)
    with pytest.warns(UserWarning, match="a temporary folder: .*No space left on device"):
        temporary = tracekit.summarize(MEMORY_RUN, workers=1, cache=False)
    for s in (cached, temporary):
        assert offheap.folder_of(s) is None
        assert_tables_equal(s, in_memory(MEMORY_RUN))
    assert list((tmp_path / "tables").iterdir()) == []  # the hidden folder being written is gone


def test_a_cache_that_cannot_be_written_still_answers_from_its_tables(tmp_path, in_memory, monkeypatch):
    first = tracekit.summarize(MEMORY_RUN, workers=1, cache_dir=tmp_path)

    def refused(folder, frames):
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(offheap, "_write", refused)
    second = tracekit.summarize(MEMORY_RUN, workers=1, cache_dir=tmp_path)  # no warning: nothing to write
    assert offheap.folder_of(second) == offheap.folder_of(first) and sorted(mapped(second)) == sorted(EVENT_TABLES)
    assert_tables_equal(second, in_memory(MEMORY_RUN))


def test_a_damaged_cache_entry_is_written_again(tmp_path, in_memory):
    entry = offheap.folder_of(tracekit.summarize(MEMORY_RUN, workers=1, cache_dir=tmp_path))
    (entry / "graph.arrow").write_bytes(b"not arrow")
    s = tracekit.summarize(MEMORY_RUN, workers=1, cache_dir=tmp_path)
    assert offheap.folder_of(s) == entry and sorted(mapped(s)) == sorted(EVENT_TABLES)
    assert_tables_equal(s, in_memory(MEMORY_RUN))


def test_info_trim_and_clear_count_and_remove_the_tables(tmp_path):
    s = tracekit.summarize(MEMORY_RUN, workers=1, cache_dir=tmp_path)
    entry = offheap.folder_of(s)
    tables_bytes = sum(p.stat().st_size for p in entry.iterdir())
    ranks_bytes = sum(p.stat().st_size for p in tmp_path.glob("??/*/*"))
    found = cache.info(tmp_path)
    assert (found.entries, found.run_tables, found.bytes) == (2, 1, ranks_bytes + tables_bytes)
    assert cache.trim(tmp_path, max_bytes=found.bytes - 1) > 0  # over the cap by a byte: the oldest goes
    assert cache.trim(tmp_path, max_bytes=0) > 0
    assert cache.info(tmp_path) == cache.CacheInfo(tmp_path, 0, 0, 0) and not entry.exists()
    assert len(s.ops_by_shape) > 0  # the live Summary still reads its trimmed tables


def test_clear_removes_only_tables_folders_the_cache_wrote(tmp_path):
    tracekit.summarize(MEMORY_RUN, workers=1, cache_dir=tmp_path)
    (tmp_path / "tables" / "notes.txt").write_text("keep")
    (tmp_path / "tables" / ("a" * 32)).mkdir()  # a key's name, but no table in it
    (tmp_path / "tables" / "mine").mkdir()
    (tmp_path / "tables" / "mine" / "x.arrow").write_text("keep")
    assert cache.clear(tmp_path).run_tables == 1
    assert sorted(p.name for p in (tmp_path / "tables").iterdir()) == sorted(["notes.txt", "a" * 32, "mine"])


def test_a_summary_made_of_frames_keeps_them_in_memory():
    gaps = pd.DataFrame({"rank": [0, 1], "dur_us": [1.5, np.nan]})
    s = Summary(ranks=pd.DataFrame({"rank": [0]}), steps=pd.DataFrame(), collectives=pd.DataFrame(), gaps=gaps)
    assert offheap.folder_of(s) is None and not mapped(s)
    assert_frame_equal(s.gaps, gaps)
    assert_frame_equal(pickle.loads(pickle.dumps(s)).gaps, gaps)


def test_a_table_arrow_cannot_keep_exactly_stays_in_memory():
    odd = pd.DataFrame({"rank": [0, 1], "shapes": [[1, 2], [3]]})  # lists would come back as arrays
    s = offheap.kept(Summary(ranks=pd.DataFrame(), steps=pd.DataFrame(), collectives=pd.DataFrame(), gaps=odd,
                             graph=pd.DataFrame({"rank": np.array([0, 1], dtype=np.int32)})))
    assert sorted(mapped(s)) == sorted(set(EVENT_TABLES) - {"gaps"})
    assert_frame_equal(s.gaps, odd)
    assert s.gaps["shapes"].tolist() == [[1, 2], [3]]
    assert s.graph["rank"].dtype == np.int32


ROUND_TRIPS = {
    "numbers, NaN, -0.0, bool": pd.DataFrame({"f": [1.0, np.nan, -0.0], "i": np.array([1, 2, 3], dtype=np.int32),
                                              "u": np.array([0, 7, 255], dtype=np.uint8), "b": [True, False, True]}),
    "strings of both storages and markers": pd.DataFrame({
        "s": pd.array(["x", None, "z"], dtype="str"),
        "p": pd.array(["a", None, "b"], dtype=pd.StringDtype("python", na_value=pd.NA))}),
    "object columns of str and None": pd.DataFrame({"o": pd.Series(["p", None, "q"], dtype=object),
                                                    "none": pd.Series([None] * 3, dtype=object)}),
    "categories unused, missing, ordered": pd.DataFrame({
        "c": pd.Categorical(["u", None, "u"], categories=["u", "v", "w"], ordered=True),
        "n": pd.Categorical([3, 1, 3]),
        "wide": pd.Categorical([f"k{i}" for i in range(300)][:3], categories=[f"k{i}" for i in range(300)])}),
    "no rows": pd.DataFrame({"k": pd.Categorical([], categories=pd.Index(["a", "b"], dtype=object)),
                             "x": pd.Series([], dtype=float), "o": pd.Series([], dtype=object)}),
    "object labels": pd.DataFrame({"a": [1]}).set_axis(pd.Index(["a"], dtype=object), axis=1),
}


@pytest.mark.parametrize("name", ROUND_TRIPS)
def test_arrowframe_round_trips_exactly(name, tmp_path):
    frame = ROUND_TRIPS[name]
    batch = arrowframe.to_arrow(frame)
    offheap._write(tmp_path, {"t": frame})
    back = offheap.MappedTable(tmp_path / "t.arrow").frame()
    assert_frame_equal(back, frame, check_exact=True)
    assert back.columns.dtype == frame.columns.dtype and list(back.dtypes) == list(frame.dtypes)
    for column in frame:
        if frame[column].dtype == object:  # None stays None (assert_frame_equal takes it for NaN)
            assert [type(v) for v in back[column]] == [type(v) for v in frame[column]]
        if isinstance(frame[column].dtype, pd.CategoricalDtype):
            assert back[column].cat.codes.dtype == frame[column].cat.codes.dtype
            assert back[column].cat.categories.dtype == frame[column].cat.categories.dtype
    assert batch.num_rows == len(frame)


@pytest.mark.parametrize("frame", [
    pd.DataFrame({"o": pd.Series(["a", np.nan], dtype=object)}),  # NaN would come back as None
    pd.DataFrame({"l": [[1], [2]]}),
    pd.DataFrame({"a": [1]}, index=[5]),
    pd.DataFrame({"t": pd.to_datetime(["2020-01-01"])}),
    pd.DataFrame({"x": pd.array([1, None], dtype="Int64")}),
    pd.DataFrame({0: [1.0]}),
], ids=["nan-in-object", "lists", "labelled-index", "datetime", "nullable-int", "integer-label"])
def test_arrowframe_refuses_what_it_cannot_keep_exactly(frame):
    assert arrowframe.to_arrow(frame) is None
