"""The docs site builds with ``mkdocs build --strict`` (a broken link or a stale API name fails it), and the tutorial
notebook runs from top to bottom on a bundled run."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_docs_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin",
                                                                        "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    # The API page was generated from the docstrings, not left as the ::: directives.
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "trace_dir" in api and ":::" not in api
    for page in ("getting-started", "concepts", "what-runs", "predict", "parallelism", "workloads", "viewer", "scale",
                 "formats", "troubleshooting", "benchmarks", "contributing"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


def test_every_page_is_in_the_nav():
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    listed = {next(iter(item.values())) for item in nav}
    assert listed == {p.name for p in (ROOT / "docs").glob("*.md")}


def test_tutorial_notebook_runs(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = tmp_path / "tutorial.ipynb"
    shutil.copy(ROOT / "docs" / "tutorial.ipynb", notebook)
    nb = nbformat.read(notebook, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "docs")}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    shown = "\n".join(str(o.get("data", {}).get("text/plain", "")) + str(o.get("text", "")) for o in outputs)
    # The what-if table and the comparison were computed, and each figure was drawn.
    assert "no_straggler" in shown and "comm_x2" in shown
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) >= 4
