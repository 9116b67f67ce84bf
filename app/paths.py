"""Where the viewer may read: its root folders, the runs under them, and the refusal of any path that leaves them.

A run is named in the URL and the sidebar by a *run id*: the root's label, then the path inside that root
(``sample_traces/resnet-gloo-2rank``). Only ids are accepted from outside; a path is made from an id here and
nowhere else, and it is refused unless it resolves (symlinks followed) inside its root.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tracekit.read.files import TRACE_SUFFIXES

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "runs"  # where the workloads write: with no run named, the viewer opens the newest run here
DEFAULT_ROOTS = (REPO / "sample_traces", RUNS)
NOT_TRACES = ("run.json",)  # a workload's own facts, next to its traces
MAX_DEPTH = 3  # how deep under a root runs are looked for


class PathRefused(ValueError):
    """A run id or path that names something outside the viewer's root folders, or nothing at all."""


@dataclass(frozen=True)
class Root:
    """One folder the viewer may read, and the label that stands for it in run ids."""

    label: str
    path: Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamlit run app/main.py --", add_help=False)
    parser.add_argument("run", nargs="?", default=None, help="a run folder to open first")
    parser.add_argument("--root", action="append", default=[], help="folder of runs (repeatable)")
    return parser


def parse_roots(argv: list[str], reserved: tuple[str, ...] = ()) -> tuple[Root, ...]:
    """Roots from the arguments after ``--`` (``--root DIR``, repeatable); the defaults when none is given.

    Labels are the folders' names, made unique (and different from ``reserved``) with a ``-2``, ``-3`` suffix.
    Unknown arguments are ignored, so the viewer also starts under a test runner's command line.

    >>> [r.label for r in parse_roots(["--root", "/tmp", "--root", "/var/tmp"])]
    ['tmp', 'tmp-2']
    """
    given, _ = _parser().parse_known_args(argv)
    return _labelled([Path(p).expanduser().absolute() for p in given.root] or list(DEFAULT_ROOTS), reserved)


def parse_args(argv: list[str], reserved: tuple[str, ...] = ()) -> tuple[tuple[Root, ...], str | None]:
    """The roots and the id of the run named on the command line (``streamlit run app/main.py -- runs/quickstart``).

    A named run folder outside every root becomes a root of its own, so it can be opened; the person who starts
    the viewer chose it. ``PathRefused`` when the named folder holds no trace files.
    """
    given, _ = _parser().parse_known_args(argv)
    roots = parse_roots(argv, reserved)
    if given.run is None:
        return roots, None
    folder = Path(given.run).expanduser().resolve()
    if not folder.is_dir() or not any(is_trace_name(f.name) for f in folder.iterdir() if f.is_file()):
        raise PathRefused(f"{given.run}: not a folder of trace files")
    for root in roots:
        base = root.path.resolve()
        if folder == base or base in folder.parents:
            return roots, "/".join((root.label, *folder.relative_to(base).parts))
    roots = _labelled([*(r.path for r in roots), folder], reserved)
    return roots, roots[-1].label


def newest_run(runs: list[str], roots: tuple[Root, ...]) -> str | None:
    """The most recently written run (folder modification time) under the workloads' ``runs/`` root, if any."""
    under = [r for r in roots if r.path.absolute() == RUNS.absolute()]
    found = [(resolve_run(run, roots).stat().st_mtime_ns, run) for run in runs
             for root in under if run.split("/", 1)[0] == root.label]
    return max(found)[1] if found else None


def _labelled(folders: list[Path], reserved: tuple[str, ...]) -> tuple[Root, ...]:
    roots: list[Root] = []
    for folder in folders:
        label, n = folder.name or "root", 1
        while label in reserved or any(r.label == label for r in roots):
            n += 1
            label = f"{folder.name or 'root'}-{n}"
        roots.append(Root(label, folder))
    return tuple(roots)


def resolve_run(run_id: str, roots: tuple[Root, ...]) -> Path:
    """The folder a run id names, or ``PathRefused`` when the id leaves its root or names no folder.

    Refused: absolute paths, ``..``, backslashes, empty parts, unknown root labels, and symlinks that point
    outside the root.
    """
    if not isinstance(run_id, str) or not run_id or "\x00" in run_id or "\\" in run_id:
        raise PathRefused(f"{run_id!r}: not a run id")
    pure = PurePosixPath(run_id)
    if pure.is_absolute() or run_id.startswith("~"):
        raise PathRefused(f"{run_id}: absolute paths are refused; name a run under a root folder")
    parts = run_id.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise PathRefused(f"{run_id}: '..', '.' and empty parts are refused")
    root = next((r for r in roots if r.label == parts[0]), None)
    if root is None:
        raise PathRefused(f"{run_id}: {parts[0]!r} is not a root folder ({', '.join(r.label for r in roots)})")
    base = root.path.resolve()
    target = (root.path.joinpath(*parts[1:])).resolve()
    if target != base and base not in target.parents:
        raise PathRefused(f"{run_id}: leaves the root folder {root.path} (a symlink out?)")
    if not target.is_dir():
        raise PathRefused(f"{run_id}: no such run folder")
    return target


def is_trace_name(name: str) -> bool:
    """Whether a file name looks like a profiler trace (a ``.json`` or ``.json.gz`` that is not ``run.json``)."""
    return name.endswith(TRACE_SUFFIXES) and name not in NOT_TRACES


def list_runs(roots: tuple[Root, ...]) -> list[str]:
    """Run ids of every folder under the roots (to ``MAX_DEPTH``) that holds trace files, sorted.

    Folders reached through a symlink that leaves the root are not listed.
    """
    runs: list[str] = []
    for root in roots:
        if not root.path.is_dir():
            continue
        base = root.path.resolve()
        for folder, dirs, files in os.walk(root.path, followlinks=True):
            rel = Path(folder).relative_to(root.path)
            resolved = Path(folder).resolve()
            if resolved != base and base not in resolved.parents:
                dirs[:] = []
                continue
            if len(rel.parts) >= MAX_DEPTH:
                dirs[:] = []
            dirs.sort()
            if any(is_trace_name(f) for f in files):
                runs.append("/".join((root.label, *rel.parts)))
    return sorted(runs)


def fingerprint(folder: Path) -> tuple:
    """(name, size, mtime) of each file in a run folder: a cache key that changes when the run is rewritten."""
    entries = []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.is_file():
            st = entry.stat()
            entries.append((entry.name, st.st_size, st.st_mtime_ns))
    return tuple(entries)
