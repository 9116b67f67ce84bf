"""The all-ranks timeline and the What-if page: the chart functions on a hand-built Summary whose bars are worked
out here, and both pages under Streamlit's AppTest against the Summary and ``tracekit.whatif``."""

from __future__ import annotations

import base64
import json
import math
import sys

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.render import charts_run
from tracekit.summary.model import Summary
from tracedata import cpu, launch, write_trace
from viewer_runs import REPO, SAMPLES, write_tiny_run
from frame_equal import assert_frame_equal

C0, C1 = charts_run.lane(0, "collectives"), charts_run.lane(1, "collectives")
P0, P1 = charts_run.lane(0, "critical path"), charts_run.lane(1, "critical path")


def hand_summary() -> Summary:
    """Two ranks, steps 5 and 6 (1000 us each; rank 1 starts 10 us later). In step 5: all-reduce #0 on both ranks
    (rank 0 from 100 us for 300 us, rank 1 from 250 us for 150 us: rank 0 waits 150 us, both transfer 150 us), a
    broadcast #1 seen on rank 0 only (600 us, 50 us long), three gaps, and a critical path that hops 0 -> 1 -> 0.
    Step 6 holds one more call, gap and path piece, which step 5's chart must leave out."""
    steps = pd.DataFrame({"rank": [0, 0, 1, 1], "step": [5, 6, 5, 6], "start_us": [0.0, 1000.0, 10.0, 1010.0],
                          "step_us": 1000.0, "in_window": [True, False, True, False]})
    nan = math.nan
    collectives = pd.DataFrame({
        "rank": [0, 1, 0, 0, 1], "step": [5, 5, 5, 6, 6], "op": ["all_reduce", "all_reduce", "broadcast",
                                                                  "all_reduce", "all_reduce"],
        "start_us": [100.0, 250.0, 600.0, 1100.0, 1100.0], "dur_us": [300.0, 150.0, 50.0, 100.0, 100.0],
        "match_id": [0, 0, 1, 2, 2], "matched": [True, True, False, True, True],
        "wait_us": [150.0, 0.0, nan, 0.0, 0.0], "transfer_us": [150.0, 150.0, nan, 100.0, 100.0]})
    gaps = pd.DataFrame({"rank": [0, 0, 1, 1], "start_us": [400.0, 700.0, 500.0, 1500.0],
                         "dur_us": [100.0, 50.0, 200.0, 100.0], "cause": ["host", "data", "comm_wait", "host"]})
    path = pd.DataFrame({
        "rank": [0, 1, 0, 0, 0], "step": [5, 5, 5, 5, 6], "start_us": [0.0, 100.0, 250.0, 400.0, 1000.0],
        "end_us": [100.0, 250.0, 400.0, 1000.0, 1100.0], "name": ["mm", "sleep", "all_reduce", "mm", "mm"],
        "kind": ["compute", "delay", "comm", "compute", "compute"],
        "category": ["compute", "host", "comm_transfer", "compute", "compute"],
        "waiting": [False, True, False, False, False], "ends_on_rank": 0})
    return Summary(ranks=pd.DataFrame({"rank": [0, 1]}), steps=steps, collectives=collectives, gaps=gaps,
                   critical_path_events=path)


def numbers(values) -> list:
    """A plotly array as a list: plain, a tuple, or the JSON typed-array form ``{"dtype", "bdata"}``."""
    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return list(values)


def traces(fig) -> dict[str, dict]:
    """Trace name -> its x, base and y as lists (a Figure or plotly's JSON of one)."""
    data = fig["data"] if isinstance(fig, dict) else [t.to_plotly_json() for t in fig.data]
    return {t["name"]: {k: numbers(t[k]) for k in ("x", "y", "base") if t.get(k) is not None} for t in data}


def segments(trace: dict) -> list[tuple]:
    """A lines trace's None-separated segments as (x0, x1, y0, y1)."""
    x, y = trace["x"], trace["y"]
    return [(x[i], x[i + 1], y[i], y[i + 1]) for i in range(0, len(x), 3)]


def test_step_span_covers_every_rank_and_the_path():
    assert charts_run.step_span(hand_summary(), 5) == (0.0, 1010.0)  # rank 0's start to rank 1's end
    with pytest.raises(ValueError, match="step 9"):
        charts_run.step_span(hand_summary(), 9)


def test_wait_is_drawn_apart_from_transfer_and_linked_across_ranks():
    t = traces(charts_run.allranks_timeline(hand_summary(), 5))
    assert t["wait"]["y"] == [C0, C1]
    assert t["wait"]["base"] == pytest.approx([0.100, 0.250]) and t["wait"]["x"] == pytest.approx([0.150, 0.0])
    # Transfers start when the last rank (rank 1, at 250 us) arrives, on both ranks.
    assert t["transfer"]["base"] == pytest.approx([0.250, 0.250]) and t["transfer"]["x"] == pytest.approx([0.150, 0.150])
    assert t["collective (not matched)"] == {"x": pytest.approx([0.050]), "y": [C0], "base": pytest.approx([0.600])}
    assert segments(t["collective link"]) == [(0.25, 0.25, C0, C1)]  # one call on 2 ranks: one line


def test_gaps_are_coloured_by_cause_within_the_step():
    t = traces(charts_run.allranks_timeline(hand_summary(), 5))
    got = {name: (v["y"], v["base"], v["x"]) for name, v in t.items() if name.startswith("idle")}
    assert got == {"idle: host": ([charts_run.lane(0, "idle")], [0.4], [pytest.approx(0.1)]),
                   "idle: data": ([charts_run.lane(0, "idle")], [0.7], [pytest.approx(0.05)]),
                   "idle: comm_wait": ([charts_run.lane(1, "idle")], [0.5], [pytest.approx(0.2)])}


def test_the_critical_path_is_its_events_with_a_hop_where_it_changes_rank():
    t = traces(charts_run.allranks_timeline(hand_summary(), 5))
    assert segments(t["critical path: compute"]) == [(0.0, 0.1, P0, P0), (0.4, 1.0, P0, P0)]
    assert segments(t["critical path: host"]) == [(0.1, 0.25, P1, P1)]
    assert segments(t["critical path: comm_transfer"]) == [(0.25, 0.4, P0, P0)]
    assert segments(t["critical path: rank hop"]) == [(0.1, 0.1, P0, P1), (0.25, 0.25, P1, P0)]
    assert not any(n.startswith("critical path") and n not in (
        "critical path: compute", "critical path: host", "critical path: comm_transfer", "critical path: rank hop")
        for n in t)


def test_default_step_is_the_first_window_step_with_a_path():
    s = hand_summary()
    assert charts_run.default_step(s) == 5
    no_path = Summary(ranks=s.ranks, steps=s.steps.assign(in_window=[False, True, False, True]),
                      collectives=s.collectives, gaps=s.gaps, critical_path_events=s.critical_path_events.iloc[:4])
    assert charts_run.default_step(no_path) == 6  # the only window step, though it has no path


def test_whatif_table_and_bars():
    table = pd.DataFrame({"scenario": ["baseline", "comm_x2"], "step_time_us": [2000.0, 1500.0],
                          "speedup": [1.0, 2000 / 1500], "saving_us": [0.0, 500.0], "saving_pct": [0.0, 25.0]})
    shown = charts_run.whatif_table(table)
    assert list(shown.columns) == ["scenario", "step_time_ms", "speedup", "saving_ms", "saving_pct"]
    assert shown["step_time_ms"].tolist() == [2.0, 1.5] and shown["saving_ms"].tolist() == [0.0, 0.5]
    fig = charts_run.whatif_bars(table, measured_us=2000.0)
    assert list(fig.data[0].x) == ["baseline", "comm_x2"] and list(fig.data[0].y) == [2.0, 1.5]
    assert [s.y0 for s in fig.layout.shapes] == [2.0]  # the measured step time
    assert "(x1.33)" in fig.data[0].text[1]
    assert not charts_run.whatif_bars(table, measured_us=math.nan).layout.shapes


def test_docstring_example_runs(monkeypatch):
    import doctest

    monkeypatch.chdir(REPO)
    result = doctest.testmod(charts_run, raise_on_error=False, verbose=False)
    assert result.failed == 0 and result.attempted > 0


# ---------------------------------------------------------------------------------------------- AppTest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from apphelp_apptest import apptest_setup_once  # noqa: E402, F401 (autouse: AppTest's setup once per process)

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
MAIN = str(REPO / "app" / "main.py")
STRAGGLER = "gpt-gloo-2rank-straggler"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    import shutil

    root = tmp_path_factory.mktemp("viewer") / "runs"
    write_tiny_run(root / "tiny")
    if (SAMPLES / STRAGGLER).is_dir():
        shutil.copytree(SAMPLES / STRAGGLER, root / STRAGGLER)
    return root


def runs(root) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def open_page(root, monkeypatch, run: str, page: str) -> AppTest:
    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(root)])
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.query_params.update({"run": f"runs/{run}", "page": page})
    at.run()
    assert not at.exception, at.exception[0].value if at.exception else ""
    return at


def check_allranks(at: AppTest, summary, step: int) -> None:
    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    t = traces(fig)
    calls = summary.collectives
    matched = calls[(calls["step"] == step) & calls["matched"].astype(bool)]
    assert len(matched) > 0
    assert len(t["wait"]["y"]) == len(t["transfer"]["y"]) == len(matched)
    assert sorted(t["transfer"]["x"]) == pytest.approx(sorted(matched["transfer_us"] / 1e3))
    linked = matched.groupby("match_id")["rank"].nunique()
    assert len(segments(t["collective link"])) == int((linked > 1).sum())
    path = summary.critical_path_events
    path = path[path["step"] == step]
    drawn = sorted((x0, x1) for name, v in t.items() if name.startswith("critical path: ") and name != "critical path: rank hop"
                   for x0, x1, _, _ in segments(v))
    want = sorted(zip(path["start_us"] / 1e3, path["end_us"] / 1e3))
    assert len(drawn) == len(want) and np.allclose(np.array(drawn, dtype=float), np.array(want, dtype=float))
    assert f"Step {step}," in fig["layout"]["title"]["text"]


@pytest.mark.parametrize("run", ["tiny", STRAGGLER])
def test_the_allranks_page_draws_the_summary(root, monkeypatch, run, summaries):
    if run not in runs(root):
        pytest.skip(f"sample_traces/{run} is not in this checkout")
    summary = summaries(root / run)  # tracekit.summarize's, shared by the two tests of the run
    at = open_page(root, monkeypatch, run, "allranks")
    assert at.title[0].value == "All ranks"
    first = charts_run.default_step(summary)
    assert at.select_slider(key="allranks_step").value == first
    check_allranks(at, summary, first)
    other = max(int(s) for s in summary.steps["step"] if summary.steps["in_window"][summary.steps["step"] == s].all())
    if other != first:
        at.select_slider(key="allranks_step").set_value(other).run()
        assert not at.exception
        check_allranks(at, summary, other)


@pytest.mark.parametrize("run", ["tiny", STRAGGLER])
def test_the_whatif_page_shows_the_replay(root, monkeypatch, run, summaries):
    if run not in runs(root):
        pytest.skip(f"sample_traces/{run} is not in this checkout")
    summary = summaries(root / run)  # tracekit.summarize's, shared by the two tests of the run
    expected = charts_run.whatif_table(tracekit.whatif(summary))
    at = open_page(root, monkeypatch, run, "whatif")
    assert at.title[0].value == "What if"
    shown = at.dataframe[0].value
    assert_frame_equal(shown.reset_index(drop=True), expected, check_dtype=False)
    assert list(shown["scenario"]) == list(tracekit.predict.scenarios.SCENARIOS)
    assert not at.warning  # every scenario predicted: no reason to give
    bars = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert numbers(bars["data"][0]["y"]) == pytest.approx(expected["step_time_ms"].tolist())
    r = summary.ranks
    measured = r.loc[r["steps"] > 0, "step_time_us"].mean() / 1e3
    assert [s["y0"] for s in bars["layout"]["shapes"]] == pytest.approx([measured])


def test_the_whatif_page_says_why_a_prediction_is_unknown(tmp_path, monkeypatch):
    """A device rank (deviceProperties) with launches but no kernel: the baseline replays the host's steps, every
    other scenario is unknown, and the page says why under the table, as the CLI does."""
    steps = [cpu(f"ProfilerStep#{n}", t, d, cat="user_annotation") for n, t, d in ((1, 0, 1000), (2, 1000, 1000),
                                                                                    (3, 2000, 10))]
    write_trace(tmp_path / "runs" / "nokernels" / "rank0.json.gz", [launch(20, 1), launch(1020, 2), *steps], rank=0,
                world_size=1, deviceProperties=[{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8}])
    at = open_page(tmp_path / "runs", monkeypatch, "nokernels", "whatif")
    assert [w.value for w in at.warning] == [
        "unknown: rank 0: a device trace without device events (kernels not collected): what a change does to the "
        "device work is unknown, so every scenario but the baseline is"]
