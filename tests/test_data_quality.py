"""Data quality, shown: ``Summary.data_quality`` (one row per rank), its notes in the text report, the JSON and the
viewer's Overview. Each fact is planted in a tiny trace built here; the counts are those of the events written."""

from __future__ import annotations

import html
import json
import sys

import pandas as pd
import pytest

import tracekit
from tracekit import quality, schema
from tracekit.render.report import html_report
from tracedata import cpu, kernel, launch, step, write_trace

GEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8"


A100 = {"deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_899_345_920}]}
MEMORY = {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 100, "tid": 1, "ts": 6, "s": "t",
          "args": {"Device Type": 1, "Device Id": 0, "Addr": 1, "Bytes": 64, "Total Allocated": 64,
                   "Total Reserved": 2 << 20}}


def clean_rank(rank=0):
    """Steps [0, 1000), [1000, 2000), [2000, 2100); gemms launched at 10 and 1010 run [100, 500), [1100, 1500);
    the CPU ops carry Input Dims (record_shapes=True), and one [memory] event (profile_memory=True). Written with
    ``**A100`` the device is a known one."""
    return [MEMORY, step(1, 0, 1000), step(2, 1000, 1000), step(3, 2000, 100),
            cpu("aten::mm", 5, 10, **{"Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]}),
            launch(10, 1), kernel(GEMM, 100, 400, correlation=1),
            launch(1010, 2), kernel(GEMM, 1100, 400, correlation=2)]


def test_a_clean_run_has_the_table_and_no_notes(tmp_path):
    write_trace(tmp_path / "rank0.json.gz", clean_rank(0), rank=0, **A100)
    write_trace(tmp_path / "rank1.json.gz", clean_rank(1), rank=1, **A100)
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    assert list(s.data_quality.columns) == list(schema.DATA_QUALITY_COLUMNS)
    assert s.data_quality.to_dict("records") == [
        {"rank": r, "device_evidence": "device events (kernel)", "device_events": 2, "device_events_absent": False,
         "pre_trace_events": 0, "pre_trace_device_us": 0.0, "unsized_ep_comm": 0, "dropped_events": 0,
         "unknown_categories": "",
         "unknown_category_events": 0, "rank_source": "distributedInfo", "rank_out_of_range": "",
         "shapes_recorded": True, "operators_unusable": False, "ops_beyond_bound": 0, "unknown_flops": "",
         "memory_events": 1, "device_peaks": "NVIDIA A100 SXM4 80GB", "graph_capture_calls": 0,
         "captured_steps": "", "held_back_findings": "", "step_source": "ProfilerStep",
         "missing_steps": ""} for r in (0, 1)]
    assert quality.notes(s.data_quality) == []
    assert "Data quality" not in str(s) and "Data quality" not in html_report(s)
    assert [row["rank"] for row in json.loads(s.to_json())["data_quality"]] == [0, 1]


def test_every_fact_is_counted_and_noted(tmp_path):
    # Rank 3, named only by its file: record_shapes off (no Input Dims), an unfinished op (dur -1) and an absurd
    # kernel (dropped: 2), 3 events of a category tracekit does not know, and one gemm launched before the trace
    # (id 0 < the first launch's 1) running [0, 80).
    events = [step(1, 0, 1000), step(2, 1000, 1000), step(3, 2000, 100),
              cpu("aten::mm", 5, 10), cpu("aten::to", 20, -1), kernel("broken", 1600, 1e15, correlation=7),
              kernel(GEMM, 0, 80, correlation=0),
              launch(10, 1), kernel(GEMM, 100, 400, correlation=1), launch(1010, 2), kernel(GEMM, 1100, 400, correlation=2)]
    events += [cpu("nvtx_push", 30 * i, 5, cat="my_vendor_marker") for i in range(3)]
    write_trace(tmp_path / "trace-rank3.json.gz", events, rank=None)
    write_trace(tmp_path / "rank-0.json.gz", clean_rank(0), rank=0, **A100)
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    q = s.data_quality.set_index("rank").loc[3]
    assert (q["rank_source"], q["shapes_recorded"], q["dropped_events"]) == ("file name", False, 2)
    assert (q["unknown_categories"], q["unknown_category_events"]) == ("my_vendor_marker (3)", 3)
    assert (q["pre_trace_events"], q["pre_trace_device_us"]) == (1, 80)
    # The gemm [0, 80) is not in rank 3's window: its span is that of the two in-trace gemms, [100, 1500).
    assert s.ranks.set_index("rank").loc[3, "span_us"] == 1400
    assert quality.notes(s.data_quality) == [
        "rank 3: 1 device events (0.08 ms of device time) were launched before the trace began: left out of the "
        "window, steps and collectives",
        "rank 3: 2 events dropped for no, negative or impossible durations",
        "rank 3: categories not recognised, read as host events: my_vendor_marker (3)",
        "rank 3: rank taken from the file name (the trace has no distributedInfo.rank)",
        "rank 3: record_shapes was off: sizes that only Input Dims give are unknown, and so are FLOPs and MFU",
        "rank 3: no [memory] events (profile_memory was off): the memory tables are empty",
        "rank 3: device not in tracekit's datasheet table (unnamed): roofline, pct_of_roofline and MFU are n/a (no peak to measure against)",
    ]
    text = str(s)
    assert "Data quality" in text and all(note in text for note in quality.notes(s.data_quality))
    page = html_report(s)  # the HTML report says the same
    assert "<h3>Data quality</h3>" in page and all(html.escape(n) in page for n in quality.notes(s.data_quality))
    row = next(r for r in json.loads(s.to_json())["data_quality"] if r["rank"] == 3)
    assert row["pre_trace_events"] == 1 and row["shapes_recorded"] is False


def test_shapes_unknown_without_cpu_ops_and_one_file_rank(tmp_path):
    # One file, no rank anywhere, no CPU op at all: rank 0 (the only file); whether shapes were recorded is unknown.
    path = write_trace(tmp_path / "trace.json", [kernel(GEMM, 0, 100), kernel(GEMM, 200, 100)], rank=None, gz=False)
    s = tracekit.summarize(path, cache=False)
    q = s.data_quality.iloc[0]
    assert q["rank_source"] == "only file" and pd.isna(q["shapes_recorded"])
    assert json.loads(s.to_json())["data_quality"][0]["shapes_recorded"] is None
    assert quality.notes(s.data_quality) == [
        "rank 0: no steps (no ProfilerStep, no known step annotation; --step-pattern names one): metrics cover the "
        "whole trace, and per-step numbers, the critical path and what-if are unknown",
        "rank 0: no rank in the trace or its file name: taken as 0 (the only file)",
        "rank 0: no CPU ops recorded (no cpu_op events; annotations such as ProfilerStep are not ops): the "
        "operators' FLOPs cannot be counted, so FLOPs and MFU are unknown",
        "rank 0: no [memory] events (profile_memory was off): the memory tables are empty",
        "rank 0: device not in tracekit's datasheet table (unnamed): roofline, pct_of_roofline and MFU are n/a (no peak to measure against)"]


def test_a_rank_outside_its_world_size_is_flagged_and_kept(tmp_path):
    # distributedInfo of a 2-rank job: one trace says rank -1 (negative), one rank 2 (not below world_size 2), one
    # rank 1 (fine). The numbers stay as the traces state them; the two bad ones get the note, the good one none.
    for name, r in (("a", -1), ("b", 2), ("c", 1)):
        write_trace(tmp_path / f"{name}.json.gz", clean_rank(r), rank=r, world_size=2, **A100)
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    assert dict(zip(s.data_quality["rank"], s.data_quality["rank_out_of_range"])) == {
        -1: "negative", 1: "", 2: "not below its world_size 2"}
    assert sorted(s.ranks["rank"]) == [-1, 1, 2]
    why = ": suspicious, as ranks run 0..world_size-1 (a trace written outside the process group, or a mislabelled " \
          "file); the number is used as stated"
    assert quality.notes(s.data_quality) == [
        "rank -1: distributedInfo gives a rank that is negative" + why,
        "rank 2: distributedInfo gives a rank that is not below its world_size 2" + why]
    assert f"rank 2: distributedInfo gives a rank that is not below its world_size 2{why}" in str(s)
    # A rank from the file name is checked against distributedInfo's world_size too: worker4 of a 4-rank job.
    write_trace(tmp_path / "named" / "worker4.json.gz", clean_rank(4), rank=None, **A100,
                distributedInfo={"backend": "nccl", "world_size": 4})
    q = tracekit.summarize(tmp_path / "named", cache=False).data_quality.iloc[0]
    assert (q["rank"], q["rank_source"], q["rank_out_of_range"]) == (4, "file name", "not below its world_size 4")
    assert "rank 4: the file name gives a rank that is not below its world_size 4" + why in quality.notes(
        pd.DataFrame([q]))


def test_same_note_on_several_ranks_is_one_line(tmp_path):
    for r in (0, 1):
        write_trace(tmp_path / f"worker{r}.json.gz", clean_rank(r), rank=None, **A100)
    notes = quality.notes(tracekit.summarize(tmp_path, cache=False, workers=1).data_quality)
    assert notes == ["ranks 0, 1: rank taken from the file name (the trace has no distributedInfo.rank)"]


def test_cache_keeps_the_data_quality(tmp_path):
    write_trace(tmp_path / "run" / "worker5.json.gz", clean_rank(5), rank=None)
    first = tracekit.summarize(tmp_path / "run", cache_dir=tmp_path / "cache", workers=1)
    again = tracekit.summarize(tmp_path / "run", cache_dir=tmp_path / "cache", workers=1)
    assert again.data_quality.to_dict("records") == first.data_quality.to_dict("records")
    assert again.data_quality.iloc[0]["rank_source"] == "file name"


def test_the_overview_shows_the_notes(tmp_path, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from viewer_runs import REPO

    root = tmp_path / "runs"
    for r in (0, 1):
        write_trace(root / "named" / f"worker{r}.json.gz", clean_rank(r), rank=None)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(root)])
    at = AppTest.from_file(str(REPO / "app" / "main.py"), default_timeout=60)
    at.query_params.update({"run": "runs/named", "page": "overview"})
    at.run()
    assert not at.exception
    assert "Data quality" in [h.value for h in at.subheader]
    note = "ranks 0, 1: rank taken from the file name (the trace has no distributedInfo.rank)"
    assert note in [i.value for i in at.info]


def test_the_notes_docstring_example_runs():
    import doctest

    result = doctest.testmod(quality, raise_on_error=False, verbose=False)
    assert result.failed == 0 and result.attempted > 0
