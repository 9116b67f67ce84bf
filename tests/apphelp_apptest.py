"""Streamlit AppTest's per-run setup, done once per process: what an AppTest of the viewer does and shows is
unchanged, only work that gives the same result every time is not repeated.

- Each new AppTest scans every installed distribution's metadata for Streamlit components (about half a second
  here, for a list that cannot change during the tests): the scan is made once.
- Each ``AppTest.run()`` compiles the app's scripts afresh (new ``ScriptCache``s per run, with Streamlit's "magic"
  rewriting of each script): one cache is shared, keyed by the script's text, so an edited script is compiled again.

A test module takes both with ``from apphelp_apptest import apptest_setup_once  # noqa: F401`` (an autouse
fixture); the patches are undone after the module.
"""

from __future__ import annotations

import os
import threading

import pytest


_lock = threading.Lock()
_scanned: list = []  # the one scan's manifests, for every module of this process
_compiled: dict = {}  # (script path, its text, magic on) -> its code


def _scan_once(scan):
    def scan_component_manifests(*args, **kwargs):
        with _lock:
            if not _scanned:
                _scanned.append(list(scan(*args, **kwargs)))
            return list(_scanned[0])
    return scan_component_manifests


def _shared_script_cache(script_cache_class):
    """A ScriptCache class whose instances share their compiled scripts, keyed by path, text and magic setting."""
    from streamlit import config
    from streamlit.runtime.scriptrunner import magic
    from streamlit.source_util import open_python_file

    class SharedScriptCache(script_cache_class):
        def get_bytecode(self, script_path: str):
            script_path = os.path.abspath(script_path)
            with open_python_file(script_path) as f:
                body = f.read()
            magic_on = bool(config.get_option("runner.magicEnabled"))
            key = (script_path, body, magic_on)
            with _lock:
                if key not in _compiled:
                    source = magic.add_magic(body, script_path) if magic_on else body
                    _compiled[key] = compile(source, script_path, mode="exec", flags=0, dont_inherit=1, optimize=-1)
                return _compiled[key]
    return SharedScriptCache


@pytest.fixture(scope="module", autouse=True)
def apptest_setup_once():
    """For the tests of the module: AppTest's component scan made once, its compiled scripts shared. Where this
    Streamlit does not have the internals patched here, the tests run without the shortcut (slower, the same checks)."""
    try:
        from streamlit.components.v2 import manifest_scanner
        from streamlit.testing.v1 import app_test, local_script_runner
        shared = _shared_script_cache(app_test.ScriptCache)
    except (ImportError, AttributeError):
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        if callable(getattr(manifest_scanner, "scan_component_manifests", None)):
            mp.setattr(manifest_scanner, "scan_component_manifests",
                       _scan_once(manifest_scanner.scan_component_manifests))
        if callable(getattr(app_test.ScriptCache, "get_bytecode", None)):
            for module in (app_test, local_script_runner):  # the pages' cache, and the main script's
                if getattr(module, "ScriptCache", None) is app_test.ScriptCache:
                    mp.setattr(module, "ScriptCache", shared)
        yield
