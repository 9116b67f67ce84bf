"""The cache keys of a run's per-rank results and of its own tables: what says a trace file, and so its result, is
unchanged (``tracekit.rank.cache``)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from tracekit.events.config import Config
from tracekit.rank import cache
from tracekit.rank.analyze import RankResult
from tracekit.read.files import is_url


def file_identity(path: str | Path) -> tuple:
    """What says a trace file is unchanged: (resolved path, size, mtime ns), or (URL, the file system's key)."""
    if is_url(path):
        import fsspec

        fs, inner = fsspec.core.url_to_fs(str(path))
        return (str(path), fs.ukey(inner))
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return (str(resolved), stat.st_size, stat.st_mtime_ns)


def rank_key(path: str | Path, config: Config, default_rank: int | None) -> str:
    """The store key of a file's ``RankResult`` under ``config``: a changed file, option or result type misses."""
    return cache.key("rank", file_identity(path), config, default_rank, cache.shape(RankResult))


def run_key(files: Sequence[str | Path], config: Config, default_rank: int | None, result_type: type) -> str | None:
    """The store key of a run's own tables (``cache.tables_entry``): every file's identity in order, the options and
    the result's shape, so a changed, added or removed file misses. None where a file cannot be identified here."""
    try:
        identities = [file_identity(f) for f in files]
    except OSError:
        return None
    return cache.key("run-tables", identities, config, default_rank, cache.shape(result_type))
