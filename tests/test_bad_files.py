"""Files that are not readable traces in a folder of ranks: skipped and listed with their reason (and rank where the
name gives it), said in the report's header and data-quality notes; ``strict`` / ``--strict`` fails on them instead."""

import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tracekit.cli.main import main as cli_main
from tracedata import kernel, step, write_trace

WORLD = 5  # ranks 0-3 are good; rank 4's file is truncated


def _good_ranks(folder: Path) -> None:
    for rank in range(4):
        write_trace(folder / f"rank{rank}.json.gz", [step(1, 0, 100), kernel("gemm", 10, 50)], rank=rank,
                    world_size=WORLD)


def _empty(folder):
    (folder / "empty.json").write_bytes(b"")
    return "empty.json", tracekit.EmptyTraceError, "empty file", None


def _notes(folder):
    (folder / "notes.json").write_text("Run notes: rank 4 died at step 3.\n")
    return "notes.json", tracekit.NotJSONError, "not valid JSON", None


def _no_events_no_rank(folder):
    (folder / "events.json").write_text('{"traceEvents": []}')
    return "events.json", tracekit.RankUnknownError, "no rank in distributedInfo or the file name", None


def _truncated_gzip(folder):
    path = write_trace(folder / "rank4.json.gz", [step(1, 0, 100)] + [kernel("gemm", 10, 50)] * 200, rank=4,
                       world_size=WORLD)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return "rank4.json.gz", tracekit.TruncatedTraceError, "truncated or corrupt gzip", 4


BAD = [_empty, _notes, _no_events_no_rank, _truncated_gzip]
IDS = [b.__name__.strip("_") for b in BAD]


def _folder(tmp_path, bad):
    folder = tmp_path / "run"
    _good_ranks(folder)
    return folder, [make(folder) for make in bad]


def test_each_bad_file_is_skipped_and_listed_with_its_reason(tmp_path):
    folder, bad = _folder(tmp_path, BAD)
    s = tracekit.summarize(folder, cache=False)
    assert s.ranks["rank"].tolist() == [0, 1, 2, 3] and s.run.ranks_read == 4
    skipped = {Path(f.path).name: f for f in s.run.skipped}
    assert sorted(skipped) == sorted(name for name, *_ in bad)
    for name, _, reason, rank in bad:
        assert reason in skipped[name].reason and skipped[name].rank == rank, skipped[name]
    report = str(s).splitlines()
    # 4 good files read of the 5 ranks distributedInfo names; the 4 skipped files follow, each on its line.
    assert report[1] == f"  ranks read 4 of world size {WORLD}, backend nccl, devices: gpu"
    for name, _, reason, rank in bad:
        shown = f"  skipped {folder / name}" + ("" if rank is None else f" (rank {rank})") + ": "
        assert any(line.startswith(shown) and reason in line for line in report), shown
    quality = report[report.index("Data quality (what the numbers above rest on)"):]
    assert any(line.startswith(f"  ranks read 4 of world size {WORLD}: 4 file(s) skipped") for line in quality)
    assert s.to_dict()["run"]["skipped"][-1]["rank"] == 4  # rank4.json.gz sorts last


@pytest.mark.parametrize("make", BAD, ids=IDS)
def test_strict_raises_the_named_error(tmp_path, make):
    folder, [(name, error, reason, rank)] = _folder(tmp_path, [make])
    assert len(tracekit.summarize(folder, cache=False).run.skipped) == 1
    with pytest.raises(error, match=reason) as info:
        tracekit.summarize(folder, cache=False, strict=True)
    assert Path(info.value.path).name == name


@pytest.mark.parametrize("make", BAD, ids=IDS)
def test_cli(tmp_path, make, capsys):
    """The CLI's entry point in this process (``test_a_folder_without_one_readable_trace_is_a_named_error`` runs it
    as its own process): the bad file is skipped; with ``--strict`` it is one named error, exit status 2 (not 3,
    an internal error)."""
    folder, [(name, _, reason, _)] = _folder(tmp_path, [make])
    argv = ["summarize", "--no-cache", str(folder)]
    assert cli_main(argv) == 0, capsys.readouterr().err
    assert f"  ranks read 4 of world size {WORLD}, backend nccl, devices: gpu" in capsys.readouterr().out.splitlines()
    status = cli_main(argv + ["--strict"])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2 and out == "" and "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("tracekit: error: ") and name in lines[0] and reason in lines[0]


def test_a_folder_without_one_readable_trace_is_a_named_error(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    for make in BAD:
        make(folder)
    with pytest.raises(tracekit.NoTracesError, match="no trace files; skipped: ") as info:
        tracekit.summarize(folder, cache=False)
    assert all(name in str(info.value) for name in ("empty.json", "notes.json", "events.json", "rank4.json.gz"))
    done = subprocess.run([sys.executable, "-m", "tracekit", "summarize", "--no-cache", str(folder)],
                          capture_output=True, text=True)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr and "no trace files" in lines[0]


@pytest.mark.parametrize("make", BAD, ids=IDS)
def test_a_bad_file_given_alone_stays_an_error(tmp_path, make):
    name, error, reason, _ = make(tmp_path)
    if make is _no_events_no_rank:  # alone, a file is rank 0: then it is the empty trace it is
        error, reason = tracekit.EmptyTraceError, "an empty trace"
    with pytest.raises(error, match=reason) as info:
        tracekit.summarize(tmp_path / name, cache=False)
    assert Path(info.value.path).name == name


def test_a_whitespace_only_file_is_empty_not_truncated(tmp_path):
    (tmp_path / "rank0.json").write_bytes(b"  \n")
    with pytest.raises(tracekit.EmptyTraceError, match="empty file"):
        tracekit.summarize(tmp_path / "rank0.json", cache=False)


def test_a_folder_of_runs_lists_them(tmp_path):
    for name in ("run-b", "run-a"):
        write_trace(tmp_path / name / "rank0.json", [step(1, 0, 100), kernel("gemm", 10, 50)], rank=0)
    (tmp_path / "notes").mkdir()  # a folder without traces is not a run
    with pytest.raises(tracekit.NoTracesError, match=r"holds runs, not traces: run-a, run-b \(summarize one"):
        tracekit.summarize(tmp_path, cache=False)
