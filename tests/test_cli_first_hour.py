"""What a person meets in their first hour with the CLI: where the cache goes (the platform's rules), whatif in the
CLI's units, and an export that lands beside the run instead of in the current folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit import fmt
from tracekit.cli.main import main
from tracekit.cli.whatif import text_table
from tracekit.predict.scenarios import WHATIF_COLUMNS
from tracekit.rank import cache
from tracedata import kernel, step, write_trace

ROOT = Path(__file__).resolve().parents[1]
GLOO_RUN = ROOT / "sample_traces" / "resnet-gloo-2rank"
STRAGGLER_RUN = ROOT / "sample_traces" / "gpt-gloo-2rank-straggler"


# --- the cache folder -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """Two ranks of three 1000 us steps: two cache entries, read in a blink."""
    folder = tmp_path_factory.mktemp("tiny")
    for rank in (0, 1):
        events = [step(k + 1, 1000 * k, 1000) for k in range(3)] + [kernel("gemm", 1000 * k, 900) for k in range(3)]
        write_trace(folder / f"rank{rank}.json", events, rank=rank)
    return folder


def _summarize_and_info(capsys, run: Path) -> str:
    """Summarize a run through the default cache; what ``tracekit cache info`` then prints."""
    assert main(["summarize", str(run), "--workers", "1"]) == 0
    capsys.readouterr()
    assert main(["cache", "info"]) == 0
    return capsys.readouterr().out


def test_cache_dir_argument_wins_over_the_environment(tiny_run, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    chosen = tmp_path / "chosen"
    assert cache.resolve_dir(chosen) == chosen
    assert main(["summarize", str(tiny_run), "--workers", "1", "--cache-dir", str(chosen)]) == 0
    capsys.readouterr()
    assert cache.info(chosen).entries == 2
    assert not (tmp_path / "env").exists() and not (tmp_path / "xdg").exists()
    assert main(["cache", "info", "--cache-dir", str(chosen)]) == 0
    assert capsys.readouterr().out.startswith(f"cache folder: {chosen}\nentries: 2\n")


def test_tracekit_cache_dir_variable_comes_next(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.resolve_dir(None) == tmp_path / "env"
    assert _summarize_and_info(capsys, GLOO_RUN).startswith(f"cache folder: {tmp_path / 'env'}\nentries: 2\n")
    assert cache.info(tmp_path / "env").entries == 2 and not (tmp_path / "xdg").exists()


def test_tracekit_cache_dir_variable_expands_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", "~/tk-cache")
    assert cache.resolve_dir(None) == tmp_path / "home" / "tk-cache"


def test_xdg_cache_home_when_set_and_absolute(tiny_run, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("TRACEKIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.resolve_dir(None) == tmp_path / "xdg" / "tracekit"
    assert _summarize_and_info(capsys, tiny_run).startswith(f"cache folder: {tmp_path / 'xdg' / 'tracekit'}\nentries: 2\n")
    assert cache.info(tmp_path / "xdg" / "tracekit").entries == 2


@pytest.mark.parametrize("xdg", [None, "", "relative/cache"], ids=["unset", "empty", "relative"])
def test_else_the_home_cache(xdg, tiny_run, tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", "")  # empty: as if unset
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    monkeypatch.chdir(tmp_path)  # a relative XDG_CACHE_HOME would land here if it were used
    assert cache.resolve_dir(None) == home / ".cache" / "tracekit"
    assert _summarize_and_info(capsys, tiny_run).startswith(f"cache folder: {home / '.cache' / 'tracekit'}\nentries: 2\n")
    assert not (tmp_path / "relative").exists()


# --- whatif in the CLI's units ----------------------------------------------------------------------------------------

def _columns(rows: list[list[str]]) -> str:
    """Right-justified columns one space apart, as pandas prints a table of strings."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(" ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows)


def test_whatif_prints_ms_percent_and_speedups(tmp_path, capsys):
    store = tmp_path / "cache"  # the run is read once, then the CLI's runs are cache hits
    table = tracekit.whatif(tracekit.summarize(STRAGGLER_RUN, workers=1, cache_dir=store))
    rows = [["scenario", "step ms", "speed-up", "saving ms", "saving %"]]
    rows += [[r.scenario, fmt.ms(r.step_time_us), fmt.ratio(r.speedup), fmt.ms(r.saving_us),  # tracekit.fmt.figure
              f"{r.saving_pct:.1f}"] for r in table.itertuples()]
    assert main(["whatif", str(STRAGGLER_RUN), "--workers", "1", "--cache-dir", str(store)]) == 0
    out = capsys.readouterr().out
    assert out == _columns(rows) + "\n"
    assert "_us" not in out and "258,842.8" not in out and " 1.22x " in out  # no raw us, speed-ups as figures

    assert main(["whatif", str(STRAGGLER_RUN), "--workers", "1", "--cache-dir", str(store), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)  # --json: the raw table, microseconds
    assert [r["scenario"] for r in records] == table["scenario"].tolist()
    assert [r["step_time_us"] for r in records] == pytest.approx(table["step_time_us"].tolist(), rel=1e-12)
    assert [r["speedup"] for r in records] == pytest.approx(table["speedup"].tolist(), rel=1e-12)


def test_whatif_text_says_unknown_for_what_the_trace_cannot_give():
    nan = float("nan")
    table = pd.DataFrame([["baseline", 1234.5, 1.0, 0.0, 0.0], ["comm_x2", nan, nan, nan, nan],
                          ["comm_x0.5", 2469.0, 0.5, -1234.5, -100.0]], columns=WHATIF_COLUMNS)
    assert text_table(table).splitlines() == [" scenario step ms speed-up saving ms saving %",
                                              " baseline    1.23    1.00x      0.00      0.0",
                                              "  comm_x2 unknown  unknown   unknown  unknown",
                                              "comm_x0.5    2.47   0.500x     -1.23   -100.0"]


# --- export beside the run ------------------------------------------------------------------------------------------

@pytest.fixture
def places(tmp_path, monkeypatch):
    """A copy of a sample run at runs/job, and an empty current folder that must stay empty."""
    run = shutil.copytree(GLOO_RUN, tmp_path / "runs" / "job")
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    yield run, here
    assert list(here.iterdir()) == [], "tracekit export wrote into the current folder"


def test_export_writes_beside_the_run_folder(places, capsys):
    run, _ = places
    before = sorted(p.name for p in run.iterdir())
    out = run.parent / "job.perfetto.json"
    assert main(["export", str(run), "--no-cache", "--workers", "1"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out} (")
    assert {e["pid"] for e in json.loads(out.read_text())["traceEvents"]} == {0, 1}
    assert sorted(p.name for p in run.iterdir()) == before  # nothing in the run folder

    out.write_text("mine")
    assert main(["export", str(run), "--no-cache", "--workers", "1"]) == 2
    assert out.read_text() == "mine" and "exists; pass --force" in capsys.readouterr().err
    assert main(["export", str(run), "--no-cache", "--workers", "1", "--force"]) == 0
    assert json.loads(out.read_text())["traceEvents"] and capsys.readouterr().out.startswith(f"wrote {out} (")


def test_export_of_the_current_folder_names_it(places, monkeypatch, capsys):
    run, _ = places
    monkeypatch.chdir(run)
    before = sorted(p.name for p in run.iterdir())
    assert main(["export", ".", "--no-cache", "--workers", "1"]) == 0
    out = run.parent / "job.perfetto.json"
    assert capsys.readouterr().out.startswith(f"wrote {out} (") and out.is_file()
    assert sorted(p.name for p in run.iterdir()) == before


def test_export_of_one_trace_file_writes_beside_it(places, tmp_path, capsys):
    run, _ = places
    alone = tmp_path / "one" / "rank-0.pt.trace.json.gz"
    alone.parent.mkdir()
    shutil.copy(run / "rank-0.pt.trace.json.gz", alone)
    out = alone.parent / "rank-0.perfetto.json"
    assert main(["export", str(alone), "--no-cache", "--workers", "1"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out} (")
    assert {e["pid"] for e in json.loads(out.read_text())["traceEvents"]} == {0}
    assert main(["export", str(alone), "--no-cache"]) == 2 and "exists" in capsys.readouterr().err

    # A trace file of a run folder: beside it is inside the run, where the export would be one more rank.
    before = sorted(p.name for p in run.iterdir())
    assert main(["export", str(run / "rank-0.pt.trace.json.gz"), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds other traces" in err and "-o" in err
    assert sorted(p.name for p in run.iterdir()) == before


def test_export_output_option_keeps_working(places, tmp_path, capsys):
    run, here = places
    chosen = tmp_path / "chosen.json"
    assert main(["export", str(run), "-o", str(chosen), "--no-cache", "--workers", "1"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {chosen} (") and chosen.is_file()
    chosen.write_text("mine")
    assert main(["export", str(run), "-o", str(chosen), "--no-cache"]) == 2
    assert chosen.read_text() == "mine" and "--force" in capsys.readouterr().err
    before = sorted(p.name for p in run.iterdir())
    assert main(["export", str(run), "-o", str(run / "perfetto.json"), "--no-cache", "--force"]) == 2
    assert "inside the run folder" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == before
    assert not (run.parent / "job.perfetto.json").exists()  # -o named the file: nothing beside the run
