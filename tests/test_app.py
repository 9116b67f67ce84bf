"""The viewer under Streamlit's AppTest: every page on each sample run and on a tiny run, the numbers shown against
the Summary's, the URL state, refused paths, and uploads (good ones and bad ones)."""

from __future__ import annotations

import base64
import gzip
import io
import json
import math
import os
import re
import stat
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

import tracekit  # noqa: E402
from viewer_runs import REPO, make_root, sample_run_names, write_tiny_run  # noqa: E402

if str(REPO) not in sys.path:  # the app is a folder of the repository, not an installed package
    sys.path.insert(0, str(REPO))
from app import fmt, paths  # noqa: E402
from app.uploads import UploadLimits, UploadRefused, save_upload  # noqa: E402
from tracekit.render import charts  # noqa: E402

MAIN = str(REPO / "app" / "main.py")
PAGES = ("overview", "ranks", "communication", "idle", "timeline", "compare")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return make_root(tmp_path_factory.mktemp("viewer") / "runs")


@pytest.fixture
def app(root, monkeypatch):
    """An AppTest of app/main.py with ``-- --root ROOT`` on its command line."""
    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(root)])

    def make(**query) -> AppTest:
        at = AppTest.from_file(MAIN, default_timeout=60)
        at.query_params.update({k: str(v) for k, v in query.items()})
        return at.run()
    return make


def no_exception(at: AppTest) -> None:
    assert not at.exception, at.exception[0].value if at.exception else ""


def frame(at: AppTest, index: int) -> pd.DataFrame:
    """The page's ``index``-th table, as the DataFrame Streamlit was given."""
    return at.dataframe[index].value


def same_table(shown: pd.DataFrame, expected: pd.DataFrame) -> None:
    """The table on the page holds the Summary's values (missing values may come back as None or NaN)."""
    def plain(df: pd.DataFrame) -> pd.DataFrame:
        df = df.reset_index(drop=True).astype(object)
        return df.where(df.notna(), None)
    pd.testing.assert_frame_equal(plain(shown), plain(expected), check_dtype=False)


def figures(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def numbers(values) -> list[float]:
    """A plotly JSON array: a plain list, or plotly's typed-array form ``{"dtype": "f8", "bdata": base64}``."""
    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return list(values)


RUNS = ["tiny", *sample_run_names()]


@pytest.mark.parametrize("run", RUNS)
def test_every_page_shows_the_summary(app, root, run):
    summary = tracekit.summarize(root / run)
    at = app(run=f"runs/{run}")
    no_exception(at)
    assert at.title[0].value == "Overview"

    # Overview: the headline numbers, computed here from the Summary's own tables.
    r = summary.ranks
    shown = {m.label: m.value for m in at.metric}
    assert shown["Step time"] == fmt.ms(r.loc[r["steps"] > 0, "step_time_us"].mean())
    assert shown["Exposed comm"] == fmt.pct(r["exposed_comm_us"].sum() / r["span_us"].sum() * 100)
    assert shown["Comm overlapped"] == fmt.pct(r["overlap_us"].sum() / r["comm_us"].sum() * 100)
    assert shown["Idle"] == fmt.pct(r["idle_us"].sum() / r["span_us"].sum() * 100)
    workload = summary.run.workload
    for kind in ("unprofiled", "profiled"):
        value = math.nan if workload is None else getattr(workload, f"throughput_{kind}")
        assert shown.get(f"Samples/s ({kind})") == (None if math.isnan(value) else fmt.rate(value))
    assert len(at.error) + len(at.warning) + len(at.info) >= len(summary.findings)
    per_rank = next(d.value for d in at.dataframe if "span_ms" in d.value.columns)  # beside quality and skipped
    same_table(per_rank, fmt.display_units(summary.ranks))  # ms and MB, as the CLI and the HTML report

    at.switch_page("views/ranks.py").run()
    no_exception(at)
    breakdown = figures(at)[0]
    per_rank = pd.DataFrame({t["name"]: numbers(t["y"]) for t in breakdown["data"]}).sum(axis=1)
    assert per_rank.tolist() == pytest.approx((r["span_us"] / 1e3).tolist())
    same_table(frame(at, -1), fmt.display_units(summary.ranks))

    at.switch_page("views/communication.py").run()
    no_exception(at)
    same_table(frame(at, 1), fmt.display_units(summary.collectives))
    same_table(frame(at, 0), fmt.display_units(charts.op_table(summary)))

    at.switch_page("views/idle.py").run()
    no_exception(at)
    gaps = frame(at, 0)
    expected = summary.gaps.nlargest(20, "dur_us").reset_index(drop=True)
    same_table(gaps.drop(columns="timeline"), fmt.display_units(expected))
    assert "dur_ms" in gaps and "dur_us" not in gaps
    assert gaps["timeline"].str.startswith("timeline?").all()

    at.switch_page("views/timeline.py").run()
    no_exception(at)
    assert len(figures(at)) == 1 and figures(at)[0]["data"]

    at.switch_page("views/compare.py").run()
    no_exception(at)
    other = at.selectbox(key="compare_b").value
    table = tracekit.compare(summary, tracekit.summarize(root / other.split("/", 1)[1])).table
    same_table(frame(at, 0), table)
    assert at.query_params["b"] == other


def test_the_url_holds_run_page_and_rank(app):
    at = app(run="runs/tiny-copy", page="idle", rank=1)
    no_exception(at)
    assert at.title[0].value == "Idle"
    assert at.selectbox(key="run").value == "runs/tiny-copy" and at.selectbox(key="rank").value == 1
    assert at.query_params["run"] == "runs/tiny-copy" and at.query_params["rank"] == "1"
    assert at.query_params["page"] == "idle"
    at.selectbox(key="run").set_value("runs/tiny").run()
    assert at.query_params["run"] == "runs/tiny"


def test_a_timeline_link_opens_the_step_of_the_gap(app, root):
    summary = tracekit.summarize(root / "tiny")
    gap = summary.gaps[summary.gaps["rank"] == 1].nlargest(1, "dur_us").iloc[0]
    at = app(run="runs/tiny", page="timeline", rank=1, at=gap["start_us"])
    no_exception(at)
    assert at.title[0].value == "Timeline"
    steps = summary.steps[summary.steps["rank"] == 1]
    step = steps[(steps["start_us"] <= gap["start_us"]) & (steps["start_us"] + steps["step_us"] > gap["start_us"])]
    assert at.select_slider(key="timeline_steps").value == (int(step["step"].iloc[0]),) * 2
    layout = figures(at)[0]["layout"]
    assert any(s.get("line", {}).get("dash") == "dot" for s in layout["shapes"])  # the moment is marked


def test_the_default_opens_a_run_with_no_arguments(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["main.py"])
    monkeypatch.setattr(paths, "RUNS", tmp_path / "runs")  # no workload run yet: a bundled sample opens
    monkeypatch.setattr(paths, "DEFAULT_ROOTS", (paths.DEFAULT_ROOTS[0], tmp_path / "runs"))
    at = AppTest.from_file(MAIN, default_timeout=60).run()
    no_exception(at)
    if sample_run_names():
        assert at.selectbox(key="run").value.startswith("sample_traces/")
    else:
        assert at.sidebar.info


def test_with_no_run_named_the_newest_run_under_runs_opens(monkeypatch, tmp_path):
    runs = tmp_path / "runs"
    newer, older = write_tiny_run(runs / "b-newer"), write_tiny_run(runs / "a-older")
    os.utime(older, ns=(1_000_000_000, 1_000_000_000))
    os.utime(newer, ns=(2_000_000_000, 2_000_000_000))
    monkeypatch.setattr(paths, "RUNS", runs)
    monkeypatch.setattr(paths, "DEFAULT_ROOTS", (paths.DEFAULT_ROOTS[0], runs))
    monkeypatch.setattr(sys, "argv", ["main.py"])
    at = AppTest.from_file(MAIN, default_timeout=60).run()
    no_exception(at)
    assert at.selectbox(key="run").value == "runs/b-newer"


def test_the_run_named_on_the_command_line_opens(root, monkeypatch, tmp_path):
    # streamlit run app/main.py -- runs/tiny-copy, from the folder that holds runs/
    monkeypatch.chdir(root.parent)
    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(root), "runs/tiny-copy"])
    at = AppTest.from_file(MAIN, default_timeout=60).run()
    no_exception(at)
    assert at.selectbox(key="run").value == "runs/tiny-copy" and not at.error
    # A run outside every root is opened all the same, as a root of its own.
    outside = write_tiny_run(tmp_path / "elsewhere" / "quickstart")
    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(root), str(outside)])
    at = AppTest.from_file(MAIN, default_timeout=60).run()
    no_exception(at)
    assert at.selectbox(key="run").value == "quickstart"
    assert at.sidebar.caption[0].value.startswith("2 rank(s)")
    # A folder without traces is said so, and the viewer opens as without it.
    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(root), str(tmp_path)])
    at = AppTest.from_file(MAIN, default_timeout=60).run()
    no_exception(at)
    assert any("not a folder of trace files" in e.value for e in at.sidebar.error)
    assert at.selectbox(key="run").value.startswith("runs/")


def test_a_broken_run_shows_one_message(tmp_path, monkeypatch):
    root = tmp_path / "roots"
    write_tiny_run(root / "good")
    (root / "broken").mkdir()
    (root / "broken" / "rank-0.json").write_text("{not json")
    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(root)])
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.query_params["run"] = "roots/broken"
    at.run()
    no_exception(at)
    assert any("Could not read roots/broken" in e.value and "rank-0.json" in e.value for e in at.error)
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.query_params.update({"run": "roots/good", "page": "compare", "b": "roots/broken"})
    at.run()
    no_exception(at)
    assert any("Could not read roots/broken" in e.value for e in at.error)


def test_only_the_loader_calls_the_analysis():
    """Pages only read: reading and analysing traces happens in app/loader.py, behind its cache."""
    for path in sorted((REPO / "app").rglob("*.py")):
        text = path.read_text()
        calls = re.findall(r"(?<!loader\.)\b(?:summarize|whatif|read_rank|classify|compare)\(", text)
        assert path.name == "loader.py" or not calls, f"{path.relative_to(REPO)} calls {calls}"


# ------------------------------------------------------------------------------------------ refused paths

@pytest.mark.parametrize("asked", ["runs/../runs/tiny", "runs/tiny/../../..", "/etc", "~/x", "runs/./tiny",
                                   "nope/tiny", "runs\\..\\tiny", "runs//tiny", ""])
def test_paths_that_leave_the_roots_are_refused(root, asked):
    roots = paths.parse_roots(["--root", str(root)])
    with pytest.raises(paths.PathRefused):
        paths.resolve_run(asked, roots)


def test_root_labels_are_unique():
    roots = paths.parse_roots(["--root", "/a/runs", "--root", "/b/runs", "--root", "/c/upload"], reserved=("upload",))
    assert [r.label for r in roots] == ["runs", "runs-2", "upload-2"]


def test_a_symlink_out_of_the_root_is_refused_and_not_listed(tmp_path):
    outside = write_tiny_run(tmp_path / "outside")
    inside = tmp_path / "root"
    write_tiny_run(inside / "ok")
    (inside / "escape").symlink_to(outside, target_is_directory=True)
    (inside / "ok" / "link.json").symlink_to(outside / "run.json")
    roots = paths.parse_roots(["--root", str(inside)])
    assert paths.list_runs(roots) == ["root/ok"]
    with pytest.raises(paths.PathRefused, match="leaves the root"):
        paths.resolve_run("root/escape", roots)
    assert paths.resolve_run("root/ok", roots) == (inside / "ok").resolve()


def test_a_refused_url_shows_a_message_and_opens_nothing_outside(app):
    at = app(run="runs/../../etc", page="ranks")
    no_exception(at)
    assert any("Refused" in e.value and "'..'" in e.value for e in at.error)
    assert at.selectbox(key="run").value != "runs/../../etc"
    at = app(run="/etc")
    assert any("absolute paths are refused" in e.value for e in at.error)


def test_a_typed_path_is_checked_too(app):
    at = app(run="runs/tiny")
    at.text_input(key="tracekit.typed_run").input("runs/../../../etc").run()
    no_exception(at)
    assert any("Refused" in e.value for e in at.error) and at.selectbox(key="run").value == "runs/tiny"
    at.text_input(key="tracekit.typed_run").input("runs/tiny-copy").run()
    assert at.selectbox(key="run").value == "runs/tiny-copy"


# ------------------------------------------------------------------------------------------------ uploads

def zipped(entries: dict[str, bytes], symlink: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries.items():
            z.writestr(name, data)
        if symlink:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, "/etc/passwd")
    return buffer.getvalue()


def run_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_a_zip_upload_becomes_a_private_run(tmp_path):
    files = run_files(write_tiny_run(tmp_path / "tiny"))
    data = zipped({f"tiny/{name}": body for name, body in files.items()} | {"__MACOSX/._x": b"junk", "README.md": b"hi"})
    folder = save_upload([("my run.zip", data)], tmp_path, "my run")
    assert folder.parent == tmp_path and stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert sorted(p.name for p in folder.iterdir()) == sorted(files)
    assert list(tracekit.summarize(folder).ranks["rank"]) == [0, 1]


def test_upload_names_cannot_climb_out(tmp_path):
    (tmp_path / "up").mkdir()
    folder = save_upload([("../../rank-0.json.gz", gzip.compress(b'{"traceEvents": []}'))], tmp_path / "up", "x")
    assert [p.name for p in folder.iterdir()] == ["rank-0.json.gz"]
    folder = save_upload([("a.zip", zipped({"../../../evil.json": b"{}", "/abs/rank-1.json": b"{}"}))], tmp_path / "up", "y")
    assert sorted(p.name for p in folder.iterdir()) == ["evil.json", "rank-1.json"]
    assert not (tmp_path / "evil.json").exists()


@pytest.mark.parametrize("case, message", [
    ("too_big", "over the 1 MiB limit"),
    ("zip_bomb", "compression ratio"),
    ("gz_bomb", "decompression bomb"),
    ("many_files", "entries, over the limit"),
    ("symlink", "symlinks are refused"),
    ("not_a_trace", "not a trace"),
    ("bad_zip", "not a readable zip"),
    ("no_trace", "holds no trace"),
    ("duplicate", "two files named"),
])
def test_bad_uploads_are_refused_and_leave_nothing(tmp_path, case, message):
    limits = UploadLimits(max_upload_bytes=2**20, max_extracted_bytes=8 * 2**20, max_files=5, max_ratio=50)
    zeros = b"\0" * (16 * 2**20)
    files = {
        "too_big": [("rank-0.json", b" " * (2**20 + 1))],
        "zip_bomb": [("bomb.zip", zipped({"rank-0.json": zeros}))],
        "gz_bomb": [("rank-0.json.gz", gzip.compress(zeros))],
        "many_files": [("many.zip", zipped({f"rank-{i}.json": b"{}" for i in range(6)}))],
        "symlink": [("link.zip", zipped({"rank-0.json": b"{}"}, symlink="rank-1.json"))],
        "not_a_trace": [("notes.txt", b"hello")],
        "bad_zip": [("broken.zip", b"PK\x03\x04 not really")],
        "no_trace": [("docs.zip", zipped({"README.md": b"hi", "run.json": b"{}"}))],
        "duplicate": [("a.zip", zipped({"x/rank-0.json": b"{}", "y/rank-0.json": b"{}"}))],
    }[case]
    parent = tmp_path / "uploads"
    parent.mkdir()
    with pytest.raises(UploadRefused, match=message):
        save_upload(files, parent, "bad", limits)
    assert os.listdir(parent) == []


def test_upload_in_the_app_then_a_refused_one(app, tmp_path):
    files = run_files(write_tiny_run(tmp_path / "tiny"))
    at = app(run="runs/tiny")
    at.file_uploader(key="tracekit.upload").set_value([("run.zip", zipped(files), "application/zip")])
    at.run()
    at.button(key="tracekit.upload_go").click().run()
    no_exception(at)
    opened = at.selectbox(key="run").value
    assert opened.startswith("upload/run-")
    assert [m.value for m in at.metric if m.label == "Samples/s (unprofiled)"] == [fmt.rate(1234.5)]
    at.file_uploader(key="tracekit.upload").set_value([("run.zip", zipped({"README.md": b"no traces"}), "application/zip")])
    at.run()
    at.button(key="tracekit.upload_go").click().run()
    assert any("Upload refused" in e.value and "holds no trace" in e.value for e in at.error)
    assert at.selectbox(key="run").value == opened
