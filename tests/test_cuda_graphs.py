"""CUDA and HIP graphs: a graph launch's kernels are its own whatever their correlation ids say, the device's wait for
the next replay is host time of kind "graph launch", and a step that already replays graphs is never told to capture
itself with graphs (an eager step still is)."""

import pandas as pd
import pytest

import tracekit
from tracekit.events.classify import classify
from tracekit.read import reader
from tracedata import cpu, kernel, step, write_trace

H100 = [{"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9}]
MI300 = [{"name": "AMD Instinct MI300X", "computeMajor": 9}]
LOOSE = (0, 3)  # kernels of each replay whose correlation id links no runtime call


def decode_loop(launch_name, steps=4, inductor=False, recorded=True):
    """An engine's decode loop, one 1000 us step per ProfilerStep, its host thread's Python recorded (``python_function``,
    with_stack=True; ``recorded=False``: not) over the whole step: 300 us of host work, one graph
    launch at +300 us (correlation 100 + i), then the graph's 10 kernels of 50 us back to back from +310 us. Kernels 0
    and 3 carry ids (5000+) that match no call, the others the launch's. One kernel on stream 9 (id 1, below every
    call's) was launched before the trace and runs at 320 us, after the first graph launch."""
    events = [step(i + 1, i * 1000, 1000) for i in range(steps)] + (python_steps(steps) if recorded else [])
    for i in range(steps):
        base, corr = i * 1000, 100 + i
        events.append(cpu(launch_name, base + 300, 20, cat="cuda_runtime", correlation=corr))
        if inductor:  # torch.compile's cudagraph trees: the replay sits under these annotations
            events += [cpu("## Call CompiledFxGraph fabc123 ##", base + 290, 40, cat="user_annotation"),
                       cpu("CUDAGraphNode.replay", base + 295, 30, cat="user_annotation")]
        events += [kernel("sm90_xmma_gemm_bf16bf16_bf16f32", base + 310 + 50 * k, 50,
                          correlation=5000 + 10 * i + k if k in LOOSE else corr) for k in range(10)]
    events.append(kernel("gemm_bf16_launched_earlier", 320, 20, stream=9, correlation=1))
    return events


def python_steps(steps):
    """The host thread's Python over each step, as with_stack=True records it: the host was busy, not unrecorded."""
    return [cpu("engine.py(120): step", i * 1000, 1000, cat="python_function") for i in range(steps)]


def eager_loop(steps=4):
    """The same loop without graphs: each of the 10 kernels has its own cudaLaunchKernel, issued from +300 us."""
    events = [step(i + 1, i * 1000, 1000) for i in range(steps)] + python_steps(steps)
    for i in range(steps):
        base = i * 1000
        for k in range(10):
            corr = 100 + 10 * i + k
            events += [cpu("cudaLaunchKernel", base + 300 + 5 * k, 4, cat="cuda_runtime", correlation=corr),
                       kernel("sm90_xmma_gemm_bf16bf16_bf16f32", base + 310 + 50 * k, 50, correlation=corr)]
    return events


def summarize(tmp_path, events, devices):
    write_trace(tmp_path / "rank0.json", events, rank=0, world_size=1, deviceProperties=devices)
    return tracekit.summarize(tmp_path, cache=False)


def only(s, kind):
    hits = [f for f in s.findings if f.kind == kind]
    assert len(hits) == 1, [f.kind for f in s.findings]
    return hits[0]


@pytest.mark.parametrize("launch_name", ["cudaGraphLaunch", "cudaGraphLaunch_v10000", "hipGraphLaunch"])
def test_every_kernel_of_a_replay_is_its_graph_launchs(tmp_path, launch_name):
    path = write_trace(tmp_path / "rank0.json", decode_loop(launch_name), rank=0, world_size=1)
    _, events, comm_args = reader.read_rank(path, default_rank=0)
    out = classify(events, comm_args)
    kernels = out[out["cat"] == "kernel"].sort_values("ts_ns")
    graph = out[out["name"] == launch_name].sort_values("ts_ns")
    replays = kernels[kernels["stream"] == 7]
    # Kernel k of step i (i = 0..3) runs at i*1000 + 310 + 50k us: all 10 of a step belong to that step's launch,
    # the two whose ids match no call (k = 0, 3) included, and take its step.
    step_of = (replays["ts_ns"].to_numpy() - replays["ts_ns"].min()) // 1_000_000
    assert list(replays["launch_row"]) == [int(graph.index[i]) for i in step_of]
    assert list(replays["launch_ns"]) == [int(graph["ts_ns"].iloc[i]) for i in step_of]
    assert list(replays["step"]) == [int(i) + 1 for i in step_of]
    # The kernel launched before the trace (id 1 < 100, the first call's) stays unlinked, even though it runs after
    # the first graph launch.
    early = kernels[kernels["stream"] == 9]
    assert early["launch_row"].tolist() == [-1] and early["pre_trace"].tolist() == [True]


@pytest.mark.parametrize("launch_name, devices, graphs", [("cudaGraphLaunch", H100, "CUDA graphs"),
                                                          ("hipGraphLaunch", MI300, "HIP graphs")])
@pytest.mark.parametrize("inductor", [False, True])
def test_replaying_steps_wait_for_graph_launches_and_get_no_capture_advice(tmp_path, launch_name, devices, graphs,
                                                                          inductor):
    s = summarize(tmp_path, decode_loop(launch_name, inductor=inductor), devices)
    # Window: steps 1-3 (the last dropped). Device busy 310-810, 1310-1810, 2310-2810 us: span 2500 us, busy 1500.
    # The two gaps (810-1310, 1810-2310 us, 500 us each) end with the next replay's kernel 0, whose id links no call:
    # it is the graph launch's (at 1300 / 2300 us, after the gap began), so both are host time of kind graph launch.
    gaps = s.gaps.sort_values("start_us")
    assert gaps["dur_us"].tolist() == pytest.approx([500.0, 500.0])
    assert gaps["cause"].tolist() == ["host", "host"] and gaps["host_kind"].tolist() == ["graph launch"] * 2
    row = s.ranks.iloc[0]
    assert row["span_us"] == pytest.approx(2500.0) and row["idle_host_us"] == pytest.approx(1000.0)
    assert row["idle_graph_launch_us"] == pytest.approx(1000.0)
    assert row["graph_launches"] == 3 and row["steps"] == 3
    assert s.data_quality["pre_trace_events"].tolist() == [1]
    # Host-bound: 1000 / 2500 = 40% of the span, over the 30% bar.
    f = only(s, "host_bound")
    assert f.severity == "high" or f.evidence.get("measured_severity") == "high"
    assert f.evidence["share"] == pytest.approx(0.4)
    assert "capture the step" not in f.recommendation and "reduce-overhead" not in f.recommendation
    assert f"already replay {graphs}" in f.message and "(1.0 graph launches per step; 100%" in f.message
    for advice in ("fewer, larger graphs", "a larger batch per replay", "less host work between replays"):
        assert advice in f.recommendation


def test_unrecorded_host_time_between_replays_is_its_own_finding_without_capture_advice(tmp_path):
    # The decode loop with the host's Python not recorded: each gap [810, 1310) is 490 us with nothing on the thread
    # and 10 us of the graph launch [1300, 1320): unrecorded 980 of the 2500 us span (39%), host 20.
    s = summarize(tmp_path, decode_loop("cudaGraphLaunch", recorded=False), H100)
    row = s.ranks.iloc[0]
    assert (row["idle_host_unrecorded_us"], row["idle_host_us"]) == pytest.approx((980.0, 20.0))
    f = only(s, "host_unrecorded")
    assert f.evidence["share"] == pytest.approx(980 / 2500) and "host_bound" not in {g.kind for g in s.findings}
    assert "fewer, larger graph replays" in f.recommendation and "capture the step" not in f.recommendation


def test_an_eager_step_that_waits_for_launches_is_told_to_capture_graphs(tmp_path):
    s = summarize(tmp_path, eager_loop(), H100)
    # The same timeline as the decode loop, every kernel with its own launch: the gaps end with a kernel launched
    # at 1300 / 2300 us by cudaLaunchKernel, so they are host time of kind kernel launch, none of graph launch.
    gaps = s.gaps.sort_values("start_us")
    assert gaps["dur_us"].tolist() == pytest.approx([500.0, 500.0])
    assert gaps["host_kind"].tolist() == ["kernel launch"] * 2
    row = s.ranks.iloc[0]
    assert row["idle_host_us"] == pytest.approx(1000.0) and row["idle_graph_launch_us"] == 0.0
    assert row["graph_launches"] == 0
    f = only(s, "host_bound")
    assert "capture the step with CUDA graphs or torch.compile(mode='reduce-overhead')" in f.recommendation
    assert "already replay" not in f.message + f.recommendation


def test_a_rank_that_replays_and_one_that_does_not_each_get_their_advice(tmp_path):
    for rank, events in ((0, decode_loop("cudaGraphLaunch")), (1, eager_loop())):
        write_trace(tmp_path / f"rank{rank}.json", events, rank=rank, world_size=2, deviceProperties=H100)
    s = tracekit.summarize(tmp_path, cache=False)
    f = only(s, "host_bound")
    assert f.ranks == (0, 1)
    assert f.recommendation.startswith("On rank 0: The steps already replay CUDA graphs")
    assert "Elsewhere: Cut launch overhead: capture the step with CUDA graphs" in f.recommendation
    assert pd.Series(s.ranks["graph_launches"]).tolist() == [3, 0]
