"""A workload's command line run in this process: its exit code, stdout and stderr, without a new interpreter.

Each `python -m workloads.X` pays torch's import (about 2 s); the flag checks need none of a new process, so the tests
of refused flags call the workload's `main(argv)` here. Each workload's `--help` test still starts a real process:
it shows that the module runs under `-m` and that importing it prints nothing, which a module already imported here
cannot show. Starting ranks here would be a bug in the checks, so the launch raises instead.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import subprocess
import warnings

import pytest

# What a plain interpreter does not print (Python's default warning filters, outside __main__).
_SILENT_BY_DEFAULT = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


class LaunchedError(AssertionError):
    """The command line got past its checks and would have started the job."""


def run_main(name: str, *flags: str) -> subprocess.CompletedProcess:
    """`python -m workloads.<name> *flags` as a CompletedProcess, run by the module's `main` in this process.

    A warning raised meanwhile is written to the captured stderr as a plain interpreter would print it (pytest would
    otherwise collect it, and a refused flag's "one line" would look clean)."""
    module = importlib.import_module(f"workloads.{name}")
    common = importlib.import_module("workloads.common")
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mp.setattr(common, "_launch", _refuse_launch)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                module.main(list(flags))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    shown = [w for w in caught if not issubclass(w.category, _SILENT_BY_DEFAULT)]
    printed = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line) for w in shown)
    return subprocess.CompletedProcess(["workloads." + name, *flags], code, out.getvalue(), printed + err.getvalue())


def _refuse_launch(*_args, **_kwargs):
    raise LaunchedError("the flags passed every check and the job would have started")
