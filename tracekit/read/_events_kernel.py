"""The compiled pass of ``tracekit.read.bytecolumns``: a chunk of trace events (the bytes of a JSON array of objects)
-> where each declared field's value lies, and its JSON type. Validates the JSON it passes over (strings, escapes,
numbers, nesting: ``_json_kernel``); anything it does not take returns -1, and the chunk is decoded by msgspec
instead.
"""

import numpy as np

from tracekit.read._json_kernel import ABSENT, INT, OBJECT, kernel, skip_space, string_end, value_end

# The tokenizer this file's functions were written against. numba keys a function's disk cache on the hash of its
# own file only, and the machine code of ``parse_events`` and ``key_at`` holds the tokenizer's (inlined or linked):
# an edit to ``_json_kernel.py`` alone would leave them running the old one from the cache. Changing this line with
# it (tests/test_bytecolumns.py fails until it is) changes this file's hash, so both are compiled again.
TOKENIZER_SHA256 = "5cde52c1a973d6a9f6cc07661885c0338af03be77539b41b93c0fc8a8a5fd82e"


BUCKETS = 1024  # the keys' hash table (``key_table``): two slots a bucket


def key_hash(length, first, middle, last):
    return (length * 131 + first * 31 + middle * 7 + last) & (BUCKETS - 1)


def key_table(keys: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(joined key bytes, offsets, buckets) of ``keys`` for ``_key``: each bucket holds up to two key indices."""
    offsets = np.cumsum([0] + [len(k) for k in keys]).astype(np.int64)
    buckets = np.full((BUCKETS, 2), -1, dtype=np.int64)
    for index, key in enumerate(keys):
        h = key_hash(len(key), key[0], key[len(key) // 2], key[-1])
        slot = 0 if buckets[h, 0] < 0 else 1
        if buckets[h, slot] >= 0:
            raise ValueError(f"three keys share a bucket: {key!r}")
        buckets[h, slot] = index
    return np.frombuffer(b"".join(keys), dtype=np.uint8).copy(), offsets, buckets


_key_hash = kernel(inline="always")(key_hash)


@kernel(inline="always")
def _spells(buf, at, length, words, offsets, k):  # pragma: no cover (compiled)
    """Whether the ``length`` bytes of ``buf`` at ``at`` are word ``k`` of ``words`` (joined, cut at ``offsets``)."""
    a = offsets[k]
    if offsets[k + 1] - a != length:
        return False
    for m in range(length):
        if words[a + m] != buf[at + m]:
            return False
    return True


@kernel()
def key_at(buf, i, keys, offsets, buckets):  # pragma: no cover (compiled)
    """The key string at ``i``: (index after its colon and spaces, its index in ``keys`` or -1); -1 first: bad. A key
    with an escape is refused (-1 first): msgspec would match its decoded text."""
    n = len(buf)
    if i >= n or buf[i] != 34:
        return -1, -1
    end, escaped = string_end(buf, i)
    if end < 0 or escaped:
        return -1, -1
    length = end - i - 1
    found = -1
    if length > 0:
        h = _key_hash(length, buf[i + 1], buf[i + 1 + length // 2], buf[end - 1])
        for slot in range(2):
            k = buckets[h, slot]
            if k < 0:
                break
            if _spells(buf, i + 1, length, keys, offsets, k):
                found = k
                break
    j = skip_space(buf, end + 1)
    if j >= n or buf[j] != 58:
        return -1, -1
    return skip_space(buf, j + 1), found


@kernel(inline="always")
def _record(tag, start, end, spans, f, e, t, v, s0, s1):  # pragma: no cover (compiled)
    """Field ``f`` of event ``e``: its tag and span (an INT's value, except in a field ``spans`` marks). False: the
    key was given before in this event (msgspec checks every value; the pass would check only the last)."""
    if tag[f, e] != ABSENT:
        return False
    tag[f, e], start[f, e], end[f, e] = t, v if t == INT and not spans[f] else s0, s1
    return True


@kernel(inline="always")
def _next_member(buf, i):  # pragma: no cover (compiled)
    """After an object member ending at ``i``: (where the next member starts, 1) after a comma, (the index past the
    object, 0) at its close; -1 second: neither."""
    n = len(buf)
    i = skip_space(buf, i)
    if i < n and buf[i] == 44:
        return skip_space(buf, i + 1), 1
    if i < n and buf[i] == 125:
        return i + 1, 0
    return i, -1


@kernel()
def parse_events(buf, kind, tag, start, end, stack, top_keys, top_offsets, top_buckets, arg_keys, arg_offsets,
                 arg_buckets, phases, phase_offsets, allowed, typed_kinds, instant_kind, instant_skips,
                 spans):  # pragma: no cover (compiled)
    """The number of events in ``buf`` (a JSON array of objects, at most ``len(kind)``), each described in the
    arrays given (allocated by the caller, so that no array is made or counted here): ``kind`` (filled with -1),
    and per field and event ``tag`` (filled with ABSENT), ``start`` (where the value starts; an INT's value, except
    in a field ``spans`` marks) and ``end`` (a string's span leaves its quotes out); ``stack``: room for nested
    containers. A key given twice in one event is refused: msgspec checks every value, the pass only the last.

    Top-level key 0 is the phase ("ph"), matched against ``phases`` (its index is the event's ``kind``; -1 unknown
    refuses); top-level key k > 0 is field k - 1; the last top-level key is ``args``, whose members' keys are fields
    after the top-level ones. -1: refused (bad JSON, an unknown or
    missing phase, an escaped key, a phase with an escape, more than ``len(kind)`` events, a field of a kind in
    ``typed_kinds`` whose tag ``allowed[field, tag]`` refuses, except field ``instant_skips`` of ``instant_kind``)."""
    n_top = len(top_offsets) - 2  # fields besides the phase
    fields = n_top + len(arg_offsets) - 1
    args_field = n_top - 1
    cap = len(kind)
    n = len(buf)
    i = skip_space(buf, 0)
    if i >= n or buf[i] != 91:
        return -1
    i = skip_space(buf, i + 1)
    if i < n and buf[i] == 93:
        return 0 if skip_space(buf, i + 1) == n else -1
    count = 0
    while True:
        if i >= n or buf[i] != 123 or count == cap:
            return -1
        e = count
        i = skip_space(buf, i + 1)
        if i < n and buf[i] == 125:
            return -1  # no phase
        while True:
            i, k = key_at(buf, i, top_keys, top_offsets, top_buckets)
            if i < 0:
                return -1
            if k == 0:  # the phase
                if i >= n or buf[i] != 34:
                    return -1
                close, escaped = string_end(buf, i)
                if close < 0 or escaped:
                    return -1
                found = -1
                for p in range(len(phase_offsets) - 1):
                    if _spells(buf, i + 1, close - i - 1, phases, phase_offsets, p):
                        found = p
                        break
                if found < 0 or kind[e] >= 0:  # unknown, or a second phase (msgspec checks each)
                    return -1
                kind[e] = found
                i = close + 1
            elif k - 1 == args_field and i < n and buf[i] == 123:  # args: its members
                if tag[args_field, e] != ABSENT:
                    return -1  # a repeated key: msgspec checks every value, the pass only the one it keeps
                tag[args_field, e] = OBJECT
                start[args_field, e] = i
                i = skip_space(buf, i + 1)
                if i < n and buf[i] == 125:
                    i += 1
                else:
                    while True:
                        i, a = key_at(buf, i, arg_keys, arg_offsets, arg_buckets)
                        if i < 0:
                            return -1
                        stop, t, v, s0, s1 = value_end(buf, i, stack)
                        if stop < 0:
                            return -1
                        if a >= 0 and not _record(tag, start, end, spans, n_top + a, e, t, v, s0, s1):
                            return -1
                        i, more = _next_member(buf, stop)
                        if more < 0:
                            return -1
                        if more == 0:
                            break
                end[args_field, e] = i
            else:
                stop, t, v, s0, s1 = value_end(buf, i, stack)
                if stop < 0:
                    return -1
                if k > 0 and not _record(tag, start, end, spans, k - 1, e, t, v, s0, s1):
                    return -1
                i = stop
            i, more = _next_member(buf, i)
            if more < 0:
                return -1
            if more == 0:
                break
        if kind[e] < 0:
            return -1  # no phase
        if typed_kinds[kind[e]]:  # a struct msgspec builds: every field's type checked, as msgspec checks it
            for f in range(fields):
                if not allowed[f, tag[f, e]] and not (kind[e] == instant_kind and f == instant_skips):
                    return -1
        count += 1
        i = skip_space(buf, i)
        if i < n and buf[i] == 44:
            i = skip_space(buf, i + 1)
            continue
        if i < n and buf[i] == 93:
            if skip_space(buf, i + 1) != n:
                return -1
            return count
        return -1


def gather(buf, starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """The bytes ``buf[starts[k]:ends[k]]`` of every k, joined: (data, offsets) of an Arrow binary array."""
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(ends - starts, out=offsets[1:])
    data = np.empty(offsets[-1], dtype=np.uint8)
    _copy_spans(buf, starts, ends, offsets, data)
    return data, offsets


@kernel()
def _copy_spans(buf, starts, ends, offsets, data):  # pragma: no cover (compiled)
    for k in range(len(starts)):
        at = offsets[k]
        for m in range(ends[k] - starts[k]):
            data[at + m] = buf[starts[k] + m]
