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
from app import fmt, loader, paths  # noqa: E402
from app.uploads import UploadLimits, UploadRefused, save_upload  # noqa: E402
from tracekit.render import charts, charts_ops, charts_roofline  # noqa: E402
from test_charts_ops import write_memory_run  # noqa: E402
from frame_equal import assert_frame_equal, labels_as_objects
from apphelp_apptest import apptest_setup_once  # noqa: F401 (autouse: AppTest's setup once per process)

MAIN = str(REPO / "app" / "main.py")
PAGES = ("overview", "ranks", "communication", "idle", "timeline", "compare", "ops", "memory")


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


def held_summary(root: Path, run: str) -> tracekit.Summary:
    """The Summary the viewer holds for ``root / run``: its own cached ``loader.summary`` (shared with the AppTest
    in this process), so a test and the page it checks read the run once. That the viewer's options (no cache, no
    workers for a small run) give the plain Summary is ``tests/test_engine.py``'s to check."""
    folder = paths.resolve_run(f"runs/{run}", paths.parse_roots(["--root", str(root)]))
    return loader.summary(str(folder), paths.fingerprint(folder))


def no_exception(at: AppTest) -> None:
    assert not at.exception, at.exception[0].value if at.exception else ""


def frame(at: AppTest, index: int) -> pd.DataFrame:
    """The page's ``index``-th table, as the DataFrame Streamlit was given."""
    return at.dataframe[index].value


def same_table(shown: pd.DataFrame, expected: pd.DataFrame, na: pd.DataFrame | None = None,
               numbers: bool = False) -> None:
    """The table on the page holds the Summary's values (missing values may come back as None or NaN), as app.fmt
    shows them: a column with an empty cell that reads 'n/a' as text (``fmt.shown``, unless ``numbers``), the others
    as numbers."""
    def plain(df: pd.DataFrame) -> pd.DataFrame:
        df = labels_as_objects(df).astype(object)
        return df.where(df.notna(), None)
    assert_frame_equal(plain(shown), plain(expected if numbers else fmt.shown(expected, na)),
                       check_dtype=False)


def figures(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def numbers(values) -> list[float]:
    """A plotly JSON array: a plain list, or plotly's typed-array form ``{"dtype": "f8", "bdata": base64}``."""
    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return list(values)


RUNS = ["tiny", *sample_run_names()]
GROUPED_BY = "run"  # each run's tests one after another (tests/conftest.py): the viewer caches 16 Summaries


@pytest.mark.parametrize("run", ["tiny", "pp-1f1b-4rank"])
def test_the_viewer_holds_the_plain_summary(root, run, summaries):
    """The Summary the pages are checked against (``held_summary``: the viewer's options) is the one
    ``tracekit.summarize`` gives with its defaults."""
    held, plain = held_summary(root, run), summaries(root / run)
    for table in ("ranks", "steps", "collectives", "gaps", "pipeline", "critical_path"):
        assert_frame_equal(getattr(held, table), getattr(plain, table), obj=table)
    assert held.findings == plain.findings


@pytest.mark.parametrize("run", RUNS)
def test_every_page_shows_the_summary(app, root, run, summaries):
    summary = held_summary(root, run)
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
    ranks_na = fmt.ranks_na(fmt.display_units(summary.ranks), summary.data_quality)  # MFU n/a without a known peak
    same_table(per_rank, fmt.display_units(summary.ranks), ranks_na)  # ms and MB, as the CLI and the HTML report

    at.switch_page("views/ranks.py").run()
    no_exception(at)
    breakdown = figures(at)[0]
    per_rank = pd.DataFrame({t["name"]: numbers(t["y"]) for t in breakdown["data"]}).sum(axis=1)
    assert per_rank.tolist() == pytest.approx((r["span_us"] / 1e3).tolist())
    same_table(frame(at, -1), fmt.display_units(summary.ranks), ranks_na)

    at.switch_page("views/communication.py").run()
    no_exception(at)
    if len(summary.collectives):  # the last two tables (the by-dimension and pair tables come first where present)
        same_table(frame(at, -1), fmt.display_units(summary.collectives))
        same_table(frame(at, -2), fmt.display_units(charts.op_table(summary)))
    else:  # a pipeline with send/recv only: its pairs, and no collectives table
        same_table(frame(at, -1), fmt.display_units(summary.p2p.drop(columns=["send_op", "recv_op"])))

    at.switch_page("views/idle.py").run()
    no_exception(at)
    gaps = frame(at, 0)
    expected = summary.gaps.nlargest(20, "dur_us").reset_index(drop=True)
    if not expected["host_kind"].astype(str).ne("").any():  # no gap has one (a CPU-only run): no column
        expected = expected.drop(columns="host_kind")
    same_table(gaps.drop(columns="timeline"), fmt.display_units(expected))
    assert "dur_ms" in gaps and "dur_us" not in gaps
    assert gaps["timeline"].str.startswith("timeline?").all()

    at.switch_page("views/timeline.py").run()
    no_exception(at)
    assert len(figures(at)) == 1 and figures(at)[0]["data"]

    at.switch_page("views/compare.py").run()
    no_exception(at)
    other = at.selectbox(key="compare_b").value
    table = tracekit.compare(summary, held_summary(root, other.split("/", 1)[1])).table
    same_table(frame(at, 0), table, fmt.comparison_na(table), numbers=True)
    assert at.dataframe[0].proto.placeholder == fmt.placeholder(table, fmt.comparison_na(table))
    assert at.query_params["b"] == other


def frames(at: AppTest) -> list[pd.DataFrame]:
    return [d.value for d in at.dataframe]


def check_ops_and_memory_pages(at: AppTest, summary, rank: int) -> None:
    """The Operators & kernels and Memory pages of an open run show the charts_ops tables of the rank."""
    at.switch_page("views/ops.py").run()
    no_exception(at)
    assert at.title[0].value == "Operators & kernels"
    kernels, ops = charts_ops.kernel_table(summary, rank), charts_ops.op_table(summary, rank)
    shown = frames(at)
    expected = [t for t in (kernels, ops) if not t.empty]
    assert len(shown) == len(expected)
    for table, want in zip(shown, expected):
        same_table(table, want)
    notes = [t.attrs["note"] for t in (kernels, ops) if t.empty]
    assert all(any(n in box.value for box in at.info) for n in notes)
    assert [f["layout"]["title"]["text"].split("<br>")[0] for f in figures(at)] == [
        charts_roofline.roofline(summary, rank).layout.title.text.split("<br>")[0],
        charts_ops.op_time_per_step(summary, rank).layout.title.text]
    at.radio(key="ops_group").set_value("name + input shapes").run()
    no_exception(at)
    if not ops.empty:
        same_table(frames(at)[-1], charts_ops.op_table(summary, rank, by_shape=True))

    at.switch_page("views/memory.py").run()
    no_exception(at)
    assert at.title[0].value == "Memory"
    note = charts_ops.memory_note(summary, rank)
    if note:
        assert any(note in box.value for box in at.info) and not figures(at) and not at.dataframe
        return
    same_table(frames(at)[0], charts_ops.memory_peaks(summary, rank))
    top = charts_ops.top_allocators(summary, rank)
    if not top.empty:
        same_table(frames(at)[1], top)
    drawn = figures(at)[0]
    want = charts_ops.memory_over_time(summary, rank)
    assert [t["name"] for t in drawn["data"]] == [t.name for t in want.data]
    assert numbers(drawn["data"][0]["y"]) == pytest.approx(list(want.data[0].y))


@pytest.mark.parametrize("run", RUNS)
def test_the_ops_and_memory_pages_on_each_run(app, root, run, summaries):
    summary = held_summary(root, run)
    at = app(run=f"runs/{run}", rank=1)
    no_exception(at)
    check_ops_and_memory_pages(at, summary, 1)


def test_the_ops_and_memory_pages_on_a_gpu_run_with_memory_events(tmp_path, monkeypatch):
    folder = write_memory_run(tmp_path / "gpu" / "a100-memory")
    summary = tracekit.summarize(folder, cache=False, workers=1)
    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(folder.parent)])
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.query_params.update({"run": "gpu/a100-memory", "page": "ops"})
    at.run()
    no_exception(at)
    assert at.title[0].value == "Operators & kernels"
    shown = {m.label: m.value for m in at.metric}
    # The device's whole name (a metric card cut it to "NVIDIA A100 SX..."), and MFU on a device with a known peak.
    assert "**Device:** NVIDIA A100 SXM4 80GB" in [m.value for m in at.markdown]
    assert shown["MFU"] == fmt.pct(summary.ranks["mfu_pct"].iloc[0]) != "n/a"
    roof = figures(at)[0]
    assert "memory roof (2,039 GB/s)" in [t["name"] for t in roof["data"]]
    check_ops_and_memory_pages(at, summary, 0)
    assert len(figures(at)) == 1 and len(at.dataframe) == 2  # memory over time, peaks and top allocators


def test_the_url_holds_run_page_and_rank(app):
    at = app(run="runs/tiny-copy", page="idle", rank=1)
    no_exception(at)
    assert at.title[0].value == "Idle"
    assert at.selectbox(key="run").value == "runs/tiny-copy" and at.selectbox(key="rank").value == 1
    assert at.query_params["run"] == "runs/tiny-copy" and at.query_params["rank"] == "1"
    assert at.query_params["page"] == "idle"
    at.selectbox(key="run").set_value("runs/tiny").run()
    assert at.query_params["run"] == "runs/tiny"


def test_a_timeline_link_opens_the_step_of_the_gap(app, root, summaries):
    summary = held_summary(root, "tiny")
    gap = summary.gaps[summary.gaps["rank"] == 1].nlargest(1, "dur_us").iloc[0]
    at = app(run="runs/tiny", page="timeline", rank=1, at=gap["start_us"])
    no_exception(at)
    assert at.title[0].value == "Timeline"
    steps = summary.steps[summary.steps["rank"] == 1]
    step = steps[(steps["start_us"] <= gap["start_us"]) & (steps["start_us"] + steps["step_us"] > gap["start_us"])]
    assert at.select_slider(key="timeline_step").value == int(step["step"].iloc[0])  # one thumb, one step
    assert not [w for w in at.select_slider if w.key == "timeline_steps"]
    layout = figures(at)[0]["layout"]
    assert any(s.get("line", {}).get("dash") == "dot" for s in layout["shapes"])  # the moment is marked


def test_a_rank_of_one_step_has_no_step_slider_but_a_sentence(tmp_path, monkeypatch):
    from tracedata import write_trace
    from viewer_runs import tiny_gpu_rank

    for rank in (0, 1):  # the tiny run's first step only
        events = [e for e in tiny_gpu_rank(rank) if e["ts"] < 1000]
        write_trace(tmp_path / "runs" / "one" / f"rank-{rank}.pt.trace.json.gz", events, rank=rank,
                    deviceProperties=[{"name": "NVIDIA H100"}])
    assert tracekit.summarize(tmp_path / "runs" / "one", cache=False).steps["step"].tolist() == [1, 1]
    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(tmp_path / "runs")])
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.query_params.update({"run": "runs/one", "page": "timeline", "rank": "0"})
    at.run()
    no_exception(at)
    assert not at.select_slider and not at.toggle
    assert "Step 1, the only step of rank 0." in [c.value for c in at.caption]


def test_the_timeline_range_slider_shows_two_steps_never_one_twice(app):
    """The range slider (two thumbs) is there only when several steps are asked for, from the step shown to the
    next; one step is picked on a one-thumb slider (two thumbs on one step read "1 1")."""
    at = app(run="runs/tiny", page="timeline", rank=0)
    no_exception(at)
    assert at.select_slider(key="timeline_step").value == 1 and at.toggle(key="timeline_several").value is False
    at.toggle(key="timeline_several").set_value(True).run()
    no_exception(at)
    assert at.select_slider(key="timeline_steps").value == (1, 2)
    assert not [w for w in at.select_slider if w.key == "timeline_step"]
    assert "steps 1-2" in figures(at)[0]["layout"]["title"]["text"]


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


# ------------------------------------------------------------------------------------- viewer polish (issue 22)

def displayed(table) -> pd.DataFrame | None:
    """The text a table's cells show (its Styler's display values), None when it was not styled."""
    from streamlit import dataframe_util

    shown = table.proto.arrow_data.styler.display_values
    return dataframe_util.convert_arrow_bytes_to_pandas_df(shown) if shown else None


def check_tables(at: AppTest, page: str) -> int:
    """Every table of the page goes through app.fmt.table: Streamlit draws an empty cell as the table's placeholder,
    'unknown' (never its default 'None'), and a share ('_pct') or a ratio that has no meaning is the text 'n/a'; no
    cell shows 'None', 'nan' or '<NA>'. Returns the tables checked."""
    for table in at.dataframe:
        values, text = table.value.reset_index(drop=True), displayed(table)
        assert text is not None, f"{page}: a table not shown through app.fmt.table"
        if page == "compare":  # tracekit.compare's table as it is: one text for its empty cells
            frame_ = table.value
            assert table.proto.placeholder == fmt.placeholder(frame_, fmt.comparison_na(frame_)), page
            assert set(text.to_numpy()[frame_.isna().to_numpy()]) <= {table.proto.placeholder}, page
            continue
        assert table.proto.placeholder == fmt.UNKNOWN, page
        assert not text.isin(["None", "nan", "NaN", "<NA>", "NaT"]).any().any(), page
        for col in values.columns:
            empty = values[col].isna().to_numpy()
            assert set(text[col].to_numpy()[empty]) <= {fmt.UNKNOWN}, (page, col)  # drawn as the placeholder
            share = (str(col).endswith("_pct") and col != "saving_pct") or col == "ratio"
            if share:
                assert not empty.any(), (page, col)  # an empty share reads n/a, as text
            elif col not in ("a", "b") and values[col].dtype == object and fmt.NOT_APPLICABLE in set(values[col]):
                raise AssertionError(f"{page}: {col} says n/a")
    return len(at.dataframe)


TABLE_PAGES = ("overview", "ranks", "communication", "idle", "whatif", "compare", "ops", "memory", "fsdp", "pipeline")


@pytest.mark.parametrize("run", ["tiny", *[r for r in sample_run_names() if r in ("resnet-gloo-2rank",
                                                                                   "fsdp-gloo-2rank")]])
def test_every_table_shows_unknown_or_na_never_none(app, run):
    at = app(run=f"runs/{run}", rank=1)
    checked = 0
    for page in TABLE_PAGES:
        at.switch_page(f"views/{page}.py").run()
        no_exception(at)
        checked += check_tables(at, page)
    assert checked >= 8
    at.switch_page("views/compare.py").run()
    compare = next(t for t in at.dataframe if "ratio" in t.value.columns)
    assert compare.value["ratio"].isna().any()  # memory 0 ms in both runs: a ratio of nothing
    table = compare.value
    assert compare.proto.placeholder == fmt.placeholder(table, fmt.comparison_na(table))
    at.switch_page("views/overview.py").run()
    ranks = next(t for t in at.dataframe if "mfu_pct" in t.value.columns).value
    assert set(ranks["mfu_pct"]) == {fmt.NOT_APPLICABLE}  # no FLOPs recorded: as tracekit.fmt.pct writes it


def test_only_app_fmt_draws_tables():
    """Every st.dataframe / st.table of the pages is app.fmt.table's, so every table writes empty cells alike."""
    for path in sorted((REPO / "app").rglob("*.py")):
        calls = re.findall(r"\bst\.(?:dataframe|table|data_editor)\(", path.read_text())
        assert path.name == "fmt.py" or not calls, f"{path.relative_to(REPO)} draws a table itself"


def test_table_text_by_unit_and_bandwidth_digits():
    frame = pd.DataFrame({"op": ["a", None], "dur_ms": [1.5, np.nan], "overlap_pct": [np.nan, 3.0],
                          "busbw_gbps": [0.000626123, np.nan], "saving_pct": [np.nan, 1.0], "calls": [1, 2],
                          "ratio": [np.nan, 2.0]})
    styler = fmt.styled(frame)
    shown = styler.to_string(delimiter="|").splitlines()[1:]
    assert [line.split("|")[1:] for line in shown] == [
        ["a", "1.50", "n/a", "0.000626", "unknown", "1", "n/a"],
        ["unknown", "unknown", "3.0", "unknown", "1.0", "2", "2.00"]]
    assert styler.data["dur_ms"].dtype.kind == "f"  # the values, and so the sorting, stay numbers
    assert styler.data["overlap_pct"].tolist() == ["n/a", "3.0"]  # but for the column with an n/a
    assert fmt.shown(frame.assign(overlap_pct=[1.0, 3.0]))["overlap_pct"].dtype.kind == "f"
    # A compare table keeps its numbers: one text for its empty cells, n/a when each is a ratio of nothing or the
    # bandwidth of an op a run never calls (as `tracekit compare` writes them), else unknown.
    compare = pd.DataFrame({"metric": ["memory_ms", "x_calls_per_step", "x_median_busbw_gbps", "throughput"],
                            "a": [0.0, 0.0, np.nan, 10.0], "b": [0.0, 2.0, 1.5, 20.0],
                            "ratio": [np.nan, np.nan, np.nan, 2.0]})
    assert fmt.placeholder(compare, fmt.comparison_na(compare)) == fmt.NOT_APPLICABLE
    unknown = compare.assign(b=[0.0, 2.0, 1.5, np.nan])  # b's throughput: no run.json
    assert fmt.placeholder(unknown, fmt.comparison_na(unknown)) == fmt.UNKNOWN
    assert fmt.styled(compare, fmt.comparison_na(compare), numbers=True).data["a"].dtype.kind == "f"
    assert [fmt.gbps(v) for v in (0.000626123, 0.0626, 26.66, 1234.4, 0.0, math.nan)] == [
        "0.000626", "0.0626", "26.66", "1,234.40", "0.00", "unknown"]  # tracekit.fmt.figure, as everywhere


def test_the_overview_of_a_workload_run_lists_no_skipped_file(app, root, summaries):
    """The workload's run.json beside the traces is no skipped file (tracekit no longer lists it)."""
    for run in ["tiny", *[r for r in sample_run_names() if r == "resnet-gloo-2rank"]]:
        assert (root / run / "run.json").is_file() and not summaries(root / run).run.skipped
        at = app(run=f"runs/{run}")
        no_exception(at)
        assert not [e for e in at.expander if "skipped" in e.label], run
        assert at.title[0].value == "Overview"


def fake_workload(workload, model=None, world_size=2):
    from tracekit.summary.facts import WorkloadRun

    return WorkloadRun.from_json({"workload": workload, "world_size": world_size,
                                  **({"config": {"model": model}} if model else {})})


def test_second_run_of_the_same_workload_and_model():
    from app.pairing import second_run

    facts = {"r/a": fake_workload("resnet", "resnet18"), "r/b": fake_workload("gpt"),
             "r/c": fake_workload("resnet", "resnet50"), "r/d": fake_workload("resnet", "resnet18", 4),
             "r/e": fake_workload("resnet", "resnet18"), "r/f": None}
    runs = list(facts)
    assert second_run("r/a", runs, facts.get) == "r/e"   # same workload, model and world size
    assert second_run("r/e", runs, facts.get) == "r/a"   # after the last, the list wraps
    assert second_run("r/c", runs, facts.get) == "r/e"   # no other resnet50: a resnet of the same world size
    assert second_run("r/b", runs, facts.get) == "r/c"   # no other gpt run: the next run
    assert second_run("r/f", runs, facts.get) == "r/a"   # no run.json: the next run
    assert second_run("r/a", ["r/a"], facts.get) is None


def test_compare_proposes_a_run_of_the_same_workload(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    for name, workload in (("a", "resnet"), ("b", "gpt"), ("c", "resnet")):
        write_tiny_run(root / name)
        (root / name / "run.json").write_text(json.dumps({"workload": workload, "config": {"model": "m"}}))
    write_tiny_run(root / "d", with_run_json=False)
    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(root)])
    for opened, proposed in (("a", "c"), ("b", "c"), ("d", "a")):
        at = AppTest.from_file(MAIN, default_timeout=60)
        at.query_params.update({"run": f"runs/{opened}", "page": "compare"})
        at.run()
        no_exception(at)
        assert at.selectbox(key="compare_b").value == f"runs/{proposed}", opened
    if "resnet-gloo-2rank" in sample_run_names():
        monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(REPO / "sample_traces")])
        at = AppTest.from_file(MAIN, default_timeout=60)
        at.query_params.update({"run": "sample_traces/resnet-gloo-2rank", "page": "compare"})
        at.run()
        assert at.selectbox(key="compare_b").value == "sample_traces/resnet-gloo-2rank-accum2"


def test_the_timeline_title_says_what_the_steps_are(tmp_path, monkeypatch):
    from test_step_pattern import PROPS, _decode
    from tracedata import write_trace

    # A decode trace without ProfilerStep: its steps are the step[DECODE bs=16] annotations [1000 k, 1000 k + 1000),
    # so the title's one-step measure (step 0, 1000 us) names them, not ProfilerStep.
    write_trace(tmp_path / "runs" / "decode" / "rank-0.pt.trace.json.gz", _decode(), rank=0, world_size=1, **PROPS)
    monkeypatch.setattr(sys, "argv", ["main.py", "--root", str(tmp_path / "runs")])
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.query_params.update({"run": "runs/decode", "page": "timeline", "rank": "0"})
    at.run()
    no_exception(at)
    title = figures(at)[0]["layout"]["title"]["text"]
    assert title == (r"rank 0: 1.00 ms (step 0, rank 0's step time: from the start of one annotation matching "
                     r"step\[.*\] to the next)")


def test_the_timeline_names_cpu_threads(app):
    runs = [r for r in sample_run_names() if r == "resnet-gloo-2rank"]
    if not runs:
        pytest.skip("needs sample_traces/resnet-gloo-2rank (a CPU-only run, whose lanes are threads)")
    at = app(run=f"runs/{runs[0]}", page="timeline", rank=0)
    no_exception(at)
    yaxis = figures(at)[0]["layout"]["yaxis"]
    labels = dict(zip(yaxis["tickvals"], yaxis["ticktext"]))
    assert [labels[v] for v in yaxis["tickvals"] if v.startswith("thread ")][0] == "main thread"
    assert sum(label.startswith("pt_gloo_runloop · ") for label in labels.values()) == 2


def test_bandwidth_in_the_communication_tables_has_three_digits(app):
    runs = [r for r in sample_run_names() if r == "resnet-gloo-2rank"]
    at = app(run=f"runs/{(runs or ['tiny'])[0]}", page="communication")
    no_exception(at)
    ops = at.dataframe[0]
    values, text = ops.value, displayed(ops)
    assert text["median_busbw_gbps"].tolist() == [fmt.gbps(v) for v in values["median_busbw_gbps"]]
    axis = figures(at)[0]["layout"]["yaxis"]
    assert axis["tickformat"] == ",.3~r" and axis["exponentformat"] == "none" and axis["title"]["text"] == "busbw (GB/s)"
