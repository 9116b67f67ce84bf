"""Suite-wide rules.

- Nothing is cached outside a temporary folder: for the whole run HOME and XDG_CACHE_HOME point into one, so
  tracekit's default cache (``~/.cache/tracekit``) and anything else that writes under the home folder land there;
  hypothesis keeps its example database there too (not in ./.hypothesis).
  Set before collection, so modules that summarize at import time are covered too, and inherited by worker
  processes and the CLI run as a subprocess.
- In CI (the ``CI`` environment variable set, as CI services do) the suite cannot go green by skipping: a missing
  torch, HolisticTraceAnalysis or ``../shared/traces`` stops the run with an error before any test, and a test
  skipped for one of them, or for a missing browser (Debian's chromium and chromedriver, Selenium), fails.
- Parallel runs (pytest-xdist, ``-n``): a test marked ``serial`` (one that times a live job, which a neighbour on
  another core would skew) runs alone: while it runs, no other worker runs a test (``_turn``). Each worker
  picks ports in its own range (``workloads.ports``), so two workers never start servers or rendezvous on one port.
- ``summaries``: one Summary per (run, options) for the whole test run, shared by the workers, for tests that only
  read it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile

try:
    import fcntl
except ImportError:  # not on Windows: there the workers run serial tests beside others
    fcntl = None
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
REQUIREMENT_SKIP = re.compile(r"(?i)(could not import|no module named) '(torch|hta|selenium)\b|shared[/ ]traces|chromium")
LOCK_ENV = "TRACEKIT_TESTS_SERIAL_LOCK"
PORT_RANGE_ENV, PORTS_FROM, PORTS_PER_WORKER = "TRACEKIT_PORT_RANGE", 20000, 200  # workloads.ports reads the range
_ENV = ("HOME", "XDG_CACHE_HOME", "HYPOTHESIS_STORAGE_DIRECTORY", LOCK_ENV, PORT_RANGE_ENV)
_saved: dict[str, str | None] = {}
_home: list[str] = []
_worker: list[str] = []  # this process's xdist worker id, if it is one


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
    _parallel_setup(home, getattr(config, "workerinput", {}).get("workerid"))
    if in_ci():
        missing = missing_requirements()
        if missing:
            raise pytest.UsageError("CI is set, so these are required, not skipped: " + "; ".join(missing))


def _parallel_setup(home: str, worker: str | None) -> None:
    """In the process that starts the workers: a lock file they share. In a worker: its own range of ports.
    (A worker is known by its config, not by PYTEST_XDIST_WORKER, which a pytest a test starts would inherit.)"""
    _worker[:] = [worker] if worker else []
    if worker is None:
        os.environ[LOCK_ENV] = str(Path(home) / "serial.lock")  # the workers inherit it
        return
    # Worker gwN: 200 ports from 20000 + 200 N, below the kernel's ephemeral range (32768 and up on Linux).
    low = PORTS_FROM + PORTS_PER_WORKER * (int(re.sub(r"\D", "", worker) or 0) % 60)
    os.environ[PORT_RANGE_ENV] = f"{low}-{low + PORTS_PER_WORKER - 1}"


@contextlib.contextmanager
def _turn(alone: bool):
    """A test's turn under pytest-xdist: shared with the other workers' tests, or, for a ``serial`` test, alone.
    A readers-writer lock on two files (flock): every test passes a turnstile first; a serial test holds the
    turnstile while it waits for the others to finish and while it runs, so no test starts meanwhile and a stream
    of short tests cannot keep it waiting. Outside a worker (one process), nothing to share."""
    lock_path = os.environ.get(LOCK_ENV)
    if not _worker or not lock_path or fcntl is None:
        yield
        return
    with open(lock_path + ".turnstile", "a") as turnstile, open(lock_path, "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


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
    _show_failed_command(outcome.get_result(), call)


def _show_failed_command(report, call) -> None:
    """A test or fixture whose subprocess (a workload, the CLI) failed with ``check=True``: its captured output's
    end goes in the report, since CalledProcessError's message holds only the command and its exit status."""
    error = call.excinfo.value if call.excinfo is not None else None
    if not isinstance(error, subprocess.CalledProcessError):
        return
    for name, stream in (("stdout", error.stdout), ("stderr", error.stderr)):
        if stream:
            text = stream.decode(errors="replace") if isinstance(stream, bytes) else str(stream)
            report.sections.append((f"failed command's {name} (last 4000 characters)", text[-4000:]))


def pytest_collection_modifyitems(items):
    """A module that names a parameter in ``GROUPED_BY`` runs its tests grouped by that parameter's value (in order
    of first appearance; tests without it first, as collected): the viewer's in-memory caches hold fewer runs than
    the sample set, so walking every run once per test would read each run again in every test."""
    by_module: dict = {}
    for position, item in enumerate(items):
        key = getattr(item.module, "GROUPED_BY", None) if hasattr(item, "module") else None
        if key is not None:
            by_module.setdefault(item.module, []).append(position)
    for module, positions in by_module.items():
        key = module.GROUPED_BY
        mine = [items[p] for p in positions]
        first: dict = {}
        for item in mine:
            value = getattr(item, "callspec", None) and item.callspec.params.get(key)
            first.setdefault(value, len(first))
        ordered = sorted(mine, key=lambda item: first[getattr(item, "callspec", None)
                                                      and item.callspec.params.get(key)])
        for p, item in zip(positions, ordered):
            items[p] = item


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_requirement_skip(outcome.get_result(), "a module")


@pytest.fixture(autouse=True)
def _cache_stays_in_the_temporary_home():
    """Every test runs with HOME (and so tracekit's default cache) inside the run's temporary folder."""
    assert os.environ["HOME"] == _home[-1], "a test or fixture changed HOME; the default cache would leave tmp"
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    with _turn(alone=item.get_closest_marker("serial") is not None):
        yield


# summarize's options that choose how a run is analysed, not what is found (tests/test_engine.py and
# tests/test_cache.py check that each gives the same Summary): one shared Summary serves them all.
HOW_OPTIONS = ("cache", "cache_dir", "workers", "engine")


@pytest.fixture(scope="session")
def summaries():
    """``summaries(path, **options)``: ``tracekit.summarize(path, **options)``, computed once per test run for each
    (path, options that decide the result), for tests that read the same run. A Summary cannot be changed (frozen,
    and each table read is a copy), so sharing it cannot let one test change what another sees.

    It is computed serially, every rank in the asking process (``workers=1, cache=False``): the reference that
    tests/test_engine.py holds the process pool, Dask and the cache to.
    Under pytest-xdist the workers share it too: the first worker to ask computes it and leaves
    a pickle in the run's temporary folder, under a lock, and the others load that pickle; each gets the Summary
    with its event tables off the heap, in a temporary folder of its own (``offheap.kept``), as
    ``summarize(..., cache=False)`` gives it."""
    import inspect

    import tracekit

    defaults = {name: p.default for name, p in inspect.signature(tracekit.summarize).parameters.items()
                if p.default is not inspect.Parameter.empty}
    shared = Path(os.environ[LOCK_ENV]).parent / "summaries" if _worker and os.environ.get(LOCK_ENV) else None
    memo = {}

    def get(path, **options):
        unshared = sorted(set(options) & {"client", "progress"})
        if unshared:  # a shared Summary cannot report progress or run on a given cluster
            raise TypeError(f"summaries() does not take {', '.join(unshared)}: call tracekit.summarize")
        # Options at their default count as given: summaries(run) and summaries(run, window="drop_last") are one.
        what = {k: v for k, v in sorted({**defaults, **options}.items()) if k not in HOW_OPTIONS}
        key = (str(Path(path).resolve()), tuple(what.items()))
        if key not in memo:
            # The resolved path: the Summary's source and files read the same whichever test asked first.
            memo[key] = _shared_summary(shared, key, lambda: tracekit.summarize(key[0], cache=False, workers=1, **what),
                                        off_heap=not what.get("_tables_in_memory"))
        return memo[key]

    return get


def _shared_summary(folder: Path | None, key: tuple, compute, off_heap: bool = True):
    """``compute()``'s Summary, or where another worker of this run computed it for ``key``, its pickle (its event
    tables then off the heap unless ``off_heap`` is False: the tables-in-memory reference)."""
    if folder is None or fcntl is None:
        return compute()
    import hashlib
    import pickle

    from tracekit.summary import offheap

    folder.mkdir(exist_ok=True)
    name = hashlib.sha256(repr(key).encode()).hexdigest()[:32]
    with open(folder / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker computes; the others wait for its pickle
        done = folder / f"{name}.pickle"
        if done.is_file():
            loaded = pickle.loads(done.read_bytes())
            return offheap.kept(loaded) if off_heap else loaded
        summary = compute()
        part = folder / f"{name}.part"
        part.write_bytes(pickle.dumps(summary, protocol=pickle.HIGHEST_PROTOCOL))
        part.rename(done)
        return summary
