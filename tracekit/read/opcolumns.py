"""Host ops and memory events -> columns: what the operator and memory tables read, kept compactly.

Every ``cpu_op`` and ``user_annotation`` event becomes a row of the ops table, whatever the reader's host-op filter
keeps in the events table: name, thread, times (int64 ns), ``External id`` (which links an op to the kernels it
launched), the profiler's own ``flops`` arg and its shapes as recorded (``Input Dims``, ``Input type``,
``Concrete Inputs``: the JSON text, categorical, decoded later once per distinct value), and ``cpu_op``: True for a
``cpu_op`` (an operator, old traces' ``Operator``), False for a ``user_annotation`` (``record_function``, the
``ProfilerStep#N`` spans): only operators have FLOPs, so a rank with annotations but no operator has unknown FLOPs.
``[memory]`` instant events (``profile_memory=True``) become the memory table: thread, time, ``Total Allocated``,
``Total Reserved``, ``Bytes`` (negative: freed), ``Device Type``, ``Device Id`` and ``Addr``.
"""

from __future__ import annotations

import operator

import numpy as np
import pandas as pd
import pyarrow as pa

from tracekit.read.categories import canonical_category
from tracekit.read.coded import categorical, factorized, floats_of, to_ns
from tracekit.read.kineto import NO_ARGS

OP_CATEGORIES = ("cpu_op", "user_annotation")
OP_COLUMNS = ("rank", "name", "tid", "ts_ns", "dur_ns", "external_id", "flops_arg", "input_dims", "input_type",
              "concrete_inputs", "cpu_op")
SHAPE_PROBE_OPS = 1000  # record_shapes is one switch for every op: the first CPU ops of a trace show it
MEMORY_COLUMNS = ("rank", "tid", "ts_ns", "total_allocated", "total_reserved", "bytes", "device_type", "device_id",
                  "addr")


def op_columns(events: list) -> dict:
    """The host ops and annotations of one chunk of complete events, as arrays and lists."""
    cats = {c: canonical_category(c) for c in {e.cat for e in events}}
    ops = [e for e in events if cats[e.cat] in OP_CATEGORIES]
    args = [e.args for e in ops]
    return {
        "cpu_op": np.array([cats[e.cat] == "cpu_op" for e in ops], dtype=bool),
        "name": factorized([e.name for e in ops]), "tid": _as_text(factorized([e.tid for e in ops])),
        "ts": to_ns(floats_of(ops, "ts")), "dur": to_ns(floats_of(ops, "dur")),
        "external_id": _ids([None if a is None else a.external_id if a.external_id is not None else a.external_id_old
                             for a in args]),
        "flops_arg": _floats([None if a is None else a.flops for a in args]),
        "input_dims": _texts(args, "input_dims"), "input_type": _texts(args, "input_type"),
        "concrete_inputs": _texts(args, "concrete_inputs"),
    }


def memory_columns(instants: list) -> dict:
    """One chunk's ``[memory]`` events as arrays."""
    args = [e.args for e in instants]
    return {"ts": to_ns(_floats([e.ts for e in instants])), "tid": [str(e.tid) for e in instants],
            "total_allocated": at_least(_floats([None if a is None else a.total_allocated for a in args]), 0),
            "total_reserved": at_least(_floats([None if a is None else a.total_reserved for a in args]), 0),
            "bytes": _floats([None if a is None else a.nbytes for a in args]),
            "device_type": _ids([None if a is None else a.device_type for a in args]),
            "device_id": _ids([None if a is None else a.device_id for a in args]),
            "addr": _ids([None if a is None else a.addr for a in args])}


def op_table(parts: list[dict], rank: int, base_ns: int, horizon: int | None = None) -> pd.DataFrame:
    """The ops table (``OP_COLUMNS``) of a rank's chunks. The chunks are consumed: each column's pieces are taken
    out of ``parts`` as they are joined, so both copies of every column never exist at once. ``horizon``: the
    events table's (``columns.finish_tables``); an op whose end lies past it has no usable duration there either."""
    def joined(key):
        return categorical([p.pop(key) for p in parts])

    def concatenated(key, dtype):
        return np.concatenate([p.pop(key) for p in parts] + [np.empty(0, dtype=dtype)])

    ts = concatenated("ts", np.int64)
    ts = np.where(ts != -1, ts + base_ns, ts)  # -1: no time (``to_ns``); a time before the base is based too
    dur = concatenated("dur", np.int64)
    if horizon is not None:
        dur[dur > horizon - ts] = -1  # as the events table drops it (dropped_events)
    columns = {"rank": np.full(len(ts), rank, dtype=np.int32), "name": joined("name"), "tid": joined("tid"),
               "ts_ns": ts, "dur_ns": dur,
               "external_id": concatenated("external_id", np.int64), "flops_arg": concatenated("flops_arg", np.float64),
               "input_dims": joined("input_dims"), "input_type": joined("input_type"),
               "concrete_inputs": joined("concrete_inputs"), "cpu_op": concatenated("cpu_op", bool)}
    return pd.DataFrame(columns, columns=list(OP_COLUMNS), copy=False)


def memory_table(parts: list[dict], rank: int, base_ns: int) -> pd.DataFrame:
    """The memory table (``MEMORY_COLUMNS``) of a rank's chunks, in time order."""
    ts = np.concatenate([p["ts"] for p in parts] + [np.empty(0, dtype=np.int64)])
    frame = pd.DataFrame({"rank": np.full(len(ts), rank, dtype=np.int32),
                          "tid": pd.Categorical([t for p in parts for t in p["tid"]]), "ts_ns": ts + base_ns,
                          **{c: np.concatenate([p[c] for p in parts] + [np.empty(0)])
                             for c in MEMORY_COLUMNS[3:]}}, columns=list(MEMORY_COLUMNS))
    frame[["device_type", "device_id", "addr"]] = frame[["device_type", "device_id", "addr"]].astype(np.int64)
    return frame[ts >= 0].sort_values("ts_ns", kind="stable", ignore_index=True)


def _as_text(coded: tuple[np.ndarray, list]) -> tuple[np.ndarray, list]:
    """``factorized`` values as their text (``str``, None as "None"): one call per distinct value, not per row.
    Two values of one text (a thread id written as 7 and as "7") share it."""
    codes, distinct = coded
    return codes, [str(v) for v in distinct]


_ABSENT = NO_ARGS.input_dims  # the Raw that msgspec gives every event without the field (one shared object)


def _texts(args: list, field: str) -> tuple[np.ndarray, list]:
    """(codes, distinct values) of a recorded JSON field (``factorized``'s form): its text, None where absent or
    empty; the bytes are encoded by Arrow and only the distinct ones decoded."""
    get = operator.attrgetter(field)
    raw = [b"" if a is None or (r := get(a)) is _ABSENT or r is None else bytes(r) for a in args]
    encoded = pa.array(raw, type=pa.binary()).dictionary_encode()
    return (encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False),
            [v.decode() if v else None for v in encoded.dictionary.to_pylist()])


def at_least(values: np.ndarray, least: float) -> np.ndarray:
    """``values`` (float64) with those below ``least`` unknown (NaN), in place: what no run can have (a total of
    bytes below 0, unlike ``Bytes``, negative for a free; a -1 some writers put for an unknown count; a group of no
    rank)."""
    values[values < least] = np.nan
    return values


def _floats(values: list) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def _ids(values: list) -> np.ndarray:
    try:
        return pa.array(values, type=pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False, writable=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return np.array([v if isinstance(v, int) else -1 for v in values], dtype=np.int64)
