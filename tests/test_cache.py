"""The Parquet cache: exact round trips, hits on unchanged files, misses when a file or an option changes, answers
that never depend on who filled an entry, and a size cap kept by removing the least recently used entries."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.rank import cache, cachefile
from tracekit.rank import engine, keys
from tracekit.events.config import Config
from tracekit.rank.analyze import RankResult, analyze_rank
from frame_equal import assert_frame_equal

ROOT = Path(__file__).resolve().parents[1]
GLOO_RUN = ROOT / "sample_traces" / "resnet-gloo-2rank"
HTA = ROOT.parent / "shared" / "traces" / "hta"
# Every rank of one run, the first rank of each other sample run (pipeline, FSDP, TP: their own tables and
# columns) and every shared trace.
FILES = (sorted(GLOO_RUN.glob("rank-*"))
         + [min(run.glob("rank-*")) for run in sorted(GLOO_RUN.parent.iterdir()) if run.is_dir() and run != GLOO_RUN]
         + sorted(HTA.glob("*/*.json.gz")))


def _assert_same_result(a, b) -> None:
    for f in dataclasses.fields(a):
        left, right = getattr(a, f.name), getattr(b, f.name)
        if isinstance(left, pd.DataFrame):
            assert_frame_equal(left, right, obj=f.name)
        else:
            assert left == right and type(left) is type(right), f.name


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.parent.name + "/" + p.name[:12])
def test_rank_result_round_trips_exactly(path, tmp_path):
    config = Config(window="all_steps")
    result = analyze_rank(path, config, 0)
    key = keys.rank_key(path, config, 0)
    store = cache.Store(tmp_path, RankResult)
    assert store.get(key) is None
    store.put(key, result)
    _assert_same_result(result, store.get(key))


def test_second_summary_comes_from_the_cache(tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(GLOO_RUN, run)
    before = sorted(p.name for p in run.iterdir())
    first = tracekit.summarize(run, workers=1, cache_dir=tmp_path / "cache")

    parse = engine.analyze_rank

    def no_parsing(path, *args, **kwargs):
        if Path(path).name.startswith("rank-"):
            raise AssertionError("a cached rank was parsed again")
        return parse(path, *args, **kwargs)  # run.json is not a trace: it is read again (cheap) and skipped

    monkeypatch.setattr(engine, "analyze_rank", no_parsing)
    second = tracekit.summarize(run, workers=1, cache_dir=tmp_path / "cache")
    assert_frame_equal(first.ranks, second.ranks)
    assert_frame_equal(first.collectives, second.collectives)
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written beside the traces


def test_a_changed_file_misses_the_cache(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(GLOO_RUN, run)
    store = tmp_path / "cache"
    tracekit.summarize(run, workers=1, cache_dir=store)
    # Rank 1's file now holds another run's rank 1 (same name, new content and size).
    replacement = ROOT / "sample_traces" / "gpt-gloo-2rank" / "rank-1.pt.trace.json.gz"
    shutil.copy(replacement, run / "rank-1.pt.trace.json.gz")
    cached = tracekit.summarize(run, workers=1, cache_dir=store)
    fresh = tracekit.summarize(run, workers=1, cache=False)
    assert_frame_equal(cached.ranks, fresh.ranks)
    assert_frame_equal(cached.steps, fresh.steps)


def test_same_size_touched_file_misses_the_cache(tmp_path):
    path = tmp_path / "rank-0.pt.trace.json.gz"
    shutil.copy(FILES[0], path)
    key = keys.rank_key(path, Config(), None)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert keys.rank_key(path, Config(), None) != key


def test_options_are_part_of_the_key(tmp_path):
    path = FILES[0]
    found = {keys.rank_key(path, Config(window=w), None) for w in ("drop_last", "all_steps", "trace")}
    found.add(keys.rank_key(path, Config(), 0))
    assert len(found) == 4
    windowed = tracekit.summarize(GLOO_RUN, window="trace", cache_dir=tmp_path)
    assert windowed.run.window == "trace"
    assert_frame_equal(windowed.ranks, tracekit.summarize(GLOO_RUN, window="trace", cache=False).ranks)


def _stored(folder: Path):
    """(store, key, result): GLOO_RUN's rank 0 analysed and put in a store in ``folder``."""
    path = GLOO_RUN / "rank-0.pt.trace.json.gz"
    store = cache.Store(folder, RankResult)
    key = keys.rank_key(path, Config(), 0)
    result = analyze_rank(path, Config(), 0)
    store.put(key, result)
    return store, key, result


def test_a_corrupt_entry_is_a_miss_and_is_recomputed(tmp_path):
    path = GLOO_RUN / "rank-0.pt.trace.json.gz"
    store, key, result = _stored(tmp_path)
    tables = list(store.entry(key).glob("*.arrow"))
    assert len(tables) == len(cachefile.split(result)[0])  # one file per table
    for table in tables:
        table.write_bytes(b"not an Arrow file")
    assert store.get(key) is None
    fresh = tracekit.summarize(path, workers=1, cache=False)
    assert_frame_equal(tracekit.summarize(path, workers=1, cache_dir=tmp_path).ranks, fresh.ranks)


@pytest.mark.parametrize("name", ["collectives.arrow", "graph.arrow", "fields.msgpack", "tables.msgpack"])
def test_one_flipped_bit_in_any_file_is_a_miss(tmp_path, name):
    """A file whose bytes are not those written is refused before it is parsed: a bit flipped inside an Arrow file can
    crash pyarrow or read back as other numbers, and one inside the msgpack as other values, none of which a
    parser alone would notice."""
    store, key, _ = _stored(tmp_path)
    target = store.entry(key) / name
    data = bytearray(target.read_bytes())
    for position in (len(data) // 3, len(data) - 1):  # inside the file, and its last byte
        damaged = data.copy()
        damaged[position] ^= 0x10
        target.write_bytes(bytes(damaged))
        assert store.get(key) is None
    target.write_bytes(bytes(data))
    assert store.get(key) is not None  # the same entry, undamaged, is read


def test_a_truncated_table_is_a_miss(tmp_path):
    """A table file cut short (a full disk, a copy stopped half-way) is a miss, not an error or a shorter table."""
    store, key, _ = _stored(tmp_path)
    graph = store.entry(key) / "graph.arrow"
    graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2])
    assert store.get(key) is None


def test_an_unwritable_cache_warns_and_still_summarizes(tmp_path):
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    with pytest.warns(UserWarning, match="cache entry not written"):
        result = tracekit.summarize(GLOO_RUN, workers=1, cache_dir=blocked)
    assert_frame_equal(result.ranks, tracekit.summarize(GLOO_RUN, workers=1, cache=False).ranks)


def test_default_folder_is_in_the_home_cache():
    assert cache.resolve_dir(None) == Path("~/.cache/tracekit").expanduser()


def _copy_run(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for file in GLOO_RUN.glob("rank-*"):
        shutil.copy(file, folder / file.name)
    return folder


def test_paths_come_from_this_call_not_from_the_call_that_filled_the_cache(tmp_path, monkeypatch):
    store = tmp_path / "cache"
    _copy_run(tmp_path / "a" / "run")
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    relative = tracekit.summarize("run", workers=1, cache_dir=store)
    assert [f.path for f in relative.run.files] == [f"run/rank-{r}.pt.trace.json.gz" for r in (0, 1)]
    assert cache.info(store).entries == 2

    monkeypatch.chdir(tmp_path / "b")  # "run" means nothing here: a path kept from the first call would not exist
    absolute = tracekit.summarize(tmp_path / "a" / "run", workers=1, cache_dir=store)
    paths = [f.path for f in absolute.run.files]
    assert paths == [str(tmp_path / "a" / "run" / f"rank-{r}.pt.trace.json.gz") for r in (0, 1)]
    assert all(Path(p).is_file() for p in paths)
    assert cache.info(store).entries == 2  # both ranks were hits: the answer above came from the store


def test_a_duplicate_rank_error_names_the_files_of_this_call(tmp_path, monkeypatch):
    store = tmp_path / "cache"
    run = _copy_run(tmp_path / "a" / "run")
    shutil.copy(run / "rank-0.pt.trace.json.gz", run / "copy-of-rank-0.json.gz")  # distributedInfo says rank 0
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    with pytest.raises(tracekit.DuplicateRankError, match="rank 0 appears in two files: run/copy-of-rank-0"):
        tracekit.summarize("run", workers=1, cache_dir=store)
    monkeypatch.chdir(tmp_path / "b")
    with pytest.raises(tracekit.DuplicateRankError) as err:
        tracekit.summarize(run, workers=1, cache_dir=store)
    assert str(err.value) == (f"rank 0 appears in two files: {run / 'copy-of-rank-0.json.gz'} and "
                              f"{run / 'rank-0.pt.trace.json.gz'}")


def test_the_store_keeps_under_its_cap_removing_the_least_recently_used(tmp_path):
    result = analyze_rank(GLOO_RUN / "rank-0.pt.trace.json.gz", Config(), None)
    store = cache.Store(tmp_path, RankResult)
    for name in ("first", "second", "third"):
        store.put(name * 4, result)
        time.sleep(0.02)  # distinct modification times, whatever the file system's resolution
    one = cache.info(tmp_path).bytes // 3  # three entries of the same result: the same size
    assert store.get("first" * 4) is not None  # used last now: "second" is the least recently used
    capped = cache.Store(tmp_path, RankResult, max_bytes=2 * one + one // 2)
    removed = capped.trim()
    assert removed == one
    assert capped.get("second" * 4) is None
    assert capped.get("first" * 4) is not None and capped.get("third" * 4) is not None
    assert cache.info(tmp_path).entries == 2 and cache.info(tmp_path).bytes <= capped.max_bytes
    assert cache.Store(tmp_path, RankResult, max_bytes=0).trim() == 2 * one and cache.info(tmp_path).entries == 0


def test_summarize_trims_the_cache_to_its_cap(tmp_path):
    from tracekit.rank.engine import EngineOptions, map_ranks

    files = sorted(GLOO_RUN.glob("rank-*"))
    map_ranks(files, Config(), None, EngineOptions(workers=1, cache_dir=tmp_path))
    assert cache.info(tmp_path).entries == 2
    map_ranks(files, Config(window="trace"), None, EngineOptions(workers=1, cache_dir=tmp_path, cache_max_bytes=0))
    assert cache.info(tmp_path).entries == 0  # a cap of nothing keeps nothing, the entries just written included


def test_clear_empties_the_folder_and_says_what_it_removed(tmp_path):
    tracekit.summarize(GLOO_RUN, workers=1, cache_dir=tmp_path)
    before = cache.info(tmp_path)
    assert before.entries == 2 and before.bytes > 0
    assert cache.clear(tmp_path) == before
    assert cache.info(tmp_path) == cache.CacheInfo(tmp_path, 0, 0)
    assert cache.info(tmp_path / "missing") == cache.CacheInfo(tmp_path / "missing", 0, 0)


def test_clear_and_trim_touch_only_what_the_cache_wrote(tmp_path):
    """A --cache-dir pointing at a user's folder must not lose their files: only entries this cache wrote go."""
    (tmp_path / "notes.json").write_text("{}")
    for name in ("ab", "ab/abcdef", "zz", "data"):  # two-letter folders and a hex-looking one that are not entries
        (tmp_path / name).mkdir()
    (tmp_path / "ab" / "abcdef" / "mine.txt").write_text("keep")
    (tmp_path / "zz" / "f").write_text("keep")
    tracekit.summarize(GLOO_RUN, workers=1, cache_dir=tmp_path)
    assert cache.info(tmp_path).entries == 2
    cache.clear(tmp_path)
    assert cache.info(tmp_path).entries == 0
    assert (tmp_path / "notes.json").read_text() == "{}"
    assert (tmp_path / "ab" / "abcdef" / "mine.txt").read_text() == "keep"
    assert (tmp_path / "zz" / "f").read_text() == "keep" and (tmp_path / "data").is_dir()


def test_a_read_only_cache_still_answers(tmp_path, monkeypatch):
    store = cache.Store(tmp_path / "cache", RankResult)
    path = GLOO_RUN / "rank-0.pt.trace.json.gz"
    key = keys.rank_key(path, Config(), 0)
    store.put(key, analyze_rank(path, Config(), 0))

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(os, "utime", read_only)  # marking the entry used fails, as on a read-only shared cache
    assert store.get(key) is not None


def test_the_code_version_covers_every_stage_folder(tmp_path):
    """The key's source hash reads the whole package: a change in any stage's module misses old entries."""
    import shutil

    package = tmp_path / "tracekit"
    shutil.copytree(Path(cache.__file__).resolve().parents[1], package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    before = cache.source_digest(package, "1")
    metrics = package / "events" / "metrics.py"
    metrics.write_text(metrics.read_text() + "\n# a changed metric\n")
    assert cache.source_digest(package, "1") != before
    assert cache.source_digest(package, "2") != cache.source_digest(package, "1")
    cache.code_version.cache_clear()  # the cached value is the process's first: the source may have changed since
    assert cache.code_version() == cache.source_digest(Path(cache.__file__).resolve().parents[1], tracekit.__version__)


def test_categories_count_as_the_same_only_in_the_same_order_dtype_and_ordering():
    """The restore step skips a column only when its categories are exactly those written (pandas' ``==`` of two
    unordered dtypes ignores their order and the categories' dtype)."""
    written = pd.CategoricalDtype(pd.Index(["b", "a"], dtype="str"))
    assert cachefile._same_categories(pd.CategoricalDtype(pd.Index(["b", "a"], dtype="str")), written)
    assert pd.CategoricalDtype(pd.Index(["a", "b"], dtype="str")) == written  # what == alone would accept
    assert not cachefile._same_categories(pd.CategoricalDtype(pd.Index(["a", "b"], dtype="str")), written)
    assert not cachefile._same_categories(pd.CategoricalDtype(pd.Index(["b", "a"], dtype=object)), written)
    assert not cachefile._same_categories(pd.CategoricalDtype(pd.Index(["b", "a"], dtype="str"), ordered=True),
                                          written)
    assert not cachefile._same_categories(pd.Series(["b", "a"], dtype="str").dtype, written)


def test_an_entry_gives_back_unused_categories_their_order_and_object_columns(tmp_path):
    """Written and read back: unused categories in their order (ordered or not, of text and of numbers), None and
    NaN kept apart in an object column, and a non-default index."""
    frame = pd.DataFrame({"kind": pd.Categorical(["b", "a"], categories=["z", "b", "a", "q"]),
                          "level": pd.Categorical([1, 2], categories=[3, 2, 1], ordered=True),
                          "loose": np.array([None, float("nan")], dtype=object),
                          "words": pd.Series(["F", None], index=[7, 3], dtype=object),  # text, held as objects
                          "n": [1.5, 2.5]}, index=[7, 3])
    assert frame["words"].dtype == object and frame["words"].tolist() == ["F", None]
    cachefile.write_entry(tmp_path / "entry", {"t": frame}, {})
    tables, _ = cachefile.read_entry(tmp_path / "entry")
    assert_frame_equal(tables["t"], frame)
    assert list(tables["t"]["kind"].cat.categories) == ["z", "b", "a", "q"]
    assert tables["t"]["loose"].iloc[0] is None and tables["t"]["loose"].iloc[1] != tables["t"]["loose"].iloc[1]
    assert tables["t"]["words"].dtype == object and tables["t"]["words"].tolist() == ["F", None]
