"""Advice for the run that was traced: on a forward-only run (inference, every hit rank's ``ranks.training`` False) no
finding names a backward-only or gradient-only remedy (backward prefetch, DDP's gradient buckets, no_sync, gradient
reduction dtypes), and each gives the remedy that applies without a backward instead; unknown (None) and training
keep the training advice. Each finding once on a tiny trace shaped like the real case, once on hand-built tables."""

from __future__ import annotations

import types

import pandas as pd
import pytest

import tracekit
from tests.test_fsdp import dist_info, fsdp2_cpu_events
from tests.tracedata import cpu, kernel, step, write_trace
from tracekit.findings import checks, comm_findings, finding, fsdp_findings

GRADIENT_WORDS = ("backward", "bucket_cap_mb", "no_sync", "gradient", "reduce_dtype", "BACKWARD_PRE")
TRAINING = [([True], True), ([None], True), ([False], False)]  # ranks.training -> the training advice?


def forward_only(text: str) -> bool:
    return not any(word in text for word in GRADIENT_WORDS)


def ranks_table(training, **columns) -> pd.DataFrame:
    n = len(training)
    return pd.DataFrame({"rank": list(range(n)), "training": pd.Series(training, dtype=object), **columns})


# --- exposed communication, by op ---------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("training, trains", TRAINING)
def test_sharded_gathers_get_backward_prefetch_only_when_training(op, training, trains):
    coll = pd.DataFrame({"rank": [0], "op": [op], "dur_us": [100.0], "in_window": [True]})
    ranks = ranks_table(training, span_us=[1000.0], exposed_comm_us=[500.0], ddp=[False])
    f = comm_findings.exposed_comm(ranks, coll, None, {})[0]  # 500 / 1000 = 50% exposed: high
    assert f.severity == "high" and f"{op} 100%" in f.message
    if trains:
        assert f.recommendation == comm_findings._OP_ADVICE["all_gather"]
        assert "backward_prefetch=BACKWARD_PRE" in f.recommendation
    else:
        assert f.recommendation == comm_findings._OP_ADVICE["inference_all_gather"]
        assert forward_only(f.recommendation) and "reshard_after_forward=False" in f.recommendation
        assert "forward_prefetch=True" in f.recommendation


@pytest.mark.parametrize("training, trains", TRAINING)
def test_ddp_all_reduce_gets_gradient_knobs_only_when_training(training, trains):
    coll = pd.DataFrame({"rank": [0], "op": ["all_reduce"], "dur_us": [100.0], "in_window": [True]})
    ranks = ranks_table(training, span_us=[1000.0], exposed_comm_us=[500.0], ddp=[True])
    f = comm_findings.exposed_comm(ranks, coll, None, {})[0]
    # forward only under DDP: DDP's reducer never ran, the all-reduces are the program's own: the op's own advice
    want = comm_findings._OP_ADVICE["ddp_all_reduce" if trains else "all_reduce"]
    assert f.recommendation == want
    assert ("bucket_cap_mb" in want) == trains and ("no_sync" in want) == trains and ("async_op=True" in want) != trains


def test_a_ddp_model_run_forward_only_gets_no_gradient_knobs(tmp_path):
    # An evaluation loop under DDP: DistributedDataParallel.forward, a forward op (operators recorded, none backward:
    # training False) and an all_reduce of 400 us per 1000 us step, nothing under it. Steps 1 and 2 are the window;
    # span 0 -> 1800 us, exposed 2 x 400 = 800 us: 44%, high.
    events = [step(i + 1, i * 1000, 1000) for i in range(3)]
    for base in (0, 1000):
        events += [kernel("gemm_f16", base, 400),
                   kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", base + 400, 400, stream=20,
                          **{"Collective name": "all_reduce", "In msg nelems": 1000, "Out msg nelems": 1000,
                             "dtype": "Float", "Group size": 2}),
                   cpu("DistributedDataParallel.forward", base + 5, 50, cat="user_annotation"),
                   cpu("aten::linear", base + 10, 40)]
    for rank in (0, 1):
        write_trace(tmp_path / f"rank{rank}.json", events, rank=rank)
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    assert s.ranks["ddp"].tolist() == [True, True] and s.ranks["training"].tolist() == [False, False]
    f = next(f for f in s.findings if f.kind == "exposed_comm")
    assert f.evidence["share"] == pytest.approx(800 / 1800) and f.evidence["ddp"] is True
    assert "async_op=True" in f.recommendation and forward_only(f.recommendation), f.recommendation


# --- stragglers and bus bandwidth ----------------------------------------------------------------------------------

@pytest.mark.parametrize("training, trains", TRAINING)
def test_a_suspected_straggler_is_confirmed_without_ddp_buckets_when_forward_only(training, trains):
    # Rank 0 arrives last at 5 of 6 calls (p too high to call it): the others wait 100 us of a 1000 us step, 10%.
    suspected = pd.DataFrame({"rank": [0], "last_arrivals": [5], "matched": [6], "expected_share": [0.5],
                              "p_value": [0.11], "caused_wait_us_per_step": [100.0], "last_share": [5 / 6]})
    run = types.SimpleNamespace(straggler_suspicions=suspected)
    ranks = ranks_table(training, step_time_us=[1000.0])
    [f] = comm_findings.straggler(ranks, None, suspected.iloc[0:0], run)
    assert f.kind == "straggler_suspected" and f.evidence["share"] == pytest.approx(0.1)
    head = f.recommendation.split("; if it holds, ")[0]
    assert head == ("Profile more steps, or use smaller DDP buckets for more collectives per step, to confirm it"
                    if trains else "Profile more steps to confirm it")


@pytest.mark.parametrize("training, trains", TRAINING)
def test_low_bus_bandwidth_names_ddp_buckets_only_when_training(training, trains):
    # A 64 MB all-reduce over 10 ms between two H100s: busbw 64e6 / 10,000 us / 1e3 x 2 x 1/2 = 6.4 GB/s, under
    # 25% of 450 GB/s. DDP runs on both ranks.
    calls = pd.DataFrame({"rank": [0, 1], "op": "all_reduce", "in_window": True, "bytes": 64e6,
                          "transfer_us": 10_000.0, "dur_us": 10_000.0, "group_size": 2})
    run = types.SimpleNamespace(world_size=2, device_names=("NVIDIA H100 80GB HBM3",), host_names=("node0",))
    ranks = ranks_table(training * 2, ddp=[True, True])
    [f] = comm_findings.low_busbw(ranks, calls, None, run)
    assert f.evidence["busbw_gbps"] == pytest.approx(6.4)
    assert ("keep DDP's buckets large enough (bucket_cap_mb)" in f.recommendation) == trains
    assert ("send fewer, larger all-reduces" in f.recommendation) != trains


# --- DataParallel ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("training, trains", TRAINING)
def test_data_parallel_advice_drops_ddp_when_forward_only(training, trains):
    [f] = checks._data_parallel(ranks_table(training, data_parallel=[True]), None, None, None)
    assert ("Switch to DistributedDataParallel" in f.recommendation) == trains
    assert ("all-reduce overlapped with backward" in f.recommendation) == trains
    if not trains:
        assert f.recommendation.startswith("Run one process per GPU (torchrun), each with its own copy of the model")


# --- FSDP ------------------------------------------------------------------------------------------------------------

def fsdp_rows(steps=(1, 2), dtype="bfloat16"):
    """Rank 0, 100 ms steps; per step the root waits 3 ms for its gather (first of the pass: nothing to prefetch
    under), blocks.0 gathers on demand after it and waits 4 ms (late), blocks.1 is prefetched; 8 MB gathers."""
    return pd.DataFrame([{"rank": 0, "step": n, "phase": "forward", "unit": unit, "order": k, "gathers": 1,
                          "prefetch": verdict, "wait_us": wait, "allgather_exposed_us": wait, "allgather_us": 5000.0,
                          "allgather_bytes": 8e6, "allgather_dtype": dtype, "compute_us": 10e3, "reduces": 0,
                          "reduce_us": 0.0, "reduce_exposed_us": 0.0, "in_window": True}
                         for n in steps
                         for k, (unit, wait, verdict) in enumerate((("(root)", 3000.0, "on_demand"),
                                                                    ("blocks.0", 4000.0, "on_demand"),
                                                                    ("blocks.1", 0.0, "prefetched")))])


def step_rows(steps):
    return pd.DataFrame({"rank": 0, "step": list(steps), "step_us": 100e3, "in_window": True})


@pytest.mark.parametrize("training, trains", TRAINING + [(None, True)])  # None: no ranks table at all
def test_fsdp_gathers_get_backward_prefetch_only_when_training(training, trains):
    # 2 steps: units wait (3 + 4) ms per 100 ms step, 2 x 7 / 200 = 7%: medium; blocks.0's 2 x 4 = 8 ms are late
    # on-demand waits: prefetch. Every unit gathers in both steps: resharded, gathered again. 8 MB
    # gathers are not small; nothing in backward: no reshard-for-backward remedy.
    ranks = None if training is None else ranks_table(training)
    found = {f.kind: f for f in fsdp_findings.find(fsdp_rows(), step_rows((1, 2)), ranks)}
    f = found["fsdp_exposed_allgather"]
    assert f.severity == "medium" and f.evidence["share"] == pytest.approx(14e3 / 200e3)
    assert f.evidence["late_on_demand_wait_us"] == pytest.approx(8e3)
    if trains:
        assert f.recommendation == fsdp_findings.PREFETCH_REMEDY + "."
        assert "set_modules_to_backward_prefetch" in f.recommendation
    else:
        assert f.recommendation == (fsdp_findings.KEEP_GATHERED_REMEDY + "; " + fsdp_findings.FORWARD_PREFETCH_REMEDY
                                    + ".")
        assert forward_only(f.recommendation) and "set_modules_to_forward_prefetch" in f.recommendation


def test_a_forward_only_unit_gathered_once_is_not_told_to_stay_gathered():
    # One step: each unit gathers once in the window, so no re-gathering is seen; (3 + 4) ms of 100 ms = 7%.
    [f] = [f for f in fsdp_findings.find(fsdp_rows(steps=(1,)), step_rows((1,)), ranks_table([False]))
           if f.kind == "fsdp_exposed_allgather"]
    assert f.recommendation == fsdp_findings.FORWARD_PREFETCH_REMEDY + "."


@pytest.mark.parametrize("training, trains", TRAINING)
def test_fsdp_float32_gathers_name_a_reduce_dtype_only_when_training(training, trains):
    # float32 gathers while units wait 7% of the step (over 5%): gather in bf16.
    rows = fsdp_rows(dtype="float")
    found = {f.kind: f for f in fsdp_findings.find(rows, step_rows((1, 2)), ranks_table(training))}
    f = found["fsdp_fp32_allgather"]
    assert ("reduce_dtype=torch.float32" in f.recommendation) == trains
    assert "param_dtype=torch.bfloat16" in f.recommendation and "halves the all-gather bytes" in f.recommendation
    assert trains or forward_only(f.recommendation)


def fsdp_forward_trace(path, steps: int):
    """The forward pass of tests/test_fsdp.py's FSDP2 gloo step (root and blocks.0 gather on demand and wait 38 and
    40 us, blocks.1 prefetched; float gathers of 800 / 400 bytes), ``steps`` times, one 300 us ProfilerStep each,
    and no backward: operators recorded, none backward, so the rank runs forward only."""
    forward = [e for e in fsdp2_cpu_events() if e["ts"] < 290 and not e["name"].startswith("ProfilerStep")]
    events = []
    for k in range(steps):
        events.append(cpu(f"ProfilerStep#{k + 1}", 300 * k, 300, cat="user_annotation"))
        events += [{**e, "ts": e["ts"] + 300 * k} for e in forward]
    return write_trace(path / "rank0.json.gz", events, rank=None, **dist_info()).parent


@pytest.mark.parametrize("steps, stays", [(1, False), (2, True)])
def test_an_fsdp_inference_trace_gets_forward_only_advice(tmp_path, steps, stays):
    s = tracekit.summarize(fsdp_forward_trace(tmp_path, steps), window="all_steps", cache=False, workers=1)
    assert s.ranks["training"].tolist() == [False]
    found = {f.kind: f for f in s.findings}
    # units wait (38 + 40) us per 300 us step: 26%, high; blocks.0 came on demand after the root: prefetch forward;
    # 400-800 byte gathers are small: larger units. With 2 steps every unit gathers twice: keep them gathered.
    f = found["fsdp_exposed_allgather"]
    assert f.severity == "high" and f.evidence["share"] == pytest.approx(78 / 300)
    remedies = ([fsdp_findings.KEEP_GATHERED_REMEDY] if stays else []) + [fsdp_findings.FORWARD_PREFETCH_REMEDY,
                                                                           fsdp_findings.LARGER_UNITS_REMEDY]
    assert f.recommendation == "; ".join(remedies) + "."
    assert forward_only(found["fsdp_fp32_allgather"].recommendation)
    assert forward_only(found["exposed_comm"].recommendation)


def test_trains_on_is_false_only_where_every_hit_rank_is_known_forward_only():
    ranks = ranks_table([False, True, None])
    assert not finding.trains_on(ranks, [0])
    assert finding.trains_on(ranks, [0, 1])  # disagreeing: training wins
    assert finding.trains_on(ranks, [2]) and finding.trains_on(ranks, [0, 2])  # unknown counts as training
    assert finding.trains_on(ranks, [7]) and finding.trains_on(None, [0])  # not in the table, no table: unknown
