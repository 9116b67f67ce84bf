"""Documentation is part of the interface: public names have docstrings, CLI commands have help, examples run."""

import argparse
import doctest
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
import tracekit.api
import tracekit.fmt
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


def _commands(parser: argparse.ArgumentParser, path=()):
    """Every (sub)command of the parser, as its argument path: ("summarize",), ("cache", "info"), ..."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name)
                yield from _commands(sub, (*path, name))


def test_every_cli_command_has_help(capsys):
    """``python -m tracekit --help`` (its own process) lists every command; each command's ``--help`` (the CLI's
    entry point in this process) prints its usage and exits 0."""
    from tracekit.cli.main import build_parser, main

    out = subprocess.run([sys.executable, "-m", "tracekit", "--help"], capture_output=True, text=True, check=True).stdout
    commands = list(_commands(build_parser()))
    assert {("summarize",), ("compare",), ("report",), ("cache", "info"), ("cache", "clear")} <= set(commands)
    for command in commands:
        if len(command) == 1:
            assert command[0] in out
        with pytest.raises(SystemExit) as done:
            main([*command, "--help"])
        assert done.value.code == 0 and "usage:" in capsys.readouterr().out, command


def test_readme_main_job_installs_only_what_it_needs_and_ends_with_the_viewer_command():
    readme = (ROOT / "README.md").read_text()
    main_job = next(line for line in readme.splitlines() if "workloads.resnet --profile --out" in line)
    assert ".venv/bin/pip install -e '.[workloads,app]' &&" in main_job
    out = re.search(r"--out (\S+)", main_job).group(1)
    # Its last step prints exactly the command that opens the viewer on the run it made.
    assert main_job.endswith(f'&& echo ".venv/bin/streamlit run app/main.py -- {out}"')
    assert f"streamlit run app/main.py -- {out}" in (ROOT / "docs" / "viewer.md").read_text()


def test_step_times_is_the_rank_by_step_table(tmp_path):
    from tracedata import kernel, step, write_trace

    for rank, lengths in ((0, (100, 200, 300)), (1, (150, 250, 50))):
        starts = [0, lengths[0], lengths[0] + lengths[1]]
        events = [step(i + 1, t, d) for i, (t, d) in enumerate(zip(starts, lengths))]
        write_trace(tmp_path / f"rank{rank}.json", events + [kernel("gemm", 0, 10)], rank=rank)
    table = tracekit.summarize(tmp_path, workers=1, cache=False).step_times()
    # Steps run to the next step's start; the last one to its annotation's end.
    assert table.index.tolist() == [0, 1] and table.columns.tolist() == [1, 2, 3]
    assert table.to_numpy().tolist() == [[100, 200, 300], [150, 250, 50]]


def test_docstring_examples_run(monkeypatch):
    monkeypatch.chdir(ROOT)
    for module in (tracekit.intervals, tracekit.api, tracekit.fmt):
        result = doctest.testmod(module, raise_on_error=False, verbose=False)
        assert result.failed == 0 and result.attempted > 0, module.__name__


def test_json_and_text_renderings(summaries):
    s = summaries(ROOT / "sample_traces" / "resnet-gloo-2rank", cache=False)
    data = json.loads(s.to_json())
    assert set(data) >= {"run", "ranks", "steps", "collectives", "stragglers", "findings"}
    assert data["ranks"][0]["rank"] == 0 and len(data["ranks"]) == len(s.ranks)
    assert data["ranks"][0]["span_us"] == s.ranks.iloc[0]["span_us"]
    # NaN is written as null, never as a number.
    nan_cols = [c for c in s.collectives.columns if s.collectives[c].dtype.kind == "f" and s.collectives[c].isna().any()]
    for col in nan_cols:
        i = int(s.collectives[col].isna().to_numpy().argmax())
        assert data["collectives"][i][col] is None
    text = str(s)
    assert "Per rank" in text and "all_reduce" in text


def test_schema_names_every_column(summaries):
    from tracekit import schema

    s = summaries(ROOT / "sample_traces" / "resnet-gloo-2rank", cache=False)
    assert list(s.ranks.columns) == list(schema.RANK_COLUMNS)
    assert list(s.steps.columns) == list(schema.STEP_COLUMNS)
    assert list(s.collectives.columns) == list(schema.COLLECTIVE_COLUMNS)
    assert list(s.gaps.columns) == list(schema.GAP_COLUMNS)


def test_schema_names_every_events_column():
    """The classified events table (what the timeline draws) and the comm args table, column for column."""
    from tracekit import schema
    from tracekit.read import reader
    from tracekit.events.classify import classify

    for path in (ROOT / "sample_traces" / "resnet-gloo-2rank" / "rank-0.pt.trace.json.gz",
                 next((ROOT.parent / "shared" / "traces" / "hta" / "nccl_a100_2rank").glob("*.json.gz"))):
        _, events, comm_args = reader.read_rank(path, default_rank=0)
        assert list(classify(events, comm_args).columns) == list(schema.EVENT_COLUMNS)
        assert list(comm_args.columns) == list(schema.COMM_ARG_COLUMNS)


def test_readme_layout_tree_matches_the_folders():
    """The contributing page's layout tree names every stage folder with its number (from its ``__init__`` docstring) in
    data-flow order, and every module at the package's root."""
    from test_layers import FRONT_DOOR, stages

    block = re.search(r"<!-- layout -->\s*```text\ntracekit/\n(.*?)```\s*<!-- /layout -->",
                      (ROOT / "docs" / "contributing.md").read_text(), re.S)
    assert block, "docs/contributing.md has no <!-- layout --> tree"
    lines = block.group(1).splitlines()
    folders = [(m.group(1), int(m.group(2))) for line in lines if (m := re.match(r"\s+(\w+)/\s+(\d+)\s+\S", line))]
    stage_of = stages(ROOT / "tracekit")
    assert folders == sorted(stage_of.items(), key=lambda kv: kv[1]), "the tree's folders, in stage order"
    root_listed = [w.removesuffix(".py") for line in lines if not re.match(r"\s+\w+/", line)
                   for w in line.split() if w.endswith(".py")]
    assert sorted(root_listed) == sorted(p.stem for p in (ROOT / "tracekit").glob("*.py"))
    front = next(line for line in lines if "front door:" in line)
    assert {w.removesuffix(".py") for w in front.split() if w.endswith(".py")} == FRONT_DOOR


def test_every_tracekit_command_in_the_readme_exists_with_its_flags():
    """Each ``tracekit ...`` line of the README's and the docs' shell blocks parses: its subcommand and every flag it passes exist
    (argparse would exit 2 on any other), so a pasted command never fails on its spelling."""
    from tracekit.cli.main import build_parser

    readme = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    lines = [line.split("#")[0].strip() for block in re.findall(r"```bash\n(.*?)```", readme, re.S)
             for line in block.splitlines()]
    commands = [line.split()[1:] for line in lines if line.startswith(("tracekit ", ".venv/bin/tracekit "))]
    assert len(commands) >= 10
    for argv in commands:
        try:
            build_parser().parse_args([a for a in argv if a != "\\"])
        except SystemExit as exit_:
            assert exit_.code == 0, f"README command does not parse: tracekit {' '.join(argv)}"


def test_readme_fits_two_screens_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150 and len(readme.encode()) <= 12_000
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert len(links) >= 10
    for link in links:
        if not link.startswith(("http://", "https://")):
            assert (ROOT / link).exists(), link
    # No measurement diary and no history: the project's text speaks of the project.
    assert not re.search(r"(?i)\bsession\b|measured again|before the fix", readme)
