"""Trace files and their bytes: finding a run's files (local paths or fsspec URLs), reading one and inflating it,
the rank its name gives, and refusing two files that claim the same rank.

Nothing here decodes JSON; ``tracekit.read.reader`` decodes the bytes ``load_bytes`` returns.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from pathlib import Path

from isal import igzip
from isal.igzip_lib import IsalError

from tracekit.errors import DuplicateRankError, NoTracesError, TraceReadError, TruncatedTraceError

GZIP_MAGIC = b"\x1f\x8b"  # a gzip file's first two bytes: gzip is known by them, not by the file name

TRACE_SUFFIXES = (".json", ".gz")  # what a trace file's name ends with (".json.gz" included); the viewer uses it too
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def find_trace_files(path: str | Path) -> list[Path | str]:
    """Trace candidates: the file itself, or the ``.json``/``.gz`` files directly inside a folder.

    ``path`` may be an fsspec URL (``s3://bucket/run``, ``memory://run``); the candidates are then URLs too.
    """
    if is_url(path):
        return _find_remote_trace_files(path)
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise NoTracesError(f"{path}: no such file or folder")
    files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
    if not files:
        runs = sorted(p.name for p in path.iterdir() if p.is_dir() and any(
            q.is_file() and q.name.endswith(TRACE_SUFFIXES) for q in p.iterdir()))
        if runs:
            raise NoTracesError(f"{path}: this folder holds runs, not traces: {', '.join(runs)} "
                                f"(summarize one of them, e.g. {path / runs[0]})")
        raise NoTracesError(f"{path}: no trace files (*.json, *.json.gz) in this folder")
    return files


def _find_remote_trace_files(url: str) -> list[str]:
    import fsspec  # only URLs need it

    fs, root = fsspec.core.url_to_fs(url)
    if fs.isfile(root):
        return [url]
    if not fs.isdir(root):
        raise NoTracesError(f"{url}: no such file or folder")
    files = sorted(info["name"] for info in fs.ls(root, detail=True)
                   if info.get("type") == "file" and info["name"].endswith(TRACE_SUFFIXES))
    if not files:
        raise NoTracesError(f"{url}: no trace files (*.json, *.json.gz) in this folder")
    return [fs.unstrip_protocol(f) for f in files]


def check_unique_ranks(metas) -> None:
    """Refuse two files that claim the same rank: one must never silently replace the other."""
    seen: dict[int, str] = {}
    for meta in metas:
        if meta.rank in seen:
            raise DuplicateRankError(meta.rank, seen[meta.rank], meta.path)
        seen[meta.rank] = meta.path


def rank_in_file_name(path: Path | str) -> int | None:
    """The rank a trace file's name gives (``rank3.``, ``rank-3``, ``rank_3``, ``worker3``), or None."""
    match = _RANK_IN_NAME.search(_file_name(path))
    return int(match.group(1)) if match else None


def is_url(path: str | Path) -> bool:
    """Whether ``path`` is an fsspec URL (``s3://...``, ``memory://...``) rather than a local path."""
    return isinstance(path, str) and "://" in path


def as_path(path: str | Path) -> Path | str:
    return path if is_url(path) else Path(path)


def _file_name(path: Path | str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] if isinstance(path, str) else path.name


def load_bytes(path: Path | str) -> bytes | bytearray:
    try:
        if isinstance(path, str):
            import fsspec  # only URLs need it

            with fsspec.open(path, "rb") as f:
                data = f.read()
        else:
            data = path.read_bytes()
    except OSError as err:
        raise TraceReadError(path, f"cannot read: {err.strerror or err}") from None
    if data[:2] != GZIP_MAGIC:
        return data
    try:
        return _gunzip(data)
    except (EOFError, OSError, IsalError):
        pass
    try:  # the gzip module names what is wrong (truncated, bad CRC, trailing bytes that are not gzip)
        return gzip.decompress(data)
    except (EOFError, OSError, zlib.error) as err:
        raise TruncatedTraceError(path, f"truncated or corrupt gzip ({err})") from None


def _gunzip(data: bytes) -> bytearray:
    """Inflate with ISA-L (about twice zlib's speed), in slices appended to one buffer: the peak is the JSON plus a
    slice, not twice the JSON. Concatenated gzip members are read as one stream, as ``gzip`` does."""
    out = bytearray()
    with igzip.IGzipFile(fileobj=io.BytesIO(data)) as stream:
        while piece := stream.read(8 << 20):
            out += piece
    return out
