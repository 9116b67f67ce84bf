"""The command line and the text report as a person meets them: --version, readable JSON, the same scale flags on
every command that reads a run, the cache commands, and a Findings section that is always there."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tracedata import kernel, step, write_trace
from tracekit import fmt
from tracekit.rank import cache
from tracekit.cli import main as cli
from tracekit.findings import checks as findings
from tracekit.summary import text as render
from tracekit.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
GLOO_RUN = ROOT / "sample_traces" / "resnet-gloo-2rank"


def test_version_is_the_installed_version():
    done = subprocess.run([sys.executable, "-m", "tracekit", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0
    assert done.stdout == f"tracekit {importlib.metadata.version('tracekit')}\n"
    assert done.stdout == f"tracekit {tracekit.__version__}\n"


def test_json_is_one_line_unless_indented(capsys):
    assert main(["summarize", str(GLOO_RUN), "--json", "--no-cache", "--workers", "1"]) == 0
    flat = capsys.readouterr().out
    assert main(["summarize", str(GLOO_RUN), "--json", "--indent", "2", "--no-cache", "--workers", "1"]) == 0
    indented = capsys.readouterr().out
    assert flat.count("\n") == 1 and json.loads(flat) == json.loads(indented)
    lines = indented.splitlines()
    assert lines[0] == "{" and lines[1].startswith('  "run": {') and lines[2].startswith('    "')


def _tiny_run(folder: Path, with_comm: bool) -> Path:
    for rank in (0, 1):
        events = [step(k + 1, 1000 * k, 1000) for k in range(3)] + [kernel("gemm", 1000 * k, 900) for k in range(3)]
        if with_comm:
            events += [kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1000 * k + 100, 100, stream=20,
                              **{"Collective name": "allreduce", "In msg nelems": 10, "Out msg nelems": 10,
                                 "dtype": "Float", "Group size": 2, "Process Group Name": "0"}) for k in range(3)]
        write_trace(folder / f"rank{rank}.json", events, rank=rank)
    return folder


def test_compare_and_report_take_the_scale_flags(tmp_path, capsys):
    a, b = _tiny_run(tmp_path / "a", True), _tiny_run(tmp_path / "b", False)
    used, unused = tmp_path / "cache", tmp_path / "no-cache"
    assert main(["compare", str(a), str(b), "--json", "--workers", "1", "--cache-dir", str(used)]) == 0
    cached = json.loads(capsys.readouterr().out)
    assert cache.info(used).entries == 4  # two ranks of each run, read through the cache
    assert main(["compare", str(a), str(b), "--json", "--workers", "2", "--no-cache", "--cache-dir", str(unused)]) == 0
    assert json.loads(capsys.readouterr().out) == cached
    assert cache.info(unused).entries == 0
    expected = tracekit.compare(tracekit.summarize(a, cache=False), tracekit.summarize(b, cache=False)).to_dict()
    assert cached == json.loads(json.dumps(expected))

    pytest.importorskip("plotly")
    out = tmp_path / "report.html"
    assert main(["report", str(a), "-o", str(out), "--workers", "1", "--no-cache", "--cache-dir", str(unused)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>") and cache.info(unused).entries == 0
    assert main(["report", str(b), "-o", str(out), "--force", "--workers", "1", "--cache-dir", str(unused)]) == 0
    assert cache.info(unused).entries == 2


def test_cache_info_and_clear(tmp_path, capsys):
    folder = tmp_path / "cache"
    assert main(["summarize", str(GLOO_RUN), "--workers", "1", "--cache-dir", str(folder)]) == 0
    capsys.readouterr()
    held = cache.info(folder)
    assert main(["cache", "info", "--cache-dir", str(folder)]) == 0
    text = capsys.readouterr().out
    assert f"cache folder: {folder}\nentries: 2\nsize: {held.bytes / 1e6:,.1f} MB" in text
    assert "\nrun-table folders: 1 " in text  # the run's event tables (tracekit.summary.offheap)
    assert main(["cache", "clear", "--cache-dir", str(folder)]) == 0
    assert capsys.readouterr().out == (f"removed 2 entries and 1 run-table folders ({held.bytes / 1e6:,.1f} MB) "
                                       f"from {folder}\n")
    assert cache.info(folder) == cache.CacheInfo(folder, 0, 0, 0) and folder.is_dir()


def test_the_findings_section_is_there_when_nothing_is_found(tmp_path):
    # One GPU rank whose steps are all compute: no communication, no idle, no precision facts (no device name).
    events = [step(k + 1, 1000 * k, 1000) for k in range(3)] + [kernel("gemm", 1000 * k, 1000) for k in range(3)]
    write_trace(tmp_path / "rank0.json", events, rank=0, world_size=1)
    s = tracekit.summarize(tmp_path, workers=1, cache=False)
    assert s.findings == ()
    text = str(s)
    section = text[text.index("\nFindings\n"):]
    assert section.startswith("\nFindings\n  None: no check fired. Checked: ")
    for check in render.checked():
        assert check in section
    assert len(render.checked()) == len(findings._CHECKS)  # one line per check: a new check must be named here


def test_the_findings_section_lists_what_was_found(tmp_path):
    # The all-reduce runs alone after the gemm: 400 of the 900 us of device time in each step is exposed
    # communication. The device then idles 100 us before the next step: the host paces the steps (had the all-reduce
    # run to the next step's start, the host's unrecorded time would be a wait on the device: ``rank.spinwait``).
    for rank in (0, 1):
        events = [step(k + 1, 1000 * k, 1000) for k in range(3)] + [kernel("gemm", 1000 * k, 500) for k in range(3)]
        events += [kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1000 * k + 500, 400, stream=20,
                          **{"Collective name": "allreduce", "In msg nelems": 10, "Out msg nelems": 10,
                             "dtype": "Float", "Group size": 2, "Process Group Name": "0"}) for k in range(3)]
        write_trace(tmp_path / f"rank{rank}.json", events, rank=rank)
    s = tracekit.summarize(tmp_path, workers=1, cache=False)
    text = str(s)
    assert "exposed_comm" in {f.kind for f in s.findings}
    # The host's ProfilerStep markers pace these steps, so the replay finds no gain in hiding the communication:
    # the finding stays, low, last, and names what binds the step.
    assert "\nFindings (largest gain first" in text and "\n  [low] Communication not hidden" in text
    assert "The step is bound by host time" in text
    assert "(ranks 0, 1)" in text
    assert "None: no check fired" not in text


def test_rank_table_header_says_what_each_number_is_a_share_of():
    text = str(tracekit.summarize(GLOO_RUN, workers=1, cache=False))
    assert "(ms; % of span)" not in text
    header = next(line for line in text.splitlines() if line.startswith("Per rank"))
    assert "ms" in header and "share of the rank's span" in header and "% of comm" in header
    assert "comm overlapped %" in text and " overlap % " not in text


def test_bad_input_is_one_line_and_status_2(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "missing"), str(GLOO_RUN), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tracekit: error: ") and "missing" in err


def test_a_finding_names_one_rank_as_rank(tmp_path):
    events = [step(k + 1, 1000 * k, 1000) for k in range(3)] + [kernel("gemm", 1000 * k, 500) for k in range(3)]
    events += [kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1000 * k + 500, 500, stream=20,
                      **{"Collective name": "allreduce", "In msg nelems": 10, "Out msg nelems": 10, "dtype": "Float",
                         "Group size": 1, "Process Group Name": "0"}) for k in range(3)]
    write_trace(tmp_path / "rank0.json", events, rank=0, world_size=1)
    found = tracekit.summarize(tmp_path, workers=1, cache=False).findings
    exposed = next(f for f in found if f.kind == "exposed_comm")
    assert "(rank 0)" in exposed.message and "ranks 0" not in exposed.message
    assert fmt.ranks([3]) == "rank 3" and fmt.ranks([0, 1]) == "ranks 0, 1"
    assert fmt.ranks(range(10)) == "ranks 0, 1, 2, 3, 4, 5, 6, 7 and 2 more"


def test_the_html_report_uses_the_cli_units(tmp_path):
    pytest.importorskip("plotly")
    from tracekit.render.report import html_report

    s = tracekit.summarize(_tiny_run(tmp_path / "run", True), workers=1, cache=False)
    text = html_report(s)
    table = text[text.index("<h3>Per rank"):]
    table = table[: table.index("</table>")]
    assert "ms" in table[:80] and "MB" in table[:80]
    assert "_us</th>" not in table and "bytes</th>" not in table
    # The window's steps are 1000 us and each rank sends 2 all-reduces of 10 float32 (80 bytes) in it.
    assert "<th>step_time_ms</th>" in table and "<td>1.00</td>" in table
    assert "<th>allreduce_MB</th>" in table
    assert "_us</th>" not in text and "_bytes</th>" not in text  # no table of the report is in us or bytes


def test_an_internal_error_is_one_line_and_the_traceback_is_on_request(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise ValueError("new categories must not include old categories")

    monkeypatch.setattr(cli, "summarize", broken)
    monkeypatch.delenv("TRACEKIT_DEBUG", raising=False)
    assert main(["summarize", str(GLOO_RUN)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error (ValueError: new categories" in err and "Traceback" not in err
    monkeypatch.setenv("TRACEKIT_DEBUG", "1")
    with pytest.raises(ValueError):
        main(["summarize", str(GLOO_RUN)])
