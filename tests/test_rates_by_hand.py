"""Issue 33, classes 8 and 9: B/E Chrome traces read, a single step's memory growth known, and hand values for the
kernel table's shares and spread, the capacity finding driven by reserved memory, and peaks_of by memory."""

import json
import math

import pandas as pd
import pytest

import tracekit
from tracekit.events.memory import memory_table
from tracekit.read.reader import RankMeta, read_rank
from tracekit.rank.whatruns import peaks_of
from tests.tracedata import cpu, kernel, step, write_trace


# --- class 8: B/E pairs ---------------------------------------------------------------------------------------------

def _be(ph, ts, tid=1, name=None, cat="cpu_op"):
    e = {"ph": ph, "pid": 1, "tid": tid, "ts": ts}
    return {**e, "name": name, "cat": cat} if ph == "B" else e


BE = [_be("B", 0, name="ProfilerStep#1", cat="user_annotation"), _be("B", 10, name="aten::mm"), _be("E", 30),
      _be("E", 5, tid=2),  # closes nothing on its thread: the trace began inside a span
      _be("B", 40, name="aten::add"), _be("E", 55), _be("E", 100),
      _be("B", 60, tid=2, name="never_closed")]


@pytest.mark.parametrize("general", [False, True], ids=["fast decoder", "general decoder"])
def test_begin_end_pairs_are_read_as_complete_events(tmp_path, general):
    """On thread 1: ProfilerStep 0-100 holds aten::mm 10-30 and aten::add 40-55 (each E closes the latest open B).
    Thread 2's E at 5 and B at 60 pair with nothing: two events dropped, not an 'empty trace'. An ``"args": null``
    sends the trace to the general decoder, which pairs alike."""
    extra = [{"ph": "X", "name": "x", "cat": "cpu_op", "pid": 1, "tid": 3, "ts": 1, "dur": 1, "args": None}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": BE + (extra if general else [])}))
    meta, events, _ = read_rank(path, default_rank=0)
    spans = {n: (ts / 1e3, d / 1e3) for n, ts, d in zip(events["name"], events["ts_ns"], events["dur_ns"]) if d >= 0}
    assert spans["ProfilerStep#1"] == (0, 100) and spans["aten::mm"] == (10, 20) and spans["aten::add"] == (40, 15)
    assert meta.dropped_events == 2


def test_a_streamed_begin_end_trace_is_read_whole_and_paired(tmp_path):
    """Streamed a chunk at a time, a span may cross chunks: a chunk with B/E sends the trace to the whole read."""
    from tracekit.read.reader import ReadOptions, read_tables

    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": BE}))
    tables = read_tables(tmp_path / "t.json", 0, options=ReadOptions(chunk_above_bytes=0, chunk_events=2))
    spans = dict(zip(tables.events["name"], tables.events["dur_ns"]))
    assert spans["aten::mm"] == 20_000 and tables.meta.dropped_events == 2


def test_a_begin_end_trace_is_summarized(tmp_path):
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": BE}))
    s = tracekit.summarize(tmp_path, cache=False)
    assert s.ranks["steps"].iloc[0] == 1 and s.ranks["step_time_us"].iloc[0] == pytest.approx(100)


# --- class 8: a single step's memory growth ---------------------------------------------------------------------

def _mem(ts_ns, nbytes, total, reserved=None):
    return {"rank": 0, "tid": 1, "ts_ns": ts_ns, "total_allocated": float(total),
            "total_reserved": float(reserved if reserved is not None else total), "bytes": float(nbytes),
            "device_type": 1, "device_id": 0, "addr": 1}


def test_single_step_growth_is_known():
    """One step, no reading before it: it starts at its first event's reading less that event's bytes.
    +100 -> 1,100 (so 1,000 before), -100 -> 1,000: growth 0, not NaN. With a last +50 -> 1,050: growth +50."""
    steps = pd.DataFrame({"step": [1], "start_ns": [0], "end_ns": [1000]})
    balanced = pd.DataFrame([_mem(10, 100, 1100), _mem(20, -100, 1000)])
    row = memory_table(balanced, steps, (80e9,)).iloc[0]
    assert row["start_allocated_bytes"] == 1000 and row["growth_bytes"] == 0
    assert row["peak_allocated_bytes"] == 1100  # the readings' peak, as before
    grown = memory_table(pd.concat([balanced, pd.DataFrame([_mem(30, 50, 1050)])]), steps, (80e9,)).iloc[0]
    assert grown["growth_bytes"] == 50


# --- class 9: the capacity finding where reserved > allocated ----------------------------------------------------

def test_near_capacity_is_read_off_reserved_memory(tmp_path):
    """Allocated peaks at 40 GB of an 80 GiB device, reserved at 78 GB: 78e9 / 85,899,345,920 = 90.8 % -> medium.
    Judged on allocated alone it would be 46.6 %: no finding."""
    from tracekit.findings.memory_findings import find

    memory = pd.DataFrame({"rank": [0], "device": ["cuda:0"], "step": [1], "peak_allocated_bytes": [40e9],
                           "peak_reserved_bytes": [78e9], "device_memory_bytes": [80 * 2**30],
                           "end_allocated_bytes": [40e9]})
    steps = pd.DataFrame({"rank": [0], "step": [1], "in_window": [True]})
    (found,) = [f for f in find(memory, steps) if f.kind == "memory_near_capacity"]
    assert found.severity == "medium" and found.evidence["share"] == pytest.approx(78e9 / (80 * 2**30))
    assert found.evidence["peak_bytes"] == 78e9


# --- class 9: kernel table shares and spread, by hand ------------------------------------------------------------

def _rank_trace(tmp_path, rank, events):
    write_trace(tmp_path / f"rank{rank}.json", [step(1, 0, 1000), *events], rank=rank, world_size=2, gz=False)


def test_kind_share_with_two_kinds_and_rank_spread(tmp_path):
    """Rank 0: gemm 30 us + relu 10 us (compute, 40 us), one memcpy 20 us (memory): gemm 75 %, relu 25 %, the
    memcpy 100 % of its kind. Rank 1: gemm 90 us. gemm's spread over the ranks: (90 - 30) / 60 = 100 %; relu runs
    on one rank: 0 %."""
    memcpy = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7,
              "ts": 300, "dur": 20, "args": {"device": 0, "stream": 7}}
    _rank_trace(tmp_path, 0, [kernel("gemm", 100, 30), kernel("relu", 200, 10), memcpy])
    _rank_trace(tmp_path, 1, [kernel("gemm", 100, 90)])
    k = tracekit.summarize(tmp_path, cache=False).kernels.set_index(["rank", "name"])
    assert k.loc[(0, "gemm"), "kind_share_pct"] == pytest.approx(75.0)
    assert k.loc[(0, "relu"), "kind_share_pct"] == pytest.approx(25.0)
    assert k.loc[(0, "Memcpy HtoD (Pinned -> Device)"), "kind_share_pct"] == pytest.approx(100.0)
    assert k.loc[(0, "gemm"), "rank_spread_pct"] == pytest.approx(100.0)
    assert k.loc[(1, "gemm"), "rank_spread_pct"] == pytest.approx(100.0)
    assert k.loc[(0, "relu"), "rank_spread_pct"] == 0


# --- class 9: peaks_of where only the memory names the board -----------------------------------------------------

def _meta(names, memory):
    return RankMeta(path="p", rank=0, backend=None, world_size=None, nccl_version=None, device_names=names,
                    compute_major=8, host_name=None, pg_config=(), dropped_events=0, device_memory_bytes=memory)


@pytest.mark.parametrize("memory, expected", [(42_297_524_224, "NVIDIA A100 SXM4 40GB"),
                                              (85_198_045_184, "NVIDIA A100 SXM4 80GB"), (None, None),
                                              (10_737_418_240, None)])  # a 10 GiB MIG slice: no board
def test_peaks_of_a_board_named_only_by_its_memory(memory, expected):
    """``NVIDIA A100-PG509-200`` is an SXM4 board sold with 40 or 80 GB: totalGlobalMem (the shared A100 traces'
    42,297,524,224 bytes) picks the entry; without it, or with a slice's memory, there is none."""
    peaks = peaks_of(_meta(("NVIDIA A100-PG509-200",) * 8, () if memory is None else (float(memory),) * 8))
    assert (peaks.name if peaks else None) == expected
