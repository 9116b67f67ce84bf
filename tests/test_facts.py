"""The run's facts (``Summary.run``) and the workload's run.json (``tracekit.summary.facts``), and the Summary's defaults."""

import doctest
import json
import math
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit import schema
from tracekit.run import crossrank
from tracekit.summary import facts
from tracekit.summary.facts import RunFacts, WorkloadRun
from tracekit.summary.model import Summary

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def test_run_json_as_the_workloads_write_it_is_typed_and_given_back_whole():
    path = SAMPLES / "resnet-gloo-2rank" / "run.json"
    written = json.loads(path.read_text())
    w = WorkloadRun.from_json(written)
    assert (w.workload, w.world_size, w.backend, w.mode) == ("resnet", 2, "gloo", "ddp")
    assert (w.throughput_unprofiled, w.throughput_profiled) == (119.042, 126.333)
    assert w.profiled_steps == (3, 4, 5) and w.samples_per_step == 16 and w.config["batch_size"] == 8
    assert w.extra == {}
    assert json.dumps(w.to_dict()) == json.dumps(written)  # same keys, values and order


def test_run_json_keys_it_does_not_know_or_of_another_type_are_kept_as_written():
    w = WorkloadRun.from_json({"workload": "gpt", "world_size": "2", "mode": None, "gpus_per_node": 8,
                               "step_ms": [1, 2.5]})
    assert w.world_size is None and w.mode is None and w.backend is None and w.step_ms == (1, 2.5)
    assert w.extra == {"world_size": "2", "mode": None, "gpus_per_node": 8}
    assert w.to_dict() == {"workload": "gpt", "step_ms": [1, 2.5], "world_size": "2", "mode": None,
                           "gpus_per_node": 8}


@pytest.mark.parametrize("rates, unprofiled, profiled", [
    ({"unprofiled": 10, "profiled": None}, 10.0, math.nan),  # no profiled step: null in run.json
    ({"profiled": 7.5}, math.nan, 7.5),
    ({"unprofiled": True, "profiled": 3.0}, math.nan, math.nan),  # not a number: the whole value is kept aside
    (120.0, math.nan, math.nan),  # a bare number does not say which
    ("fast", math.nan, math.nan),
])
def test_throughput_is_read_once_as_numbers_or_nan(rates, unprofiled, profiled):
    w = WorkloadRun.from_json({"throughput_samples_per_s": rates})
    assert w.throughput_unprofiled == pytest.approx(unprofiled, nan_ok=True)
    assert w.throughput_profiled == pytest.approx(profiled, nan_ok=True)
    assert w.throughputs() == {k: v for k, v in (("unprofiled", unprofiled), ("profiled", profiled))
                               if not math.isnan(v)}
    assert w.to_dict() == {"throughput_samples_per_s": rates}
    assert WorkloadRun().throughputs() == {}


@pytest.mark.parametrize("world_sizes, backends, world_json, backend_json", [
    ((2,), ("nccl",), 2, "nccl"),
    ((), (), None, None),  # no trace says
    ((2, 4), ("gloo", "nccl"), [2, 4], ["gloo", "nccl"]),  # the traces disagree
])
def test_world_size_and_backend_are_one_value_or_none(world_sizes, backends, world_json, backend_json):
    run = RunFacts(world_sizes=world_sizes, backends=backends)
    assert run.world_size == (world_json if isinstance(world_json, int) else None)
    assert run.backend == (backend_json if isinstance(backend_json, str) else None)
    assert (run.to_dict()["world_size"], run.to_dict()["backend"]) == (world_json, backend_json)


def test_run_facts_of_a_real_run():
    s = tracekit.summarize(SAMPLES / "gpt-gloo-2rank-straggler", workers=1, cache=False)
    run = s.run
    assert (run.world_size, run.backend, run.ranks_read, run.window) == (2, "gloo", 2, "drop_last")
    assert [(f.rank, Path(f.path).name) for f in run.files] == [(0, "rank-0.pt.trace.json.gz"),
                                                                  (1, "rank-1.pt.trace.json.gz")]
    assert run.skipped == ()  # run.json is read as the run's facts, not skipped
    assert run.workload.workload == "gpt" and run.workload.throughput_unprofiled == 61.657
    assert run.origin_us == run.origin_ns / 1e3
    assert list(run.clock_offsets.columns) == list(schema.CLOCK_OFFSET_FIELDS)
    assert run.straggler_suspicions["rank"].tolist() == [1]
    assert list(s.to_dict()["run"]) == ["source", "world_size", "ranks_read", "backend", "nccl_version",
                                        "device_names", "host_names", "files", "skipped", "window", "origin_ns",
                                        "origin_us", "clock_offsets", "workload", "straggler_suspicions"]


def test_clock_shift_is_the_corrected_offset():
    offsets = pd.DataFrame({"rank": [0, 1, 2], "offset_us": [0.0, 5000.4, 7.0], "corrected": [False, True, False]})
    s = Summary(ranks=pd.DataFrame(), steps=pd.DataFrame(), collectives=pd.DataFrame(), gaps=pd.DataFrame(),
                run=RunFacts(clock_offsets=offsets))
    assert [s.clock_shift_ns(r) for r in (0, 1, 2, 3)] == [0, 5_000_400, 0, 0]


def test_every_summary_field_has_a_default_with_its_columns():
    s = Summary(ranks=pd.DataFrame(), steps=pd.DataFrame(), collectives=pd.DataFrame(), gaps=pd.DataFrame())
    expected = {"stragglers": schema.STRAGGLER_COLUMNS, "critical_path": schema.CRITICAL_PATH_COLUMNS,
                "critical_path_events": schema.CRITICAL_PATH_EVENT_COLUMNS, "graph": schema.GRAPH_COLUMNS,
                "data_quality": schema.DATA_QUALITY_COLUMNS, "fsdp": schema.FSDP_COLUMNS}
    for name, columns in expected.items():
        assert list(getattr(s, name).columns) == list(columns) and getattr(s, name).empty, name
    # imbalance and mismatches have the columns crossrank gives them
    no_steps = pd.DataFrame({"rank": [], "step": [], "step_us": [], "in_window": []})
    assert list(s.imbalance.columns) == list(crossrank.imbalance(no_steps).columns)
    no_calls = pd.DataFrame(columns=list(schema.COLLECTIVE_COLUMNS))
    assert list(s.mismatches.columns) == list(crossrank.mismatches(no_calls, [], lambda pg: set()).columns)
    assert list(s.run.clock_offsets.columns) == list(schema.CLOCK_OFFSET_FIELDS)
    assert list(s.run.straggler_suspicions.columns) == list(schema.STRAGGLER_COLUMNS)
    assert s.run.workload is None and s.run.world_size is None and s.findings == ()
    assert json.loads(s.to_json())["run"]["clock_offsets"] == []


def test_docstring_example_runs():
    result = doctest.testmod(facts, raise_on_error=False, verbose=False)
    assert result.failed == 0 and result.attempted > 0
