"""A chunk of trace events' bytes -> the columns ``columns.collect_parts`` makes of it, without a Python object per
event.

A compiled pass (``_events_kernel.parse_events``) finds, in one walk over the bytes, where each field tracekit reads
lies and what JSON type it has; Arrow then joins the spans, encodes the distinct strings and parses the numbers
(correctly rounded, as msgspec does). Only distinct values and the rare communication calls' args become Python
objects. The result equals what the msgspec structs give (``columns._chunk_columns``, ``opcolumns.op_columns``,
``opcolumns.memory_columns``), value for value; what this pass does not take raises ``NotTaken``, and that chunk is
decoded by msgspec instead: a begin/end pair, a type msgspec would refuse, malformed JSON (a lone surrogate escape
included), an escaped key, a key given twice in one event, an integer id beyond int64, nesting over ``MAX_DEPTH``.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.commnames import COLLECTIVE_OP, HOST_COMM_PREFIXES
from tracekit.read import _events_kernel as kernel
from tracekit.read._json_kernel import ABSENT, BIG_INT, ESCAPED, FLOAT, INT, NULL, STRING
from tracekit.read.bytefields import (ARG_KEYS, ARGS_DECODER, CHECKS, COMPLETE, FIELD, INSTANT, MAX_DEPTH, PAIRED,
                                      PHASE_TABLE, RAW, SPANS, TEXT_FIELDS, TOP_KEYS)
from tracekit.read.categories import KNOWN_CATEGORIES, canonical_category
from tracekit.read.coded import to_ns
from tracekit.read.kineto import MEMORY_EVENT, Args
from tracekit.read.opcolumns import OP_CATEGORIES, SHAPE_PROBE_OPS, _ids, at_least

__all__ = ["NotTaken", "chunk_parts"]


class NotTaken(Exception):
    """The compiled pass does not take this chunk: msgspec decodes it."""


def chunk_parts(chunk, keep_name, cap: int | None = None) -> tuple[dict, dict, dict]:
    """(events part, ops part, memory part) of one chunk (the bytes of a JSON array of events), as
    ``columns._chunk_columns``, ``opcolumns.op_columns`` and ``opcolumns.memory_columns`` make them of msgspec's
    structs; ``keep_name``: the reader's ``columns._NameFilter``; ``cap``: at least as many as the chunk's events
    (None: counted). Raises NotTaken."""
    buf = np.frombuffer(chunk, dtype=np.uint8)
    if not buf.flags.writeable:  # one signature for the compiled pass (read-only arrays would compile another)
        buf = np.frombuffer(bytearray(chunk), dtype=np.uint8)
    # Room for the events: ``cap``, or as many as the bytes can hold (an event the pass takes, {"ph":"X"}, is 10).
    cap = max(min(len(chunk) // 10 + 1, cap if cap is not None else len(chunk)), 1)
    kind = np.full(cap, -1, dtype=np.int8)
    tag = np.zeros((len(FIELD), cap), dtype=np.int8)  # field-major: a field no event has touches no page
    start = np.empty((len(FIELD), cap), dtype=np.int64)
    end = np.empty((len(FIELD), cap), dtype=np.int64)
    n = kernel.parse_events(buf, kind, tag, start, end, np.empty(MAX_DEPTH, dtype=np.uint8), *TOP_KEYS,
                            *ARG_KEYS, *PHASE_TABLE, *CHECKS, SPANS)
    if n < 0:
        raise NotTaken("not taken by the compiled pass")
    chunk_ = _Chunk(buf, kind[:n], tag[:, :n], start[:, :n], end[:, :n])
    return chunk_.events_part(keep_name), chunk_.ops_part(), chunk_.memory_part()


class _Chunk:
    """One parsed chunk: per event its kind and, per field and event, its tag and span (an INT's value in ``start``)."""

    def __init__(self, buf, kind, tag, start, end) -> None:
        if np.isin(kind, PAIRED).any():
            raise NotTaken("begin/end pairs")  # a span may cross chunks: the document is paired whole
        self.buf, self.tag, self.start, self.end = buf, tag, start, end
        self.complete = np.flatnonzero(kind == COMPLETE)
        self.instant = np.flatnonzero(kind == INSTANT)
        self._validate()
        self.cat = self.strings(self.complete, "cat")
        self.name = self.strings(self.complete, "name")

    def _validate(self) -> None:
        """The text of every string field msgspec would build, where it has an escape or a byte beyond ASCII: as
        msgspec checks it (valid UTF-8, valid escapes). (The kernel checked every field's type.)"""
        typed = np.flatnonzero(self.kind_typed())
        for name in TEXT_FIELDS:
            f = FIELD[name]
            rows = typed[self.tag[f, typed] == ESCAPED]
            for row in rows.tolist():
                _text(self.buf[self.start[f, row]:self.end[f, row]].tobytes())

    def kind_typed(self) -> np.ndarray:
        typed = np.zeros(self.tag.shape[1], dtype=bool)
        typed[self.complete] = True
        typed[self.instant] = True
        return typed

    # --- columns of one field over some rows ---

    def strings(self, rows: np.ndarray, name: str) -> tuple[np.ndarray, list]:
        """(codes, distinct values) of a text field (absent: "", as the struct's default)."""
        f = FIELD[name]
        absent = self.tag[f, rows] == ABSENT
        starts = np.where(absent, 0, self.start[f, rows])
        ends = np.where(absent, 0, self.end[f, rows])
        return _encoded(self.buf, starts, ends, _text)

    def ids(self, rows: np.ndarray, name: str) -> tuple[np.ndarray, list]:
        """``coded.factorized(..., mixed=True)`` of an id field: distinct ints, strings and None."""
        f = FIELD[name]
        tags = self.tag[f, rows]
        is_int = tags == INT
        is_text = (tags == STRING) | (tags == ESCAPED)
        codes = np.empty(len(rows), dtype=np.int32)
        values: list = []
        if is_int.any():
            int_codes, ints = pd.factorize(self.start[f, rows[is_int]])
            codes[is_int] = int_codes
            values += ints.tolist()
        if is_text.any():
            text_rows = rows[is_text]
            text_codes, texts = _encoded(self.buf, self.start[f, text_rows], self.end[f, text_rows], _text)
            codes[is_text] = text_codes + len(values)
            values += texts
        missing = ~(is_int | is_text)
        if missing.any():
            codes[missing] = len(values)
            values.append(None)
        return codes, values

    def integers(self, rows: np.ndarray, name: str) -> np.ndarray:
        """An id field as int64: -1 where it is not an integer (absent, null, a string)."""
        f = FIELD[name]
        return np.where(self.tag[f, rows] == INT, self.start[f, rows], -1)

    def external_ids(self, rows: np.ndarray) -> np.ndarray:
        """``External id``, else the old ``external id`` where the new one is absent or null (a string: -1)."""
        new = self.tag[FIELD["external_id"], rows]
        return np.where((new == ABSENT) | (new == NULL), self.integers(rows, "external_id_old"),
                        self.integers(rows, "external_id"))

    def floats(self, rows: np.ndarray, name: str) -> np.ndarray:
        """A number field as float64 (NaN: absent or null), each parsed as msgspec parses it."""
        f = FIELD[name]
        tags = self.tag[f, rows]
        out = np.full(len(rows), np.nan)
        ints = tags == INT
        out[ints] = self.start[f, rows[ints]]
        other = (tags == FLOAT) | (tags == BIG_INT)
        if other.any():
            picked = rows[other]
            data, offsets = kernel.gather(self.buf, self.start[f, picked], self.end[f, picked])
            text = pa.Array.from_buffers(pa.large_string(), len(picked),
                                         [None, pa.py_buffer(offsets), pa.py_buffer(data)])
            try:
                parsed = pc.cast(text, pa.float64()).to_numpy(zero_copy_only=False)
            except pa.ArrowInvalid:
                raise NotTaken(f"a number Arrow does not parse in {name}") from None
            if not np.isfinite(parsed).all():
                raise NotTaken(f"a number out of range in {name}")  # msgspec refuses it
            out[other] = parsed
        return out

    def raw_texts(self, rows: np.ndarray, name: str) -> tuple[np.ndarray, list]:
        """``opcolumns._texts``: a Raw field's JSON text, None where absent."""
        f = FIELD[name]
        tags = self.tag[f, rows]
        quoted = (tags == STRING) | (tags == ESCAPED)  # a string's span leaves its quotes out; Raw keeps them
        starts = np.where(tags == ABSENT, 0, self.start[f, rows] - quoted)
        ends = np.where(tags == ABSENT, 0, self.end[f, rows] + quoted)
        return _encoded(self.buf, starts, ends, lambda raw: raw.decode() if raw else None)

    def args(self, row: int) -> Args:
        f = FIELD["args"]
        if self.tag[f, row] == ABSENT:
            return Args()
        return ARGS_DECODER.decode(self.buf[self.start[f, row]:self.end[f, row]].tobytes())

    # --- the three parts ---

    def events_part(self, keep_name) -> dict:
        """``columns._chunk_columns`` of the chunk's complete events."""
        rows, cat, name = self.complete, self.cat, self.name
        has_collective = np.isin(self.tag[FIELD["collective"], rows], (STRING, ESCAPED))
        shapes = self._shapes_recorded()
        keep = keep_name.keep_mask(cat, name, has_collective)
        left = rows[~keep] if keep is not None else rows[:0]
        if keep is not None:
            rows, cat, name, has_collective = rows[keep], _subset(cat, keep), _subset(name, keep), has_collective[keep]
        unknown = {c for c in cat[1] if canonical_category(c) not in KNOWN_CATEGORIES}
        comm_name = np.fromiter((n.startswith(HOST_COMM_PREFIXES) or COLLECTIVE_OP.search(n) is not None
                                 for n in name[1]), dtype=bool, count=len(name[1]))
        comm_rows = np.flatnonzero(comm_name[name[0]] | has_collective) if len(rows) else np.empty(0, dtype=np.int64)
        tids = self.ids(rows, "tid")
        device_arg_cats = set()
        if unknown:
            has_device = ~np.isin(self.tag[FIELD["device"], rows], (ABSENT, NULL))
            device_arg_cats = {canonical_category(cat[1][c]) for c in np.unique(cat[0][has_device]).tolist()
                               if cat[1][c] in unknown}
        return {
            "ts": to_ns(self.floats(rows, "ts")), "dur": to_ns(self.floats(rows, "dur")),
            "cat": cat, "name": name, "pid": self.ids(rows, "pid"), "tid": tids,
            "tid_num": _ids(tids[1])[tids[0]],
            "correlation": self.integers(rows, "correlation"), "stream": self.integers(rows, "stream"),
            "external_id": self.external_ids(rows),
            "comm_rows": comm_rows, "comm_args": [self.args(int(rows[i])) for i in comm_rows],
            "comm_names": [name[1][name[0][i]] for i in comm_rows],
            "left_ts": to_ns(self.floats(left, "ts")), "left_dur": to_ns(self.floats(left, "dur")),
            "shapes": shapes, "device_arg_cats": device_arg_cats,
        }

    def _shapes_recorded(self) -> bool | None:
        """``columns._shapes_recorded``: whether the chunk's first CPU ops carry ``Input Dims``."""
        is_cpu = np.array([canonical_category(c) == "cpu_op" for c in self.cat[1]], dtype=bool)
        ops = self.complete[is_cpu[self.cat[0]]][:SHAPE_PROBE_OPS] if len(is_cpu) else self.complete[:0]
        if len(ops) == 0:
            return None
        return bool((self.tag[FIELD["input_dims"], ops] != ABSENT).any())

    def ops_part(self) -> dict:
        """``opcolumns.op_columns`` of the chunk's complete events."""
        canonical = [canonical_category(c) for c in self.cat[1]]
        is_op = np.array([c in OP_CATEGORIES for c in canonical], dtype=bool)
        is_cpu = np.array([c == "cpu_op" for c in canonical], dtype=bool)
        picked = is_op[self.cat[0]] if len(canonical) else np.zeros(len(self.complete), dtype=bool)
        rows = self.complete[picked]
        tid_codes, tids = self.ids(rows, "tid")
        return {
            "cpu_op": is_cpu[self.cat[0][picked]] if len(canonical) else np.zeros(0, dtype=bool),
            "name": _subset(self.name, picked), "tid": (tid_codes, [str(v) for v in tids]),
            "ts": to_ns(self.floats(rows, "ts")), "dur": to_ns(self.floats(rows, "dur")),
            "external_id": self.external_ids(rows), "flops_arg": self.floats(rows, "flops"),
            **{name: self.raw_texts(rows, name) for name in RAW},
        }

    def memory_part(self) -> dict:
        """``opcolumns.memory_columns`` of the chunk's ``[memory]`` instant events."""
        codes, names = self.strings(self.instant, "name")
        is_memory = np.array([n == MEMORY_EVENT for n in names], dtype=bool)
        rows = self.instant[is_memory[codes]] if len(names) else self.instant
        tid_codes, tids = self.ids(rows, "tid")
        tid_text = [str(v) for v in tids]
        return {"ts": to_ns(self.floats(rows, "ts")), "tid": [tid_text[c] for c in tid_codes.tolist()],
                "total_allocated": at_least(self.floats(rows, "total_allocated"), 0),
                "total_reserved": at_least(self.floats(rows, "total_reserved"), 0),
                "bytes": self.floats(rows, "nbytes"),
                "device_type": self.integers(rows, "device_type"), "device_id": self.integers(rows, "device_id"),
                "addr": self.integers(rows, "addr")}


def _text(raw: bytes) -> str:
    """A JSON string's text from the bytes between its quotes, as msgspec decodes it."""
    try:
        return msgspec.json.decode(b'"' + raw + b'"') if b"\\" in raw else raw.decode("utf-8")
    except (msgspec.DecodeError, UnicodeDecodeError):
        raise NotTaken("a string msgspec refuses") from None


def _encoded(buf, starts, ends, decode) -> tuple[np.ndarray, list]:
    """(codes, distinct decoded values) of the byte spans: Arrow's hash table over the raw bytes."""
    if len(starts) == 0:
        return np.empty(0, dtype=np.int32), []
    data, offsets = kernel.gather(buf, starts, ends)
    raw = pa.Array.from_buffers(pa.large_binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    encoded = raw.dictionary_encode()
    return (encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False),
            [decode(v) for v in encoded.dictionary.to_pylist()])


def _subset(coded: tuple[np.ndarray, list], mask: np.ndarray) -> tuple[np.ndarray, list]:
    """The coded values at ``mask``, with only the distinct values they hold."""
    codes, values = coded
    picked = codes[mask]
    present = np.flatnonzero(np.bincount(picked, minlength=len(values)))
    renumbered = np.full(len(values), -1, dtype=np.int32)
    renumbered[present] = np.arange(len(present), dtype=np.int32)
    return renumbered[picked], [values[c] for c in present.tolist()]
