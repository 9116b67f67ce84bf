"""Documentation is part of the interface: public names have docstrings, CLI commands have help, examples run."""

import doctest
import inspect
import json
import subprocess
import sys
from pathlib import Path

import tracekit
import tracekit.api
import tracekit.intervals

ROOT = Path(__file__).resolve().parents[1]


def test_every_public_name_has_a_docstring():
    for name in tracekit.__all__:
        obj = getattr(tracekit, name)
        assert inspect.getdoc(obj), name
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                if inspect.isfunction(value) and not member.startswith("_"):
                    assert inspect.getdoc(value), f"{name}.{member}"


def test_every_cli_command_has_help():
    out = subprocess.run([sys.executable, "-m", "tracekit", "--help"], capture_output=True, text=True, check=True).stdout
    commands = ["summarize", "compare"] + [c for c in ("report",) if c in out]
    for command in commands:
        assert command in out
        sub = subprocess.run([sys.executable, "-m", "tracekit", command, "--help"], capture_output=True, text=True)
        assert sub.returncode == 0 and "usage:" in sub.stdout, command


def test_docstring_examples_run(monkeypatch):
    monkeypatch.chdir(ROOT)
    for module in (tracekit.intervals, tracekit.api):
        result = doctest.testmod(module, raise_on_error=False, verbose=False)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_json_and_text_renderings():
    s = tracekit.summarize(ROOT / "sample_traces" / "resnet-gloo-2rank")
    data = json.loads(s.to_json())
    assert set(data) >= {"run", "ranks", "steps", "collectives", "gaps", "stragglers", "findings"}
    assert data["ranks"][0]["rank"] == 0 and len(data["ranks"]) == len(s.ranks)
    assert data["ranks"][0]["span_us"] == s.ranks.iloc[0]["span_us"]
    # NaN is written as null, never as a number.
    nan_cols = [c for c in s.collectives.columns if s.collectives[c].dtype.kind == "f" and s.collectives[c].isna().any()]
    for col in nan_cols:
        i = int(s.collectives[col].isna().to_numpy().argmax())
        assert data["collectives"][i][col] is None
    text = str(s)
    assert "Per rank" in text and "all_reduce" in text


def test_schema_names_every_column():
    from tracekit import schema

    s = tracekit.summarize(ROOT / "sample_traces" / "resnet-gloo-2rank")
    assert list(s.ranks.columns) == list(schema.RANK_COLUMNS)
    assert list(s.steps.columns) == list(schema.STEP_COLUMNS)
    assert list(s.collectives.columns) == list(schema.COLLECTIVE_COLUMNS)
    assert list(s.gaps.columns) == list(schema.GAP_COLUMNS)


def test_schema_names_every_events_column():
    """The classified events table (what the timeline draws) and the comm args table, column for column."""
    from tracekit import reader, schema
    from tracekit.classify import classify

    for path in (ROOT / "sample_traces" / "resnet-gloo-2rank" / "rank-0.pt.trace.json.gz",
                 next((ROOT.parent / "shared" / "traces" / "hta" / "nccl_a100_2rank").glob("*.json.gz"))):
        _, events, comm_args = reader.read_rank(path, default_rank=0)
        assert list(classify(events, comm_args).columns) == list(schema.EVENT_COLUMNS)
        assert list(comm_args.columns) == list(schema.COMM_ARG_COLUMNS)
