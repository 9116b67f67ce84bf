"""A workload's command line run in this process: its exit code, stdout and stderr, without a new interpreter.

Each `python -m workloads.X` pays torch's import (about 2 s); the flag checks need none of a new process, so the tests
of refused flags call the workload's `main(argv)` here. One `--help` per suite still starts a real process.
Starting ranks here would be a bug in the checks, so the launch raises instead. pytest collects the warnings that a
real process would print; the real `--help` processes check that importing a workload prints nothing on stderr.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import subprocess

import pytest


class LaunchedError(AssertionError):
    """The command line got past its checks and would have started the job."""


def run_main(name: str, *flags: str) -> subprocess.CompletedProcess:
    """`python -m workloads.<name> *flags` as a CompletedProcess, run by the module's `main` in this process."""
    module = importlib.import_module(f"workloads.{name}")
    common = importlib.import_module("workloads.common")
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(common, "_launch", _refuse_launch)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                module.main(list(flags))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return subprocess.CompletedProcess(["workloads." + name, *flags], code, out.getvalue(), err.getvalue())


def _refuse_launch(*_args, **_kwargs):
    raise LaunchedError("the flags passed every check and the job would have started")
