"""The Parquet cache: exact round trips, hits on unchanged files, misses when a file or an option changes."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit import cache, engine
from tracekit.config import Config
from tracekit.rank import analyze_rank
from tracekit.reader import read_rank

ROOT = Path(__file__).resolve().parents[1]
GLOO_RUN = ROOT / "sample_traces" / "resnet-gloo-2rank"
HTA = ROOT.parent / "shared" / "traces" / "hta"
FILES = sorted(GLOO_RUN.glob("rank-*")) + sorted(HTA.glob("*/*.json.gz"))


def _assert_same_result(a, b) -> None:
    for f in dataclasses.fields(a):
        left, right = getattr(a, f.name), getattr(b, f.name)
        if isinstance(left, pd.DataFrame):
            pd.testing.assert_frame_equal(left, right, obj=f.name)
        else:
            assert left == right and type(left) is type(right), f.name


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.parent.name + "/" + p.name[:12])
def test_rank_result_round_trips_exactly(path, tmp_path):
    config = Config(window="all_steps")
    result = analyze_rank(path, config, 0)
    key = cache.rank_key(path, config, 0)
    cache.store(tmp_path, key, result)
    _assert_same_result(result, cache.load(tmp_path, key))


@pytest.mark.parametrize("path", FILES[:3], ids=lambda p: p.name[:12])
def test_events_for_the_timeline_round_trip_exactly(path, tmp_path):
    first = cache.load_rank_events(path, tmp_path)
    second = cache.load_rank_events(path, tmp_path)
    fresh = read_rank(path)
    for got in (first, second):
        assert got[0] == fresh[0]
        pd.testing.assert_frame_equal(got[1], fresh[1])
        pd.testing.assert_frame_equal(got[2], fresh[2])
    assert len([p for p in tmp_path.glob("*/*") if p.is_dir()]) == 1


def test_second_summary_comes_from_the_cache(tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(GLOO_RUN, run)
    before = sorted(p.name for p in run.iterdir())
    first = tracekit.summarize(run, workers=1, cache_dir=tmp_path / "cache")

    parse = cache.analyze_rank

    def no_parsing(path, *args, **kwargs):
        if Path(path).name.startswith("rank-"):
            raise AssertionError("a cached rank was parsed again")
        return parse(path, *args, **kwargs)  # run.json is not a trace: it is read again (cheap) and skipped

    monkeypatch.setattr(cache, "analyze_rank", no_parsing)
    monkeypatch.setattr(engine, "analyze_rank", no_parsing)
    second = tracekit.summarize(run, workers=1, cache_dir=tmp_path / "cache")
    pd.testing.assert_frame_equal(first.ranks, second.ranks)
    pd.testing.assert_frame_equal(first.collectives, second.collectives)
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
    pd.testing.assert_frame_equal(cached.ranks, fresh.ranks)
    pd.testing.assert_frame_equal(cached.steps, fresh.steps)


def test_same_size_touched_file_misses_the_cache(tmp_path):
    path = tmp_path / "rank-0.pt.trace.json.gz"
    shutil.copy(FILES[0], path)
    key = cache.rank_key(path, Config(), None)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert cache.rank_key(path, Config(), None) != key


def test_options_are_part_of_the_key(tmp_path):
    path = FILES[0]
    keys = {cache.rank_key(path, Config(window=w), None) for w in ("drop_last", "all_steps", "trace")}
    keys.add(cache.rank_key(path, Config(), 0))
    assert len(keys) == 4
    windowed = tracekit.summarize(GLOO_RUN, window="trace", cache_dir=tmp_path)
    assert windowed.run["window"] == "trace"
    pd.testing.assert_frame_equal(windowed.ranks, tracekit.summarize(GLOO_RUN, window="trace", cache=False).ranks)


def test_a_corrupt_entry_is_recomputed(tmp_path):
    path = FILES[0]
    key = cache.rank_key(path, Config(), 0)
    result = cache.analyze_cached(path, Config(), 0, tmp_path)
    for table in (tmp_path / key[:2] / key).glob("*.parquet"):
        table.write_bytes(b"not parquet")
    assert cache.load(tmp_path, key) is None
    _assert_same_result(result, cache.analyze_cached(path, Config(), 0, tmp_path))


def test_an_unwritable_cache_warns_and_still_summarizes(tmp_path):
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    with pytest.warns(UserWarning, match="cache entry not written"):
        result = tracekit.summarize(GLOO_RUN, workers=1, cache_dir=blocked)
    pd.testing.assert_frame_equal(result.ranks, tracekit.summarize(GLOO_RUN, workers=1, cache=False).ranks)


def test_default_folder_is_in_the_home_cache():
    assert cache.resolve_dir(None) == Path("~/.cache/tracekit").expanduser()
