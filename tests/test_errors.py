"""Bad input: a named exception in the library, one line and a non-zero exit from the CLI, never a traceback."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tracedata import kernel, write_trace


def _truncated_gzip(tmp_path):
    path = write_trace(tmp_path / "rank0.json.gz", [kernel("gemm", 0, 10)] * 50)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _gzip_with_trailing_bytes(tmp_path):
    path = write_trace(tmp_path / "rank0.json.gz", [kernel("gemm", 0, 10)] * 50)
    path.write_bytes(path.read_bytes() + b"garbage!")
    return path


def _not_json(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text('{"traceEvents": [ {"ph": "X", ')
    return path


def _not_a_trace(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"model": "resnet18", "steps": 3}))
    return path


def _empty_trace(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text('{"traceEvents": []}')
    return path


def _empty_array(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text("[]")
    return path


def _empty_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    return tmp_path / "empty"


def _duplicate_ranks(tmp_path):
    write_trace(tmp_path / "a.json", [kernel("gemm", 0, 10)], rank=1, gz=False)
    write_trace(tmp_path / "b.json.gz", [kernel("gemm", 0, 10)], rank=1)
    return tmp_path


CASES = [
    (_truncated_gzip, tracekit.TruncatedTraceError, "truncated"),
    (_gzip_with_trailing_bytes, tracekit.TruncatedTraceError, "Not a gzipped file"),
    (_not_json, tracekit.NotJSONError, "not valid JSON"),
    (_not_a_trace, tracekit.NotATraceError, "not a profiler trace"),
    (_empty_trace, tracekit.EmptyTraceError, "an empty trace"),
    (_empty_array, tracekit.EmptyTraceError, "an empty trace"),
    (_empty_folder, tracekit.NoTracesError, "no trace files"),
    (_duplicate_ranks, tracekit.DuplicateRankError, "rank 1 appears in two files"),
]


@pytest.mark.parametrize("make, error, words", CASES, ids=[c[0].__name__.strip("_") for c in CASES])
def test_library_raises_named_error(tmp_path, make, error, words):
    path = make(tmp_path)
    with pytest.raises(error, match=words) as info:
        tracekit.summarize(path)
    assert isinstance(info.value, tracekit.TracekitError)


@pytest.mark.parametrize("make, error, words", CASES, ids=[c[0].__name__.strip("_") for c in CASES])
def test_cli_prints_one_line(tmp_path, make, error, words):
    path = make(tmp_path)
    done = subprocess.run([sys.executable, "-m", "tracekit", "summarize", str(path)], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert words in lines[0]
    if error is not tracekit.NoTracesError:
        assert "rank0.json" in lines[0] or "a.json" in lines[0]


def test_broken_file_in_folder_is_skipped_and_named_or_raised_when_strict(tmp_path):
    write_trace(tmp_path / "rank0.json.gz", [kernel("gemm", 0, 10)], rank=0)
    (tmp_path / "rank1.json").write_text("{ not json")
    skipped = tracekit.summarize(tmp_path, cache=False).run.skipped
    assert [(Path(f.path).name, f.rank) for f in skipped] == [("rank1.json", 1)]
    with pytest.raises(tracekit.NotJSONError, match="rank1.json"):
        tracekit.summarize(tmp_path, strict=True)


def test_cli_help_for_every_command():
    for args in (["--help"], ["summarize", "--help"]):
        done = subprocess.run([sys.executable, "-m", "tracekit", *args], capture_output=True, text=True)
        assert done.returncode == 0 and "usage:" in done.stdout
