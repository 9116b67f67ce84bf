"""The streamed reader (tracekit.read.stream) reads exactly what the whole-file reader reads, whatever the block and
chunk sizes, the escapes in names, the order of the document's keys, or gzip."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.read import reader, stream
from tracekit.read.reader import ReadOptions
from tests.tracedata import cpu, kernel, launch, step
from frame_equal import assert_frame_equal

STREAMED = ReadOptions(chunk_above_bytes=0, chunk_events=3)


def _events():
    return [step(1, 0, 100), launch(10, correlation=5), kernel("k", 20, 30, correlation=5),
            cpu('aten::add "quoted" {brace} [bracket] \\ back', 40, 5), cpu("aten::mm", 50, 10, **{"Input Dims": [[2, 3]]}),
            {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "}]"}},
            kernel("ncclDevKernel_AllReduce", 60, 20, stream=9, correlation=7)]


def _same(path, monkeypatch, options=STREAMED):
    whole = reader.read_tables(path, default_rank=0)
    with monkeypatch.context() as patched:  # no fall-back to the whole-file path
        patched.setattr(reader, "load_bytes", lambda p: pytest.fail(f"{p} read whole"))
        patched.setattr(reader, "_read", lambda p, *a, **k: pytest.fail(f"{p} decoded whole"))
        streamed = reader.read_tables(path, default_rank=0, options=options)
    assert streamed.meta == whole.meta
    for table in ("events", "comm_args", "ops", "memory"):
        assert_frame_equal(getattr(streamed, table), getattr(whole, table), obj=table)
    return streamed


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("block", [1, 7, 64, 1 << 20])
def test_blocks_of_any_size_read_the_same(tmp_path, monkeypatch, gz, block):
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 3, "world_size": 4, "backend": "nccl"},
           "traceEvents": _events(), "baseTimeNanoseconds": 1_000_000}
    path = tmp_path / ("rank3.json.gz" if gz else "rank3.json")
    data = json.dumps(doc, indent=1).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    monkeypatch.setattr(stream, "BLOCK_BYTES", block)
    tables = _same(path, monkeypatch)
    # The header after the events array counts: its time base moves every start by 1 ms.
    assert tables.meta.rank == 3 and tables.events["ts_ns"].min() == 1_000_000
    assert len(tables.events) == 6  # the metadata event is not a complete event


def test_a_key_named_like_the_array_inside_a_value_is_not_the_array(tmp_path, monkeypatch):
    head = r'{"traceName": "traceEvents", "q": "\\\"traceEvents\": [", "r": "\"{", "x": {"traceEvents": [1, 2]}, '
    path = tmp_path / "rank0.json"
    path.write_text(head + '"traceEvents": ' + json.dumps(_events()) + "}")
    assert len(_same(path, monkeypatch).events) == 6


def test_a_top_level_array_of_events_streams(tmp_path, monkeypatch):
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(_events()))
    monkeypatch.setattr(stream, "BLOCK_BYTES", 5)
    assert len(_same(path, monkeypatch).events) == 6


def test_the_scan_finds_each_event_end_by_hand():
    # The two events end at indexes 10 and 26 (their closing braces); the array closes at index 28.
    body = b' {"a": "}"}, {"b": [1, {}]} ] '
    ends = stream.np.empty(8, dtype=stream.np.int64)
    state = stream.np.array([0, 0, 1, 1], dtype=stream.np.int64)
    found, closed, stop = stream._scan(stream.np.frombuffer(body, dtype=stream.np.uint8), 0, state, ends)
    assert (found, closed, stop) == (2, 28, 28)
    assert list(ends[:2]) == [body.index(b"}, "), body.rindex(b"}")]
    full = stream.np.empty(1, dtype=stream.np.int64)  # room for one end: the scan stops right after it
    state = stream.np.array([0, 0, 1, 1], dtype=stream.np.int64)
    assert stream._scan(stream.np.frombuffer(body, dtype=stream.np.uint8), 0, state, full) == (1, -1, 11)


def test_a_truncated_stream_falls_back_to_the_whole_file_error(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text('{"traceEvents": [' + json.dumps(_events())[1:-1])  # no closing brackets
    with pytest.raises(reader.NotJSONError, match="rank0.json"):
        reader.read_tables(path, options=STREAMED)


def _no_whole_read(path, *args, **kwargs):
    raise AssertionError(f"{path} read whole")


_NAMES = st.text(alphabet=st.sampled_from(list('ab"\\{}[],: \u00e9')), max_size=12)


@settings(max_examples=40, deadline=None)
@given(names=st.lists(_NAMES, min_size=1, max_size=12), block=st.integers(1, 40), chunk=st.integers(1, 5))
def test_any_names_any_cuts_read_the_same(tmp_path_factory, names, block, chunk):
    events = [cpu(name, 10 * i, 5) for i, name in enumerate(names)] + [kernel("k", 3, 4, correlation=1)]
    path = tmp_path_factory.mktemp("s") / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events, "distributedInfo": {"rank": 0}}))
    old = stream.BLOCK_BYTES, reader.load_bytes, reader._read
    stream.BLOCK_BYTES, reader.load_bytes, reader._read = block, _no_whole_read, _no_whole_read
    try:
        streamed = reader.read_tables(path, options=ReadOptions(chunk_above_bytes=0, chunk_events=chunk))
    finally:
        stream.BLOCK_BYTES, reader.load_bytes, reader._read = old
    whole = reader.read_tables(path)
    assert_frame_equal(streamed.events, whole.events)
    assert list(streamed.ops["name"].astype(str)) == names


@pytest.mark.parametrize("text, error", [('{"traceEvents": null, "x": 1}', reader.NotATraceError),
                                         ('{"schemaVersion": 1}', reader.NotATraceError),
                                         ('{"traceEvents": [{"ph": "X"', reader.NotJSONError)])
def test_a_streamed_document_without_a_readable_events_array_gets_the_named_error(tmp_path, text, error):
    # Streamed (every size streams here), a document whose events array the scan cannot see or finish is read
    # whole, and the general decoder names what is wrong.
    path = tmp_path / "rank0.json"
    path.write_text(text)
    with pytest.raises(error, match="rank0.json"):
        reader.read_tables(path, options=STREAMED)
