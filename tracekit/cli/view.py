"""``tracekit view [RUN]``: the Streamlit viewer (``app/main.py``) on a run, from a checkout or an installed package.

The viewer is the ``app`` package beside ``tracekit`` (the repository's ``app/`` folder, which the package installs
too); this only finds its ``main.py`` and runs ``streamlit run`` on it, as the README's
``streamlit run app/main.py -- RUN`` does.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from tracekit.errors import TracekitError

APP_MAIN = Path(__file__).resolve().parents[2] / "app" / "main.py"


def add_view(commands) -> None:
    cmd = commands.add_parser("view", help="open the viewer (Streamlit) on a run",
                              description="Start the Streamlit viewer on a run folder (with none named: the newest "
                                          "run under runs/, else a bundled sample). Needs the app extra.")
    cmd.add_argument("run_dir", nargs="?", help="run folder to open first")
    cmd.add_argument("--port", type=int, help="port for the viewer (Streamlit's default: 8501)")
    cmd.add_argument("--address", default="localhost",
                     help="address the viewer listens on (default localhost; 0.0.0.0 serves the network)")
    cmd.set_defaults(run=view)


def command(run_dir: str | None, port: int | None = None, address: str = "localhost") -> list[str]:
    """The ``streamlit run`` command line that ``tracekit view`` runs: no usage statistics sent, and listening on
    ``address`` only (Streamlit then prints one local URL, not the machine's network and external addresses)."""
    if not APP_MAIN.is_file():
        raise TracekitError(f"the viewer's app/main.py is not beside tracekit ({APP_MAIN}): reinstall tracekit")
    if importlib.util.find_spec("streamlit") is None:
        raise TracekitError("the viewer needs Streamlit: pip install 'tracekit[app]'")
    if run_dir is not None and not Path(run_dir).exists():
        raise TracekitError(f"{run_dir}: no such run folder or file")
    argv = [sys.executable, "-m", "streamlit", "run", str(APP_MAIN), "--browser.gatherUsageStats=false",
            f"--server.address={address}"]
    argv += [f"--server.port={port}"] if port else []
    return argv + (["--", str(Path(run_dir).resolve())] if run_dir is not None else [])


def view(args) -> int:
    """Become the viewer's process (so that stopping ``tracekit view`` stops Streamlit); returns only on failure."""
    argv = command(args.run_dir, args.port, args.address)
    sys.stdout.flush()
    os.execv(argv[0], argv)
    return 1
