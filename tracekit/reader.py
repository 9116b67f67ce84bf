"""Files -> one events table. Finds trace files, decodes only the fields tracekit uses, and tags each row with its rank.

The decoder is typed (msgspec): fields that are not declared below are skipped without being built,
which is what makes loading many times faster than ``json.load``.
"""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from tracekit.errors import (
    DuplicateRankError,
    NoTracesError,
    NotATraceError,
    NotJSONError,
    RankUnknownError,
    TraceReadError,
    TruncatedTraceError,
)

_Id = int | str | None
_Num = int | float | None


class _Args(msgspec.Struct, gc=False):
    external_id: _Id = msgspec.field(default=None, name="External id")
    external_id_old: _Id = msgspec.field(default=None, name="external id")
    correlation: _Id = None
    stream: _Id = None
    collective: str | None = msgspec.field(default=None, name="Collective name")
    dtype: str | None = None
    in_nelems: _Num = msgspec.field(default=None, name="In msg nelems")
    out_nelems: _Num = msgspec.field(default=None, name="Out msg nelems")
    group_size: _Num = msgspec.field(default=None, name="Group size")
    pg_name: _Id = msgspec.field(default=None, name="Process Group Name")
    pg_id: _Id = msgspec.field(default=None, name="Process Group ID")
    seq: _Num = msgspec.field(default=None, name="Seq")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: _Id = None
    tid: _Id = None
    ts: _Num = None
    dur: _Num = None
    args: _Args | None = None


class _DistributedInfo(msgspec.Struct, gc=False):
    rank: _Id = None
    backend: str | None = None
    world_size: _Num = None
    nccl_version: str | None = None
    pg_config: msgspec.Raw = msgspec.Raw()


class _DeviceProperties(msgspec.Struct, gc=False):
    name: str | None = None
    computeMajor: _Num = None


class _Trace(msgspec.Struct, gc=False):
    traceEvents: list[_Event] | None = None
    distributedInfo: _DistributedInfo | None = None
    baseTimeNanoseconds: _Num = None
    deviceProperties: list[_DeviceProperties] | None = None
    host_name: str | None = None


_DECODER = msgspec.json.Decoder(_Trace | list[_Event])

# Older Kineto wrote other category names; map them to today's.
_CATEGORY_ALIASES = {
    "runtime": "cuda_runtime",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "operator": "cpu_op",
    "async_gpu": "gpu_user_annotation",
}
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
_COMM_PREFIXES = ("nccl:", "gloo:", "rccl:", "c10d::", "record_param_comms")
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
_TRACE_SUFFIXES = (".json", ".gz")
_MAX_US = 9.2e15  # int64 nanoseconds end here


@dataclass(frozen=True)
class RankMeta:
    """What one trace file says about its rank, besides its events."""

    path: str
    rank: int
    backend: str | None
    world_size: int | None
    nccl_version: str | None
    device_names: tuple[str, ...]
    compute_major: int | None  # CUDA compute capability major of the devices (7+ has tensor cores)
    host_name: str | None
    pg_config: tuple[dict, ...]
    dropped_events: int  # events with no or impossible duration


@dataclass(frozen=True)
class TraceSet:
    """All ranks of one run: the events table, the communication args table, and per-file facts."""

    events: pd.DataFrame
    comm_args: pd.DataFrame
    ranks: tuple[RankMeta, ...]
    skipped: tuple[tuple[str, str], ...] = field(default=())  # (file, reason)


def find_trace_files(path: str | Path) -> list[Path]:
    """Trace candidates: the file itself, or the ``.json``/``.gz`` files directly inside a folder."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise NoTracesError(f"{path}: no such file or folder")
    files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(_TRACE_SUFFIXES))
    if not files:
        raise NoTracesError(f"{path}: no trace files (*.json, *.json.gz) in this folder")
    return files


def read_traces(path: str | Path) -> TraceSet:
    """Read every trace under ``path`` into one table; non-trace JSON files in a folder are skipped and listed."""
    files = find_trace_files(path)
    single = len(files) == 1
    parts: list[tuple[RankMeta, pd.DataFrame, pd.DataFrame]] = []
    skipped: list[tuple[str, str]] = []
    for file in files:
        try:
            parts.append(read_rank(file, default_rank=0 if single else None))
        except NotATraceError as err:
            if Path(path).is_file():
                raise
            skipped.append((str(file), err.problem))
    if not parts:
        raise NoTracesError(f"{path}: no trace files; skipped: " + "; ".join(f"{f} ({r})" for f, r in skipped))
    return combine(parts, skipped)


def check_unique_ranks(metas) -> None:
    """Refuse two files that claim the same rank: one must never silently replace the other."""
    seen: dict[int, str] = {}
    for meta in metas:
        if meta.rank in seen:
            raise DuplicateRankError(meta.rank, seen[meta.rank], meta.path)
        seen[meta.rank] = meta.path


def combine(parts, skipped=()) -> TraceSet:
    """Join per-rank results into one TraceSet, refusing two files with the same rank."""
    check_unique_ranks(p[0] for p in parts)
    parts = sorted(parts, key=lambda p: p[0].rank)
    events = pd.concat([p[1] for p in parts], ignore_index=True)
    for col in ("cat", "name", "pid", "tid"):
        events[col] = events[col].astype("category")
    offsets = np.cumsum([0] + [len(p[1]) for p in parts[:-1]])
    comm_args = pd.concat([p[2].assign(row=p[2]["row"] + off) for p, off in zip(parts, offsets)], ignore_index=True)
    return TraceSet(events, comm_args, tuple(p[0] for p in parts), tuple(skipped))


def read_rank(path: str | Path, default_rank: int | None = None) -> tuple[RankMeta, pd.DataFrame, pd.DataFrame]:
    """Decode one trace file into (meta, events, comm_args) for its rank."""
    path = Path(path)
    trace = _decode(path, _load_bytes(path))
    events_list = trace if isinstance(trace, list) else trace.traceEvents
    if events_list is None:
        raise NotATraceError(path, "JSON without traceEvents: not a profiler trace")
    info = None if isinstance(trace, list) else trace.distributedInfo
    rank = _rank_of(path, info, default_rank)
    base_ns = 0 if isinstance(trace, list) else int(trace.baseTimeNanoseconds or 0)
    complete = [e for e in events_list if e.ph == "X"]
    if not complete and events_list and not any(e.ph for e in events_list):
        raise NotATraceError(path, "a JSON array whose items are not trace events", rank)
    events, comm_args, dropped = _tables(complete, rank, base_ns)
    props = () if isinstance(trace, list) else tuple(trace.deviceProperties or ())
    devices = tuple(d.name or "" for d in props)
    majors = [int(d.computeMajor) for d in props if d.computeMajor is not None]
    meta = RankMeta(
        path=str(path),
        rank=rank,
        backend=info.backend if info else None,
        world_size=int(info.world_size) if info and info.world_size is not None else None,
        nccl_version=info.nccl_version if info else None,
        device_names=devices,
        compute_major=min(majors) if majors else None,
        host_name=None if isinstance(trace, list) else trace.host_name,
        pg_config=tuple(_decode_raw(info.pg_config, list) or ()) if info else (),
        dropped_events=dropped,
    )
    return meta, events, comm_args


def _load_bytes(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise TraceReadError(path, f"cannot read: {err.strerror or err}") from None
    if data[:2] != b"\x1f\x8b":  # gzip is detected by its magic bytes, not the file name
        return data
    try:
        return gzip.decompress(data)
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise TruncatedTraceError(path, f"truncated or corrupt gzip ({err})") from None


def _decode(path: Path, data: bytes):
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as err:
        try:
            msgspec.json.decode(data)
        except msgspec.DecodeError:
            pass
        else:
            raise NotATraceError(path, f"JSON that is not a profiler trace ({err})") from None
        raise NotJSONError(path, f"not valid JSON ({err})") from None
    except msgspec.DecodeError as err:
        raise NotJSONError(path, f"not valid JSON ({err})") from None


def _rank_of(path: Path, info: _DistributedInfo | None, default_rank: int | None) -> int:
    if info is not None and info.rank is not None:
        try:
            return int(info.rank)
        except ValueError:
            pass
    match = _RANK_IN_NAME.search(path.name)
    if match:
        return int(match.group(1))
    if default_rank is not None:
        return default_rank
    raise RankUnknownError(path, "no rank in distributedInfo or the file name (rank3., rank-3, worker3)")


def _tables(events: list[_Event], rank: int, base_ns: int) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    n = len(events)
    args = [e.args for e in events]
    ts_ns = _to_ns([e.ts for e in events]) + base_ns
    dur_ns = _to_ns([e.dur for e in events])
    # No duration, a negative one (unfinished CPU events) or one longer than the whole trace: not usable.
    last_start = int(ts_ns.max()) if n else 0
    horizon = last_start + max(last_start - (int(ts_ns.min()) if n else 0), 1_000_000_000)
    bad = (dur_ns < 0) | (ts_ns + dur_ns > horizon)
    dur_ns[bad] = -1
    cats = [e.cat for e in events]
    names = [e.name for e in events]
    table = pd.DataFrame({
        "rank": np.full(n, rank, dtype=np.int32),
        "cat": pd.Categorical([_CATEGORY_ALIASES.get(c.lower(), c.lower()) for c in cats]),
        "name": pd.Categorical(names),
        "pid": pd.Categorical([str(e.pid) for e in events]),
        "tid": pd.Categorical([str(e.tid) for e in events]),
        "ts_ns": ts_ns,
        "dur_ns": dur_ns,
        "correlation": _ids([a.correlation if a is not None else None for a in args]),
        "external_id": _ids([_external_id(a) for a in args]),
        "stream": _ids([a.stream if a is not None else None for a in args]),
    })
    is_device = table["cat"].isin(DEVICE_CATEGORIES).to_numpy()
    tid_num = _ids([e.tid for e in events])
    table["stream"] = np.where(is_device & (table["stream"].to_numpy() < 0), tid_num, table["stream"].to_numpy())
    comm_rows = [i for i, (name, a) in enumerate(zip(names, args))
                 if name.startswith(_COMM_PREFIXES) or (a is not None and a.collective is not None)]
    return table, _comm_args(comm_rows, args, names, rank), int(bad.sum())


def _comm_args(rows: list[int], args: list[_Args | None], names: list[str], rank: int) -> pd.DataFrame:
    picked = [args[i] or _Args() for i in rows]
    dims = [_decode_raw(a.input_dims, list) for a in picked]
    types = [_decode_raw(a.input_type, list) for a in picked]
    return pd.DataFrame({
        "rank": np.full(len(rows), rank, dtype=np.int32),
        "row": np.asarray(rows, dtype=np.int64),  # within this rank; made global by combine()
        "collective": [a.collective for a in picked],  # from args only; None when the args do not say
        "pg": [_pg(a) for a in picked],
        "seq": _floats([a.seq for a in picked]),
        "in_nelems": _floats([a.in_nelems for a in picked]),
        "out_nelems": _floats([a.out_nelems for a in picked]),
        "dtype": [a.dtype for a in picked],
        "group_size": _floats([a.group_size for a in picked]),
        "input_nelems": _floats([_first_tensor_nelems(d) for d in dims]),
        "input_type": [t[0] if t else None for t in types],
    })


def _pg(a: _Args):
    value = a.pg_name if a.pg_name is not None else a.pg_id
    return None if value is None else str(value)


def _first_tensor_nelems(dims) -> float | None:
    """Elements of the first input tensor from ``Input Dims``; None when it is not a plain shape."""
    if not dims or not isinstance(dims[0], list) or not dims[0]:
        return None
    shape = dims[0]
    if not all(isinstance(d, int) for d in shape):
        return None
    return float(np.prod(shape, dtype=np.float64))


def _external_id(a: _Args | None):
    if a is None:
        return None
    return a.external_id if a.external_id is not None else a.external_id_old


def _decode_raw(raw, kind):
    if raw is None or len(raw) == 0:
        return None
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    if isinstance(value, str):  # "[0, 1]" written as a string
        try:
            value = msgspec.json.decode(value)
        except msgspec.DecodeError:
            return None
    return value if isinstance(value, kind) else None


def _to_ns(values: list) -> np.ndarray:
    """Microseconds (int or float with ns decimals) -> int64 ns, exact: the integer and fraction parts are split."""
    us = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    missing = np.isnan(us) | (np.abs(us) > _MAX_US)  # beyond int64 ns: an overflowed value, not a time
    us[missing] = 0.0
    whole = np.floor(us)
    ns = whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)
    ns[missing] = -1
    return ns


def _ids(values: list) -> np.ndarray:
    out = np.full(len(values), -1, dtype=np.int64)
    for_numeric = [i for i, v in enumerate(values) if isinstance(v, int)]
    if len(for_numeric) == len(values):
        return np.asarray(values, dtype=np.int64)
    out[for_numeric] = [values[i] for i in for_numeric]
    return out


def _floats(values: list) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
