"""Memory a large trace's reading no longer holds: the chunk columns are consumed as the tables are joined
(``read.columns.finish_tables``, ``read.opcolumns.op_table``), and freed pages go back to the operating system
between a rank's stages (``read.release``). Neither changes a value: the golden Summaries and the streamed-read
tests hold the tables; these tests hold the memory rules themselves."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pandas as pd
import pytest

from tracekit.read import columns, pairs, release
from tracekit.read.kineto import CHUNK_DECODER
from tests.tracedata import cpu, kernel, launch, step


def _chunk(events):
    return pairs.split_events(CHUNK_DECODER.decode(json.dumps(events).encode()))


def _collected():
    first = [step(1, 0, 100), launch(10, correlation=5), cpu("aten::mm", 12, 4, **{"Input Dims": [[2, 3], [3, 4]],
                                                                                     "Input type": ["float", "float"]})]
    second = [kernel("k", 20, 30, correlation=5), cpu("aten::add", 40, 5), cpu("aten::mm", 50, 10)]
    return columns.collect_parts([_chunk(first), _chunk(second)], host_ops=lambda name: name == "aten::mm")


def test_finish_tables_takes_every_joined_column_out_of_the_chunks():
    collected = _collected()
    parts, ops, memory = collected
    events, _, dropped, first_ts_ns, facts = columns.finish_tables(collected, rank=0, base_ns=1000)
    # The tables, by hand: 4 rows kept in the events table (the kernel arrives after aten::add was read, so
    # aten::add, which the filter does not keep, is left out of the second chunk), every host op in the ops table.
    assert events["name"].astype(str).tolist() == ["ProfilerStep#1", "cudaLaunchKernel", "aten::mm", "k", "aten::mm"]
    assert events["ts_ns"].tolist() == [1000, 11_000, 13_000, 21_000, 51_000]
    assert facts["ops"]["name"].astype(str).tolist() == ["ProfilerStep#1", "aten::mm", "aten::add", "aten::mm"]
    assert facts["ops"]["ts_ns"].tolist() == [1000, 13_000, 41_000, 51_000]
    assert dropped == 0 and first_ts_ns == 1000
    # ... and no chunk still holds its piece of any joined column.
    joined = {"ts", "dur", "left_ts", "left_dur", "cat", "name", "pid", "tid", "tid_num", "correlation",
              "external_id", "stream"}
    assert all(joined.isdisjoint(p) for p in parts), [sorted(joined & set(p)) for p in parts]
    assert all(not p for p in ops), ops


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux") or release._malloc_trim() is None,
                    reason="glibc's malloc_trim: Linux with glibc")
def test_release_memory_returns_the_free_pages_that_a_live_block_above_them_pins():
    release.release_memory()
    # 200 MB of 4 KB blocks from the C heap, every 64th kept: the heap cannot shrink past the kept ones.
    blocks = [np.ones(512) for _ in range(50_000)]
    kept = blocks[::64]
    del blocks
    before = _rss()
    release.release_memory()
    after = _rss()
    assert before - after > 100e6, (before / 1e6, after / 1e6)
    assert all(float(b.sum()) == 512.0 for b in kept)  # what is still used is untouched
