"""A Summary's event tables off the Python heap: written once as Arrow IPC files, memory-mapped, read on first use.

The tables that grow with a trace (``EVENT_TABLES``: gaps, critical_path_events, ops_by_shape, op_steps,
memory_timeline, graph) are most of a Summary's memory, and most readers of a Summary never look at them.
``kept(summary, entry)`` writes each to ``<folder>/<table>.arrow`` and returns the Summary holding, for each, a
``MappedTable``: the file mapped into memory, its pages read from disk only when touched, turned into the same
DataFrame (``arrowframe``) the first time the table is read, and held from then on.

Where the folder is:
  - ``entry``, a folder of the cache (``tracekit.rank.cache.tables_entry``: ``<cache_dir>/tables/<key>``, keyed on
    what decides the run's result). It is written once, into a hidden folder renamed into place; a later Summary
    of the same run maps the files already there. ``tracekit cache info`` counts it, trim and clear remove it.
  - ``entry=None`` (no cache): a new temporary folder (``tracekit-tables-<pid>-*`` in the system's temporary
    folder), removed when the Summary is garbage collected or the interpreter exits. A process that ends without
    running its exit handlers (killed by a signal or a ``timeout``, ended by ``os._exit``) leaves its folders
    behind; the next temporary folder made on the machine removes those of processes no longer running.
Where the folder cannot be written or read (a read-only cache, a full disk), the tables stay in memory, as
DataFrames, and a warning says so. A table ``arrowframe`` cannot keep exactly stays in memory too.

Each file is mapped when the Summary is made and no file is held open: the mapping keeps a file's data readable
after the file is removed (Linux and other POSIX systems), so a Summary keeps working when ``tracekit cache clear``,
a trim or a cleaner of temporary files removes its folder meanwhile. Files are never changed in place.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import warnings
import weakref
from pathlib import Path

import pandas as pd
import pyarrow as pa

from tracekit.summary import arrowframe
from tracekit.summary.mapped import MappedTable
from tracekit.summary import model
from tracekit.summary.model import EVENT_TABLES

__all__ = ["MappedTable", "kept", "folder_of", "SUFFIX"]

SUFFIX = ".arrow"
_PROBLEMS = (OSError, pa.ArrowException)
_PREFIX = "tracekit-tables-"  # a temporary folder: tracekit-tables-<pid of its Summary's process>-<random>


def kept(summary, entry: Path | None = None):
    """``summary`` with its event tables written under ``entry`` (a cache entry folder, used as it is when it
    already exists) or, for None, a temporary folder removed with the returned Summary; each mapped and loaded on
    first read. Where that fails, ``summary`` itself, tables in memory, with a warning naming the folder."""
    frames = {name: getattr(summary, name) for name in EVENT_TABLES}
    where = "a temporary folder" if entry is None else str(entry)
    try:
        folder, tables = _temporary(frames) if entry is None else (entry, _in_cache(entry, frames))
    except _PROBLEMS as err:
        warnings.warn(f"tracekit: the Summary's event tables are kept in memory: they could not be written to "
                      f"{where}: {err}", stacklevel=2)
        return summary
    out = model.replace(summary, **{**frames, **tables})
    if entry is None:
        weakref.finalize(out, _remove, str(folder), os.getpid())
    return out


def folder_of(summary) -> Path | None:
    """The folder a Summary's event tables were mapped from; None when they are all in memory."""
    for name in EVENT_TABLES:
        value = object.__getattribute__(summary, name)
        if isinstance(value, MappedTable):
            return value.path.parent
    return None


def _mapped(folder: Path, frames: dict[str, pd.DataFrame]) -> dict[str, MappedTable]:
    """The tables with a file in ``folder`` (one ``arrowframe`` cannot keep has none), mapped."""
    paths = {name: folder / f"{name}{SUFFIX}" for name in frames}
    return {name: MappedTable(path) for name, path in paths.items() if path.is_file()}


def _temporary(frames: dict[str, pd.DataFrame]) -> tuple[Path, dict[str, MappedTable]]:
    _remove_orphans(Path(tempfile.gettempdir()))
    folder = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
    try:
        _write(folder, frames)
        return folder, _mapped(folder, frames)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _in_cache(entry: Path, frames: dict[str, pd.DataFrame]) -> dict[str, MappedTable]:
    """The tables of the cache entry, written now unless a readable entry is there (the same key: the same tables)."""
    if entry.is_dir():
        try:
            tables = _mapped(entry, frames)
        except _PROBLEMS:  # damaged, or removed meanwhile: written again
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):  # a read-only cache still answers; it is just not reordered
                os.utime(entry)  # most recently used: trimmed last
            return tables
    entry.parent.mkdir(parents=True, exist_ok=True)
    hidden = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    try:
        _write(hidden, frames)
        os.rename(hidden, entry)  # atomic: the entry appears whole or not at all
    except OSError:
        shutil.rmtree(hidden, ignore_errors=True)
        if not entry.is_dir():
            raise
        # another process wrote the same entry first
    except BaseException:
        shutil.rmtree(hidden, ignore_errors=True)
        raise
    return _mapped(entry, frames)


def _write(folder: Path, frames: dict[str, pd.DataFrame]) -> None:
    for name, frame in frames.items():
        batch = arrowframe.to_arrow(frame)
        if batch is None:  # not kept exactly: stays in memory
            continue
        with pa.OSFile(str(folder / f"{name}{SUFFIX}"), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
            writer.write_batch(batch)


def _remove_orphans(temp: Path) -> None:
    """Remove the temporary folders of processes that are no longer running (they ended without their exit
    handlers). A Summary still reading one would lose nothing: its files are mapped when it is made."""
    try:
        found = [e for e in os.scandir(temp) if e.name.startswith(_PREFIX) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for folder in found:
        pid, named, _ = folder.name[len(_PREFIX):].partition("-")
        # Only names this module makes: <pid>-<random>, the pid in ASCII digits. Anything else is left alone.
        if named and pid.isascii() and pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(folder.path, ignore_errors=True)


def _running(pid: int) -> bool:
    """Whether a process ``pid`` exists; True where that cannot be told (another user's, or no valid pid)."""
    try:
        os.kill(pid, 0)  # no signal sent: only asks whether the process exists
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):  # another user's; a number no pid can be
        return True
    return True


def _remove(folder: str, owner_pid: int) -> None:
    """Remove a Summary's temporary folder; not from a forked child, whose copy of the Summary is not the owner."""
    if os.getpid() == owner_pid:
        shutil.rmtree(folder, ignore_errors=True)
