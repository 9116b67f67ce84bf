"""The compiled pass over a chunk's bytes (tracekit.read.bytecolumns) reads exactly what msgspec's structs give: the
same tables, value for value, on every sample and shared trace and on generated ones, and it hands msgspec every
chunk it does not take (a type msgspec refuses, malformed JSON, begin/end pairs, ...)."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frame_equal import assert_frame_equal
from tracekit.events.hostops import reads_host_op
from tracekit.read import bytecolumns, columns, reader
from tracekit.read.columns import _NameFilter

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces" / "hta"
TRACES = sorted(ROOT.glob("sample_traces/*/rank-0*.json.gz")) + sorted(SHARED.glob("*/*.json.gz"))


def _read(path, monkeypatch, compiled: bool, host_ops=reads_host_op):
    """read_tables with the compiled pass, or with msgspec's structs only; (tables or the error, chunks taken)."""
    taken = []

    def counted(*args, **kwargs):
        result = bytecolumns.chunk_parts(*args, **kwargs)
        taken.append(True)
        return result

    def refused(*args, **kwargs):
        raise bytecolumns.NotTaken("off in this test")

    with monkeypatch.context() as patched:
        patched.setattr(columns, "chunk_parts", counted if compiled else refused)
        try:
            return reader.read_tables(path, default_rank=0, host_ops=host_ops), len(taken)
        except Exception as error:  # the same error either way, checked by the caller
            return error, len(taken)


def _assert_same(path, monkeypatch, host_ops=reads_host_op) -> int:
    """The tables of both ways equal (or both raise the same error); the number of chunks the pass took."""
    fast, taken = _read(path, monkeypatch, True, host_ops)
    slow, _ = _read(path, monkeypatch, False, host_ops)
    if isinstance(slow, Exception) or isinstance(fast, Exception):
        assert type(fast) is type(slow) and str(fast) == str(slow)
        return taken
    assert fast.meta == slow.meta
    for table in ("events", "comm_args", "ops", "memory"):
        a, b = getattr(fast, table), getattr(slow, table)
        assert_frame_equal(a, b, obj=table)
        for column in a.columns:  # the categories too, used or not: they decide groupby's rows
            if hasattr(a[column], "cat"):
                assert list(a[column].cat.categories) == list(b[column].cat.categories), (table, column)
    return taken


# Inputs a review found where the pass once differed from msgspec: an integer in a Raw field (its value was taken
# for a byte offset), keys given twice (msgspec checks each value), lone surrogate escapes where msgspec skips,
# a second phase.
REVIEWED = {
    "raw int": '{"ph":"X","cat":"cpu_op","name":"a","ts":1,"dur":1,"args":{"Input Dims":-1,"Concrete Inputs":0}}',
    "raw big negative": '{"ph":"X","cat":"cpu_op","name":"a","ts":1,"dur":1,"args":{"Input type":-100000000}}',
    "key twice": '{"ph":"X","cat":"kernel","name":"k","ts":"x","ts":1,"dur":1}',
    "arg twice": '{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1,"args":{"External id":1.5,"External id":3}}',
    "args twice": '{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1,"args":{"stream":[]},"args":{}}',
    "name twice": '{"ph":"X","cat":"kernel","name":"\\ud800","name":"x","ts":1,"dur":1}',
    "lone low surrogate": '{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1,"zz":"\\udc00"}',
    "lone high surrogate in Raw":
        '{"ph":"X","cat":"cpu_op","name":"k","ts":1,"dur":1,"args":{"Input type":["\\ud800"]}}',
    "surrogate in a flow": '{"ph":"f","id":"\\udc00"}',
    "pair": '{"ph":"X","cat":"kernel","name":"\\ud83d\\ude00","ts":1,"dur":1}',
    "phase twice": '{"ph":"f","ph":"s"},{"ph":"I","name":"[memory]","ts":3,"args":{"Bytes":8}}',
}


@pytest.mark.parametrize("event", REVIEWED.values(), ids=REVIEWED.keys())
@pytest.mark.parametrize("chunk_events", [None, 1])
def test_reviewed_inputs_read_the_same(tmp_path, monkeypatch, event, chunk_events):
    path = tmp_path / "rank0.json"
    path.write_text('{"traceEvents":[{"ph":"X","cat":"kernel","name":"k0","ts":0,"dur":1},' + event + "]}")
    options = reader.ReadOptions() if chunk_events is None else reader.ReadOptions(chunk_above_bytes=0,
                                                                                   chunk_events=chunk_events)
    with monkeypatch.context() as patched:
        patched.setattr(reader, "read_tables", lambda p, *a, _read=reader.read_tables, **k: _read(p, *a, **k,
                                                                                              options=options))
        _assert_same(path, patched)


def test_an_integer_in_a_raw_field_is_its_text():
    _, ops, _ = _parts('[{"ph":"X","cat":"cpu_op","name":"a","ts":1,"dur":1,"args":{"Input Dims":-100000000}}]')
    assert [ops["input_dims"][1][c] for c in ops["input_dims"][0]] == ["-100000000"]


def test_a_huge_chunk_size_allocates_by_the_chunk():
    events, _, _ = bytecolumns.chunk_parts(bytearray(b'[{"ph":"X","name":"a"}]'), _NameFilter(None), cap=10**9)
    assert len(events["ts"]) == 1


@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parent.name}/{p.name[:24]}")
def test_every_sample_and_shared_trace_reads_the_same(path, monkeypatch):
    assert _assert_same(path, monkeypatch) >= 1  # and the pass took its chunks: the test tests it


def test_every_host_op_kept_reads_the_same(monkeypatch):
    assert _assert_same(ROOT / "sample_traces/tp-fsdp-4rank/rank-1.pt.trace.json.gz", monkeypatch, None) >= 1


def _parts(text: str):
    return bytecolumns.chunk_parts(bytearray(text.encode()), _NameFilter(None))


def test_values_by_hand():
    events, ops, memory = _parts(
        '[{"ph":"X","cat":"cpu_op","name":"aten::mm \\"q\\" \\u00e9","pid":7,"tid":"thread 2","ts":1.5,"dur":2,'
        '"args":{"External id":12,"Input Dims":[[2,3],[3,4]],"Input type":["float","float"],"flops":48}},'
        ' {"ph":"f","id":1,"args":null,"ts":"not typed: a flow event is passed over"},\n'
        '{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":10,"dur":0.0015,'
        '"args":{"correlation":5,"stream":7,"device":0,"External id":"x","external id":3}},'
        '{"ph":"i","cat":"cpu_instant_event","name":"[memory]","pid":7,"tid":7,"ts":3,"dur":"an instant has none",'
        '"args":{"Total Allocated":100,"Bytes":-50,"Device Type":1,"Device Id":0,"Addr":123}},'
        '{"ph":"X","cat":"cpu_op","name":"c10d::allreduce_","pid":7,"tid":"thread 2","ts":20,"dur":5,'
        '"args":{"Collective name":"allreduce","Group size":2,"External id":null,"external id":9}}]')
    assert events["ts"].tolist() == [1500, 10000, 20000] and events["dur"].tolist() == [2000, 2, 5000]
    names = [events["name"][1][c] for c in events["name"][0]]
    assert names == ['aten::mm "q" \u00e9', "k", "c10d::allreduce_"]
    assert [events["tid"][1][c] for c in events["tid"][0]] == ["thread 2", 7, "thread 2"]
    assert events["tid_num"].tolist() == [-1, 7, -1]
    assert events["correlation"].tolist() == [-1, 5, -1] and events["stream"].tolist() == [-1, 7, -1]
    # A string id is no id; the old key counts only where the new one is absent or null.
    assert events["external_id"].tolist() == [12, -1, 9]
    assert events["comm_rows"].tolist() == [2] and events["comm_names"] == ["c10d::allreduce_"]
    assert events["comm_args"][0].collective == "allreduce" and events["comm_args"][0].group_size == 2
    assert events["shapes"] is True
    assert ops["cpu_op"].tolist() == [True, True] and ops["ts"].tolist() == [1500, 20000]
    assert ops["flops_arg"][0] == 48 and np.isnan(ops["flops_arg"][1])
    assert [ops["input_dims"][1][c] for c in ops["input_dims"][0]] == ["[[2,3],[3,4]]", None]
    assert memory["ts"].tolist() == [3000] and memory["tid"] == ["7"] and memory["bytes"].tolist() == [-50]
    assert memory["total_allocated"].tolist() == [100] and np.isnan(memory["total_reserved"][0])
    assert memory["addr"].tolist() == [123] and memory["device_type"].tolist() == [1]


def test_the_host_op_filter_keeps_what_the_structs_keep():
    chunk = ('[{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1,"args":{"correlation":1}},'
             '{"ph":"X","cat":"cpu_op","name":"aten::add","ts":2,"dur":1},'
             '{"ph":"X","cat":"cpu_op","name":"aten::mm","ts":3,"dur":1},'
             '{"ph":"X","cat":"cpu_op","name":"odd","ts":4,"dur":1,"args":{"Collective name":"send"}}]')
    events, ops, _ = bytecolumns.chunk_parts(bytearray(chunk.encode()), _NameFilter(lambda name: name == "aten::mm"))
    assert [events["name"][1][c] for c in events["name"][0]] == ["k", "aten::mm", "odd"]
    assert events["left_ts"].tolist() == [2000]  # aten::add: left out, its time kept
    assert len(ops["ts"]) == 3  # the operator table has every op


@pytest.mark.parametrize("chunk", [
    '[{"ph":"X","args":null}]',  # args must be an object
    '[{"ph":"X","args":[1]}]',
    '[{"ph":"X","pid":1.5}]',  # an id is an int or a string
    '[{"ph":"X","pid":12345678901234567890}]',  # an integer id beyond int64
    '[{"ph":"X","cat":null}]',
    '[{"ph":"X","ts":true}]',
    '[{"ph":"X","ts":"1"}]',
    '[{"ph":"X","ts":1e400}]',  # out of range: msgspec refuses it
    '[{"ph":"X","na\\u006de":"a"}]',  # an escaped key
    '[{"ph":"B","name":"a","ts":1}]',  # begin/end pairs are paired over the whole document
    '[{"ph":"Q"}]',  # an unknown phase
    '[{"name":"a"}]',  # no phase
    '[{"ph":"X","ts":01}]',  # malformed JSON, in every way
    '[{"ph":"X","name":"a\tb"}]',
    '[{"ph":"X","name":"a\\qb"}]',
    '[{"ph":"X","args":{"Input Dims":[1,}}]',
    '[{"ph":"X","args":{"Input Dims":[1}}]',
    '[{"ph":"X"},]',
    '[{"ph":"X"} {"ph":"X"}]',
    '[{"ph":"X","ts":-}]',
    '[{"ph":"X","ts":nul}]',
    '[{"ph":"X","name":"a\\u12"}]',
    '[{"ph":"X","dur":1.}]',
    '[{"ph":"X","ts":1,"ts":2}]',  # a key twice: msgspec checks each value, the pass would check one
    '[{"ph":"f","ph":"s"}]',
    '[{"ph":"X","args":{},"args":{}}]',
    '[{"ph":"X","args":{"stream":1,"stream":2}}]',
    '[{"ph":"s","id":"\\udc00"}]',  # lone surrogates, even where msgspec skips the value
    '[{"ph":"X","name":"\\ud800x"}]',
    '[{"ph":"X","name":"\\ud800\\u0041"}]',
])
def test_what_msgspec_refuses_is_not_taken(chunk):
    with pytest.raises(bytecolumns.NotTaken):
        _parts(chunk)


def test_invalid_utf8_in_a_string_msgspec_builds_is_not_taken():
    with pytest.raises(bytecolumns.NotTaken):
        bytecolumns.chunk_parts(bytearray(b'[{"ph":"X","name":"a\xffb"}]'), _NameFilter(None))


def test_what_msgspec_passes_over_is_taken():
    # A flow event's fields are not read (no type to check), an instant has no duration, unknown keys of any value.
    events, _, memory = _parts('[{"ph":"s","args":null,"ts":"x"},{"ph":"i","name":"a","dur":"x"},'
                               '{"ph":"X","name":"a","ts":1,"dur":1,"unknown":{"deep":[1,{"a":[]}]},'
                               '"args":{"Input Dims":null,"other":[true,false,null]}}]')
    assert events["ts"].tolist() == [1000] and len(memory["ts"]) == 0


# --- generated traces: both ways give the same tables, or the same error ---

_IDS = st.one_of(st.integers(-5, 2**40), st.sampled_from(["7", "thread 2", "é", 'q"uote', "tab\there"]), st.none())
# Values msgspec refuses somewhere (a float or bool id, an id beyond int64, a container): rarer, so most traces are
# taken whole and some go to msgspec.
_ODD = st.sampled_from([1.5, True, [1], {"a": 1}, 2**70, "1.5"])
_NUMS = st.one_of(st.integers(-10, 2**53), st.floats(-1e6, 1e16, allow_nan=False, allow_infinity=False),
                  st.sampled_from([1712195495890283.2, 0.0015, 1e5]), st.none())
_TEXT = st.one_of(st.sampled_from(["aten::mm", "c10d::allreduce_", "nccl:all_reduce", "k<4, \"x\">", "[memory]",
                                   "ProfilerStep#3", "é\u2028", "", "\\back"]),
                  st.text(st.characters(blacklist_categories=("Cs",)), max_size=6))
_CATS = st.sampled_from(["cpu_op", "kernel", "gpu_memcpy", "cuda_runtime", "user_annotation", "Operator",
                         "python_function", "cpu_instant_event", "odd_category", ""])
_RAW = st.one_of(st.just([[2, 3], []]), st.just(["float", "Scalar"]), st.just(["", "", "1", "0"]), st.none(),
                 st.just("[[1]]"), st.integers(0, 9))
_ARG_VALUES = {"External id": st.one_of(_IDS, _ODD), "external id": _IDS, "correlation": _IDS, "stream": _IDS,
               "device": _IDS,
               "Collective name": st.one_of(_TEXT, st.none()), "dtype": st.one_of(_TEXT, st.none()),
               "In msg nelems": _NUMS, "Group size": _NUMS, "Process Group Name": _IDS, "Dst Rank": _IDS,
               "Seq": _NUMS, "Input Dims": _RAW, "Input type": _RAW, "Concrete Inputs": _RAW, "flops": _NUMS,
               "Total Allocated": _NUMS, "Bytes": _NUMS, "Addr": _IDS, "Device Type": _IDS,
               "unknown": st.one_of(_RAW, _TEXT)}
_EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "i", "f", "s", "M"])},
    optional={"cat": _CATS, "name": _TEXT, "pid": st.one_of(_IDS, _IDS, _IDS, _ODD), "tid": _IDS, "ts": _NUMS,
              "dur": st.one_of(_NUMS, _NUMS, _NUMS, _ODD),
              "args": st.fixed_dictionaries({}, optional=_ARG_VALUES), "id": st.integers(0, 9)})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(events=st.lists(_EVENT, min_size=1, max_size=12), ascii_only=st.booleans(), indent=st.sampled_from([None, 1]),
       base=st.sampled_from([0, 1_700_000_000_000_000_000]))
def test_generated_traces_read_the_same(tmp_path_factory, monkeypatch, events, ascii_only, indent, base):
    doc = {"distributedInfo": {"rank": 0}, "baseTimeNanoseconds": base,
           "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1}] + events}
    path = tmp_path_factory.mktemp("generated") / "rank0.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc, ensure_ascii=ascii_only, indent=indent).encode()))
    _assert_same(path, monkeypatch)


def test_more_events_than_the_room_given_or_deeper_nesting_is_not_taken():
    two = bytearray(b'[{"ph":"X","name":"a"},{"ph":"X","name":"b"}]')
    assert len(bytecolumns.chunk_parts(two, _NameFilter(None), cap=2)[0]["ts"]) == 2
    with pytest.raises(bytecolumns.NotTaken):
        bytecolumns.chunk_parts(two, _NameFilter(None), cap=1)
    with pytest.raises(bytecolumns.NotTaken):
        _parts('[{"ph":"X","unknown":' + "[" * 65 + "]" * 65 + "}]")
    assert len(_parts('[{"ph":"X","unknown":' + "[" * 64 + "]" * 64 + "}]")[0]["ts"]) == 1


def test_the_events_pass_names_the_tokenizer_it_was_compiled_with():
    """numba's disk cache of parse_events is keyed on its own file: a tokenizer edit must change that file too."""
    from tracekit.read import _events_kernel, _json_kernel
    digest = hashlib.sha256(Path(_json_kernel.__file__).read_bytes()).hexdigest()
    assert digest == _events_kernel.TOKENIZER_SHA256, (
        f"_json_kernel.py changed: set TOKENIZER_SHA256 in _events_kernel.py to {digest}, or the cached "
        "parse_events keeps running the old tokenizer")
