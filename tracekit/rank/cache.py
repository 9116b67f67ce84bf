"""The result store: frozen dataclasses (per-rank results) kept on disk by key, within a size cap.

The store only gets and puts; it knows nothing of traces or analysis. The engine makes each key from what it
knows (the trace file's identity, the ``Config``, the result's shape) and decides ``store.get(key)`` or compute.
``key`` adds the tracekit version and a hash of its source files, so a changed metric never reads an old entry;
nothing is ever invalidated by hand.

An entry is a folder: one Arrow IPC file per table (``<table>.arrow``, zstd) and one msgpack file for everything
else, each checked against a digest on reading, written to a temporary folder and renamed into place, so a reader
never sees half an entry. Reading an entry marks it used; ``trim`` removes the least recently used entries until the
folder is under its cap (``DEFAULT_MAX_BYTES`` unless told).

A run's Summary keeps its event tables here too (``tracekit.summary.offheap``): one folder per run,
``tables/<key>``, of Arrow IPC files (``<table>.arrow``), keyed like an entry on what decides the run's result
(``tracekit.rank.keys.run_key``). ``info`` counts them, and ``trim`` and ``clear`` remove them, as entries.

The store lives in its own folder (``resolve_dir``: ``--cache-dir``, else ``$TRACEKIT_CACHE_DIR``, else
``$XDG_CACHE_HOME/tracekit``, else ``~/.cache/tracekit``), never in the trace folder. It is an optimisation: an entry
that cannot be written is skipped with a warning, and one that cannot be read is a miss.

    store = Store(Path("/tmp/tk"), RankResult)
    result = store.get(key)
    if result is None:
        result = compute()
        store.put(key, result)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from tracekit.rank import cachefile

__all__ = ["DEFAULT_CACHE_DIR", "CACHE_DIR_VARIABLE", "DEFAULT_MAX_BYTES", "Store", "CacheInfo", "key", "shape",
           "resolve_dir", "info", "clear", "trim", "tables_entry", "TABLES_FOLDER"]

DEFAULT_CACHE_DIR = Path("~/.cache/tracekit")  # the last resort of resolve_dir: no variable says otherwise
CACHE_DIR_VARIABLE = "TRACEKIT_CACHE_DIR"
DEFAULT_MAX_BYTES = 4 * 1024**3  # 4 GiB: a few hundred large ranks' results
_FORMAT = 3  # bump when the layout of an entry changes
TABLES_FOLDER = "tables"  # the runs' event tables: <cache>/tables/<key>/<table>.arrow
_TABLE_SUFFIX = ".arrow"
_ERRORS_WRITING = (OSError, NotImplementedError, msgspec.EncodeError, ValueError, TypeError)
_ERRORS_READING = (OSError, ValueError, TypeError, KeyError, msgspec.DecodeError)


def resolve_dir(cache_dir: str | Path | None) -> Path:
    """The cache folder to use, with ``~`` expanded; the first of: ``cache_dir`` (``--cache-dir``), the
    ``TRACEKIT_CACHE_DIR`` environment variable, ``$XDG_CACHE_HOME/tracekit`` when XDG_CACHE_HOME is set and
    absolute (the XDG rule: a relative one is ignored), ``~/.cache/tracekit``. Empty variables count as unset."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if os.environ.get(CACHE_DIR_VARIABLE):
        return Path(os.environ[CACHE_DIR_VARIABLE]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "tracekit"
    return DEFAULT_CACHE_DIR.expanduser()


@functools.cache
def code_version() -> str:
    """The tracekit version and a hash of its source: a changed metric never reads an old entry."""
    from tracekit import __version__

    return source_digest(Path(__file__).resolve().parents[1], __version__)


def source_digest(package: Path, version: str) -> str:
    """A hash of the version and every module of the package, its stage folders' included."""
    digest = hashlib.sha256(version.encode())
    for source in sorted(package.rglob("*.py")):
        digest.update(source.relative_to(package).as_posix().encode() + source.read_bytes())
    return digest.hexdigest()[:16]


def shape(cls: type) -> str:
    """A dataclass's field names and types: part of a key, so a changed result type misses old entries."""
    return repr([(f.name, str(f.type)) for f in dataclasses.fields(cls)])


def key(kind: str, *parts: Any) -> str:
    """A stable hex key of an entry of ``kind`` from the parts that decide its content (compared by ``repr``)."""
    payload = msgspec.json.encode([_FORMAT, kind, code_version(), [repr(p) for p in parts]])
    return hashlib.sha256(payload).hexdigest()[:32]


@dataclass(frozen=True)
class Store:
    """Entries of one frozen dataclass type ``kind`` under ``folder``, at most ``max_bytes`` after ``trim``.

    DataFrame fields are kept as Arrow IPC files (categories and object columns restored exactly), the others as
    msgpack.
    A Store is plain data: it can be sent to worker processes, which put what they compute.
    """

    folder: Path
    kind: type
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if not dataclasses.is_dataclass(self.kind):
            raise ValueError(f"a Store keeps dataclasses; got {self.kind!r}")
        if not isinstance(self.max_bytes, int) or self.max_bytes < 0:
            raise ValueError(f"max_bytes must be a non-negative integer; got {self.max_bytes!r}")

    def entry(self, key: str) -> Path:
        """The folder of an entry (it may not exist)."""
        return self.folder / key[:2] / key

    def get(self, key: str):
        """The value kept under ``key`` (and mark it used), or None when there is none or it cannot be read."""
        entry = self.entry(key)
        try:
            if not entry.is_dir():
                return None
            value = cachefile.join(self.kind, *cachefile.read_entry(entry))
        except _ERRORS_READING:  # unreadable, half-removed or from another layout: a miss
            return None
        with contextlib.suppress(OSError):  # a read-only cache still answers; it is just not reordered
            os.utime(entry)  # most recently used: trimmed last
        return value

    def put(self, key: str, value) -> None:
        """Keep ``value`` under ``key``; a failure to write is a warning, never an error. Does not trim."""
        try:
            cachefile.write_entry(self.entry(key), *cachefile.split(value))
        except _ERRORS_WRITING as err:
            warnings.warn(f"tracekit: cache entry not written in {self.folder}: {err}", stacklevel=2)

    def trim(self) -> int:
        """Remove the least recently used entries until the folder holds at most ``max_bytes``; the bytes removed."""
        return trim(self.folder, self.max_bytes)


def tables_entry(folder: Path, key: str) -> Path:
    """The folder of a run's event tables under ``key`` (it may not exist): ``<folder>/tables/<key>``."""
    return folder / TABLES_FOLDER / key


def trim(folder: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> int:
    """Remove the least recently used entries and runs' tables until ``folder`` holds at most ``max_bytes``; the
    bytes removed."""
    entries = sorted([*_entries(folder), *_run_tables(folder)], key=lambda e: e[1])  # oldest use first
    total = sum(size for _, _, size in entries)
    removed = 0
    for path, _, size in entries:
        if total - removed <= max_bytes:
            break
        shutil.rmtree(path, ignore_errors=True)
        removed += size
    return removed


@dataclass(frozen=True)
class CacheInfo:
    """What a cache folder holds: its per-rank entries, its runs' event tables (``run_tables``: folders
    ``tables/<key>``) and the bytes on disk of both."""

    folder: Path
    entries: int
    bytes: int
    run_tables: int = 0


def info(cache_dir: str | Path | None = None) -> CacheInfo:
    """The entries, runs' tables and bytes of a cache folder (``resolve_dir``'s by default); zero when it does not
    exist."""
    folder = resolve_dir(cache_dir)
    found, tables = list(_entries(folder)), list(_run_tables(folder))
    return CacheInfo(folder=folder, entries=len(found), bytes=sum(size for _, _, size in found + tables),
                     run_tables=len(tables))


def clear(cache_dir: str | Path | None = None) -> CacheInfo:
    """Delete every entry and run's tables of the cache folder (the folder itself stays); what was removed.

    Only what this cache wrote goes: entry folders ``xx/<key>`` holding ``fields.msgpack`` and tables folders
    ``tables/<key>`` holding ``.arrow`` files, then the folders above them left empty. Anything else in the folder
    (a mistyped ``--cache-dir`` pointing at a user's files) is left untouched."""
    before = info(cache_dir)
    parents = set()
    for path, _, _ in [*_entries(before.folder), *_run_tables(before.folder)]:
        shutil.rmtree(path, ignore_errors=True)
        parents.add(path.parent)
    for parent in parents:
        try:
            parent.rmdir()  # only when empty
        except OSError:
            pass
    return before


def _is_entry(shard: str, entry: os.DirEntry) -> bool:
    """A folder this cache wrote: named by a key starting with its shard's name, holding ``fields.msgpack``."""
    return (entry.name.startswith(shard) and not entry.name.startswith(".") and entry.is_dir()
            and os.path.isfile(os.path.join(entry.path, "fields.msgpack")))


def _entries(folder: Path):
    """(path, last use ns, bytes) of each entry: folders ``folder/xx/<key>``; half-written ones (``.tmp``) skipped."""
    if not folder.is_dir():
        return
    for shard in os.scandir(folder):
        if not shard.is_dir() or len(shard.name) != 2:
            continue
        for entry in os.scandir(shard.path):
            if not _is_entry(shard.name, entry):
                continue
            try:
                size = sum(f.stat().st_size for f in os.scandir(entry.path) if f.is_file())
                yield Path(entry.path), entry.stat().st_mtime_ns, size
            except OSError:  # removed meanwhile by another process
                continue


def _run_tables(folder: Path):
    """(path, last use ns, bytes) of each run's tables: folders ``folder/tables/<key>`` holding ``.arrow`` files;
    half-written ones (hidden, ``.<key>.*``) skipped."""
    tables = folder / TABLES_FOLDER
    if not tables.is_dir():
        return
    for entry in os.scandir(tables):
        if not _is_key(entry.name) or not entry.is_dir():
            continue
        try:
            files = [f for f in os.scandir(entry.path) if f.is_file()]
            if not any(f.name.endswith(_TABLE_SUFFIX) for f in files):
                continue
            yield Path(entry.path), entry.stat().st_mtime_ns, sum(f.stat().st_size for f in files)
        except OSError:  # removed meanwhile by another process
            continue


def _is_key(name: str) -> bool:
    """A name ``key`` makes: 32 lowercase hex digits."""
    return len(name) == 32 and all(c in "0123456789abcdef" for c in name)
