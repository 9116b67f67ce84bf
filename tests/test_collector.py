"""Python's cyclic garbage collector around tracekit: paused while tracekit imports and left as the importer had it,
frozen (``gc.freeze``) only in processes tracekit owns: the ``tracekit`` command and a pool's workers."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

from tracekit.cli import main as cli
from tracekit.events.config import Config
from tracekit.rank import engine
from tracekit.rank.engine import EngineOptions, map_ranks

ROOT = Path(__file__).resolve().parents[1]
GLOO_RUN = ROOT / "sample_traces" / "resnet-gloo-2rank"

_IMPORT = """
import gc, sys
{before}
import tracekit
print(gc.isenabled(), gc.get_freeze_count())
"""


def _after_import(before: str) -> str:
    done = subprocess.run([sys.executable, "-c", _IMPORT.format(before=before)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_importing_tracekit_leaves_the_collector_as_it_was_and_freezes_nothing():
    assert _after_import("") == "True 0"
    assert _after_import("gc.disable()") == "False 0"  # a program that runs without the collector keeps it off


def test_the_command_freezes_its_imports_and_a_caller_of_main_keeps_its_collector(monkeypatch):
    frozen = []
    monkeypatch.setattr(cli.gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(sys, "argv", ["tracekit", "--version"])
    try:
        cli.entry()
    except SystemExit as stop:  # --version exits from the parser
        assert stop.code == 0
    assert frozen == [True]
    frozen.clear()
    try:
        cli.main(["--version"])
    except SystemExit:
        pass
    assert frozen == []  # main() called by a program: its collector is its own


def test_each_pool_worker_freezes_what_it_started_with(monkeypatch):
    seen = {}
    real = engine.ProcessPoolExecutor

    def pool(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "ProcessPoolExecutor", pool)
    frozen_here = gc.get_freeze_count()
    results = map_ranks(sorted(GLOO_RUN.glob("rank-*")), Config(), None, EngineOptions(workers=2))
    assert seen["initializer"] is gc.freeze
    assert [r.meta.rank for r in results] == [0, 1]
    assert gc.get_freeze_count() == frozen_here  # the caller's own process: not frozen by the engine
