"""One trace file -> its rank's events table: reads the bytes, picks a decoder, and tags each row with the rank.

A trace is first decoded by the fast decoders (``tracekit.read.kineto``), which build complete ("X") events only. A
large trace is streamed (``tracekit.read.stream``): inflated and decoded a chunk of events at a time (``ReadOptions``),
so neither its bytes nor its structs ever all exist at once. What the fast decoders refuse is decoded again, whole,
by the general decoder, which also names any error. Columns are made from the
structs by ``tracekit.read.columns``; files are found and inflated by ``tracekit.read.files``. Paths may be local or fsspec URLs.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import msgspec
import numpy as np
import pandas as pd

from tracekit.read.categories import KNOWN_CATEGORIES, device_evidence
from tracekit.errors import (EmptyTraceError, NotATraceError, NotJSONError, RankUnknownError, TraceReadError,
                             TruncatedTraceError)
from tracekit.read.columns import collect_chunks, collect_parts, finish_tables
from tracekit.read.files import as_path, load_bytes, rank_in_file_name
from tracekit.read.meta import RankMeta, RankTables
from tracekit.read.kineto import CHUNK_DECODER, FAST_DECODER, MEMORY_EVENT, TRACE_DECODER, DistributedInfo, decode_raw
from tracekit.read.pairs import by_kind, paired, split_events
from tracekit.read.parallel import collect_parallel
from tracekit.read.stream import EventStream, open_trace, read_block

__all__ = ["RankMeta", "RankTables", "ReadOptions", "read_rank", "read_tables"]


@dataclass(frozen=True, kw_only=True)
class ReadOptions:
    """How ``read_rank`` decodes a trace file.

    chunk_above_bytes: a trace larger than this (as JSON) is streamed, ``chunk_events`` events at a time: a worker
      then holds one block of the file and one chunk's structs besides the columns, never the whole JSON. 0 streams
      every trace.
    chunk_events: events per chunk.
    decode_workers: helper processes that decode a streamed trace's chunks (``tracekit.read.parallel``: at most 4,
      forked only from a single-threaded process, each holding up to two chunks); 1 for none, in this process.
    """

    chunk_above_bytes: int = 16 << 20
    chunk_events: int = 20_000
    decode_workers: int = 1

    def __post_init__(self) -> None:
        if self.chunk_above_bytes < 0:
            raise ValueError(f"chunk_above_bytes must be 0 or more; got {self.chunk_above_bytes}")
        if self.chunk_events < 1:
            raise ValueError(f"chunk_events must be 1 or more; got {self.chunk_events}")
        if self.decode_workers < 1:
            raise ValueError(f"decode_workers must be 1 or more; got {self.decode_workers}")


class _Refused(Exception):
    """The fast decoders do not take this trace: read it again with the general one."""


def read_rank(path: str | Path, default_rank: int | None = None,
              host_ops: Callable[[str], bool] | None = None,
              options: ReadOptions = ReadOptions()) -> tuple[RankMeta, pd.DataFrame, pd.DataFrame]:
    """(meta, events, comm_args) of ``read_tables``."""
    tables = read_tables(path, default_rank, host_ops, options)
    return tables.meta, tables.events, tables.comm_args


def read_tables(path: str | Path, default_rank: int | None = None,
                host_ops: Callable[[str], bool] | None = None,
                options: ReadOptions = ReadOptions()) -> RankTables:
    """Decode one trace file (a local path or an fsspec URL) into its rank's tables (``RankTables``).

    ``host_ops``: None keeps every event. Otherwise, once a device event (kernel, memcpy, memset) has been seen,
    CPU ops (``cpu_op``) are kept only where ``host_ops(name)`` is true or they are communication calls: the
    analysis of a GPU rank reads a few host ops by name, and the rest (half of a Kineto trace) need no columns.
    ``meta.dropped_events`` and ``meta.first_ts_ns`` count every event either way.
    ``options``: how the trace is decoded (chunk sizes, helper processes); the result does not depend on them.
    """
    path = as_path(path)
    with open_trace(path) as stream:
        try:
            first = read_block(stream, path, options.chunk_above_bytes + 1)
        except TruncatedTraceError:
            first = None  # the gzip module names what is wrong, below
        if first is not None and len(first) > options.chunk_above_bytes:
            return _read_streamed(path, EventStream(stream, path, first, options.chunk_events), default_rank,
                                  host_ops, options.decode_workers)
    return _read_whole(path, load_bytes(path) if first is None else first, default_rank, host_ops)


def _read_whole(path, data: bytes, default_rank, host_ops) -> RankTables:
    """``read_tables`` of a whole document: its events in chunks by the compiled pass (``_read_chunked``), and what
    that refuses by the fast decoders, then by the general one."""
    if len(data) < 64 and not bytes(data).strip():  # a JSON parser would call it truncated, hiding the cause
        raise EmptyTraceError(path, "empty file (no JSON in it)")
    try:
        return _read_chunked(path, EventStream(io.BytesIO(), path, data, ReadOptions().chunk_events), default_rank,
                             host_ops)
    except _Refused:
        pass
    try:
        return _read(path, data, default_rank, host_ops, fast=True)
    except _Refused:
        return _read(path, data, default_rank, host_ops, fast=False)


def _read_streamed(path, events: EventStream, default_rank, host_ops, workers: int = 1) -> RankTables:
    """``read_tables`` of a large trace, a chunk at a time (by ``workers`` helper processes when more than one);
    what is refused is read again whole."""
    if not events.found:
        return _read_whole(path, events.document(), default_rank, host_ops)
    try:
        if workers == 1:
            return _read_chunked(path, events, default_rank, host_ops)
        parts = collect_parallel(events.chunks(), _complete_events, host_ops, workers, events.chunk_events)
        trace = _header(events)
    except (_Refused, ValueError):  # msgspec's errors are ValueErrors too
        data = load_bytes(path)
    else:
        return _tables(path, trace, parts, default_rank)
    try:
        return _read(path, data, default_rank, host_ops, fast=True)
    except _Refused:
        return _read(path, data, default_rank, host_ops, fast=False)


def _read_chunked(path, events: EventStream, default_rank, host_ops) -> RankTables:
    """``read_tables`` of a document's events array, chunk by chunk (``columns.collect_chunks``); raises _Refused
    where the document has no events array the scan finds, or a chunk the fast decoders refuse."""
    if not events.found:
        raise _Refused
    parts = collect_chunks(_scanned(events), _complete_events, host_ops, events.chunk_events)
    return _tables(path, _header(events), parts, default_rank)


def _scanned(events: EventStream):
    """The stream's chunks; what its scan cannot cut (an item that is not an object, a document that ends inside
    the array) is refused, to be read whole, where the general decoder names the error."""
    try:
        yield from events.chunks()
    except ValueError:
        raise _Refused from None


def _header(events: EventStream):
    """The document without its events, decoded (``chunks()`` exhausted)."""
    try:
        return FAST_DECODER.decode(events.trace_bytes())
    except ValueError:
        raise _Refused from None


def _read(path: Path | str, data: bytes, default_rank: int | None, host_ops, fast: bool) -> RankTables:
    trace, complete = _decode_fast(data) if fast else _decode_general(path, data)
    if complete is None:
        rank = _rank_of(path, None if isinstance(trace, list) else trace.distributedInfo, default_rank)[0]
        raise NotATraceError(path, "a JSON array whose items are not trace events", rank)
    return _tables(path, trace, collect_parts(complete, host_ops), default_rank)


def _latest_ns(parts) -> int:
    """The latest start (ns from the base, a Python int) of the chunk columns' events, host ops and ``[memory]``
    events. (A duration past the trace's horizon drops its event: ``columns.finish_tables``.)"""
    events, ops, memory = parts
    starts = [a for p in events for a in (p["ts"], p["left_ts"])] + [p["ts"] for p in ops] + [p["ts"] for p in memory]
    return max((int(a.max()) for a in starts if len(a)), default=0)


def _tables(path: Path | str, trace, parts, default_rank: int | None) -> RankTables:
    """The rank's tables from its decoded header (``trace``) and its events' columns (``parts``)."""
    info = None if isinstance(trace, list) else trace.distributedInfo
    rank, rank_source = _rank_of(path, info, default_rank)
    base_ns = 0 if isinstance(trace, list) else int(trace.baseTimeNanoseconds or 0)
    if _latest_ns(parts) + base_ns > np.iinfo(np.int64).max:  # would wrap around: every time after it wrong
        raise TraceReadError(path, f"event starts up to {_latest_ns(parts) / 1e3:.0f} us after baseTimeNanoseconds "
                             f"{base_ns} pass the nanoseconds int64 holds (year 2262): not times of one run", rank)
    events, comm_args, dropped, first_ts_ns, facts = finish_tables(parts, rank, base_ns)
    memory_bytes = [float(d.totalGlobalMem) for d in (() if isinstance(trace, list) else trace.deviceProperties or ())
                    if d.totalGlobalMem is not None]
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
        pg_config=tuple(decode_raw(info.pg_config, list) or ()) if info else (),
        dropped_events=dropped,
        first_ts_ns=first_ts_ns,
        rank_source=rank_source,
        shapes_recorded=facts["shapes_recorded"],
        unknown_categories=unknown,
        device_evidence=device_evidence(events, facts["device_arg_cats"], len(props),
                                        info.backend if info else None),
        device_memory_bytes=tuple(memory_bytes),
    )
    return RankTables(meta=meta, events=events, comm_args=comm_args, ops=facts["ops"], memory=facts["memory"])


def _decode_fast(data: bytes):
    """(trace, [its complete and memory events]) by the fast decoder."""
    try:
        trace = FAST_DECODER.decode(data)
    except msgspec.MsgspecError:
        raise _Refused from None
    events = trace if isinstance(trace, list) else trace.traceEvents
    if events is None:
        raise _Refused
    return trace, [split_events(events)]


def _complete_events(chunk) -> tuple[list, list]:
    """The complete events and ``[memory]`` events of ``chunk``, the bytes of a JSON array of events."""
    try:
        events = CHUNK_DECODER.decode(chunk)
    except msgspec.MsgspecError:
        raise _Refused from None
    complete, memory, marks = by_kind(events)
    if marks:  # a span may cross chunks: pair them whole
        raise _Refused
    return complete, memory


def _decode_general(path: Path | str, data: bytes):
    """(trace, [complete events]) by the general decoder, or (trace, None) for an array of non-events."""
    trace = _decode(path, data)
    events_list = trace if isinstance(trace, list) else trace.traceEvents
    if events_list is None:
        raise NotATraceError(path, "JSON without traceEvents: not a profiler trace")
    marks = [e for e in events_list if e.ph in ("B", "E")]
    complete = [e for e in events_list if e.ph == "X"] + paired(
        marks, [e.ph == "B" for e in marks],
        lambda b, dur: msgspec.structs.replace(b, ph="X", dur=dur, name=b.name if b.ph == "B" else ""))
    if not complete and events_list and not any(e.ph for e in events_list):
        return trace, None
    return trace, [(complete, [e for e in events_list if e.ph in ("i", "I") and e.name == MEMORY_EVENT])]


def _decode(path: Path, data: bytes):
    try:
        return TRACE_DECODER.decode(data)
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


def _rank_of(path: Path, info: DistributedInfo | None, default_rank: int | None) -> tuple[int, str]:
    """(rank, where it came from: ``distributedInfo``, ``file name`` or ``only file``)."""
    if info is not None and info.rank is not None:
        try:
            return int(info.rank), "distributedInfo"
        except ValueError:
            pass
    from_name = rank_in_file_name(path)
    if from_name is not None:
        return from_name, "file name"
    if default_rank is not None:
        return default_rank, "only file"
    raise RankUnknownError(path, "no rank in distributedInfo or the file name (rank3., rank-3, worker3)")
