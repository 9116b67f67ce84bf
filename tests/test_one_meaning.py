"""One way to write each number, and no word that does not apply: the text report, ``tracekit compare`` and
``whatif`` on the command line, the HTML report and the viewer's tables write a quantity alike (``tracekit.fmt.figure``:
two decimals from 1 up, three significant digits below 1); a CPU-only run names no kernel launch; an unknown FLOP
count says why."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracekit import fmt, quality
from tracekit.cli.whatif import text_table
from tracekit.render import charts, report
from tracekit.render.compare import Comparison
from tracekit.summary import text_runs

REPO = Path(__file__).resolve().parents[1]
SAMPLED = REPO.parent / "shared" / "traces" / "hta" / "sampled_128rank"
# The issue's numbers: a step time, a ratio, a small ratio, amd_mi250's GFLOP/step and an achieved TFLOPS/s.
PICKED = (125.018, 0.6988, 0.09782, 1.651e-05, 0.000883)
WRITTEN = ("125.02", "0.699", "0.0978", "0.0000165", "0.000883")


def test_figure_two_decimals_from_one_three_digits_below():
    assert tuple(fmt.figure(v) for v in PICKED) == WRITTEN
    assert [fmt.figure(v) for v in (1234.5, 1.0, 0.9996, 0.0, -0.04567, float("nan"))] == [
        "1,234.50", "1.00", "1.00", "0.00", "-0.0457", "unknown"]
    assert fmt.ms(125_018.0) == "125.02" and fmt.ms(698.8) == "0.699" and fmt.ms(16.51e-3) == "0.0000165"
    assert fmt.gflop(1.651e4) == "0.0000165" and fmt.tflops(8.83e5, 1000.0) == "0.000883"
    assert [fmt.ratio(v) for v in (0.6988, 0.09782, float("nan"))] == ["0.699x", "0.0978x", "n/a"]


def test_compare_on_the_command_line():
    table = pd.DataFrame({"metric": ["step_time_ms", "idle_ms", "x_MB_per_step"], "unit": ["ms/step", "ms/step", "MB/step"],
                          "a": [125.018, 0.09782, 1.651e-05], "b": [87.37, 0.000883, 0.0],
                          "ratio": [0.6988, 0.000883 / 0.09782, 0.0], "source": ["trace"] * 3})
    rows = {line.split()[0]: line.split() for line in str(Comparison(a="x", b="y", table=table)).splitlines()[4:7]}
    assert rows["step_time_ms"][2:5] == ["125.02", "87.37", "0.699x"]
    assert rows["idle_ms"][2:5] == ["0.0978", "0.000883", "0.00903x"]
    assert rows["x_MB_per_step"][2:5] == ["0.0000165", "0.00", "0.00x"]


def test_whatif_speed_up_on_the_command_line():
    shown = text_table(pd.DataFrame({"scenario": ["baseline", "comm_x2"], "step_time_us": [125_018.0, 698.8],
                                     "speedup": [1.0, 0.6988], "saving_us": [0.0, 97.82], "saving_pct": [0.0, 1.0]}))
    assert shown.splitlines()[2].split() == ["comm_x2", "0.699", "0.699x", "0.0978", "1.0"]


def test_text_report_gflop_and_tflops():
    # Rank 0: 16,510 FLOPs per step (amd_mi250's 1.651e-05 GFLOP) over a 1000 us device step: 1.651e-05 TFLOPS/s.
    # Rank 1: 8.83e5 FLOPs per step over 1000 us: 0.000883 GFLOP and 0.000883 TFLOPS/s.
    ranks = pd.DataFrame({"rank": [0, 1], "device": ["AMD Radeon Graphics", "cpu"],
                          "matmul_flops_per_step": [1.651e4, 8.83e5], "mfu_pct": [np.nan, np.nan]})
    steps = pd.DataFrame({"rank": [0, 1], "step": [1, 1], "in_window": [True, True],
                          "device_step_us": [1000.0, 1000.0], "matmul_at_peak_us": [np.nan, np.nan]})
    dq = pd.DataFrame({"rank": [0, 1], "device_peaks": ["unknown: AMD Radeon Graphics", ""]})
    lines = text_runs._mfu(ranks, steps, dq).splitlines()
    assert lines[1].split()[-3:] == ["0.0000165", "0.0000165", "n/a"]
    assert lines[2].split()[-3:] == ["0.000883", "0.000883", "n/a"]
    ops = pd.DataFrame({"name": ["aten::mm", "aten::add"], "calls": [1, 1], "host_self_us": [698.8, 97.82],
                        "host_total_us": [125_018.0, 97.82], "device_us": [np.nan, np.nan], "flops": [125.018e9, 1.651e4]})
    rows = [line.split() for line in text_runs._ops(ops).splitlines()[1:]]
    assert rows[0] == ["aten::mm", "1", "0.699", "125.02", "unknown", "125.02"]
    assert rows[1] == ["aten::add", "1", "0.0978", "0.0978", "unknown", "0.0000165"]


def test_html_report_tables():
    frame = pd.DataFrame({"name": ["a", "b"], "self_ms": [125.018, 0.6988], "achieved_tflops": [0.000883, 0.09782],
                          "GFLOP": [1.651e-05, np.nan], "overlap_pct": [0.6988, 50.0], "calls": [3.0, 2.5]})
    cells = re.findall(r"<td>(.*?)</td>", report._table(frame, "t"))
    assert cells == ["a", "125.02", "0.000883", "0.0000165", "0.7", "3",
                     "b", "0.699", "0.0978", "unknown", "50.0", "2.50"]


def test_viewer_tables():
    from app import fmt as app_fmt  # streamlit is not needed for the formats

    compare = pd.DataFrame({"metric": ["step_time_ms", "idle_ms"], "unit": ["ms/step", "ms/step"],
                            "a": [125.018, 0.09782], "b": [87.37, 1.651e-05], "ratio": [0.6988, 1.651e-05 / 0.09782]})
    shown = app_fmt.styled(compare, app_fmt.comparison_na(compare), numbers=True).to_string(delimiter="|")
    assert [line.split("|")[3:] for line in shown.splitlines()[1:]] == [
        ["125.02", "87.37", "0.699"], ["0.0978", "0.0000165", "0.000169"]]
    ops = pd.DataFrame({"name": ["x"], "GFLOP": [1.651e-05], "achieved_tflops": [0.000883], "self_ms": [0.6988]})
    assert app_fmt.styled(ops).to_string(delimiter="|").splitlines()[1].split("|")[2:] == [
        "0.0000165", "0.000883", "0.699"]


# ------------------------------------------------------------------- host_kind on a CPU-only run

def test_a_cpu_only_run_names_no_kernel_launch(summaries):
    s = summaries(REPO / "sample_traces" / "gpt-gloo-2rank")
    assert set(s.ranks["device"]) == {"cpu"} and len(s.gaps) > 1000
    assert set(s.gaps["host_kind"]) == {""}
    assert "host_kind" not in charts.largest_gaps(s, 20)  # the Idle page's and the HTML report's table
    assert "kernel launch" not in report.html_report(s)


# ------------------------------------------------------------------- an unknown FLOP count says why

@pytest.mark.skipif(not SAMPLED.is_dir(), reason=f"needs the shared traces ({SAMPLED})")
def test_an_unknown_step_flop_count_has_its_reason(summaries):
    s = summaries(SAMPLED)
    flops = s.steps.set_index(["rank", "step"])["matmul_flops"]
    assert np.isnan(flops[(1, 551)]) and flops[(1, 552)] > 0  # the case: unknown beside known
    assert s.data_quality.set_index("rank")["unknown_flops"].to_dict() == {0: "", 1: "551: aten::linear x1"}
    said = [n for n in quality.notes(s.data_quality) if "FLOP count" in n]
    assert said == ["rank 1: matmul-class ops whose recorded Input Dims give no FLOP count (missing, or not matching "
                    "each other) leave the matmul FLOPs of step 551: aten::linear x1 unknown, and so the TFLOPS/s "
                    "and MFU over them"]
    assert said[0] in str(s)


def test_host_kind_is_empty_on_a_rank_with_no_device():
    from tracekit.events.causes import host_kinds

    gaps = pd.DataFrame({"start_ns": [0, 500], "dur_us": [0.2, 0.3], "idle_host_us": [0.2, 0.0]})
    assert host_kinds(gaps, pd.DataFrame(), pd.DataFrame(), device_rank=False).tolist() == ["", ""]
