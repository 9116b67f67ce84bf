"""Chart functions, the timeline's binning and the HTML report, on tiny Summaries whose answers are known by hand."""

import doctest
import math

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("plotly")

import tracekit  # noqa: E402
from tracekit.render import charts
from tracekit.render import timeline  # noqa: E402
from tracekit.events.classify import classify  # noqa: E402
from tracekit.cli.main import main as cli  # noqa: E402
from tracekit.read.reader import read_rank  # noqa: E402
from tracekit.summary.facts import RunFacts  # noqa: E402
from tracekit.render.report import html_report, write_report  # noqa: E402
from tracekit.summary.model import Summary  # noqa: E402
from viewer_runs import REPO, SAMPLES, write_tiny_run  # noqa: E402


def tiny_summary(stragglers=None) -> Summary:
    """Two ranks over a 1000 us span: rank 0 computes 600 (200 of it under 300 us of comm), copies 50, idles 250;
    rank 1 computes 400, comm 500 (100 under compute), idles 200. Steps 1-2 are in the window, step 3 is not."""
    ranks = pd.DataFrame({
        "rank": [0, 1], "device": ["gpu", "gpu"], "steps": [2, 2], "step_time_us": [500.0, 520.0],
        "span_us": [1000.0, 1000.0], "busy_us": [750.0, 800.0], "compute_us": [600.0, 400.0], "comm_us": [300.0, 500.0],
        "overlap_us": [200.0, 100.0], "exposed_comm_us": [100.0, 400.0], "memory_us": [50.0, 0.0],
        "idle_us": [250.0, 200.0], "overlap_pct": [200 / 3, 20.0], "idle_pct": [25.0, 20.0],
        "allreduce_count": [2, 2], "allreduce_us": [300.0, 500.0], "allreduce_bytes": [8e6, 8e6],
        "idle_sync_us": [50.0, 0.0], "idle_data_us": [0.0, 120.0], "idle_comm_wait_us": [100.0, 0.0],
        "idle_host_us": [100.0, 0.0], "idle_other_us": [0.0, 80.0], "idle_alloc_us": [0.0, 0.0],
        "idle_host_unrecorded_us": [0.0, 0.0],
        "comm_wait_us": [60.0, 0.0], "comm_transfer_us": [240.0, 500.0], "last_arrivals": [0, 0],
    })
    steps = pd.DataFrame({"rank": [0, 0, 0, 1, 1, 1], "step": [1, 2, 3] * 2, "start_us": [0, 500, 1000] * 2,
                          "step_us": [500.0, 500.0, 90.0, 510.0, 530.0, 80.0], "in_window": [True, True, False] * 2})
    collectives = pd.DataFrame({
        "rank": [0, 0, 1, 1, 1], "step": [1, 2, 1, 2, 3], "op": ["all_reduce", "all_reduce", "all_reduce", "all_reduce", "broadcast"],
        "start_us": [100.0, 600.0, 100.0, 600.0, 1000.0], "dur_us": [150.0, 150.0, 250.0, 250.0, 10.0],
        "bytes": [4e6, 4e6, 4e6, np.nan, 1e3], "busbw_gbps": [26.7, 26.7, 16.0, np.nan, 0.1],
        "in_window": [True, True, True, True, False],
    })
    gaps = pd.DataFrame({"rank": [0, 0, 0, 1, 1], "start_us": [10.0, 300.0, 700.0, 50.0, 900.0],
                         "dur_us": [100.0, 50.0, 100.0, 120.0, 80.0], "cause": ["host", "sync", "comm_wait", "data", "other"]})
    extra = {} if stragglers is None else {"stragglers": stragglers}
    return Summary(ranks=ranks, steps=steps, collectives=collectives, gaps=gaps, run=RunFacts(source="tiny <run>"), **extra)


def bar_totals(fig) -> dict[str, list[float]]:
    return {t.name: list(t.y) for t in fig.data}


def test_rank_segments_add_up_to_the_span():
    seg = charts.rank_segments(tiny_summary())
    assert seg.loc[0, ["compute only", "overlapped comm", "exposed comm", "memory"]].tolist() == [400, 200, 100, 50]
    assert seg.loc[1, ["compute only", "overlapped comm", "exposed comm", "memory"]].tolist() == [300, 100, 400, 0]
    assert seg.drop(columns="rank").sum(axis=1).tolist() == [1000, 1000]


def test_rank_breakdown_draws_idle_by_cause():
    fig = charts.rank_breakdown(tiny_summary())
    totals = bar_totals(fig)
    assert totals["idle: host"] == [0.1, 0.0] and totals["idle: data"] == [0.0, 0.12]
    assert np.sum(list(totals.values()), axis=0).tolist() == pytest.approx([1.0, 1.0])  # ms
    assert fig.layout.barmode == "stack"


def test_step_heatmap_shows_window_steps_in_ms():
    fig = charts.step_heatmap(tiny_summary())
    heat = fig.data[0]
    assert list(heat.x) == ["1", "2"] and list(heat.y) == ["rank 0", "rank 1"]
    assert np.asarray(heat.z).tolist() == [[0.5, 0.5], [0.51, 0.53]]


def test_busbw_leaves_out_unknown_sizes_and_uses_log_axes():
    fig = charts.busbw_vs_size(tiny_summary())
    assert [t.name for t in fig.data] == ["all_reduce"]  # the broadcast is outside the window
    assert len(fig.data[0].x) == 3  # the call of unknown size is not drawn
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"


def test_op_table_keeps_unknown_bytes_unknown():
    table = charts.op_table(tiny_summary()).set_index("op")
    assert table.loc["all_reduce", "calls"] == 4 and table.loc["all_reduce", "total_us"] == 800
    assert math.isnan(table.loc["all_reduce", "total_bytes"])


def test_wait_vs_transfer_per_rank():
    assert bar_totals(charts.wait_vs_transfer(tiny_summary())) == {"wait": [0.06, 0.0], "transfer": [0.24, 0.5]}


def test_gap_histogram_counts_every_gap_by_cause():
    fig = charts.gap_histogram(tiny_summary())
    assert sum(sum(t.y) for t in fig.data) == 5
    assert sorted(t.name for t in fig.data) == ["idle: comm_wait", "idle: data", "idle: host", "idle: other", "idle: sync"]
    assert fig.layout.xaxis.type == "log"


def test_idle_by_cause_and_largest_gaps():
    totals = bar_totals(charts.idle_by_cause(tiny_summary()))
    assert totals["idle: host"] == [0.1, 0.0] and totals["idle: other"] == [0.0, 0.08]
    top = charts.largest_gaps(tiny_summary(), 2)
    assert top["dur_us"].tolist() == [120.0, 100.0] and top["rank"].tolist() == [1, 0]


def test_headline_numbers_by_hand():
    head = charts.headline(tiny_summary())
    assert head["step_time_us"] == 510
    assert head["exposed_comm_pct"] == pytest.approx(500 / 2000 * 100)
    assert head["overlap_pct"] == pytest.approx(300 / 800 * 100)
    assert head["idle_pct"] == pytest.approx(450 / 2000 * 100)
    assert (head["worst_rank"], head["worst_is_straggler"], head["worst_step_time_us"]) == (1, False, 520)
    named = charts.headline(tiny_summary(stragglers=pd.DataFrame({"rank": [0], "caused_wait_us_per_step": [60.0]})))
    assert (named["worst_rank"], named["worst_is_straggler"]) == (0, True)


def test_compare_bars_stack_the_parts_of_each_step_and_count_idle_once():
    """a: idle 4 ms, by cause 3 (sync) + 1 (data); b: idle 3 ms whose causes are unknown: one idle part."""
    rows = {"step_time_ms": (10.0, 20.0), "throughput_samples_per_s": (100.0, 50.0), "compute_only_ms": (5.0, 15.0),
            "overlapped_comm_ms": (0.5, 1.0), "exposed_comm_ms": (0.5, 1.0), "memory_ms": (0.0, 0.0),
            "idle_ms": (4.0, 3.0), "idle_sync_ms": (3.0, float("nan")), "idle_data_ms": (1.0, float("nan")),
            "idle_comm_wait_ms": (0.0, float("nan")), "idle_host_ms": (0.0, float("nan")),
            "idle_other_ms": (0.0, float("nan")), "idle_alloc_ms": (0.0, float("nan")),
            "idle_host_unrecorded_ms": (0.0, float("nan"))}
    table = pd.DataFrame({"metric": list(rows), "a": [a for a, _ in rows.values()], "b": [b for _, b in rows.values()]})
    fig = charts.compare_bars(table, "fp32", "amp")
    assert fig.layout.barmode == "stack" and all(list(t.x) == ["fp32", "amp"] for t in fig.data)
    heights = {t.name: [None if pd.isna(v) else v for v in t.y] for t in fig.data}
    assert list(heights)[:4] == ["compute only", "overlapped comm", "exposed comm", "memory"]
    assert heights["idle: sync"] == [3.0, None] and heights["idle"] == [None, 3.0]  # idle counted once per run
    assert "idle: comm_wait" in heights and all(name in charts.COLORS for name in heights)
    for i in (0, 1):  # each bar is its step time
        assert sum(y[i] for y in heights.values() if y[i] is not None) == pytest.approx(list(rows["step_time_ms"])[i])


# ------------------------------------------------------------------------------------------------- timeline

def lane_rows(rows):
    return pd.DataFrame(rows, columns=["lane", "kind", "start_us", "dur_us", "name"]).assign(step=1)


def test_timeline_hides_nested_events_and_bins_what_is_too_small():
    events = lane_rows([
        ("thread 1", "compute", 0, 500, "outer"), ("thread 1", "compute", 10, 100, "nested"),
        ("stream 7", "compute", 0, 300, "gemm"),
        *[("stream 7", "compute", 400 + i / 2, 0.1, "tiny") for i in range(5)],  # 5 events in one 2-pixel bin
        ("stream 20", "comm", 950, 100, "clipped at the window's end"),
    ])
    drawn = timeline.bars(events, 0, 1000, width_px=500, bin_px=2)   # 2 us per pixel
    single = drawn[drawn["n"] == 1].set_index("label")
    assert "nested (100.0 us)" not in single.index and single.loc["outer (500.0 us)", "dur_us"] == 500
    assert single.loc["clipped at the window's end (50.0 us)", "dur_us"] == 50
    binned = drawn[drawn["n"] > 1]
    assert binned["n"].tolist() == [5] and binned["label"].iloc[0] == "5 compute events, 0.5 us busy"


def test_timeline_partial_overlap_keeps_the_uncovered_tail():
    drawn = timeline.bars(lane_rows([("stream 7", "compute", 0, 100, "a"), ("stream 7", "compute", 50, 100, "b")]), 0, 200, 200)
    assert drawn.sort_values("start_us")[["start_us", "dur_us"]].values.tolist() == [[0, 100], [100, 50]]


def test_timeline_of_200k_events_stays_a_few_thousand_bars():
    rng = np.random.default_rng(0)
    n = 200_000
    starts = np.sort(rng.uniform(0, 1e6, n))
    events = pd.DataFrame({"lane": rng.choice(["stream 7", "stream 20", "thread 3"], n), "kind": "compute",
                           "start_us": starts, "dur_us": rng.exponential(2.0, n), "name": "k", "step": 1})
    drawn = timeline.bars(events, 0, 1e6, width_px=1000, bin_px=2)
    assert len(drawn) <= 3 * (1000 + 1000 // 2)
    fig = timeline.figure(drawn, 0, 1e6)
    assert sum(len(t.x) for t in fig.data) == len(drawn)


def test_timeline_lanes_from_a_real_classified_trace(tmp_path):
    run = write_tiny_run(tmp_path / "tiny")
    summary = tracekit.summarize(run)
    _, events, comm_args = read_rank(run / "rank-0.pt.trace.json.gz", default_rank=0)
    lanes = timeline.lanes(classify(events, comm_args), summary.run.origin_ns)
    kinds = lanes.groupby("lane")["kind"].agg(lambda k: sorted(set(k))).to_dict()
    # The host thread beside the streams: its aten::mm ops (3, 4 us each) and its runtime calls (the launches).
    assert kinds == {"steps": ["step"], "stream 7": ["compute", "memory"], "stream 20": ["comm"],
                     "thread 1": ["host", "launch"]}
    assert timeline.lane_order(lanes["lane"]) == ["steps", "stream 7", "stream 20", "thread 1"]
    host = lanes[lanes["kind"] == "host"]
    assert host["name"].tolist() == ["aten::mm"] * 3 and host["dur_us"].tolist() == [4.0] * 3
    assert (lanes["kind"] == "launch").sum() == 3 * 5  # 3 steps x (2 gemms, a memcpy, 2 all-reduces)
    comm = lanes[lanes["kind"] == "comm"]
    assert comm["start_us"].tolist() == summary.collectives.loc[summary.collectives["rank"] == 0, "start_us"].tolist()
    gaps = timeline.gap_lane(summary.gaps[summary.gaps["rank"] == 0])
    fig = timeline.figure(timeline.bars(pd.concat([lanes, gaps]), 0, 3000), 0, 3000, summary.gaps)
    assert {t.name for t in fig.data} >= {"step", "compute", "comm", "memory", "idle", "host"} and fig.layout.shapes
    assert "thread 1" in fig.layout.yaxis.tickvals


# --------------------------------------------------------------------------------------------------- report

def test_report_is_one_self_contained_file():
    text = html_report(tiny_summary())
    assert text.count("<script") == 1 + 7  # plotly itself, then one script per chart (the roofline the 7th)
    assert "<script src" not in text and "<link" not in text and "cdn.plot.ly" not in text.split("</head>")[1]
    assert "tiny &lt;run&gt;" in text and "tiny <run>" not in text  # the run's name is escaped
    for heading in ("Overview", "Ranks", "Communication", "Idle"):
        assert f"<h2>{heading}</h2>" in text


def test_report_never_overwrites_silently(tmp_path):
    out = tmp_path / "report.html"
    out.write_text("mine")
    with pytest.raises(FileExistsError):
        write_report(tiny_summary(), out)
    assert out.read_text() == "mine"
    write_report(tiny_summary(), out, force=True)
    assert out.read_text().startswith("<!DOCTYPE html>") and list(tmp_path.iterdir()) == [out]


def test_cli_report(tmp_path, capsys):
    run = write_tiny_run(tmp_path / "tiny")
    out = tmp_path / "r.html"
    assert cli(["report", str(run), "-o", str(out)]) == 0
    first = out.read_text()
    assert "1,234.5 samples/s" in first  # throughput from run.json
    assert cli(["report", str(run), "-o", str(out)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err and out.read_text() == first
    assert cli(["report", str(run), "-o", str(out), "--force"]) == 0
    assert cli(["report", str(tmp_path / "missing"), "-o", str(tmp_path / "x.html")]) == 2
    assert not (tmp_path / "x.html").exists()


def test_docstring_examples_run(monkeypatch):
    if not (SAMPLES / "resnet-gloo-2rank").is_dir():
        pytest.skip("the examples read sample_traces/resnet-gloo-2rank")
    monkeypatch.chdir(REPO)
    for module in (charts, timeline, tracekit.render.report):
        result = doctest.testmod(module, raise_on_error=False, verbose=False)
        assert result.failed == 0 and result.attempted > 0, module.__name__


# ------------------------------------------------------------------------- titles, axes and thread names

def every_figure(tmp_path):
    """Every chart of tracekit/render/charts*.py and the timeline, on the tiny Summary and on a tiny real run."""
    from tracekit.render import charts_ops, charts_roofline, charts_run

    small = tiny_summary()
    run = tracekit.summarize(write_tiny_run(tmp_path / "tiny"), cache=False, workers=1)
    table = tracekit.compare(run, run).table
    whatif = pd.DataFrame({"scenario": ["baseline", "comm_x2"], "step_time_us": [1000.0, 800.0],
                           "speedup": [1.0, 1.25], "saving_us": [0.0, 200.0], "saving_pct": [0.0, 20.0]})
    lanes = pd.DataFrame({"lane": ["steps", "thread 1"], "kind": ["step", "compute"], "start_us": [0.0, 10.0],
                          "dur_us": [900.0, 100.0], "name": ["ProfilerStep#1", "aten::mm"], "step": 1})
    return {
        "rank_breakdown": charts.rank_breakdown(small), "step_heatmap": charts.step_heatmap(small),
        "busbw_vs_size": charts.busbw_vs_size(small), "wait_vs_transfer": charts.wait_vs_transfer(small),
        "gap_histogram": charts.gap_histogram(small), "idle_by_cause": charts.idle_by_cause(small),
        "compare_bars": charts.compare_bars(table), "allranks_timeline": charts_run.allranks_timeline(run, 2),
        "whatif_bars": charts_run.whatif_bars(whatif, 1000.0), "roofline": charts_roofline.roofline(run, 0),
        "op_time_per_step": charts_ops.op_time_per_step(run, 0), "memory_over_time": charts_ops.memory_over_time(run, 0),
        "timeline": timeline.figure(timeline.bars(lanes, 0, 1000), 0, 1000),
    }


def test_every_chart_title_sits_top_left_clear_of_the_toolbar(tmp_path):
    """The modebar (plotly's toolbar, about 30 px tall) sits at the top right over the top of the figure: every title
    is at the left just above the plot, under a free row for the toolbar, and no legend is at the top right."""
    for name, fig in every_figure(tmp_path).items():
        layout = fig.layout
        assert layout.title.text, name
        assert layout.title.xanchor == "left" and layout.title.x <= 0.02, name
        assert (layout.title.yref, layout.title.y, layout.title.yanchor) == ("paper", 1, "bottom"), name
        lines = layout.title.text.count("<br>") + 1
        assert layout.margin.t is not None and layout.margin.t >= charts.TOP + 25 * (lines - 1), name
        legend = layout.legend
        top_right = (legend.y is None or legend.y >= 1) and legend.xanchor in (None, "auto", "right") \
            and legend.orientation == "h"
        assert not top_right, name


def test_bandwidth_and_log_axes_read_in_plain_numbers():
    """No SI prefixes on the log axes (plotly writes 1e-4 as '100μ' by default): 3 significant digits, in MB and GB/s."""
    fig = charts.busbw_vs_size(tiny_summary())
    for axis in (fig.layout.xaxis, fig.layout.yaxis):
        assert axis.type == "log" and axis.tickformat == ",.3~r" and axis.exponentformat == "none"
    assert list(fig.data[0].x) == [4.0, 4.0, 4.0] and fig.layout.xaxis.title.text == "message size (MB)"
    assert fig.layout.yaxis.title.text == "busbw (GB/s)" and "%{y:,.3~r} GB/s" in fig.data[0].hovertemplate
    hist = charts.gap_histogram(tiny_summary())
    assert hist.layout.xaxis.title.text == "gap (ms)" and hist.layout.xaxis.tickformat == ",.3~r"
    assert max(max(t.x) for t in hist.data) < 0.13  # the longest gap is 120 us


def thread_meta(tid, name, pid=100):
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0, "args": {"name": name}}


def write_threaded_trace(path):
    """A CPU-only rank: the main thread (tid = pid 100), an autograd thread, a thread named 'gloo' that Kineto also
    lists under its inherited name 'python', and tid 9 with no thread_name event."""
    from tracedata import cpu, step, write_trace

    events = [thread_meta(100, "thread 100 (python)"), thread_meta(7, "thread 7 (pt_autograd_0)"),
              thread_meta(8, "thread 8 (gloo)"), thread_meta(8, "thread 8 (python)"),
              {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
              step(1, 0, 1000, tid=100), cpu("aten::mm", 10, 100, tid=100), cpu("aten::mm", 200, 100, tid=7),
              cpu("gloo:all_reduce", 400, 100, tid=8), cpu("aten::mm", 600, 50, tid=9)]
    return write_trace(path, events, rank=0, world_size=1, backend="gloo")


def test_timeline_lanes_are_named_by_thread_with_the_tid_in_the_hover(tmp_path):
    path = write_threaded_trace(tmp_path / "rank-0.json.gz")
    names = timeline.thread_names(path)
    assert names == {"100": "main thread", "7": "pt_autograd_0", "8": "gloo"}
    _, events, comm_args = read_rank(path, default_rank=0)
    lanes = timeline.lanes(classify(events, comm_args), 0)
    assert {"thread 100", "thread 8"} <= set(lanes["lane"])  # the lanes of the threads that hold device-time events
    more = pd.DataFrame({"lane": ["thread 7", "thread 9"], "kind": "compute", "start_us": [200.0, 600.0],
                         "dur_us": [100.0, 50.0], "name": "aten::mm", "step": 1})
    lanes = pd.concat([lanes, more], ignore_index=True)
    fig = timeline.figure(timeline.bars(lanes, 0, 1000), 0, 1000, threads=names)
    labels = dict(zip(fig.layout.yaxis.tickvals, fig.layout.yaxis.ticktext))
    assert labels == {"steps": "steps", "thread 100": "main thread", "thread 7": "pt_autograd_0", "thread 8": "gloo",
                      "thread 9": "thread 9"}
    hovers = {lane: where for t in fig.data for lane, where in zip(t.y, t.customdata)}
    assert hovers["thread 100"] == "main thread (tid 100)" and hovers["thread 9"] == "thread 9"
    assert "%{customdata}" in fig.data[0].hovertemplate
    # Two threads of one name keep apart by their ids; a file without names, or not a trace, names none.
    assert timeline.lane_names(["thread 1", "thread 2"], {"1": "pt_gloo_runloop", "2": "pt_gloo_runloop"}) == {
        "thread 1": "pt_gloo_runloop · 1", "thread 2": "pt_gloo_runloop · 2"}
    (tmp_path / "bad.json").write_text("{not json")
    assert timeline.thread_names(tmp_path / "bad.json") == {} and timeline.thread_names(tmp_path / "none.json") == {}
    assert timeline.lane_names(["thread 3", "stream 7"]) == {"thread 3": "thread 3", "stream 7": "stream 7"}


def test_sample_traces_name_their_gloo_threads():
    sample = SAMPLES / "resnet-gloo-2rank" / "rank-0.pt.trace.json.gz"
    if not sample.is_file():
        pytest.skip("needs sample_traces/resnet-gloo-2rank")
    names = timeline.thread_names(sample)
    assert sorted(names.values()) == ["main thread", "pt_gloo_runloop", "pt_gloo_runloop"]
