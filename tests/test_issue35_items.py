"""Issue 35's checklist, items that had no test of their own: the viewer on one rank of a two-rank GPU run
(``nccl_a100_2rank`` from the shared traces) and on the samples under Streamlit's AppTest (no slowest rank, the
wait/transfer message, the device's name, the roofline message, the step slider, host threads, the FSDP captions,
the Compare page's sources and flag, MFU n/a or unknown); the HTML report's MFU; "compute" and host_kind by hand; the
roofline's log ticks; ``tracekit view``'s own output, ``cache info``'s limit, and the newcomer's CLI lines."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tracekit
from tracekit.cli.main import main
from tracekit.render import charts_roofline, report

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
ONE_OF_TWO = REPO.parent / "shared" / "traces" / "hta" / "nccl_a100_2rank"  # rank 0's trace only
MAIN = str(REPO / "app" / "main.py")
needs_shared = pytest.mark.skipif(not ONE_OF_TWO.is_dir(), reason=f"needs the shared traces ({ONE_OF_TWO})")


# ------------------------------------------------------------------- MFU n/a on a CPU, in the HTML report too

def test_the_html_reports_ranks_table_writes_cpu_mfu_as_na(summaries):
    """resnet-gloo-2rank is CPU-only: no device peak, so MFU is n/a (as in the text report and the viewer), not
    'unknown'; the FLOPs per step beside it are known (1,738,260,480)."""
    page = report.html_report(summaries(SAMPLES / "resnet-gloo-2rank", cache=False, workers=1))
    ranks = page.split("Per rank (times in ms")[1].split("</table>")[0]
    rows = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", ranks, re.S)]
    rows = [r for r in rows if r]
    assert [r[:2] for r in rows] == [["0", "cpu"], ["1", "cpu"]]
    assert [r[-2:] for r in rows] == [["1,738,260,480", "n/a"]] * 2


def test_the_html_reports_mfu_is_unknown_where_the_peak_is_known_and_the_flops_are_not():
    import pandas as pd

    ranks = pd.DataFrame({"rank": [0, 1, 2], "mfu_pct": [41.26, float("nan"), float("nan")]})
    dq = pd.DataFrame({"rank": [0, 1, 2], "device_peaks": ["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB",
                                                           "unknown: AMD Radeon Graphics"]})
    assert report._mfu_written(ranks, dq)["mfu_pct"].tolist() == ["41.3", "unknown", "n/a"]


# ------------------------------------------------------------------- the roofline's log ticks by hand

def test_roofline_ticks_label_1_2_5_over_two_and_a_half_decades_else_powers_of_ten():
    # 0.07 .. 9: log10(9 / 0.07) = 2.11 decades -> 1, 2, 5 per decade ("D2"); 0.5 .. 2000: 3.60 -> powers of ten;
    # 0.01 .. 3: 2.48 -> D2; 0.01 .. 4: 2.60 -> powers of ten. Zeros and NaN are not on a log axis.
    assert charts_roofline.log_ticks([0.07, 9.0]) == {"dtick": "D2"}
    assert charts_roofline.log_ticks([0.5, 2000.0]) == {"dtick": 1}
    assert charts_roofline.log_ticks([0.01, 0.0, 3.0, float("nan")]) == {"dtick": "D2"}
    assert charts_roofline.log_ticks([0.01, 4.0]) == {"dtick": 1}


# ------------------------------------------------------------------- cache info's limit

def test_cache_info_gives_the_limit_as_4_gib(tmp_path, capsys):
    # 4 GiB = 4 x 2**30 = 4,294,967,296 bytes = 4,295 MB (the README's 4 GiB, not "at most 4,295 MB" alone).
    assert main(["cache", "info", "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "of at most 4 GiB (4,295 MB;" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["cache", "--help"])
    assert "4 GiB" in capsys.readouterr().out


# ------------------------------------------------------------------- the newcomer's CLI lines

def test_an_empty_compressed_file_is_an_empty_file_on_the_command_line(tmp_path, capsys):
    for name, data in (("zero/rank-0.pt.trace.json.gz", b""), ("nothing/rank-0.json.gz", gzip.compress(b""))):
        (tmp_path / name).parent.mkdir()
        (tmp_path / name).write_bytes(data)
        assert main(["summarize", str((tmp_path / name).parent), "--no-cache"]) == 2
        err = capsys.readouterr().err
        assert f"{tmp_path / name} (empty file" in err and "truncated" not in err, err


def test_summarize_on_a_folder_of_runs_lists_them_on_the_command_line(tmp_path, capsys):
    for name in ("resnet-gloo-2rank", "gpt-gloo-2rank"):
        shutil.copytree(SAMPLES / name, tmp_path / "runs" / name)
    assert main(["summarize", str(tmp_path / "runs"), "--no-cache"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"tracekit: error: {tmp_path / 'runs'}: this folder holds runs, not traces: gpt-gloo-2rank, resnet-gloo-2rank "
        f"(summarize one of them, e.g. {tmp_path / 'runs' / 'gpt-gloo-2rank'})")


# ------------------------------------------------------------------- tracekit view's own output

def test_tracekit_view_prints_one_local_url_and_no_usage_statistics_line(tmp_path):
    """Streamlit, started by ``tracekit view``, prints one local URL: no Network or External URL (it listens on
    localhost) and no "collecting usage statistics" line (none are sent)."""
    pytest.importorskip("streamlit")
    from workloads.ports import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tracekit", "view", str(SAMPLES / "gpt-gloo-2rank"),
                             "--port", str(port)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(f":{port}" in line and "URL" in line for line in lines):
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            lines.append(line)
        time.sleep(1)  # anything Streamlit prints after the URL
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    text = "".join(lines) + out
    urls = [line.strip() for line in text.splitlines() if "URL:" in line]
    assert urls == [f"URL: http://localhost:{port}"], text
    assert "usage statistics" not in text.lower() and "Network URL" not in text and "External URL" not in text


# ------------------------------------------------------------------- the viewer on one rank of two (AppTest)

@pytest.fixture(scope="module")
def runs_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("issue35") / "runs"
    if ONE_OF_TWO.is_dir():
        shutil.copytree(ONE_OF_TWO, root / "nccl_a100_2rank")
    for name in ("gpt-gloo-2rank", "fsdp-gloo-2rank"):
        shutil.copytree(SAMPLES / name, root / name)
    return root


@pytest.fixture
def page(runs_root, monkeypatch):
    """The AppTest of one viewer page of one run (``run`` a folder under the root), run once."""
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(runs_root)])
    if str(REPO) not in sys.path:
        monkeypatch.syspath_prepend(str(REPO))

    def open_page(run: str, name: str, rank: int = 0):
        at = AppTest.from_file(MAIN, default_timeout=120)
        at.query_params.update({"run": f"runs/{run}", "page": name, "rank": str(rank)})
        at.run()
        assert not at.exception, at.exception[0].value
        return at
    return open_page


def figures(at) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


@needs_shared
def test_overview_of_one_rank_of_two_names_no_slowest_rank(page):
    at = page("nccl_a100_2rank", "overview")
    labels = [m.label for m in at.metric]
    assert labels == ["Step time", "Exposed comm", "Comm overlapped", "Idle"]  # no Slowest rank / Straggler card
    assert "1 rank(s) · backend nccl" in [c.value for c in at.caption]


@needs_shared
def test_the_wait_and_transfer_chart_of_one_rank_says_why_it_is_empty(page):
    at = page("nccl_a100_2rank", "communication")
    chart = [f for f in figures(at) if "waiting for the last rank" in f["layout"]["title"]["text"]]
    assert len(chart) == 1
    said = [a["text"].replace("<br>", " ") for a in chart[0]["layout"].get("annotations", [])]
    assert said == ["unknown: waiting and transfer need each collective matched on two or more ranks (one rank read)"]


@needs_shared
def test_the_ops_page_gives_the_whole_device_name_and_a_wrapped_roofline_message(page):
    at = page("nccl_a100_2rank", "ops")
    assert "**Device:** NVIDIA A100 SXM4 40GB" in [m.value for m in at.markdown]
    assert "Device" not in [m.label for m in at.metric]  # a metric card cut it to "NVIDIA A100 SX..."
    assert {m.label: m.value for m in at.metric}["MFU"] == "unknown"  # the A100's peak is known, its FLOPs are not
    roofline = [f for f in figures(at) if f["layout"]["title"]["text"].startswith("Roofline")][0]
    lines = roofline["layout"]["annotations"][0]["text"].split("<br>")
    assert len(lines) >= 2 and max(map(len, lines)) <= 60, lines  # lines a half-width chart shows whole
    assert "record_shapes=True" in " ".join(lines)


@needs_shared
def test_the_timeline_of_a_gpu_rank_has_one_step_thumb_and_its_host_threads(page):
    at = page("nccl_a100_2rank", "timeline")
    assert [(s.key, s.value) for s in at.select_slider] == [("timeline_step", 4)]  # one thumb: never "4 4"
    lanes = figures(at)[0]["layout"]["yaxis"]["tickvals"]
    assert any(str(lane).startswith("stream") for lane in lanes), lanes
    assert any(str(lane).startswith("thread") for lane in lanes), lanes  # host threads beside the streams


def test_the_ops_page_of_a_cpu_run_writes_mfu_na(page):
    at = page("gpt-gloo-2rank", "ops")
    assert {m.label: m.value for m in at.metric}["MFU"] == "n/a"


def test_no_fsdp_caption_puts_a_code_span_in_parentheses(page):
    """A code span in parentheses, ``(`steps`)``, is drawn as '( steps )': the FSDP page names the count in words."""
    at = page("fsdp-gloo-2rank", "fsdp")
    captions = [c.value for c in at.caption]
    assert any("their count is the table's steps column" in c for c in captions), captions
    assert not [c for c in captions if re.search(r"\(\s*`[^`]*`\s*\)", c)], captions


# ------------------------------------------------------------------- host_kind: no kernel launch on a CPU rank

def test_host_kind_names_a_launch_only_on_a_rank_with_a_device():
    """Two gaps, the first with 200 us of host time before the op that ends it, the second none. On a GPU rank the
    first is a 'kernel launch' (a cudaLaunchKernel issued the work at 1,000 ns); on a CPU-only rank, with the same
    tables, nothing is launched: ''. (The sample CPU runs have no host part in any gap, so this is the case that
    tells the two apart.)"""
    import pandas as pd

    from tracekit.events.causes import host_kinds

    gaps = pd.DataFrame({"start_ns": [0, 5_000], "dur_us": [2.0, 1.0], "idle_host_us": [0.2, 0.0]})
    dev = pd.DataFrame({"start_ns": [2_000, 6_000], "launch_ns": [1_000, 4_000]})
    events = pd.DataFrame({"ts_ns": [1_000, 4_000], "name": pd.Categorical(["cudaLaunchKernel"] * 2),
                           "cat": pd.Categorical(["cuda_runtime"] * 2)})
    assert host_kinds(gaps, dev, events, device_rank=True).tolist() == ["kernel launch", ""]
    assert host_kinds(gaps, dev, events, device_rank=False).tolist() == ["", ""]


# ------------------------------------------------------------------- "compute": one meaning

def test_compute_is_all_compute_and_compute_only_has_its_own_name(tmp_path):
    """test_compare's hand run: each 1000 us step has a gemm 0-400 us and an all-reduce 300-600 us, so 100 us of
    the 400 us of compute has communication under it. Over the window's two steps: compute (the text report, the
    API's ranks table) is all of it, 2 x 400 = 800 us = 0.800 ms, not the 2 x 300 = 0.600 ms without communication
    under it; that part is compare's compute_only_ms, per step 0.3 ms (0.4 ms on the run with no all-reduce)."""
    from test_compare import _run

    a, b = _run(tmp_path / "a", True), _run(tmp_path / "b", False)
    assert a.ranks["compute_us"].tolist() == [800.0, 800.0] and a.ranks["overlap_us"].tolist() == [200.0, 200.0]
    lines = str(a).splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["rank", "device"])
    assert lines[header].split()[5] == "compute" and lines[header + 1].split()[5:7] == ["0.800", "(40%)"]
    table = tracekit.compare(a, b).table.set_index("metric")
    assert table.loc["compute_only_ms", ["a", "b"]].tolist() == pytest.approx([0.3, 0.4])
    assert "compute_ms" not in table.index  # no second meaning under the first one's name


# ------------------------------------------------------------------- one number, one way: amd_mi250's GFLOP/step

AMD = REPO.parent / "shared" / "traces" / "hta" / "amd_mi250"


@pytest.mark.skipif(not AMD.is_dir(), reason=f"needs the shared traces ({AMD})")
def test_amd_mi250s_gflop_per_step_reads_alike_in_the_text_and_the_viewer(runs_root, page, summaries):
    """327,680 matmul FLOPs per step = 0.00032768 GFLOP: '0.000328' (three significant digits below 1) in the text
    report and on the Operators page's card (the issue saw 0.00, 0.0003277 and 1.651e-05); MFU n/a in both, the
    Radeon having no datasheet peak in tracekit."""
    shutil.copytree(AMD, runs_root / "amd_mi250", dirs_exist_ok=True)
    s = summaries(AMD, cache=False, workers=1)
    assert s.ranks["matmul_flops_per_step"].tolist() == [327_680.0]
    text = str(s).split("Matmul FLOPs and MFU per rank")[1].splitlines()
    assert text[2].split()[-3:] == ["0.000328", "0.0000351", "n/a"]
    at = page("amd_mi250", "ops")
    assert {m.label: m.value for m in at.metric} == {"Matmul GFLOP per step": "0.000328", "MFU": "n/a"}
    # The device is known by name, as the text report names it; only its peak is not ('unknown' said otherwise).
    assert "**Device:** AMD Radeon Graphics (no known peak)" in [m.value for m in at.markdown]


# ------------------------------------------------------------------- the Compare page: sources, the flag, the digits

def test_the_compare_page_names_each_rows_source_and_flags_the_disagreeing_pair(runs_root, page):
    """resnet-gloo-2rank-memory against -bf16, the issue's pair: the profiled step is 285.25 / 233.34 = 1.2225x
    slower, which with the same samples per step implies 1 / 1.2225 = 0.818x the throughput, but run.json's
    un-profiled steps measured 80.90 / 68.63 = 1.18x: flagged, as ``tracekit compare`` flags it. The table's cells
    read as the CLI writes them (233.34, 1.22, 0.431), each row with its source."""
    import pyarrow as pa

    for name in ("resnet-gloo-2rank-memory", "resnet-gloo-2rank-bf16"):
        shutil.copytree(SAMPLES / name, runs_root / name, dirs_exist_ok=True)
    at = page("resnet-gloo-2rank-memory", "compare")
    at.selectbox(key="compare_b").set_value("runs/resnet-gloo-2rank-bf16").run()
    assert not at.exception
    shown = pa.ipc.open_stream(at.dataframe[0].proto.arrow_data.styler.display_values).read_pandas()
    rows = shown.set_index("metric")[["a", "b", "ratio", "source"]]
    assert rows.loc["step_time_ms"].tolist() == ["233.34", "285.25", "1.22", "trace"]
    assert rows.loc["throughput_samples_per_s"].tolist() == ["68.63", "80.90", "1.18", "run.json"]
    assert rows.loc["exposed_comm_ms"].tolist() == ["63.87", "27.56", "0.431", "trace"]
    assert "compute_only_ms" in rows.index and "compute_ms" not in rows.index
    assert [w.value for w in at.warning] == [
        "the profiled step time (1.22x) implies 0.818x the throughput, but the un-profiled steps of run.json measured "
        "1.18x: the two disagree in direction (profiler overhead, or a different load on the machine between the runs)"]


# ------------------------------------------------------------------- MFU in the viewer's per-rank tables

def test_the_viewers_rank_tables_write_mfu_as_the_text_report_does(page):
    """CPU ranks (gpt-gloo-2rank): n/a, no device peak. The viewer's one placeholder for every other empty cell is
    'unknown', so a column that holds an n/a is text."""
    for name in ("overview", "ranks"):
        table = next(d.value for d in page("gpt-gloo-2rank", name).dataframe if "mfu_pct" in d.value.columns)
        assert table["mfu_pct"].tolist() == ["n/a", "n/a"], name


@needs_shared
def test_the_viewers_rank_tables_write_unknown_mfu_where_the_peak_is_known(page):
    """nccl_a100_2rank: an A100 (peak known) without record_shapes (FLOPs unknown): MFU unknown, as on the
    Operators page's card and in the HTML report, not n/a. Streamlit draws the empty cell with the table's
    placeholder, 'unknown'."""
    for name in ("overview", "ranks"):
        at = page("nccl_a100_2rank", name)
        shown = next(d for d in at.dataframe if "mfu_pct" in d.value.columns)
        assert shown.value["mfu_pct"].isna().tolist() == [True] and shown.proto.placeholder == "unknown", name
