"""The roofline chart with nothing to place (``tracekit.render.charts_roofline``): the empty chart and the HTML
report say why, in words that say what to change, one reason per case built here; a sample run with ops has points
and no such text. The points and roofs themselves are tested in test_charts_ops.py."""

from __future__ import annotations

import pytest

import tracekit
from tracedata import cpu, kernel, launch, step, write_trace
from tracekit.render import charts_ops, report
from tracekit.render.charts_roofline import roofline
from viewer_runs import SAMPLES

H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_520_809_984, "computeMajor": 9}]
MM = {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}  # 2 * 64^3 FLOPs, 3 * 64^2 * 4 bytes
EMPTY = "No op to place on the roofline on rank 0: "
NO_OPERATOR = ("no operator was recorded (no cpu_op events; annotations such as ProfilerStep are not ops): record "
               "with torch.profiler's ProfilerActivity.CPU and record_shapes=True.")


def _summary(tmp_path, events, **top):
    write_trace(tmp_path / "rank-0.json.gz", events, rank=0, world_size=1, **top)
    return tracekit.summarize(tmp_path, cache=False, workers=1)


def _annotated_gemms(extra=lambda k, t: []):
    """Three 1 ms ProfilerStep annotations, each with a launch and an 800 us gemm kernel, and no cpu_op but what
    ``extra(step, start)`` adds."""
    events = []
    for k in (1, 2, 3):
        t = (k - 1) * 1000
        events += [step(k, t, 1000), launch(t + 20, correlation=k), kernel("sm90_gemm_bf16", t + 100, 800,
                                                                           correlation=k), *extra(k, t)]
    return events


def _said(fig) -> str:
    """The empty chart's one annotation, after checking it draws nothing."""
    assert not fig.data and len(fig.layout.annotations) == 1
    return charts_ops.unwrapped(fig.layout.annotations[0].text)


def test_annotations_without_operators_say_no_operator_was_recorded(tmp_path):
    """The ops table holds the ProfilerStep annotations only (shapes_recorded is missing: no cpu_op at all): the
    chart and the report say no operator was recorded and how to record one, not that no op has FLOPs."""
    s = _summary(tmp_path, _annotated_gemms(), deviceProperties=H100)
    assert len(s.ops) == 3  # ProfilerStep#1..3
    assert _said(roofline(s, 0)) == EMPTY + NO_OPERATOR
    # The chart's message is in lines a half-width chart shows whole: plotly's JSON writes each <br> as \u003cbr\u003e.
    page = charts_ops.unwrapped(report.html_report(s).replace("\\u003cbr\\u003e", "<br>"))
    assert "no operator was recorded (no cpu_op events" in page
    assert "ProfilerActivity.CPU and record_shapes=True" in page
    assert "none of its ops is one tracekit has FLOPs for" not in page


def test_kernels_alone_say_no_operator_was_recorded(tmp_path):
    """No host op at all (an empty ops table): the same reason."""
    s = _summary(tmp_path, [kernel("gemm", 0, 10), kernel("gemm", 20, 10)], deviceProperties=H100)
    assert s.ops.empty and _said(roofline(s, 0)) == EMPTY + NO_OPERATOR


def test_operators_none_of_a_usable_duration_say_so(tmp_path):
    """Each step's aten::mm is unfinished (dur -1): the 3 are dropped, operators_unusable is True, and the chart
    says they were recorded but unusable (record_shapes was on: telling the user to turn it on would be wrong)."""
    s = _summary(tmp_path, _annotated_gemms(lambda k, t: [cpu("aten::mm", t + 30, -1, **MM)]), deviceProperties=H100)
    assert s.data_quality.loc[0, "operators_unusable"]
    assert _said(roofline(s, 0)) == EMPTY + ("its CPU ops were recorded, but none had a usable duration (all dropped "
                                             "for no, negative or impossible durations), so none can be rated.")


def test_ops_without_a_flop_count_say_so(tmp_path):
    """aten::view has shapes but no FLOP formula (it moves no data): nothing to rate."""
    view = cpu("aten::view", 10, 50, **{"Input Dims": [[4, 4], [2]], "Input type": ["float", "ScalarList"]})
    s = _summary(tmp_path, [step(1, 0, 1000), step(2, 1000, 1000), view])
    assert _said(roofline(s, 0)) == EMPTY + ("none of its ops is one tracekit has FLOPs for (matmul, conv, attention, "
                                             "elementwise, norm).")


def test_ops_with_flops_but_no_linked_device_time_say_so(tmp_path):
    """On a device rank an op's rate is over the device time it launched. The mm has 2 * 64^3 FLOPs, but the
    kernel has no correlation to a launch (nothing links it to the mm): no device time, so no rate. Without any
    kernel (one launch, nothing collected) the reason names the missing kernels."""
    events = [step(1, 0, 1000), step(2, 1000, 1000), cpu("aten::mm", 10, 50, **MM)]
    unlinked = _summary(tmp_path / "unlinked", [*events, kernel("gemm", 100, 30)], deviceProperties=H100)
    assert unlinked.ops.set_index("name").loc["aten::mm", "flops"] == 2 * 64 ** 3
    assert _said(roofline(unlinked, 0)) == EMPTY + ("its ops with a FLOP count have no measured device time (no "
                                                    "kernel of the trace is linked to them).")
    absent = _summary(tmp_path / "absent", [*events, launch(20, correlation=1)], deviceProperties=H100)
    assert _said(roofline(absent, 0)) == EMPTY + ("its ops with a FLOP count have no device time: the trace holds "
                                                  "no kernel (not collected).")


def test_ops_with_flops_but_no_bytes_say_the_dtypes_are_missing(tmp_path):
    """Input Dims without Input type (a review's probe): aten::mm's FLOPs are counted from the shapes, 3 calls of
    2 * 64^3 = 524,288, but its bytes need the dtypes, so it has no intensity to place; with the dtypes it is placed."""
    ops = [cpu("aten::mm", (k - 1) * 1000 + 20, 100, **{"Input Dims": MM["Input Dims"]}) for k in (1, 2, 3)]
    s = _summary(tmp_path / "untyped", [step(k, (k - 1) * 1000, 900) for k in (1, 2, 3)] + ops, backend="gloo")
    assert s.ops.set_index("name").loc["aten::mm", "flops"] == 3 * 524_288
    assert _said(roofline(s, 0)) == EMPTY + ("its ops' FLOPs are counted, but their bytes are not: the inputs' dtypes "
                                             "(Input type) were not recorded, or an input is a list of tensors.")
    typed = [cpu("aten::mm", (k - 1) * 1000 + 20, 100, **MM) for k in (1, 2, 3)]
    placed = roofline(_summary(tmp_path / "typed", [step(k, (k - 1) * 1000, 900) for k in (1, 2, 3)] + typed,
                               backend="gloo"), 0)
    assert sum(len(trace.x) for trace in placed.data) == 1


def test_a_sample_run_with_ops_has_points_and_no_empty_text():
    if not (SAMPLES / "gpt-gloo-2rank").is_dir():
        pytest.skip("needs sample_traces/gpt-gloo-2rank")
    s = tracekit.summarize(SAMPLES / "gpt-gloo-2rank", cache=False, workers=1)
    fig = roofline(s, 0)
    assert sum(len(t.x) for t in fig.data if t.mode == "markers") > 0 and not fig.layout.annotations
    assert "No op to place on the roofline" not in report.html_report(s)
