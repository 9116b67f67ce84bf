"""The suite's own rules (tests/conftest.py): with CI set a missing requirement is an error, not a skip; the cache
stays in a temporary folder; .ci/run lists skips and runs the README's test command."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import tracekit
from tracekit.rank import cache

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

MINI_SUITE = '''
import pytest

def test_needs_a_torch_module():
    pytest.importorskip("torch.no_such_module_here")

def test_skipped_for_another_reason():
    pytest.skip("needs a GPU")

def test_runs():
    assert True
'''


def _mini_run(tmp_path, ci: str | None, shared: bool):
    """A copy of the conftest in <tmp>/repo/tests, beside <tmp>/shared/traces/hta (a link to the real one) or not."""
    tests = tmp_path / "repo" / "tests"
    tests.mkdir(parents=True)
    shutil.copy(TESTS / "conftest.py", tests / "conftest.py")
    (tests / "test_mini.py").write_text(MINI_SUITE)
    if shared:
        (tmp_path / "shared" / "traces").mkdir(parents=True)
        (tmp_path / "shared" / "traces" / "hta").symlink_to(TESTS.parents[1] / "shared" / "traces" / "hta")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tests)],
                          cwd=tmp_path / "repo", env=env, capture_output=True, text=True, timeout=120)


def test_outside_ci_a_missing_module_is_a_skip(tmp_path):
    out = _mini_run(tmp_path, ci=None, shared=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed, 2 skipped" in out.stdout
    assert "needs a GPU" in out.stdout and "no_such_module_here" in out.stdout  # -rs lists each skip's reason


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
