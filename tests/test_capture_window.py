"""A trace recorded while CUDA/HIP graphs were captured: the data-quality note and the report's top line say so, and the
captured window gets no step-speed finding (the findings that do not judge speed stay), with what was held back named."""

import pytest

import tracekit
from tracekit import quality
from tracedata import cpu, kernel, step, write_trace

H100 = [{"name": "NVIDIA H100 80GB HBM3", "computeMajor": 9}]
MI300 = [{"name": "AMD Instinct MI300X", "computeMajor": 9}]
CUDA = {"launch": "cudaLaunchKernel", "begin": "cudaStreamBeginCapture", "end": "cudaStreamEndCapture",
        "instantiate": "cudaGraphInstantiateWithFlags", "graph": "cudaGraphLaunch"}
HIP = {"launch": "hipLaunchKernel", "begin": "hipStreamBeginCapture", "end": "hipStreamEndCapture",
       "instantiate": "hipGraphInstantiate", "graph": "hipGraphLaunch"}
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"


def call(name, ts, dur, corr):
    return cpu(name, ts, dur, cat="cuda_runtime", correlation=corr)


def eager_step(base, names, corr):
    """10 launches from +300 us, their 50 us kernels back to back from +310 us."""
    return [e for k in range(10) for e in (call(names["launch"], base + 300 + 5 * k, 4, corr + k),
                                           kernel(GEMM, base + 310 + 50 * k, 50, correlation=corr + k))]


def capture(base, names, corr):
    """torch.cuda.graph's capture: BeginCapture at +50 us, 10 launches recorded (no kernel runs), EndCapture at +200,
    instantiation from +210 to +290 us."""
    return ([call(names["begin"], base + 50, 5, corr)]
            + [call(names["launch"], base + 100 + 5 * k, 4, corr + 1 + k) for k in range(10)]
            + [call(names["end"], base + 200, 5, corr + 11), call(names["instantiate"], base + 210, 80, corr + 12)])


def replay(base, names, corr):
    """One graph launch at +300 us and its 10 kernels from +310 us, all with the launch's id."""
    return [call(names["graph"], base + 300, 20, corr)] + [kernel(GEMM, base + 310 + 50 * k, 50, correlation=corr)
                                                           for k in range(10)]


def trace(names, capture_step=2, steps=True):
    """Steps 1-4 (1000 us each): step 1 eager (a warm-up), the capture in ``capture_step`` followed by the first
    replay, replays after it; DataParallel.forward in step 1 (a finding that does not judge speed)."""
    events = [step(i + 1, i * 1000, 1000) for i in range(4)] if steps else []
    # The host thread's Python over each step (with_stack=True): the launch waits are recorded host time.
    events += [cpu("engine.py(120): step", i * 1000, 1000, cat="python_function") for i in range(4)]
    events.append(cpu("DataParallel.forward", 10, 900, cat="user_annotation"))
    for i in range(4):
        base, corr = i * 1000, 1000 * (i + 1)
        if i + 1 < capture_step:
            events += eager_step(base, names, corr)
        elif i + 1 == capture_step:
            events += capture(base, names, corr) + replay(base, names, corr + 100)
        else:
            events += replay(base, names, corr)
    return events


def summarize(tmp_path, events, devices):
    write_trace(tmp_path / "rank0.json", events, rank=0, world_size=1, deviceProperties=devices)
    return tracekit.summarize(tmp_path, cache=False)


@pytest.mark.parametrize("names, devices", [(CUDA, H100), (HIP, MI300)])
def test_a_captured_step_is_noted_first_and_gets_no_step_speed_finding(tmp_path, names, devices):
    s = summarize(tmp_path, trace(names), devices)
    # Window: steps 1-3. Device busy 310-810, 1310-1810, 2310-2810 us (span 2500): 1000 us idle waiting for launches,
    # 40% of the span, which would be a host_bound finding; but step 2 holds the capture (BeginCapture 1050 us to
    # EndCapture 1205, instantiation 1210-1290), so it is held back. DataParallel does not judge speed: it stays.
    assert s.ranks.iloc[0]["idle_host_us"] == pytest.approx(1000.0)
    assert s.ranks.iloc[0]["span_us"] == pytest.approx(2500.0)
    dq = s.data_quality.iloc[0]
    assert dq["graph_capture_calls"] == 3 and dq["captured_steps"] == "2"
    assert dq["held_back_findings"] == "host_bound"
    kinds = [f.kind for f in s.findings]
    assert "host_bound" not in kinds and "data_parallel" in kinds
    note = [n for n in quality.notes(s.data_quality) if "captured" in n]
    assert note == ["rank 0: CUDA/HIP graphs were captured during step 2 (stream capture, graph instantiation): "
                    "their kernels are capture and warm-up, not the job's steady work; step-speed findings held "
                    "back: host_bound; profile steps after the capture (a later profiler schedule) to judge their "
                    "speed"]
    lines = str(s).splitlines()
    assert lines[1] == "  WARNING " + note[0]
    assert "  Held back, the window overlaps a graph capture (see the top): host_bound." in lines


def test_a_capture_outside_the_window_holds_nothing_back(tmp_path):
    # The capture is in step 4, which the default window drops: steps 1-3 are eager, their 1000 us of launch
    # waits (40% of 2500 us) give the host_bound finding with the advice to capture graphs.
    s = summarize(tmp_path, trace(CUDA, capture_step=4), H100)
    dq = s.data_quality.iloc[0]
    assert dq["graph_capture_calls"] == 3 and dq["captured_steps"] == "" and dq["held_back_findings"] == ""
    host = [f for f in s.findings if f.kind == "host_bound"]
    assert len(host) == 1 and "capture the step with CUDA graphs" in host[0].recommendation
    assert "rank 0: 3 graph-capture calls outside the window's steps: their work is left out of the numbers" in \
        quality.notes(s.data_quality)
    assert "WARNING" not in str(s)


def test_a_trace_without_steps_that_captures_is_held_back_whole(tmp_path):
    # No step annotation: the window is the whole trace (span 310-3810 us, 3 gaps of 500 us: 1500 us, 43%), and it
    # holds the capture.
    s = summarize(tmp_path, trace(CUDA, steps=False), H100)
    assert s.ranks.iloc[0]["idle_host_us"] == pytest.approx(1500.0)
    dq = s.data_quality.iloc[0]
    assert dq["captured_steps"] == "the window" and dq["held_back_findings"] == "host_bound"
    assert "host_bound" not in [f.kind for f in s.findings]
    assert str(s).splitlines()[1].startswith("  WARNING rank 0: CUDA/HIP graphs were captured during the window")


@pytest.mark.parametrize("drop, captured", [
    # Capture begun before the trace: from the trace's start (the first step, 0 us) to EndCapture's end (1205 us).
    ("begin", "1, 2"),
    # Instantiation alone (1210-1290 us, e.g. a cudagraph tree instantiating a graph captured earlier): step 2.
    ("begin end", "2"),
    # An unfinished capture: BeginCapture at 1050 us to the trace's end, over steps 2 and 3 of the window.
    ("end instantiate", "2, 3"),
])
def test_the_capture_spans(tmp_path, drop, captured):
    names = [CUDA[k] for k in drop.split()]
    events = [e for e in trace(CUDA) if e["name"] not in names]
    dq = summarize(tmp_path, events, H100).data_quality.iloc[0]
    assert dq["graph_capture_calls"] == 3 - len(names) and dq["captured_steps"] == captured
