"""Advice that fits the job: findings name the ops that dominate, give DDP's knobs only where DDP runs, and name
the interconnect of the GPUs' vendor (NVLink / nvidia-smi on NVIDIA, Infinity Fabric / rocm-smi on AMD)."""

import pandas as pd
import pytest

import tracekit
from tracekit.findings import comm_findings
from tracekit.findings import finding
from tracekit.events.hostops import reads_host_op
from tracedata import cpu, kernel, step, write_trace

DDP_KNOBS = ("bucket_cap_mb", "no_sync", "gradient_as_bucket_view", "broadcast_buffers")
V100 = [{"name": "Tesla V100-SXM2-32GB", "computeMajor": 7}]


def comm(op, ts, dur, nelems=1000, group=2, name=None, **extra):
    """A communication kernel whose args name its op (today's traces), 4-byte elements."""
    kernel_name = name or {"all_to_all": "ncclDevKernel_SendRecv", "all_reduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                           "all_gather": "ncclDevKernel_AllGather_RING_LL",
                           "reduce_scatter": "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"}[op]
    return kernel(kernel_name, ts, dur, stream=20, **{"Collective name": op, "In msg nelems": nelems,
                                                      "Out msg nelems": nelems, "dtype": "Float", "Group size": group, **extra})


def run(tmp_path, per_rank, **top):
    for rank, events in per_rank.items():
        write_trace(tmp_path / f"rank{rank}.json", events, rank=rank, **top)
    return tracekit.summarize(tmp_path, cache=False)


def dlrm_step(base, with_ddp=False, training=True):
    """One 1000 us step: 200 us of compute, then 390 us of all_to_all and 110 us of all_reduce, nothing under them.
    ``training``: an autograd backward node on the host (what rank.analyze.trains looks for); without it the trace
    is forward only (inference)."""
    events = [kernel("sm70_xmma_gemm_f16f16", base, 200), comm("all_to_all", base + 200, 390),
              comm("all_reduce", base + 590, 110)]
    if with_ddp:
        events.append(cpu("DistributedDataParallel.forward", base + 1, 100, cat="user_annotation"))
    # The host op at 700 us: a backward node when training, else a forward op (operators recorded, none backward:
    # known to be forward only, not unknown).
    events.append(cpu("autograd::engine::evaluate_function: EmbeddingBackward0" if training else "aten::embedding_bag",
                      base + 700, 50))
    return events


def only(s, kind):
    hits = [f for f in s.findings if f.kind == kind]
    assert len(hits) == 1, [f.kind for f in s.findings]
    return hits[0]


def test_all_to_all_job_without_ddp_gets_all_to_all_advice_and_no_ddp_knobs(tmp_path):
    # Steps 1 and 2 are the window (the last is dropped). Per rank: span 0 -> 1700 us, comm 2 x 500 us, none hidden.
    s = run(tmp_path, {r: [step(i + 1, i * 1000, 1000) for i in range(3)] + dlrm_step(0) + dlrm_step(1000)
                       for r in (0, 1)}, deviceProperties=V100)
    f = only(s, "exposed_comm")
    # The host's ProfilerStep markers, not the device, pace these steps: the replay predicts no gain and says so,
    # and says what binds the step; a fix worth nothing is low whatever share of the span it concerns.
    assert f.severity == "low" and f.evidence["measured_severity"] == "high" and f.ranks == (0, 1)
    assert f.evidence["predicted_saving_us"] == pytest.approx(0.0, abs=1e-6) and "no measurable gain" in f.message
    assert "The step is bound by" in f.message
    assert f.evidence["share"] == pytest.approx(1000 / 1700)
    assert f.evidence["op_shares"] == pytest.approx({"all_to_all": 390 / 500, "all_reduce": 110 / 500})
    assert f.evidence["ddp"] is False and not s.ranks["ddp"].any()
    assert "all_to_all 78%, all_reduce 22% of the communication time" in f.message
    assert "TrainPipelineSparseDist" in f.recommendation  # the all_to_all advice, first
    assert f.recommendation.index("all_to_all") < f.recommendation.index("all_reduce")
    assert not any(knob in f.recommendation for knob in DDP_KNOBS), f.recommendation


INFERENCE_A2A = "two-batch overlap"  # words only the forward-only all_to_all advice has


@pytest.mark.parametrize("trains_on", [(), (1,), (0, 1)])
def test_all_to_all_advice_names_a_training_pipeline_only_when_a_rank_trains(tmp_path, trains_on):
    # The DLRM steps above; a rank trains when its host shows an autograd backward node. Per rank: comm 2 x 500 us
    # exposed over a span of 1700 us (59%), all_to_all 2 x 390 / 1000 = 78% of the communication time, so the
    # all_to_all advice comes first. Forward only on both ranks: inference advice; if any rank trains (here rank 1
    # only), the job is set up as a training job and the training pipeline stands.
    s = run(tmp_path, {r: [step(i + 1, i * 1000, 1000) for i in range(3)]
                       + dlrm_step(0, training=r in trains_on) + dlrm_step(1000, training=r in trains_on)
                       for r in (0, 1)}, deviceProperties=V100)
    assert s.ranks["training"].tolist() == [r in trains_on for r in (0, 1)]
    f = only(s, "exposed_comm")
    assert f.ranks == (0, 1) and f.evidence["share"] == pytest.approx(1000 / 1700)
    assert f.evidence["op_shares"] == pytest.approx({"all_to_all": 390 / 500, "all_reduce": 110 / 500})
    text = f.recommendation
    assert text.index("all_to_all") < text.index("all_reduce")
    if trains_on:
        assert "TrainPipelineSparseDist" in text and INFERENCE_A2A not in text
    else:
        assert "TrainPipelineSparseDist" not in text and "Train" not in text and "training" not in text.lower()
        assert INFERENCE_A2A in text and "micro-batches" in text and "fp8 dispatch" in text


@pytest.mark.parametrize("marker", ["DistributedDataParallel.forward", "torch.distributed.ddp.reducer::copy_bucket_to_grad"])
def test_ddp_all_reduce_gets_ddp_knobs(tmp_path, marker):
    # All communication is all_reduce; DDP shows itself by its forward or by its reducer's ops. The reducer runs in
    # backward, inside autograd's engine: its node is there too, so the rank trains (a forward-only rank gets no
    # gradient knobs: tests/test_inference_advice.py).
    events = [step(i + 1, i * 1000, 1000) for i in range(3)]
    for base in (0, 1000):
        events += [kernel("gemm_f16", base, 400), comm("all_reduce", base + 400, 400),
                   cpu(marker, base + 5, 50, cat="cpu_op" if "reducer" in marker else "user_annotation"),
                   cpu("autograd::engine::evaluate_function: AddmmBackward0", base + 300, 50)]
    s = run(tmp_path, {0: events, 1: events})
    assert s.ranks["ddp"].tolist() == [True, True]
    f = only(s, "exposed_comm")
    assert f.evidence["op_shares"] == {"all_reduce": 1.0} and f.evidence["ddp"] is True
    assert "all_reduce 100%" in f.message
    assert all(knob in f.recommendation for knob in ("bucket_cap_mb", "no_sync", "gradient_as_bucket_view"))


def test_all_reduce_without_ddp_gets_no_ddp_knobs(tmp_path):
    events = [step(i + 1, i * 1000, 1000) for i in range(3)]
    for base in (0, 1000):
        events += [kernel("gemm_f16", base, 400), comm("all_reduce", base + 400, 400)]
    f = only(run(tmp_path, {0: events, 1: events}), "exposed_comm")
    assert "async_op=True" in f.recommendation
    assert not any(knob in f.recommendation for knob in DDP_KNOBS), f.recommendation


def test_fsdp_like_gathers_get_sharding_advice_once(tmp_path):
    # all_gather 300 us and reduce_scatter 200 us a step: both dominant, one piece of advice covers both.
    events = [step(i + 1, i * 1000, 1000) for i in range(3)]
    for base in (0, 1000):
        events += [kernel("gemm_f16", base, 300), comm("all_gather", base + 300, 300, nelems=2000),
                   comm("reduce_scatter", base + 600, 200, nelems=2000)]
    f = only(run(tmp_path, {0: events, 1: events}), "exposed_comm")
    assert f.evidence["op_shares"] == pytest.approx({"all_gather": 0.6, "reduce_scatter": 0.4})
    assert "all_gather 60%, reduce_scatter 40%" in f.message
    assert f.recommendation.count("backward_prefetch") == 1
    assert not any(knob in f.recommendation for knob in DDP_KNOBS)


def test_minor_op_gets_no_advice_of_its_own():
    coll = pd.DataFrame({"rank": [0, 0, 0, 1], "op": ["all_reduce", "broadcast", "all_reduce", "all_reduce"],
                         "dur_us": [500.0, 100.0, 400.0, 999.0], "in_window": [True, True, True, True]})
    shares = comm_findings.op_shares(coll, [0])
    assert shares == pytest.approx({"all_reduce": 0.9, "broadcast": 0.1}) and list(shares) == ["all_reduce", "broadcast"]
    assert comm_findings.dominant_ops(shares) == ["all_reduce"]  # 10% < DOMINANT_OP_SHARE
    assert comm_findings.dominant_ops({"broadcast": 0.5, "barrier": 0.3, "send": 0.2}) == ["broadcast", "barrier", "send"]
    assert comm_findings.dominant_ops({"broadcast": 0.81, "barrier": 0.19}) == ["broadcast"]
    assert comm_findings.op_shares(coll.assign(in_window=False), [0]) == {}
    assert comm_findings.op_shares(coll.assign(dur_us=0.0), [0]) == {}  # no call time: no shares, not NaN ones


@pytest.mark.parametrize("op, words", [("reduce_scatter", "backward_prefetch"), ("recv", "micro-batches"),
                                        ("all_to_all", "TrainPipelineSparseDist"), ("barrier", "barriers out"),
                                        ("other", "unnamed op")])
def test_each_op_gets_its_own_advice(op, words):
    coll = pd.DataFrame({"rank": [0], "op": [op], "dur_us": [100.0], "in_window": [True]})
    ranks = pd.DataFrame({"rank": [0], "span_us": [1000.0], "exposed_comm_us": [500.0], "ddp": [True]})
    f = comm_findings.exposed_comm(ranks, coll, None, {})[0]
    assert words in f.recommendation and f"{op} 100%" in f.message
    assert op == "other" or "unnamed op" not in f.recommendation


@pytest.mark.parametrize("training, words", [([False], INFERENCE_A2A), ([True], "TrainPipelineSparseDist"),
                                             ([None], "TrainPipelineSparseDist"),  # unknown: the advice of old
                                             ([False, True], "TrainPipelineSparseDist")])  # disagree: training wins
def test_all_to_all_advice_follows_ranks_training(training, words):
    n = len(training)
    coll = pd.DataFrame({"rank": list(range(n)), "op": ["all_to_all"] * n, "dur_us": [100.0] * n,
                         "in_window": [True] * n})
    ranks = pd.DataFrame({"rank": list(range(n)), "span_us": [1000.0] * n, "exposed_comm_us": [500.0] * n,
                          "ddp": [False] * n, "training": pd.Series(training, dtype=object)})
    f = comm_findings.exposed_comm(ranks, coll, None, {})[0]  # 500 / 1000 = 50% exposed: high, on every rank
    assert f.ranks == tuple(range(n)) and words in f.recommendation
    assert ("TrainPipelineSparseDist" in f.recommendation) != (INFERENCE_A2A in f.recommendation)


def hip_launch(ts, correlation):
    return cpu("hipLaunchKernel", ts, 2, cat="cuda_runtime", correlation=correlation)


def slow_all_reduce_ranks(launch_call):
    # A 64 MB all-reduce taking 10 ms between two GPUs: busbw 6.4 GB/s; one launch each so the runtime shows.
    big = 16_000_000
    return {r: [step(i + 1, i * 20_000, 20_000) for i in range(3)]
            + [launch_call(4990, 1), kernel("gemm_bf16", 0, 20_000),
               comm("all_reduce", 5000, 10_000, nelems=big, correlation=1)]
            for r in (0, 1)}


def test_amd_gpus_get_infinity_fabric_and_rocm_smi(tmp_path):
    mi300 = [{"name": "AMD Instinct MI300X", "computeMajor": 9}]
    s = run(tmp_path, slow_all_reduce_ranks(hip_launch), deviceProperties=mi300)
    assert s.ranks["gpu_runtime"].tolist() == ["hip", "hip"]
    f = only(s, "low_busbw")
    assert f.evidence["busbw_gbps"] == pytest.approx(6.4) and f.evidence["link_gbps"] == 448
    assert "Infinity Fabric" in f.message and "rocm-smi" in f.recommendation
    text = " ".join(g.message + " " + g.recommendation for g in s.findings)
    assert "NVLink" not in text and "nvidia-smi" not in text
    assert "bucket_cap_mb" not in f.recommendation  # no DDP in this trace


def test_nvidia_gpus_get_nvlink_and_nvidia_smi(tmp_path):
    a100 = [{"name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8}]
    cuda_launch = lambda ts, c: cpu("cudaLaunchKernel", ts, 2, cat="cuda_runtime", correlation=c)  # noqa: E731
    s = run(tmp_path, slow_all_reduce_ranks(cuda_launch), deviceProperties=a100)
    assert s.ranks["gpu_runtime"].tolist() == ["cuda", "cuda"]
    f = only(s, "low_busbw")
    assert f.evidence["link_gbps"] == 300 and "300 GB/s NVLink" in f.message and "nvidia-smi topo -m" in f.recommendation


def test_amd_host_bound_and_precision_advice_name_amd_features(tmp_path):
    # Kernels launched 90 us into each 150 us gap: the host, running Python (recorded), is late; fp32 GEMMs.
    events = [step(i + 1, i * 1000, 1000) for i in range(3)]
    events += [cpu("train.py(42): step", i * 1000, 1000, cat="python_function") for i in range(3)]
    for i, base in enumerate((0, 1000)):
        events += [hip_launch(base, 10 * i + 1), kernel("Cijk_Ailk_Bljk_SB_MT64x16", base + 10, 400, correlation=10 * i + 1),
                   hip_launch(base + 500, 10 * i + 2), kernel("Cijk_Ailk_Bljk_SB_MT64x16", base + 560, 400,
                                                              correlation=10 * i + 2)]
    s = run(tmp_path, {0: events}, deviceProperties=[{"name": "AMD Radeon Graphics", "computeMajor": 9}])
    host, fp32 = only(s, "host_bound"), only(s, "no_reduced_precision")
    assert "HIP graphs" in host.recommendation and "matrix cores" in fp32.message
    assert "tensor cores" not in fp32.message + fp32.recommendation


@pytest.mark.parametrize("runtimes, names, vendor", [
    (["hip"], [], "amd"),
    ([None], ["AMD Instinct MI250X"], "amd"),
    ([None], ["AMD Radeon Graphics"], "amd"),
    (["cuda"], [], "nvidia"),
    ([None], ["Tesla V100-SXM2-32GB"], "nvidia"),
    ([None], ["NVIDIA B200"], "nvidia"),
    ([None], ["H100 80GB HBM3"], "nvidia"),
    ([None, None], [], None),
    (["hip", None], ["gfx942"], "amd"),
])
def test_gpu_vendor(runtimes, names, vendor):
    ranks = pd.DataFrame({"rank": range(len(runtimes)), "gpu_runtime": runtimes})
    assert finding.gpu_vendor(ranks, names) == vendor


def test_unknown_vendor_gets_nothing_vendor_specific(tmp_path):
    # No runtime calls and no device names: 20% of the span is exposed all_reduce, and the advice names no vendor.
    events = [step(i + 1, i * 1000, 1000) for i in range(3)]
    for base in (0, 1000):
        events += [kernel("gemm_f16", base, 800), comm("all_reduce", base + 800, 200)]
    s = run(tmp_path, {0: events, 1: events})
    assert s.ranks["gpu_runtime"].isna().all() and finding.gpu_vendor(s.ranks, s.run.device_names) is None
    text = only(s, "exposed_comm").recommendation
    assert not any(word in text for word in ("NVLink", "nvidia-smi", "rocm-smi", "Infinity Fabric", "CUDA", "HIP"))


def test_the_reader_keeps_the_host_ops_that_say_ddp():
    assert reads_host_op("DistributedDataParallel.forward")
    assert reads_host_op("torch.distributed.ddp.reducer::copy_bucket_to_grad")
    assert not reads_host_op("DistributedDataParallel.forward_helper")
    assert not reads_host_op("aten::mm")


def test_real_gloo_ddp_sample_says_ddp():
    from pathlib import Path

    s = tracekit.summarize(Path(__file__).resolve().parents[1] / "sample_traces" / "resnet-gloo-2rank", cache=False)
    assert s.ranks["ddp"].tolist() == [True, True] and s.ranks["gpu_runtime"].isna().all()


@pytest.mark.parametrize("call, advice, not_advice", [
    ("hipFree", "PYTORCH_HIP_ALLOC_CONF", ".item()"),
    ("cudaMemcpy", "pin_memory=True", "empty_cache"),
    ("cudaStreamSynchronize", "torch.cuda.synchronize()", "empty_cache"),
])
def test_sync_finding_names_the_call_and_advises_on_it(tmp_path, call, advice, not_advice):
    # Each 1000 us step: a kernel [10, 110), then the host blocks in `call` for 500 us (a short cudaDeviceSynchronize
    # too), and launches the next kernel when it returns: idle [110, 650) is sync, with `call` the longest.
    events = [step(i + 1, i * 1000, 1000) for i in range(3)]
    for i, base in enumerate((0, 1000, 2000)):
        events += [cpu("cudaLaunchKernel", base, 5, cat="cuda_runtime", correlation=10 * i + 1),
                   kernel("gemm_f16", base + 10, 100, correlation=10 * i + 1),
                   cpu(call, base + 120, 500, cat="cuda_runtime"),
                   cpu("cudaDeviceSynchronize", base + 100, 10, cat="cuda_runtime"),
                   cpu("cudaLaunchKernel", base + 640, 5, cat="cuda_runtime", correlation=10 * i + 2),
                   kernel("gemm_f16", base + 650, 100, correlation=10 * i + 2)]
    s = run(tmp_path, {0: events})
    assert s.ranks["sync_top_call"].tolist() == [call] and s.ranks["sync_calls"].tolist() == [4]  # 2 steps x 2
    f = only(s, "sync_in_step")
    assert f.evidence["top_call"] == call and f"most of their time in {call}" in f.message
    assert advice in f.recommendation and not_advice not in f.recommendation


def test_findings_are_ordered_by_what_their_fix_gains():
    """A medium finding whose fix saves 3% comes after a low one that saves 15%; findings without a prediction come
    after those with one; one that gains nothing comes last, low, and says what binds the step (here host time, 80 of
    100 us of the critical path)."""
    import pandas as pd

    from tracekit.findings.order import by_gain

    def make(kind, severity, saving_us, share=0.5):
        evidence = {"share": share}
        if saving_us is not None:
            evidence |= {"predicted_step_us": 1000.0 - saving_us, "predicted_saving_us": saving_us}
        return finding.Finding(kind, severity, (0,), f"{kind} seen.", "fix it", evidence)

    path = pd.DataFrame({"rank": 0, "step": 1, "category": ["host", "compute", "launch"], "us": [80.0, 18.0, 2.0],
                         "waiting": False, "ends_on_rank": 0})
    found = by_gain((make("a", "high", 5.0), make("b", "medium", 30.0), make("c", "low", 150.0),
                     make("d", "medium", None, share=0.08)), path)
    # Predicted: c 15%, b 3%; then d (no prediction, by severity); a's 0.5% is no gain: last, and low.
    assert [f.kind for f in found] == ["c", "b", "d", "a"]
    assert [f.severity for f in found] == ["low", "medium", "medium", "low"]
    assert found[-1].message == ("a seen. The step is bound by host time (80% of the critical path), then compute "
                                 "(18% of the critical path) instead.")


def test_a_rank_of_no_device_time_beside_one_of_0_us_span_gets_no_share_and_no_error(tmp_path):
    """Rank 0 ran no device event (its device times are unknown: NaN), rank 1 one kernel of 0 us (a span of 0 us,
    exposed comm 0). Shares of a 0 us span are unknown, so no exposed-comm finding; the run's rank columns stay
    numbers (rank 0's row of unknowns made them Python objects, and 0.0 / 0.0 raised ZeroDivisionError)."""
    s = run(tmp_path, {0: [step(1, 0, 100), cpu("aten::add", 10, 20)],
                       1: [step(1, 0, 100), kernel("elementwise_kernel", 10, 0)]}, deviceProperties=V100)
    ranks = s.ranks.set_index("rank")
    assert ranks.loc[1, "span_us"] == 0 and ranks.loc[1, "exposed_comm_us"] == 0
    assert pd.isna(ranks.loc[0, "span_us"]) and ranks["span_us"].dtype == "float64"
    assert ranks["exposed_comm_us"].dtype == "float64" and finding.share_of_span(s.ranks, "exposed_comm_us").isna().all()
    assert "exposed_comm" not in [f.kind for f in s.findings]
