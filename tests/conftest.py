"""Suite-wide rules.

- Nothing is cached outside a temporary folder: for the whole run HOME and XDG_CACHE_HOME point into one, so
  tracekit's default cache (``~/.cache/tracekit``) and anything else that writes under the home folder land there;
  hypothesis keeps its example database there too (not in ./.hypothesis).
  Set before collection, so modules that summarize at import time are covered too, and inherited by worker
  processes and the CLI run as a subprocess.
- In CI (the ``CI`` environment variable set, as CI services do) the suite cannot go green by skipping: a missing
  torch, HolisticTraceAnalysis or ``../shared/traces`` stops the run with an error before any test, and a test
  skipped for one of them fails.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

SHARED_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
# What the suite needs in CI.
REQUIRED = {
    "torch": lambda: importlib.util.find_spec("torch") is not None,
    "HolisticTraceAnalysis (hta)": lambda: importlib.util.find_spec("hta") is not None,
    f"the shared traces ({SHARED_TRACES})": lambda: (SHARED_TRACES / "hta").is_dir(),
}
# A skip reason that names one of them: pytest.importorskip's, or any that mentions the shared traces.
REQUIREMENT_SKIP = re.compile(r"(?i)(could not import|no module named) '(torch|hta)\b|shared[/ ]traces")
_ENV = ("HOME", "XDG_CACHE_HOME", "HYPOTHESIS_STORAGE_DIRECTORY")
_saved: dict[str, str | None] = {}
_home: list[str] = []


def in_ci() -> bool:
    """CI services set CI (to "true", "1", ...); an empty or "0"/"false" value means not CI."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing_requirements() -> list[str]:
    """The requirements of REQUIRED that this machine lacks."""
    return [name for name, present in REQUIRED.items() if not present()]


def pytest_configure(config):
    home = tempfile.mkdtemp(prefix="tracekit-tests-home-")
    _home.append(home)
    for name in _ENV:
        _saved[name] = os.environ.get(name)
    os.environ["HOME"] = home
    os.environ["XDG_CACHE_HOME"] = str(Path(home) / ".cache")
    # hypothesis keeps its example database and caches in ./.hypothesis unless told otherwise.
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(Path(home) / ".hypothesis")
    try:
        from hypothesis.configuration import set_hypothesis_home_dir
    except ImportError:
        pass
    else:
        set_hypothesis_home_dir(Path(home) / ".hypothesis")
    if in_ci():
        missing = missing_requirements()
        if missing:
            raise pytest.UsageError("CI is set, so these are required, not skipped: " + "; ".join(missing))


def pytest_unconfigure(config):
    for name, value in _saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    for home in _home:
        shutil.rmtree(home, ignore_errors=True)


def _requirement_skip(reason: str) -> bool:
    return REQUIREMENT_SKIP.search(reason) is not None


def _fail_requirement_skip(report, what: str) -> None:
    """In CI, turn a skip for a missing requirement into a failure that says so."""
    if in_ci() and report.skipped and _requirement_skip(str(report.longrepr)):
        report.outcome = "failed"
        report.longrepr = f"CI is set: skipping {what} for a missing requirement is an error ({report.longrepr})"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_requirement_skip(outcome.get_result(), "a test")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_requirement_skip(outcome.get_result(), "a module")


@pytest.fixture(autouse=True)
def _cache_stays_in_the_temporary_home():
    """Every test runs with HOME (and so tracekit's default cache) inside the run's temporary folder."""
    assert os.environ["HOME"] == _home[-1], "a test or fixture changed HOME; the default cache would leave tmp"
    yield
