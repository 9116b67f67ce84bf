"""Decoded events -> columns: one rank's complete events become its events table and its communication args table.

Strings become categoricals, ids int64 (-1: none), times exact int64 nanoseconds, without a Python call per event.
Chunks of events are turned into columns one at a time, so a large trace's structs never all exist at once.
"""

from __future__ import annotations

import itertools
import operator
from typing import Callable, Iterable

import numpy as np
import pandas as pd
import pyarrow as pa

from tracekit.read.coded import categorical, factorized, floats_of, to_ns
from tracekit.read.categories import DEVICE_CATEGORIES, KNOWN_CATEGORIES, canonical_category
from tracekit.commnames import COLLECTIVE_OP, HOST_COMM_PREFIXES
from tracekit.read.kineto import NO_ARGS
from tracekit.read.bytecolumns import NotTaken, chunk_parts
from tracekit.read.commargs import comm_args_table
from tracekit.read.opcolumns import SHAPE_PROBE_OPS, memory_columns, memory_table, op_columns, op_table



def collect_parts(chunks: Iterable[tuple[list, list]], host_ops=None) -> tuple[list, list, list]:
    """The columns of each chunk (events, ops, memory), built as the chunks come: a chunk's structs can go once
    its columns exist. The rank and the time base are not needed yet (a streamed trace may give them last)."""
    keep_name = _NameFilter(host_ops)
    parts, ops, memory = [], [], []
    for events, instants in chunks:
        ops.append(op_columns(events))
        parts.append(_chunk_columns(events, keep_name))
        memory.append(memory_columns(instants))
    return parts, ops, memory


def collect_chunks(chunks: Iterable, decode: Callable, host_ops=None,
                   cap: int | None = None) -> tuple[list, list, list]:
    """``collect_parts`` of chunks given as bytes (each a JSON array of events): made by the compiled pass
    (``bytecolumns.chunk_parts``), or, where it does not take a chunk, of ``decode(chunk)``'s structs (its complete
    and ``[memory]`` events); the columns are the same either way. ``cap``: the most events a chunk holds (None:
    unknown)."""
    keep_name = _NameFilter(host_ops)
    parts, ops, memory = [], [], []
    for chunk in chunks:
        try:
            part, op, mem = chunk_parts(chunk, keep_name, cap)
        except NotTaken:
            events, instants = decode(chunk)
            part, op, mem = _chunk_columns(events, keep_name), op_columns(events), memory_columns(instants)
        parts.append(part)
        ops.append(op)
        memory.append(mem)
    return parts, ops, memory


def finish_tables(collected: tuple[list, list, list], rank: int, base_ns: int):
    """(events, comm_args, events dropped, first usable start, facts) of one rank's chunk columns
    (``collect_parts``); facts: ``shapes_recorded`` (see RankMeta), ``device_arg_cats`` (the unknown categories
    with a ``device`` arg), ``ops`` (every host op and annotation, ``OP_COLUMNS``) and ``memory``
    (``MEMORY_COLUMNS``).

    The chunk columns are consumed: each column's pieces are taken out of ``collected`` as they are joined, so the
    chunks' copy of a column ends once the table's exists, and a large trace never holds both copies of every
    column at once."""
    parts, ops, memory = collected
    n = sum(len(p["ts"]) for p in parts)
    offsets = np.cumsum([0] + [len(p["ts"]) for p in parts])
    # Times of every event: the table's rows first, then the CPU ops left out (they count for dropped and first).
    ts_ns = _taken(parts, ["ts", "left_ts"], np.int64)
    ts_ns += base_ns
    dur_ns = _taken(parts, ["dur", "left_dur"], np.int64)
    # No duration, a negative one (unfinished CPU events) or one longer than the whole trace: not usable.
    last_start = int(ts_ns.max()) if len(ts_ns) else 0
    horizon = min(last_start + max(last_start - (int(ts_ns.min()) if len(ts_ns) else 0), 1_000_000_000),
                  int(np.iinfo(np.int64).max))
    bad = (dur_ns < 0) | (dur_ns > horizon - ts_ns)  # not ts + dur: a duration near int64's end would wrap
    dur_ns[bad] = -1
    first_ts_ns = int(ts_ns[~bad].min()) if (~bad).any() else None
    dropped = int(bad.sum())
    del bad
    ts_ns, dur_ns = ts_ns[:n].copy(), dur_ns[:n].copy()  # the left-out ops' times end here
    table = pd.DataFrame({
        "rank": np.full(n, rank, dtype=np.int32),
        "cat": categorical(_pieces(parts, "cat"), canonical_category),
        "name": categorical(_pieces(parts, "name")),
        "pid": categorical(_pieces(parts, "pid"), str),
        "tid": categorical(_pieces(parts, "tid"), str),
        "ts_ns": ts_ns,
        "dur_ns": dur_ns,
        "correlation": _taken(parts, ["correlation"], np.int64),
        "external_id": _taken(parts, ["external_id"], np.int64),
        "stream": _taken(parts, ["stream"], np.int64),
    }, copy=False)
    del ts_ns, dur_ns
    is_device = table["cat"].isin(DEVICE_CATEGORIES).to_numpy()
    tid_num = _taken(parts, ["tid_num"], np.int64)
    table["stream"] = np.where(is_device & (table["stream"].to_numpy() < 0), tid_num, table["stream"].to_numpy())
    del tid_num, is_device
    comm_rows = [int(row + off) for p, off in zip(parts, offsets) for row in p["comm_rows"]]
    args = dict(zip(comm_rows, [a for p in parts for a in p["comm_args"]]))
    names = dict(zip(comm_rows, [name for p in parts for name in p["comm_names"]]))
    shapes = [p["shapes"] for p in parts if p["shapes"] is not None]
    facts = {"shapes_recorded": any(shapes) if shapes else None,
             "device_arg_cats": {c for p in parts for c in p["device_arg_cats"]},
             "ops": op_table(ops, rank, base_ns, horizon), "memory": memory_table(memory, rank, base_ns)}
    return table, comm_args_table(comm_rows, args, names, rank), dropped, first_ts_ns, facts


def _pieces(parts: list[dict], key: str) -> list:
    """Every chunk's ``key``, taken out of the chunks (``finish_tables`` consumes them)."""
    return [p.pop(key) for p in parts]


def _taken(parts: list[dict], keys: list[str], dtype) -> np.ndarray:
    """The chunks' arrays under ``keys`` (all chunks' first key, then the next), joined and taken out of them."""
    return np.concatenate([p.pop(key) for key in keys for p in parts] + [np.empty(0, dtype=dtype)])


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
        self.cpu_op_cats |= {c for c in cats if canonical_category(c) == "cpu_op"}
        self.device_seen = self.device_seen or any(canonical_category(c) in DEVICE_CATEGORIES for c in cats)
        if not self.device_seen:
            return events, []
        cpu_op, wanted = self.cpu_op_cats, self.wanted
        keep = [e.cat not in cpu_op or wanted[e.name] or (e.args is not None and e.args.collective is not None)
                for e in events]
        return list(itertools.compress(events, keep)), list(itertools.compress(events, map(operator.not_, keep)))


    def keep_mask(self, cats: tuple[np.ndarray, list], names: tuple[np.ndarray, list],
                  has_collective: np.ndarray) -> np.ndarray | None:
        """``split`` of one chunk's complete events given as coded columns: which to keep (None: all)."""
        if self.host_ops is None:
            return None
        self.cpu_op_cats |= {c for c in cats[1] if canonical_category(c) == "cpu_op"}
        self.device_seen = self.device_seen or any(canonical_category(c) in DEVICE_CATEGORIES for c in cats[1])
        if not self.device_seen:
            return None
        is_cpu_op = np.array([c in self.cpu_op_cats for c in cats[1]], dtype=bool)
        wanted = np.array([self.wanted[n] for n in names[1]], dtype=bool)
        if len(cats[0]) == 0:
            return np.zeros(0, dtype=bool)
        return ~is_cpu_op[cats[0]] | wanted[names[0]] | has_collective


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
    args = [e.args or NO_ARGS for e in events]  # the general decoder leaves args None when there are none
    cats = factorized([e.cat for e in events])
    unknown = {c for c in cats[1] if canonical_category(c) not in KNOWN_CATEGORIES}
    name = [e.name for e in events]
    names = factorized(name)
    tids = factorized([e.tid for e in events], mixed=True)
    comm_name = np.fromiter((n.startswith(HOST_COMM_PREFIXES) or COLLECTIVE_OP.search(n) is not None
                             for n in names[1]), dtype=bool, count=len(names[1]))
    has_collective = pa.array([a.collective for a in args], type=pa.string()).is_valid()
    comm_rows = np.flatnonzero(comm_name[names[0]] | has_collective.to_numpy(zero_copy_only=False))
    return {
        "ts": to_ns(floats_of(events, "ts")), "dur": to_ns(floats_of(events, "dur")),
        "cat": cats, "name": names,
        "pid": factorized([e.pid for e in events], mixed=True), "tid": tids, "tid_num": _ids(tids[1])[tids[0]],
        "correlation": _ids([a.correlation for a in args]), "stream": _ids([a.stream for a in args]),
        "external_id": _ids([a.external_id if a.external_id is not None else a.external_id_old for a in args]),
        "comm_rows": comm_rows, "comm_args": [args[i] for i in comm_rows], "comm_names": [name[i] for i in comm_rows],
        "left_ts": to_ns(floats_of(left, "ts")), "left_dur": to_ns(floats_of(left, "dur")),
        "shapes": shapes,
        "device_arg_cats": {canonical_category(e.cat) for e in events if e.cat in unknown and e.args is not None
                            and e.args.device is not None} if unknown else set(),
    }


def _shapes_recorded(events: list) -> bool | None:
    """Whether the first CPU ops of a chunk carry ``Input Dims`` (``record_shapes=True``); None without CPU ops."""
    cpu_op = {c for c in {e.cat for e in events} if canonical_category(c) == "cpu_op"}
    ops = list(itertools.islice((e for e in events if e.cat in cpu_op), SHAPE_PROBE_OPS)) if cpu_op else []
    if not ops:
        return None
    return any(e.args is not None and len(e.args.input_dims) > 0 for e in ops)


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
