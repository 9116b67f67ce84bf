"""The kernel, operator and memory charts and tables (``tracekit.render.charts_ops``) on tiny traces whose numbers
are worked out here: an addmm and an add on an A100 SXM4 80GB with [memory] events, the same on the CPU only, and on
a GPU tracekit does not know."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import tracekit
from tracedata import cpu, kernel, launch, step, write_trace
from tracekit.render import charts_ops, charts_roofline, report

A100 = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_899_345_920, "computeMajor": 8}]
ADDMM = {"Input Dims": [[32], [64, 128], [128, 32], [], []], "Input type": ["float", "float", "float", "Scalar", "Scalar"]}
ADD = {"Input Dims": [[1024, 1024], [1024, 1024], []], "Input type": ["float", "float", "Scalar"]}
# Per call: addmm M=64, K=128, N=32: 2 * 64 * 128 * 32 FLOPs over 4 * (64*128 + 128*32 + 32 + 64*32) bytes; add of
# two 1M-float tensors: 1M FLOPs over 3 * 4 MB. Each runs once per step: addmm's kernel 40 us, add's 100 us.
ADDMM_FLOPS, ADDMM_BYTES = 2 * 64 * 128 * 32, 4 * (64 * 128 + 128 * 32 + 32 + 64 * 32)
ADD_FLOPS, ADD_BYTES = 1024 * 1024, 3 * 4 * 1024 * 1024
STEPS = 3


def memory_event(ts, nbytes, total, addr, reserved=32 * 2**20, device_type=1):
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 100, "tid": 1, "ts": ts, "s": "t",
            "args": {"Device Type": device_type, "Device Id": 0 if device_type else -1, "Addr": addr, "Bytes": nbytes, "Total Allocated": total,
                     "Total Reserved": reserved}}


def events(gpu: bool = True, memory: bool = True) -> list[dict]:
    """Three 1000 us steps; in each an addmm at +10 (50 us) and an add at +100 (60 us); on a GPU each launches a
    kernel; with ``memory`` 1 MB is allocated as the trace starts and each add allocates 4 MB that stay live."""
    out = [memory_event(0, 2**20, 2**20, 1)] if memory else []
    for k in range(STEPS):
        t = 1000 * k
        a, b = 10 * k + 1, 10 * k + 2
        out += [step(k + 1, t, 1000), cpu("aten::addmm", t + 10, 50, **{"External id": a, **ADDMM}),
                cpu("aten::add", t + 100, 60, **{"External id": b, **ADD})]
        if gpu:
            out += [{**launch(t + 20, correlation=a), "args": {"correlation": a, "External id": a}},
                    kernel("sgemm", t + 200, 40, correlation=a, **{"External id": a}),
                    {**launch(t + 110, correlation=b), "args": {"correlation": b, "External id": b}},
                    kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                           "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
                           "at::detail::Array<char*, 3>)", t + 300, 100, correlation=b, **{"External id": b})]
        if memory:
            out.append(memory_event(t + 120, 4 * 2**20, 2**20 + (k + 1) * 4 * 2**20, 100 + k))
    return out


def write_memory_run(folder: Path, device_properties=A100, gpu: bool = True, memory: bool = True) -> Path:
    """A one-rank run folder of ``events`` (the viewer's tests open it too)."""
    top = {"deviceProperties": device_properties} if device_properties else {}
    write_trace(Path(folder) / "rank-0.pt.trace.json.gz", events(gpu, memory), rank=0, world_size=1, **top)
    return Path(folder)


@pytest.fixture(scope="module")
def a100(tmp_path_factory):
    return tracekit.summarize(write_memory_run(tmp_path_factory.mktemp("a100")), cache=False, workers=1)


@pytest.fixture(scope="module")
def cpu_only(tmp_path_factory):
    folder = write_memory_run(tmp_path_factory.mktemp("cpu"), device_properties=None, gpu=False, memory=False)
    return tracekit.summarize(folder, cache=False, workers=1)


def points(fig) -> dict[str, tuple]:
    """The roofline's op points: name -> (x, y, customdata)."""
    out = {}
    for trace in fig.data:
        if trace.mode == "markers":
            for x, y, extra in zip(trace.x, trace.y, trace.customdata):
                out[extra[0]] = (x, y, tuple(extra))
    return out


def test_the_roofline_points_sit_at_each_ops_intensity_and_achieved_rate(a100):
    fig = charts_roofline.roofline(a100, 0)
    got = points(fig)
    assert set(got) == {"aten::addmm", "aten::add"}
    x, y, extra = got["aten::addmm"]
    assert x == pytest.approx(ADDMM_FLOPS / ADDMM_BYTES)
    assert y == pytest.approx(STEPS * ADDMM_FLOPS / (STEPS * 40e-6) / 1e12)  # device time: 3 kernels of 40 us
    assert extra[1:3] == (STEPS, "float") and extra[3] == pytest.approx(STEPS * 40 / 1e3)  # calls, dtype, ms
    x, y, _ = got["aten::add"]
    assert x == pytest.approx(ADD_FLOPS / ADD_BYTES) and y == pytest.approx(ADD_FLOPS / 100e-6 / 1e12)
    kinds = {t.name for t in fig.data if t.mode == "markers"}
    assert kinds == {"matmul", "elementwise"}  # one trace per op kind


def test_the_roofs_are_the_a100s_2039_gbs_and_fp32_peak(a100):
    fig = charts_roofline.roofline(a100, 0)
    lines = {t.name: t for t in fig.data if t.mode == "lines"}
    assert set(lines) == {"memory roof (2,039 GB/s)", "fp32 roof (19.5 TFLOPS/s)"}
    memory = lines["memory roof (2,039 GB/s)"]
    assert [tf * 1e3 / x for x, tf in zip(memory.x, memory.y)] == pytest.approx([2039, 2039])  # GB/s
    fp32 = lines["fp32 roof (19.5 TFLOPS/s)"]
    assert list(fp32.y) == [19.5, 19.5]
    assert fp32.x[0] == pytest.approx(19.5e12 / 2039e9) == memory.x[-1]  # they meet at the ridge point
    assert "NVIDIA A100 SXM4 80GB" in fig.layout.title.text
    assert fig.layout.xaxis.type == fig.layout.yaxis.type == "log"


def test_without_a_known_device_there_are_no_roofs_and_the_subtitle_says_why(cpu_only, tmp_path):
    fig = charts_roofline.roofline(cpu_only, 0)
    assert not [t for t in fig.data if t.mode == "lines"]
    assert "CPU-only" in fig.layout.title.text
    # On the CPU the rate is over host time: 50 us per addmm.
    assert points(fig)["aten::addmm"][1] == pytest.approx(ADDMM_FLOPS / 50e-6 / 1e12)
    mystery = tracekit.summarize(write_memory_run(tmp_path, [{"id": 0, "name": "Mystery GPU 9000"}]), cache=False,
                                 workers=1)
    fig = charts_roofline.roofline(mystery, 0)
    assert not [t for t in fig.data if t.mode == "lines"] and len(points(fig)) == 2
    assert "'Mystery GPU 9000' is not in tracekit's datasheet table" in fig.layout.title.text


def test_a_roofline_without_shapes_says_why(tmp_path):
    bare = [step(1, 0, 1000), step(2, 1000, 1000), cpu("aten::mm", 10, 50)]  # no Input Dims: record_shapes off
    write_trace(tmp_path / "rank-0.json.gz", bare, rank=0, world_size=1)
    fig = charts_roofline.roofline(tracekit.summarize(tmp_path, cache=False, workers=1), 0)
    assert not fig.data and "record_shapes=True was off" in charts_ops.unwrapped(fig.layout.annotations[0].text)


def test_op_time_per_step_stacks_each_ops_self_time_per_window_step(a100, cpu_only):
    fig = charts_ops.op_time_per_step(a100, 0)
    bars = {t.name: list(t.y) for t in fig.data}
    window = 2  # the default window drops the last step
    assert list(fig.data[0].x) == ["step 1", "step 2"] and len(bars) == 2  # no ProfilerStep bar
    assert bars["aten::add"] == pytest.approx([0.1] * window) and bars["aten::addmm"] == pytest.approx([0.04] * window)
    assert "device self time" in fig.layout.title.text and fig.layout.barmode == "stack"
    cpu_bars = {t.name: list(t.y) for t in charts_ops.op_time_per_step(cpu_only, 0).data}
    assert cpu_bars == {"aten::add": pytest.approx([0.06] * window), "aten::addmm": pytest.approx([0.05] * window)}
    one = charts_ops.op_time_per_step(a100, 0, top=1)
    assert [t.name for t in one.data] == ["aten::add", "other ops"]


def test_the_kernel_and_op_tables_are_in_ms_sorted_by_time_with_short_names(a100, cpu_only):
    kernels = charts_ops.kernel_table(a100, 0)
    assert kernels["name"].tolist() == ["vectorized_elementwise_kernel<4, CUDAFunctor_add<…>, Array<…> >(…)", "sgemm"]
    assert kernels["total_ms"].tolist() == pytest.approx([0.2, 0.08])  # 2 window calls of 100 and of 40 us
    assert kernels["mean_ms"].tolist() == pytest.approx([0.1, 0.04]) and kernels["trace_calls"].tolist() == [3, 3]
    assert kernels["full_name"].iloc[0].startswith("void at::native::vectorized_elementwise_kernel<4,")
    ops = charts_ops.op_table(a100, 0)
    assert ops["name"].tolist()[:2] == ["aten::add", "aten::addmm"]  # by device self time
    addmm = ops.set_index("name").loc["aten::addmm"]
    assert addmm["device_self_ms"] == pytest.approx(0.12) and addmm["host_self_ms"] == pytest.approx(0.15)
    assert addmm["GFLOP"] == pytest.approx(STEPS * ADDMM_FLOPS / 1e9) and addmm["MB"] == pytest.approx(
        STEPS * ADDMM_BYTES / 1e6)
    roof_us = STEPS * max(ADDMM_FLOPS / 19.5e12, ADDMM_BYTES / 2039e9) * 1e6
    assert addmm["roofline_ms"] == pytest.approx(roof_us / 1e3)
    shaped = charts_ops.op_table(a100, 0, by_shape=True).set_index("name")
    assert shaped.loc["aten::addmm", "input_dims"] == str(ADDMM["Input Dims"])
    on_cpu = charts_ops.op_table(cpu_only, 0)
    assert "device_self_ms" not in on_cpu and "roofline_ms" not in on_cpu  # no device, no roofs
    assert on_cpu["name"].tolist()[0].startswith("ProfilerStep#")  # most host self time: the steps' own
    empty = charts_ops.kernel_table(cpu_only, 0)
    assert empty.empty and empty.attrs["note"] == "No kernels on rank 0: a CPU-only trace."


def test_memory_over_time_draws_allocated_reserved_steps_and_the_device(a100):
    fig = charts_ops.memory_over_time(a100, 0)
    lines = {t.name: t for t in fig.data}
    assert set(lines) == {"cuda:0 allocated", "cuda:0 reserved"}
    timeline = a100.memory_timeline
    assert list(lines["cuda:0 allocated"].y) == pytest.approx((timeline["allocated_bytes"] / 1e6).tolist())
    assert list(lines["cuda:0 allocated"].x) == pytest.approx((timeline["start_us"] / 1e3).tolist())
    assert max(lines["cuda:0 allocated"].y) == pytest.approx((2**20 + STEPS * 4 * 2**20) / 1e6)
    shapes = fig.layout.shapes
    steps = sorted(s.x0 for s in shapes if s.type == "line" and s.x0 == s.x1 and s.xref == "x")
    assert steps == pytest.approx((a100.steps["start_us"] / 1e3).tolist())
    device = [s for s in shapes if s.line.dash == "dash"]
    assert len(device) == 1 and device[0].y0 == pytest.approx(85_899_345_920 / 1e6)
    assert "is above the top" in fig.layout.title.text  # 85.9 GB against 33.6 MB: the line is off the chart


def test_cpu_memory_has_no_reserved_line_and_no_device_line(tmp_path):
    """The CPU allocator reports Total Reserved 0: only the allocated line is drawn, and no device memory."""
    trace = [step(1, 0, 1000), step(2, 1000, 1000), cpu("aten::empty", 10, 5),
             memory_event(12, 4096, 4096, 1, reserved=0, device_type=0),
             memory_event(1012, -4096, 0, 1, reserved=0, device_type=0)]
    write_trace(tmp_path / "rank-0.json.gz", trace, rank=0, world_size=1)
    fig = charts_ops.memory_over_time(tracekit.summarize(tmp_path, cache=False, workers=1), 0)
    assert [t.name for t in fig.data] == ["cpu allocated"] and list(fig.data[0].y) == pytest.approx([0.004096, 0])
    assert not [s for s in fig.layout.shapes if s.line.dash == "dash"] and "above" not in fig.layout.title.text


def test_memory_tables(a100):
    peaks = charts_ops.memory_peaks(a100, 0).set_index("step")
    assert peaks.loc[1, "peak_allocated_MB"] == pytest.approx(5 * 2**20 / 1e6)
    assert peaks.loc[2, "growth_MB"] == pytest.approx(4 * 2**20 / 1e6)
    assert peaks.loc[1, "peak_reserved_of_device_pct"] == pytest.approx(32 * 2**20 / 85_899_345_920 * 100)
    top = charts_ops.top_allocators(a100, 0)
    assert top["op"].tolist()[0] == "aten::add" and top["allocations"].tolist()[0] == STEPS
    assert top["live_MB"].iloc[0] == pytest.approx(STEPS * 4 * 2**20 / 1e6)
    assert top["share_of_peak_pct"].iloc[0] == pytest.approx(STEPS * 4 / (1 + STEPS * 4) * 100)


def test_without_memory_events_every_memory_view_says_why(cpu_only):
    why = "No [memory] events: the trace was recorded without profile_memory=True."
    assert charts_ops.memory_note(cpu_only, 0) == why
    fig = charts_ops.memory_over_time(cpu_only, 0)
    assert not fig.data and charts_ops.unwrapped(fig.layout.annotations[0].text) == why
    for table in (charts_ops.memory_peaks(cpu_only, 0), charts_ops.top_allocators(cpu_only, 0)):
        assert table.empty and table.attrs["note"] == why


def test_styled_tables_show_unknown_never_nan(a100):
    peaks = charts_ops.memory_peaks(a100, 0)
    peaks.loc[peaks.index[0], "growth_MB"] = float("nan")  # unknown (step 1's is known since its level before is)
    shown = charts_ops.styled(peaks).to_string()
    assert "unknown" in shown and "nan" not in shown.lower()
    assert charts_ops.styled(charts_ops.op_table(a100, 0)).data["calls"].dtype.kind == "i"  # sorting stays numeric


def test_short_names():
    assert charts_ops.short_name("aten::mm") == "aten::mm"
    name = ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::BinaryFunctor<float, "
            "float, float, at::native::MulFunctor<float> > >(at::TensorIteratorBase&)::{lambda(int)#1}>(int, float)")
    assert charts_ops.short_name(name) == "elementwise_kernel<128, 2, gpu_kernel_impl<…>{lambda(…)#1}>(…)"
    long = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel__5x_cublas"
    cut = charts_ops.short_name(long, 40)
    assert len(cut) == 40 and cut.startswith("sm90_xmma") and cut.endswith("_cublas") and "…" in cut


def test_the_report_has_the_ops_kernels_roofline_and_memory_sections(a100, cpu_only):
    html = report.html_report(a100)
    for text in ("Operators &amp; kernels", "Top kernels", "Top ops", "Roofline, rank 0", "Memory over time, rank 0"):
        assert text in html, text
    plain = report.html_report(cpu_only)
    assert "Roofline, rank 0" in plain and "Memory over time" not in plain
    assert "profile_memory=True" in plain and "a CPU-only trace" in plain
    assert not math.isnan(a100.ranks["mfu_pct"].iloc[0])


def test_memory_peaks_lists_the_window_steps_only(a100):
    """Three steps, the default window drops the last: the Memory page's peaks are those of steps 1 and 2, as every
    other number, while summary.memory keeps step 3 (out of the window) for those who want it."""
    assert sorted(a100.memory["step"].tolist()) == [1, 2, 3]
    assert a100.memory.set_index("step").loc[3, "in_window"] == False  # noqa: E712 (a numpy bool)
    assert sorted(charts_ops.memory_peaks(a100, 0)["step"].tolist()) == [1, 2]
