"""The suite's own rules (tests/conftest.py): with CI set a missing requirement is an error, not a skip; the cache
stays in a temporary folder; .ci/run lists skips and runs the README's test command."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tracekit.rank import cache

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

MINI_SUITE = '''
import sys

import pytest

sys.modules["torch"] = None  # torch missing, as this suite sees it, without paying for its import

def test_needs_a_torch_module():
    pytest.importorskip("torch")

def test_skipped_for_another_reason():
    pytest.skip("needs a GPU")

def test_runs():
    assert True
'''


def inner_env() -> dict[str, str]:
    """The environment of a pytest run inside this one: no CI or PYTEST_ADDOPTS of ours, and no plugin loaded unless
    named with -p (the conftest's rules need none; loading hypothesis, xdist and anyio costs a second a run)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    return {**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _mini_run(tmp_path, ci: str | None, shared: bool):
    """A copy of the conftest in <tmp>/repo/tests, beside <tmp>/shared/traces/hta (a link to the real one) or not."""
    tests = tmp_path / "repo" / "tests"
    tests.mkdir(parents=True)
    shutil.copy(TESTS / "conftest.py", tests / "conftest.py")
    (tests / "test_mini.py").write_text(MINI_SUITE)
    if shared:
        (tmp_path / "shared" / "traces").mkdir(parents=True)
        (tmp_path / "shared" / "traces" / "hta").symlink_to(TESTS.parents[1] / "shared" / "traces" / "hta")
    env = inner_env()
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tests)],
                          cwd=tmp_path / "repo", env=env, capture_output=True, text=True, timeout=120)


def test_outside_ci_a_missing_module_is_a_skip(tmp_path):
    out = _mini_run(tmp_path, ci=None, shared=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed, 2 skipped" in out.stdout
    assert "needs a GPU" in out.stdout and "could not import 'torch'" in out.stdout  # -rs: each reason


def test_in_ci_a_skip_for_a_missing_requirement_fails(tmp_path):
    out = _mini_run(tmp_path, ci="true", shared=True)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 failed, 1 passed, 1 skipped" in out.stdout  # the GPU skip stays a skip
    assert "CI is set" in out.stdout


def test_ci_false_is_not_ci(tmp_path):
    assert _mini_run(tmp_path, ci="false", shared=True).returncode == 0


def test_in_ci_missing_shared_traces_stop_the_run(tmp_path):
    out = _mini_run(tmp_path, ci="1", shared=False)
    assert out.returncode == 4, out.stdout + out.stderr  # pytest's usage error: nothing ran
    assert "shared traces" in out.stderr and "required, not skipped" in out.stderr


def test_the_default_cache_is_in_the_runs_temporary_home(tmp_path):
    home = Path(os.environ["HOME"])
    assert home.name.startswith("tracekit-tests-home-") and home.parent == Path(os.environ.get("TMPDIR", "/tmp"))
    assert cache.resolve_dir(None).is_relative_to(home)
    # A default-cached summary writes there (and nowhere else in the home folder).
    before = {p for p in home.rglob("*") if p.is_file()}
    run = shutil.copytree(REPO / "sample_traces" / "resnet-gloo-2rank", tmp_path / "run")  # a new cache key
    tracekit.summarize(run, workers=1)
    written = {p for p in home.rglob("*") if p.is_file()} - before
    assert written and all(p.is_relative_to(cache.resolve_dir(None)) for p in written)


def test_ci_script_lists_skips_and_runs_the_readme_command():
    script = (REPO / ".ci" / "run").read_text()
    readme = (REPO / "README.md").read_text()
    command = re.search(r"```bash\n(python3 -m venv .venv && .venv/bin/pip install -e '\.\[all\]' && "
                        r"\.venv/bin/python -m pytest[^\n]*)\n```", readme).group(1)
    assert script.rstrip().splitlines()[-1] == command
    assert 'PYTEST_ADDOPTS="-rs' in script and 'CI="${CI:-true}"' in script


BROWSER_SUITE = '''
import pytest

@pytest.mark.skipif(True, reason="needs Debian's chromium and chromium-driver")
def test_in_a_browser():
    pass

def test_needs_selenium():
    pytest.importorskip("selenium.no_such_module_here")
'''


def test_in_ci_a_skip_for_a_missing_browser_fails(tmp_path):
    """Issue 35 item 7: the browser tests cannot go green by skipping under CI; outside CI they are skips."""
    tests = tmp_path / "repo" / "tests"
    tests.mkdir(parents=True)
    shutil.copy(TESTS / "conftest.py", tests / "conftest.py")
    (tests / "test_browser_mini.py").write_text(BROWSER_SUITE)
    (tmp_path / "shared" / "traces").mkdir(parents=True)
    (tmp_path / "shared" / "traces" / "hta").symlink_to(TESTS.parents[1] / "shared" / "traces" / "hta")
    env = inner_env()
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tests)]
    ci = subprocess.run(command, cwd=tmp_path / "repo", env={**env, "CI": "true"}, capture_output=True, text=True,
                        timeout=120)
    # A skip in setup (skipif) is reported as an error, one in the test's body as a failure: both fail the run.
    assert ci.returncode == 1 and "1 failed, 1 error" in ci.stdout, ci.stdout + ci.stderr
    assert ci.stdout.count("CI is set: skipping a test for a missing requirement") == 2, ci.stdout
    local = subprocess.run(command, cwd=tmp_path / "repo", env=env, capture_output=True, text=True, timeout=120)
    assert local.returncode == 0 and "2 skipped" in local.stdout, local.stdout + local.stderr


PARALLEL_SUITE = '''
import json
import os
import time

import pytest

from pathlib import Path

LOG = Path(os.environ["MINI_LOG"])


def _record(name, seconds):
    start = time.monotonic()
    time.sleep(seconds)
    with open(LOG, "a") as f:
        f.write(f"{name} {start} {time.monotonic()} {os.environ.get('TRACEKIT_PORT_RANGE', '')}\\n")


@pytest.mark.parametrize("i", range(12))
def test_short(i):
    _record(f"short{i}", 0.15)


@pytest.mark.serial
@pytest.mark.parametrize("i", range(2))
def test_timed_alone(i):
    _record(f"serial{i}", 0.8)
'''


def test_under_xdist_a_serial_test_runs_alone_and_workers_have_their_own_ports(tmp_path):
    """Two workers: no test's interval overlaps a serial test's, and each worker has its own port range."""
    tests = tmp_path / "repo" / "tests"
    tests.mkdir(parents=True)
    shutil.copy(TESTS / "conftest.py", tests / "conftest.py")
    (tests / "test_parallel_mini.py").write_text(PARALLEL_SUITE)
    (tmp_path / "repo" / "pytest.ini").write_text("[pytest]\nmarkers =\n    serial: alone\n")
    log = tmp_path / "log.txt"
    env = inner_env()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist.plugin", "-n", "2",
               str(tests)]
    done = subprocess.run(command, cwd=tmp_path / "repo", env={**env, "MINI_LOG": str(log)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "14 passed" in done.stdout, done.stdout + done.stderr
    rows = [line.split() for line in log.read_text().splitlines()]
    spans = {name: (float(a), float(b)) for name, a, b, _ in rows}
    for name in ("serial0", "serial1"):
        a, b = spans[name]
        overlapping = [other for other, (c, d) in spans.items() if other != name and c < b and a < d]
        assert not overlapping, (name, overlapping)
    ranges = {r for *_, r in rows}
    assert len(ranges) == 2 and all(re.fullmatch(r"\d+-\d+", r) for r in ranges), ranges
    (a_lo, a_hi), (b_lo, b_hi) = sorted(tuple(map(int, r.split("-"))) for r in ranges)
    assert a_hi < b_lo and b_hi < 32768  # disjoint, and below the kernel's ephemeral ports


def test_summaries_share_one_summary_per_run_and_options(summaries):
    run = REPO / "sample_traces" / "resnet-gloo-2rank"
    s = summaries(run, workers=1, cache=False)
    # Options at their default are the same key; a relative path to the same folder too.
    assert summaries(run, window="drop_last", cache=False, workers=1) is s
    assert summaries(os.path.relpath(run), workers=1, cache=False) is s
    other = summaries(run, window="all_steps", workers=1, cache=False)
    assert other is not s and other.run.window != s.run.window
    # What is shared cannot be changed by a test that reads it: each read of a table is a copy.
    ranks = s.ranks
    ranks.loc[0, "span_us"] = -1.0
    assert (s.ranks["span_us"] > 0).all()
    assert golden_form(s, run) == golden_form(tracekit.summarize(run, workers=1, cache=False), run)
    # Options that choose only how the run is analysed share it too; a shared Summary reports no progress.
    assert summaries(run) is s and summaries(run, workers=2, cache=True) is s
    with pytest.raises(TypeError, match="progress"):
        summaries(run, progress=lambda done, total: None)
    # Whoever asks first, the Summary names the run by its resolved path.
    assert summaries(os.path.relpath(run), window="all_steps").run.source == str(run.resolve())


def test_a_summary_computed_by_one_worker_is_loaded_by_another(tmp_path):
    from conftest import _shared_summary
    from tracekit.summary import offheap
    from tracekit.summary.model import EVENT_TABLES

    run = REPO / "sample_traces" / "resnet-gloo-2rank"
    computed = []

    def compute(window="drop_last"):
        computed.append(window)
        return tracekit.summarize(run, workers=1, cache=False, window=window)

    key = (str(run), (("window", "drop_last"),))
    first = _shared_summary(tmp_path, key, compute)
    second = _shared_summary(tmp_path, key, compute)  # another worker: the pickle, not a second analysis
    assert len(computed) == 1 and second is not first
    assert [p.suffix for p in tmp_path.iterdir() if p.suffix != ".lock"] == [".pickle"]
    assert offheap.folder_of(second) not in (None, offheap.folder_of(first))  # its own folder, off the heap
    assert golden_form(second, run) == golden_form(first, run)
    for name in EVENT_TABLES:
        assert getattr(second, name).equals(getattr(first, name)), name
    # The tables-in-memory reference stays in memory when another worker loads it.
    in_memory = _shared_summary(tmp_path, key, compute, off_heap=False)
    assert offheap.folder_of(in_memory) is None and golden_form(in_memory, run) == golden_form(first, run)
    other = _shared_summary(tmp_path, (str(run), (("window", "all_steps"),)), lambda: compute("all_steps"))
    assert computed == ["drop_last", "all_steps"] and other.run.window == "all_steps"  # another key: computed


def golden_form(s, run):
    from tests import golden_summary

    return json.dumps(golden_summary.compact(s, run), sort_keys=True)


def test_free_port_keeps_to_its_range_and_skips_a_taken_port(monkeypatch):
    import socket

    from workloads.ports import free_port

    returned = []
    for _ in range(5):  # another process (a neighbour test's server) may hold the port beside ours: a fresh pair
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            port = taken.getsockname()[1]
            taken.listen()
            monkeypatch.setenv("TRACEKIT_PORT_RANGE", f"{port}-{port}")
            with pytest.raises(OSError, match="no free port"):
                free_port()
            # The range's only other port is the one it must return, when the OS has it free.
            other = port + 1
            monkeypatch.setenv("TRACEKIT_PORT_RANGE", f"{port}-{other}")
            try:
                returned.append((free_port(), other))
            except OSError:  # ``other`` is taken too, by someone else: try another pair
                continue
        assert returned[-1][0] == returned[-1][1]  # never the taken port
        break
    assert returned, "no pair of adjacent ports was free in 5 tries"
