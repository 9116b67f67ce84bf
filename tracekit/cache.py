"""The Parquet cache: per-rank results (and, for the viewer, per-rank events) kept between runs.

An entry is keyed by the trace file's identity (resolved path, size and mtime; for an fsspec URL, the file system's
own key of its properties), the tracekit version and a hash of its source files, the ``Config``, and the shape of
``RankResult`` (its field names and types). Changing any of these misses the cache; nothing is ever invalidated by
hand. An entry is a folder: one Parquet file per table and one msgpack file for everything else, written to a
temporary folder and renamed into place, so a reader never sees half an entry.

The cache lives in its own folder (``~/.cache/tracekit`` unless told otherwise), never in the trace folder. It is an
optimisation: an entry that cannot be written is skipped with a warning, and one that cannot be read is recomputed.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import shutil
import tempfile
import typing
import warnings
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from tracekit.config import Config
from tracekit.rank import RankResult, analyze_rank
from tracekit.reader import RankMeta, is_url, read_rank

__all__ = ["DEFAULT_CACHE_DIR", "cache_key", "load", "store", "analyze_cached", "load_rank_events", "clear"]

DEFAULT_CACHE_DIR = Path("~/.cache/tracekit")
_FORMAT = 1  # bump when the layout of an entry changes


def resolve_dir(cache_dir: str | Path | None) -> Path:
    """The cache folder to use: ``cache_dir`` or the default, with ``~`` expanded."""
    return Path(cache_dir if cache_dir is not None else DEFAULT_CACHE_DIR).expanduser()


def file_identity(path: str | Path) -> tuple:
    """What says a trace file is unchanged: (resolved path, size, mtime ns), or (URL, the file system's key)."""
    if is_url(path):
        import fsspec

        fs, inner = fsspec.core.url_to_fs(str(path))
        return (str(path), fs.ukey(inner))
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return (str(resolved), stat.st_size, stat.st_mtime_ns)


@functools.cache
def code_version() -> str:
    """The tracekit version and a hash of its source: a changed metric never reads an old entry."""
    from tracekit import __version__

    digest = hashlib.sha256(__version__.encode())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.name.encode() + source.read_bytes())
    return digest.hexdigest()[:16]


def _shape(cls: type) -> str:
    return repr([(f.name, str(f.type)) for f in dataclasses.fields(cls)])


def cache_key(kind: str, identity: tuple, *parts: Any) -> str:
    """A stable hex key of an entry of ``kind`` for one file identity and the options that shape the entry."""
    payload = msgspec.json.encode([_FORMAT, kind, code_version(), list(identity), [repr(p) for p in parts]])
    return hashlib.sha256(payload).hexdigest()[:32]


def rank_key(path: str | Path, config: Config, default_rank: int | None) -> str:
    """The key of a file's ``RankResult`` under ``config``."""
    return cache_key("rank", file_identity(path), config, default_rank, _shape(RankResult))


def _entry(cache_dir: Path, key: str) -> Path:
    return cache_dir / key[:2] / key


# --- generic (de)serialisation of a frozen dataclass: DataFrames as Parquet, the rest as msgpack ------------------

def _enc_hook(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise NotImplementedError(f"cannot cache a {type(value).__name__}")


def _write_entry(cache_dir: Path, key: str, tables: dict[str, pd.DataFrame], rest: dict[str, Any]) -> None:
    final = _entry(cache_dir, key)
    if final.exists():
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=final.parent))
    try:
        layout = {}
        for name, frame in tables.items():
            loose = [c for c, dtype in frame.dtypes.items() if dtype == object]
            frame.drop(columns=loose).to_parquet(tmp / f"{name}.parquet", engine="pyarrow", compression="zstd")
            layout[name] = {"columns": [str(c) for c in frame.columns], "categories": _categories(frame),
                            "loose": {str(c): frame[c].tolist() for c in loose}}
        (tmp / "fields.msgpack").write_bytes(msgspec.msgpack.encode(rest, enc_hook=_enc_hook))
        (tmp / "tables.msgpack").write_bytes(msgspec.msgpack.encode(layout, enc_hook=_enc_hook))
        os.rename(tmp, final)  # atomic: the entry appears whole or not at all
    except OSError:
        if final.exists():  # another process wrote the same entry first
            shutil.rmtree(tmp, ignore_errors=True)
            return
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _read_entry(cache_dir: Path, key: str) -> tuple[dict[str, pd.DataFrame], bytes] | None:
    entry = _entry(cache_dir, key)
    if not entry.is_dir():
        return None
    layout = msgspec.msgpack.decode((entry / "tables.msgpack").read_bytes())
    tables = {name: _restored(pd.read_parquet(entry / f"{name}.parquet", engine="pyarrow"), spec)
              for name, spec in layout.items()}
    return tables, (entry / "fields.msgpack").read_bytes()


def _categories(frame: pd.DataFrame) -> dict:
    """Each categorical column's categories: Parquet keeps only the values that occur."""
    return {str(col): [list(dtype.categories), str(dtype.categories.dtype), bool(dtype.ordered)]
            for col, dtype in frame.dtypes.items() if isinstance(dtype, pd.CategoricalDtype)}


def _restored(frame: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """Undo what Parquet changes: unused categories, and object columns (None and NaN kept apart, as msgpack)."""
    dtypes = {col: pd.CategoricalDtype(pd.Index(cats, dtype=kind), ordered=ordered)
              for col, (cats, kind, ordered) in spec["categories"].items()}
    frame = frame.astype(dtypes) if dtypes else frame
    if spec["loose"]:
        loose = {col: pd.Series(_objects(values), index=frame.index, dtype=object)
                 for col, values in spec["loose"].items()}
        frame = frame.assign(**loose)
    return frame[spec["columns"]] if list(frame.columns) != spec["columns"] else frame


def _objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _split(obj) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    tables, rest = {}, {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        (tables if isinstance(value, pd.DataFrame) else rest)[f.name] = value
    return tables, rest


def _join(cls: type, tables: dict[str, pd.DataFrame], rest: bytes):
    hints = typing.get_type_hints(cls)
    scalars = {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.name not in tables}
    values = msgspec.msgpack.decode(rest, type=msgspec.defstruct("_Fields", list(scalars.items())))
    return cls(**tables, **{name: getattr(values, name) for name in scalars})


# --- per-rank results ----------------------------------------------------------------------------------------------

def store(cache_dir: str | Path, key: str, result: RankResult) -> None:
    """Keep ``result`` under ``key``; a failure to write is a warning, never an error."""
    try:
        _write_entry(resolve_dir(cache_dir), key, *_split(result))
    except (OSError, NotImplementedError, msgspec.EncodeError, ValueError, TypeError) as err:
        warnings.warn(f"tracekit: cache entry not written in {cache_dir}: {err}", stacklevel=2)


def load(cache_dir: str | Path, key: str) -> RankResult | None:
    """The ``RankResult`` kept under ``key``, or None."""
    try:
        found = _read_entry(resolve_dir(cache_dir), key)
        return None if found is None else _join(RankResult, *found)
    except (OSError, ValueError, TypeError, msgspec.DecodeError):  # unreadable or from another layout: recompute
        return None


def analyze_cached(path: str | Path, config: Config, default_rank: int | None, cache_dir: str | Path,
                   key: str | None = None) -> RankResult:
    """``analyze_rank`` through the cache: read the entry if the file is unchanged, else compute and keep it."""
    key = key or rank_key(path, config, default_rank)
    hit = load(cache_dir, key)
    if hit is not None:
        return hit
    result = analyze_rank(path, config, default_rank)
    if rank_key(path, config, default_rank) == key:  # the file did not change while it was read
        store(cache_dir, key, result)
    return result


# --- per-rank events, for the viewer's timeline ----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _RankEvents:
    meta: RankMeta
    events: pd.DataFrame
    comm_args: pd.DataFrame


def load_rank_events(path: str | Path, cache_dir: str | Path | None = None, default_rank: int | None = None,
                     *, cache: bool = True) -> tuple[RankMeta, pd.DataFrame, pd.DataFrame]:
    """``reader.read_rank(path)`` through the cache: one rank's (meta, events, comm_args) for the timeline.

    The first call parses the trace and keeps its events as Parquet; later calls on the unchanged file read that.

    Example:
      >>> meta, events, comm = load_rank_events("sample_traces/resnet-gloo-2rank/rank-0.pt.trace.json.gz")
      >>> meta.rank, list(events.columns[:3])
      (0, ['rank', 'cat', 'name'])
    """
    if not cache:
        return read_rank(path, default_rank=default_rank)
    folder = resolve_dir(cache_dir)
    key = cache_key("events", file_identity(path), default_rank, _shape(_RankEvents))
    try:
        found = _read_entry(folder, key)
        if found is not None:
            hit = _join(_RankEvents, *found)
            return hit.meta, hit.events, hit.comm_args
    except (OSError, ValueError, TypeError, msgspec.DecodeError):
        pass
    meta, events, comm_args = read_rank(path, default_rank=default_rank)
    try:
        if key == cache_key("events", file_identity(path), default_rank, _shape(_RankEvents)):
            _write_entry(folder, key, *_split(_RankEvents(meta, events, comm_args)))
    except (OSError, NotImplementedError, msgspec.EncodeError, ValueError, TypeError) as err:
        warnings.warn(f"tracekit: cache entry not written in {folder}: {err}", stacklevel=2)
    return meta, events, comm_args


def clear(cache_dir: str | Path | None = None) -> None:
    """Delete every entry of the cache folder (the folder itself stays)."""
    folder = resolve_dir(cache_dir)
    if folder.is_dir():
        for child in folder.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()

