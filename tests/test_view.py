"""``tracekit view [RUN]`` starts the Streamlit viewer on a run, as ``streamlit run app/main.py -- RUN`` does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tracekit.cli import view
from tracekit.cli.main import main
from workloads.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "sample_traces" / "resnet-gloo-2rank"


def test_the_command_is_streamlit_run_on_the_apps_main_with_the_run():
    pytest.importorskip("streamlit")
    argv = view.command(str(RUN), port=8600)
    assert argv == [sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "main.py"),
                    "--browser.gatherUsageStats=false", "--server.address=localhost", "--server.port=8600", "--", str(RUN)]
    assert "--server.address=0.0.0.0" in view.command(str(RUN), address="0.0.0.0")
    assert view.command(None)[4] == str(ROOT / "app" / "main.py") and "--" not in view.command(None)


def test_a_missing_run_is_one_line_and_status_2(tmp_path, capsys):
    assert main(["view", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tracekit: error: ") and "nope" in err and len(err.splitlines()) == 1


def test_view_serves_the_viewer():
    pytest.importorskip("streamlit")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tracekit", "view", str(RUN), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "STREAMLIT_SERVER_HEADLESS": "true"})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as reply:
                    assert reply.read() == b"ok"
                    return
            except OSError:
                assert proc.poll() is None, "tracekit view exited"
                time.sleep(0.5)
        raise AssertionError("the viewer did not answer within 60 s")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
