"""The pipeline's charts, HTML section and viewer page, on the tiny GPipe run whose numbers test_pipeline works out
by hand (stage 0's blocks [10,110) [120,220) [600,700) [710,800) us; stage 1's [200,300) [320,420) [420,570)
[580,730) us; each step 1000 us)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("plotly")

import tracekit  # noqa: E402
from tracekit.render import charts_pipeline  # noqa: E402
from tracekit.render.report import html_report  # noqa: E402
from tests.pipeline_runs import write_gpipe_run  # noqa: E402

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pipe") / "runs"
    write_gpipe_run(root / "gpipe")
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_traces" / "gpt-gloo-2rank", root / "plain")
    return root


@pytest.fixture(scope="module")
def summary(runs):
    return tracekit.summarize(runs / "gpipe", cache=False, workers=1)


def test_grid_draws_each_block_and_marks_the_bubble(summary):
    fig = charts_pipeline.schedule_grid(summary)
    bars = {t.name: t for t in fig.data}
    assert sorted(bars["forward"].text) == ["F0", "F0", "F1", "F1"]
    assert sorted(round(x * 1e3) for x in bars["backward"].x) == [90, 100, 150, 150]
    # The gaps between a rank's blocks: rank 0's 10 + 380 + 10 us, rank 1's 20 + 10 us (each rank's wait_us).
    bubble = [t for t in fig.data if t.name == "bubble"]
    assert sorted(round(x * 1e3) for t in bubble for x in t.x) == [10, 10, 10, 20, 380]
    assert min(bars["forward"].base) == 0  # from the step's first block


def test_grid_draws_send_recv_pairs_when_given(summary):
    pairs = pd.DataFrame({"src_rank": [0], "dst_rank": [1], "step": [1], "send_start_us": [110.0],
                          "recv_end_us": [200.0]})
    fig = charts_pipeline.schedule_grid(summary, 1, p2p=pairs)
    line = next(t for t in fig.data if t.name == "send -> recv")
    assert list(line.x[:2]) == pytest.approx([0.1, 0.19]) and list(line.y[:2]) == ["stage 0 (rank 0)", "stage 1 (rank 1)"]


def test_stage_bars_add_up_to_the_step(summary):
    fig = charts_pipeline.stage_bars(summary)
    totals = pd.DataFrame({t.name: list(t.y) for t in fig.data}).sum(axis=1)
    assert totals.tolist() == pytest.approx([1.0, 1.0])  # ms: compute + other busy + fill + wait + drain


def test_report_has_a_pipeline_section_only_for_pipelines(summary, runs):
    assert "<h2>Pipeline</h2>" in html_report(summary)
    plain = tracekit.summarize(runs / "plain", cache=False, workers=1)
    assert "<h2>Pipeline</h2>" not in html_report(plain)


def test_viewer_page(runs, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(runs)])
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.query_params.update({"run": "runs/gpipe"})
    at.run()
    at.switch_page("views/pipeline.py").run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == 2
    table = at.dataframe[0].value
    assert list(table["stage"]) == [0, 1] and list(table["wait_ms"]) == pytest.approx([0.4, 0.03])
    assert any("Stage 1 (rank 1)" in w.value for w in at.warning)  # stage_imbalance: medium
    assert any("Pipeline stages idle 53%" in e.value for e in at.error)  # pipeline_bubble: high
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.query_params.update({"run": "runs/plain"})
    at.run()
    at.switch_page("views/pipeline.py").run()
    assert not at.exception and "no pipeline stages" in at.info[0].value
