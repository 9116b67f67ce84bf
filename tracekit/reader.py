"""Files -> one events table. Finds trace files, decodes only the fields tracekit uses, and tags each row with its rank.

The decoder is typed (msgspec): fields that are not declared below are skipped without being built,
which is what makes loading many times faster than ``json.load``. Events other than complete ("X") ones are not
built at all, columns are made from the structs without a Python call per event, and a large trace is decoded a
chunk of events at a time, so its structs never all exist at once. Paths may be local or fsspec URLs.
"""

from __future__ import annotations

import gzip
import io
import itertools
import operator
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Union

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
from isal import igzip
from isal.igzip_lib import IsalError

from tracekit.commnames import COLLECTIVE_OP
from tracekit.errors import (
    DuplicateRankError,
    EmptyTraceError,
    NotATraceError,
    NotJSONError,
    NoTracesError,
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
    device: _Id = None
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


def _retyped(struct: type, name: str, types: dict, drop: tuple = (), factories: dict | None = None, **options) -> type:
    """A copy of ``struct`` with some field types (and default factories) replaced: it follows fields added to it."""
    factories = factories or {}
    fields = [(f.name, types.get(f.name, f.type),
               msgspec.field(default_factory=factories[f.name], name=f.encode_name) if f.name in factories else
               msgspec.field(default=f.default, default_factory=f.default_factory, name=f.encode_name))
              for f in msgspec.structs.fields(struct) if f.name not in drop]
    return msgspec.defstruct(name, fields, **options)


# The fast decoders. A union tagged on "ph" builds complete ("X") events and makes every other phase (flows,
# counters, metadata: a third of a Kineto trace) an empty struct. What they refuse (an unknown phase, an event
# without "ph", "args": null) is decoded again by the general decoder above, which also names any error.
_OTHER_PHASES = ("B", "E", "i", "I", "C", "b", "n", "e", "s", "t", "f", "P", "O", "N", "D", "M", "V", "v", "R", "c",
                 "(", ")")
_Complete = _retyped(_Event, "_Complete", {"args": _Args}, drop=("ph",), factories={"args": _Args},
                     tag="X", tag_field="ph", gc=False)
_AnyEvent = Union[(_Complete, *(msgspec.defstruct(f"_Skipped{i}", [], tag=ph, tag_field="ph", gc=False)
                                for i, ph in enumerate(_OTHER_PHASES)))]
_FAST = msgspec.json.Decoder(_retyped(_Trace, "_FastTrace", {"traceEvents": list[_AnyEvent] | None})
                             | list[_AnyEvent])
_RAW = msgspec.json.Decoder(_retyped(_Trace, "_RawTrace", {"traceEvents": list[msgspec.Raw] | None})
                            | list[msgspec.Raw])
_CHUNK = msgspec.json.Decoder(list[_AnyEvent])
# Traces larger than this (as JSON) are decoded _CHUNK_EVENTS events at a time: a worker's peak memory is then the
# JSON plus one chunk's structs (measured: a 55 MB trace peaks at 133 MB over the imports instead of 251 MB, in the
# same time).
_CHUNK_ABOVE_BYTES = 16 << 20
_CHUNK_EVENTS = 20_000
_NO_ARGS = _Args()


class _Refused(Exception):
    """The fast decoders do not take this trace: read it again with the general one."""

# Older Kineto wrote other category names; map them to today's.
_CATEGORY_ALIASES = {
    "runtime": "cuda_runtime",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "operator": "cpu_op",
    "async_gpu": "gpu_user_annotation",
}
# Work that runs on a device: GPU kernels and copies, and MTIA's device events (``mtia_ccp_events``).
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events")
# Host calls that launch device work; a device event's ``correlation`` names one of them. Runtime calls come first:
# where a runtime call and a driver call share a correlation id, the runtime call is the launch.
RUNTIME_CATEGORIES = ("cuda_runtime", "mtia_runtime", "xpu_runtime", "privateuse1_runtime",
                      "cuda_driver", "xpu_driver", "privateuse1_driver")
# Categories only a trace of a device (GPU, MTIA, XPU, HPU, ...) has: its events, its API calls, its annotations.
DEVICE_API = re.compile(r"^(kernel|gpu_|cuda_|hip_|mtia_|xpu_|hpu_|mlu_|gcu_|privateuse1_)")
# Every category tracekit knows (today's names); events of other categories are kept as host events and reported.
KNOWN_CATEGORIES = frozenset((*DEVICE_CATEGORIES, *RUNTIME_CATEGORIES, "cpu_op", "user_annotation",
                              "gpu_user_annotation", "python_function", "cpu_instant_event", "overhead", "trace",
                              "cuda_sync", "cuda_event", "cuda_profiler_range", "mtia_insight", "mtia_counters",
                              "external_correlation", "collective_comm", "xpu_sync"))
# record_shapes is one switch for every op: the first CPU ops of a trace show whether shapes were recorded.
_SHAPE_PROBE_OPS = 1000
_COMM_PREFIXES = ("nccl:", "gloo:", "rccl:", "c10d::", "record_param_comms")
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
TRACE_SUFFIXES = (".json", ".gz")  # what a trace file's name ends with (".json.gz" included); the viewer uses it too
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
    first_ts_ns: int | None = None  # start of the earliest event with a usable duration (None: there is none)
    rank_source: str = "distributedInfo"  # where the rank came from: distributedInfo, file name, or only file
    shapes_recorded: bool | None = None  # Input Dims on CPU ops (record_shapes=True); None: no CPU op to tell
    unknown_categories: tuple[tuple[str, int], ...] = ()  # (category, events) of categories tracekit does not know
    device_evidence: str | None = None  # why this is a device rank (None: a CPU-only rank); see device_evidence()


@dataclass(frozen=True)
class TraceSet:
    """All ranks of one run: the events table, the communication args table, and per-file facts."""

    events: pd.DataFrame
    comm_args: pd.DataFrame
    ranks: tuple[RankMeta, ...]
    skipped: tuple[tuple[str, str], ...] = field(default=())  # (file, reason)


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


def read_rank(path: str | Path, default_rank: int | None = None,
              host_ops: Callable[[str], bool] | None = None) -> tuple[RankMeta, pd.DataFrame, pd.DataFrame]:
    """Decode one trace file (a local path or an fsspec URL) into (meta, events, comm_args) for its rank.

    ``host_ops``: None keeps every event. Otherwise, once a device event (kernel, memcpy, memset) has been seen,
    CPU ops (``cpu_op``) are kept only where ``host_ops(name)`` is true or they are communication calls: the
    analysis of a GPU rank reads a few host ops by name, and the rest (half of a Kineto trace) need no columns.
    ``meta.dropped_events`` and ``meta.first_ts_ns`` count every event either way.
    """
    path = _as_path(path)
    data = _load_bytes(path)
    try:
        return _read(path, data, default_rank, host_ops, fast=True)
    except _Refused:
        return _read(path, data, default_rank, host_ops, fast=False)


def _read(path: Path | str, data: bytes, default_rank: int | None, host_ops, fast: bool):
    trace, complete = _decode_fast(data) if fast else _decode_general(path, data)
    info = None if isinstance(trace, list) else trace.distributedInfo
    rank, rank_source = _rank_of(path, info, default_rank)
    base_ns = 0 if isinstance(trace, list) else int(trace.baseTimeNanoseconds or 0)
    if complete is None:
        raise NotATraceError(path, "a JSON array whose items are not trace events", rank)
    events, comm_args, dropped, first_ts_ns, facts = _tables(complete, rank, base_ns, host_ops)
    if len(events) == 0:
        raise EmptyTraceError(path, "an empty trace: it holds no events with a duration", rank)
    props = () if isinstance(trace, list) else tuple(trace.deviceProperties or ())
    devices = tuple(d.name or "" for d in props)
    counts = events["cat"].value_counts(sort=False)
    unknown = tuple((str(c), int(n)) for c, n in counts.items() if n > 0 and c not in KNOWN_CATEGORIES)
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
        first_ts_ns=first_ts_ns,
        rank_source=rank_source,
        shapes_recorded=facts["shapes_recorded"],
        unknown_categories=unknown,
        device_evidence=device_evidence(events, facts["device_arg_cats"], len(props),
                                        info.backend if info else None),
    )
    return meta, events, comm_args


def device_evidence(events: pd.DataFrame, device_arg_categories=(), devices: int = 0,
                    backend: str | None = None) -> str | None:
    """Why one rank's trace is a device (GPU, MTIA, ...) trace, or None for a CPU-only one.

    The trace says so by, first match wins: device events (kernels, copies, MTIA events); other events only a device
    trace has (runtime calls, ``gpu_*``, ``mtia_*``, ``cuda_profiler_range``...); events of an unknown category that
    carry a ``device`` arg; or ``deviceProperties`` listing a device, unless the rank communicates through gloo (the
    CPU backend: a CPU job profiled on a machine that has GPUs still lists them).
    """
    cats = [str(c) for c, n in events["cat"].value_counts(sort=False).items() if n > 0]
    found = sorted(c for c in cats if c in DEVICE_CATEGORIES)
    if found:
        return "device events (" + ", ".join(found) + ")"
    found = sorted(c for c in cats if DEVICE_API.match(c))
    if found:
        return "device API events (" + ", ".join(found) + ")"
    if device_arg_categories:
        return "a device arg on " + ", ".join(sorted(device_arg_categories)) + " events"
    names = events["name"].cat.categories if isinstance(events["name"].dtype, pd.CategoricalDtype) else \
        pd.Index(events["name"].astype(str).unique())
    gloo = backend == "gloo" or bool(names.astype(str).str.startswith("gloo:").any())
    return "deviceProperties" if devices and not gloo else None


def is_url(path: str | Path) -> bool:
    """Whether ``path`` is an fsspec URL (``s3://...``, ``memory://...``) rather than a local path."""
    return isinstance(path, str) and "://" in path


def _as_path(path: str | Path) -> Path | str:
    return path if is_url(path) else Path(path)


def _file_name(path: Path | str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] if isinstance(path, str) else path.name


def _load_bytes(path: Path | str) -> bytes | bytearray:
    try:
        if isinstance(path, str):
            import fsspec  # only URLs need it

            with fsspec.open(path, "rb") as f:
                data = f.read()
        else:
            data = path.read_bytes()
    except OSError as err:
        raise TraceReadError(path, f"cannot read: {err.strerror or err}") from None
    if data[:2] != b"\x1f\x8b":  # gzip is detected by its magic bytes, not the file name
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


def _decode_fast(data: bytes):
    """(trace, chunks of complete events) by the fast decoders; a large trace's chunks are decoded as they are used."""
    try:
        if len(data) > _CHUNK_ABOVE_BYTES:
            trace = _RAW.decode(data)
            raws = trace if isinstance(trace, list) else trace.traceEvents
            if raws is None:
                raise _Refused
            return trace, _raw_chunks(data, raws)
        trace = _FAST.decode(data)
    except msgspec.MsgspecError:
        raise _Refused from None
    events = trace if isinstance(trace, list) else trace.traceEvents
    if events is None:
        raise _Refused
    return trace, [[e for e in events if type(e) is _Complete]]


def _raw_chunks(data: bytes | bytearray, raws: list) -> Iterator[list]:
    """The complete events of ``raws`` (views into ``data``), decoded ``_CHUNK_EVENTS`` at a time.

    The byte range of every chunk is taken first and ``raws`` emptied, so its Raw objects are gone before any
    event struct is built.
    """
    base, pieces = _address(data), []
    for i in range(0, len(raws), _CHUNK_EVENTS):
        first, last = raws[i], raws[min(i + _CHUNK_EVENTS, len(raws)) - 1]
        start, end = _address(first) - base, _address(last) - base + len(last)
        pieces.append((start, end) if 0 <= start < end <= len(data) else b",".join(raws[i:i + _CHUNK_EVENTS]))
    raws.clear()
    return (_complete_events(memoryview(data)[p[0]:p[1]] if isinstance(p, tuple) else p) for p in pieces)


def _complete_events(body) -> list:
    """The complete events of ``body``, a comma-separated run of events."""
    try:
        events = _CHUNK.decode(b"".join((b"[", body, b"]")))
    except msgspec.MsgspecError:
        raise _Refused from None
    return [e for e in events if type(e) is _Complete]


def _address(buffer) -> int:
    return np.frombuffer(buffer, dtype=np.uint8).ctypes.data


def _decode_general(path: Path | str, data: bytes):
    """(trace, [complete events]) by the general decoder, or (trace, None) for an array of non-events."""
    trace = _decode(path, data)
    events_list = trace if isinstance(trace, list) else trace.traceEvents
    if events_list is None:
        raise NotATraceError(path, "JSON without traceEvents: not a profiler trace")
    complete = [e for e in events_list if e.ph == "X"]
    if not complete and events_list and not any(e.ph for e in events_list):
        return trace, None
    return trace, [complete]


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


def _rank_of(path: Path, info: _DistributedInfo | None, default_rank: int | None) -> tuple[int, str]:
    """(rank, where it came from: ``distributedInfo``, ``file name`` or ``only file``)."""
    if info is not None and info.rank is not None:
        try:
            return int(info.rank), "distributedInfo"
        except ValueError:
            pass
    match = _RANK_IN_NAME.search(_file_name(path))
    if match:
        return int(match.group(1)), "file name"
    if default_rank is not None:
        return default_rank, "only file"
    raise RankUnknownError(path, "no rank in distributedInfo or the file name (rank3., rank-3, worker3)")


def _tables(chunks: Iterable[list], rank: int, base_ns: int, host_ops=None):
    """(events, comm_args, events dropped, first usable start, facts) of one rank's chunks of complete events;
    facts: ``shapes_recorded`` (see RankMeta) and ``device_arg_cats``, the unknown categories with a ``device`` arg."""
    keep_name = _NameFilter(host_ops)
    parts = [_chunk_columns(events, keep_name) for events in chunks]
    n = sum(len(p["ts"]) for p in parts)
    # Times of every event: the table's rows first, then the CPU ops left out (they count for dropped and first).
    ts_ns = _to_ns(np.concatenate([p["ts"] for p in parts] + [p["left_ts"] for p in parts] + [np.empty(0)])) + base_ns
    dur_ns = _to_ns(np.concatenate([p["dur"] for p in parts] + [p["left_dur"] for p in parts] + [np.empty(0)]))
    # No duration, a negative one (unfinished CPU events) or one longer than the whole trace: not usable.
    last_start = int(ts_ns.max()) if len(ts_ns) else 0
    horizon = last_start + max(last_start - (int(ts_ns.min()) if len(ts_ns) else 0), 1_000_000_000)
    bad = (dur_ns < 0) | (ts_ns + dur_ns > horizon)
    dur_ns[bad] = -1
    first_ts_ns = int(ts_ns[~bad].min()) if (~bad).any() else None
    dropped = int(bad.sum())
    ts_ns, dur_ns = ts_ns[:n], dur_ns[:n]
    table = pd.DataFrame({
        "rank": np.full(n, rank, dtype=np.int32),
        "cat": _categorical([p["cat"] for p in parts], _category),
        "name": _categorical([p["name"] for p in parts]),
        "pid": _categorical([p["pid"] for p in parts], str),
        "tid": _categorical([p["tid"] for p in parts], str),
        "ts_ns": ts_ns,
        "dur_ns": dur_ns,
        "correlation": _joined(parts, "correlation", np.int64),
        "external_id": _joined(parts, "external_id", np.int64),
        "stream": _joined(parts, "stream", np.int64),
    })
    is_device = table["cat"].isin(DEVICE_CATEGORIES).to_numpy()
    tid_num = _joined(parts, "tid_num", np.int64)
    table["stream"] = np.where(is_device & (table["stream"].to_numpy() < 0), tid_num, table["stream"].to_numpy())
    offsets = np.cumsum([0] + [len(p["ts"]) for p in parts])
    comm_rows = [int(row + off) for p, off in zip(parts, offsets) for row in p["comm_rows"]]
    args = dict(zip(comm_rows, [a for p in parts for a in p["comm_args"]]))
    names = dict(zip(comm_rows, [name for p in parts for name in p["comm_names"]]))
    shapes = [p["shapes"] for p in parts if p["shapes"] is not None]
    facts = {"shapes_recorded": any(shapes) if shapes else None,
             "device_arg_cats": {c for p in parts for c in p["device_arg_cats"]}}
    return table, _comm_args(comm_rows, args, names, rank), dropped, first_ts_ns, facts


def _category(cat: str) -> str:
    """A Kineto category as today's traces name it."""
    return _CATEGORY_ALIASES.get(cat.lower(), cat.lower())


class _NameFilter:
    """Which CPU ops to keep (see ``read_rank``'s ``host_ops``): asks ``host_ops`` once per distinct name, and starts
    leaving ops out only once a device event has been seen, so a CPU-only trace keeps every op."""

    def __init__(self, host_ops: Callable[[str], bool] | None) -> None:
        self.host_ops, self.device_seen, self.cpu_op_cats = host_ops, False, set()
        self.wanted = _Lookup(lambda name: isinstance(name, str) and bool(host_ops(name)))

    def split(self, events: list) -> tuple[list, list]:
        """(events to keep, CPU ops left out) of one chunk."""
        if self.host_ops is None:
            return events, []
        cats = {e.cat for e in events}
        self.cpu_op_cats |= {c for c in cats if _category(c) == "cpu_op"}
        self.device_seen = self.device_seen or any(_category(c) in DEVICE_CATEGORIES for c in cats)
        if not self.device_seen:
            return events, []
        cpu_op, wanted = self.cpu_op_cats, self.wanted
        keep = [e.cat not in cpu_op or wanted[e.name] or (e.args is not None and e.args.collective is not None)
                for e in events]
        return list(itertools.compress(events, keep)), list(itertools.compress(events, map(operator.not_, keep)))


class _Lookup(dict):
    """A dict that computes a missing value once, from its key."""

    def __init__(self, compute: Callable) -> None:
        super().__init__()
        self.compute = compute

    def __missing__(self, key):
        value = self[key] = self.compute(key)
        return value


def _chunk_columns(events: list, keep_name: _NameFilter) -> dict:
    """One chunk of complete events as columns: numbers as arrays, strings as (codes, distinct values).

    One list comprehension per field (the cheapest way to read a struct field per event), then vectorized work.
    CPU ops that ``keep_name`` leaves out get no row: only their times are kept (``left_ts``, ``left_dur``).
    """
    shapes = _shapes_recorded(events)
    events, left = keep_name.split(events)
    args = [e.args or _NO_ARGS for e in events]  # the general decoder leaves args None when there are none
    cats = _factorized([e.cat for e in events])
    unknown = {c for c in cats[1] if _category(c) not in KNOWN_CATEGORIES}
    name = [e.name for e in events]
    names = _factorized(name)
    tids = _factorized([e.tid for e in events], mixed=True)
    comm_name = np.fromiter((n.startswith(_COMM_PREFIXES) or COLLECTIVE_OP.search(n) is not None for n in names[1]),
                            dtype=bool, count=len(names[1]))
    has_collective = pa.array([a.collective for a in args], type=pa.string()).is_valid()
    comm_rows = np.flatnonzero(comm_name[names[0]] | has_collective.to_numpy(zero_copy_only=False))
    return {
        "ts": _floats_of(events, "ts"), "dur": _floats_of(events, "dur"),
        "cat": cats, "name": names,
        "pid": _factorized([e.pid for e in events], mixed=True), "tid": tids, "tid_num": _ids(tids[1])[tids[0]],
        "correlation": _ids([a.correlation for a in args]), "stream": _ids([a.stream for a in args]),
        "external_id": _ids([a.external_id if a.external_id is not None else a.external_id_old for a in args]),
        "comm_rows": comm_rows, "comm_args": [args[i] for i in comm_rows], "comm_names": [name[i] for i in comm_rows],
        "left_ts": _floats_of(left, "ts"), "left_dur": _floats_of(left, "dur"),
        "shapes": shapes,
        "device_arg_cats": {_category(e.cat) for e in events if e.cat in unknown and e.args is not None
                            and e.args.device is not None} if unknown else set(),
    }


def _shapes_recorded(events: list) -> bool | None:
    """Whether the first CPU ops of a chunk carry ``Input Dims`` (``record_shapes=True``); None without CPU ops."""
    ops = list(itertools.islice((e for e in events if _category(e.cat) == "cpu_op"), _SHAPE_PROBE_OPS))
    if not ops:
        return None
    return any(e.args is not None and len(e.args.input_dims) > 0 for e in ops)


def _floats_of(events: list, attr: str) -> np.ndarray:
    """Field ``attr`` of every event, int or float, as float64; None -> NaN (as ``np.array(..., dtype=float)``)."""
    get = operator.attrgetter(attr)
    try:
        return np.fromiter(map(get, events), dtype=np.float64, count=len(events))
    except TypeError:  # None among them
        return np.array([np.nan if v is None else v for v in map(get, events)], dtype=np.float64)


def _joined(parts: list[dict], key: str, dtype) -> np.ndarray:
    return np.concatenate([p[key] for p in parts]) if parts else np.empty(0, dtype=dtype)


def _factorized(values: list, mixed: bool = False) -> tuple[np.ndarray, list]:
    """(codes, distinct values): every value, None included, has a code. ``mixed``: expect ints and strings."""
    try:  # one type (all strings, or all integers): Arrow's hash table
        if mixed:
            raise pa.ArrowTypeError("pid and tid mix numbers and names in Kineto traces")
        encoded = pa.array(values).dictionary_encode(null_encoding="encode")
        return encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary.to_pylist()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        distinct = list(dict.fromkeys(values))
        code_of = {v: i for i, v in enumerate(distinct)}
        return np.fromiter(map(code_of.__getitem__, values), dtype=np.int64, count=len(values)), distinct


def _categorical(pieces: list[tuple[np.ndarray, list]], relabel=None) -> pd.Categorical:
    """``pd.Categorical`` of the relabelled values of all pieces; ``relabel`` is called once per distinct value."""
    labels = [[relabel(u) for u in uniques] if relabel else uniques for _, uniques in pieces]
    categories = sorted({label for piece in labels for label in piece})
    code_of = {c: i for i, c in enumerate(categories)}
    codes = [np.array([code_of[label] for label in piece], dtype=np.int64)[c] for (c, _), piece in zip(pieces, labels)]
    return pd.Categorical.from_codes(np.concatenate(codes) if codes else np.empty(0, dtype=np.int64), categories)


def _comm_args(rows: list[int], args: dict[int, _Args | None], names: dict[int, str], rank: int) -> pd.DataFrame:
    picked = [args[i] or _Args() for i in rows]
    tensors = [_first_tensor_nelems(_decode_raw(a.input_dims, list), _decode_raw(a.input_type, list)) for a in picked]
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
        "input_nelems": _floats([t[0] for t in tensors]),
        "input_type": [t[1] for t in tensors],
        "second_nelems": _floats([t[2] for t in tensors]),
    })


def _pg(a: _Args):
    value = a.pg_name if a.pg_name is not None else a.pg_id
    return None if value is None else str(value)


# "Input type" of inputs that are not tensors (ints, strings, process groups), and of lists of tensors.
_NOT_TENSOR = ("", "Scalar", "ScalarList", "ScalarType", "None", "String")
_TENSOR_LIST = ("TensorList", "GenericList")


def _first_tensor_nelems(dims, types) -> tuple[float | None, str | None, float | None]:
    """From ``Input Dims``/``Input type``: (elements, type) of the first input tensor, and the elements of the input
    right after it when that is a plain tensor too (c10d's ``*_base_`` ops take output, input); None where unknown.

    Leading inputs that are not tensors are passed over (vLLM's ``_C_custom_ar::all_reduce`` takes a handle first);
    a list of tensors ends the search, since its tensors' sizes are not recorded. A 0-dim tensor (``[]`` with a
    dtype, as in ``dist.all_reduce(loss)``) has one element.
    """
    if not dims or not types:
        return None, None, None
    for i, (shape, kind) in enumerate(zip(dims, types)):
        if not isinstance(kind, str) or kind in _TENSOR_LIST:
            return None, None, None
        if kind in _NOT_TENSOR:
            continue
        nelems = _nelems(shape)
        if nelems is None:
            return None, None, None
        after = i + 1 < min(len(dims), len(types)) and isinstance(types[i + 1], str) and \
            types[i + 1] not in _NOT_TENSOR + _TENSOR_LIST
        return nelems, kind, _nelems(dims[i + 1]) if after else None
    return None, None, None


def _nelems(shape) -> float | None:
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        return None
    return float(np.prod(shape, dtype=np.float64))


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


def _to_ns(values) -> np.ndarray:
    """Microseconds (int or float with ns decimals) -> int64 ns, exact: the integer and fraction parts are split."""
    us = np.array(values, dtype=np.float64)  # None becomes NaN
    missing = np.isnan(us) | (np.abs(us) > _MAX_US)  # beyond int64 ns: an overflowed value, not a time
    us[missing] = 0.0
    whole = np.floor(us)
    ns = whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)
    ns[missing] = -1
    return ns


def _ids(values) -> np.ndarray:
    """Integer ids as int64; -1 where a value is missing or not an integer."""
    try:
        return pa.array(values, type=pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False, writable=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # strings among the ids
        return _ids_of_mixed(values)


def _ids_of_mixed(values) -> np.ndarray:
    out = np.full(len(values), -1, dtype=np.int64)
    for_numeric = [i for i, v in enumerate(values) if isinstance(v, int)]
    if len(for_numeric) == len(values):
        return np.asarray(values, dtype=np.int64)
    out[for_numeric] = [values[i] for i in for_numeric]
    return out


def _floats(values: list) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
