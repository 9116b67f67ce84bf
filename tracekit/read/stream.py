"""A trace file read as a stream: inflated and cut into chunks of whole events a block at a time, never all in memory.

``open_trace`` opens a local file or fsspec URL and inflates gzip as it reads. ``EventStream`` scans the JSON's
bytes for the ``traceEvents`` array (or a top-level array of events) and hands out its events ``chunk_events`` at a
time, each chunk a small JSON array of its own for ``CHUNK_DECODER``. Everything else in the document (the header:
``distributedInfo``, ``deviceProperties``, ``baseTimeNanoseconds``, wherever it stands) is kept as bytes and decoded
once the events are read: ``trace()``. The bytes of a chunk are freed once it is decoded, so the peak is a block and
a chunk, whatever the file's size.

The scan is a byte-level JSON tokenizer (strings, escapes and nesting), compiled with numba: about 1 GB/s.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np
from isal import igzip
from isal.igzip_lib import IsalError
from numba import njit

from tracekit.errors import TraceReadError, TruncatedTraceError
from tracekit.read.files import GZIP_MAGIC

BLOCK_BYTES = 8 << 20  # inflated bytes read at a time
_ENDS = 1 << 16  # event ends found per call of the scan
_NOT_FOUND = -1  # _find_events: the array is not in the bytes read so far (-2: not a JSON object or array)
_SPACE = b" \t\r\n"


@contextmanager
def open_trace(path: Path | str) -> Iterator[BinaryIO]:
    """The trace's bytes as a readable stream; gzip (found by its magic bytes, not the name) is inflated."""
    try:
        if isinstance(path, str):
            import fsspec  # only URLs need it

            raw = fsspec.open(path, "rb").open()
        else:
            raw = open(path, "rb")
    except OSError as err:
        raise TraceReadError(path, f"cannot read: {err.strerror or err}") from None
    try:
        magic = raw.read(2)
        raw.seek(0)
        if magic != GZIP_MAGIC:
            yield raw
        else:
            with igzip.IGzipFile(fileobj=raw) as inflated:
                yield inflated
    except OSError as err:
        raise TraceReadError(path, f"cannot read: {err.strerror or err}") from None
    finally:
        raw.close()


def read_block(stream: BinaryIO, path, size: int | None = None) -> bytes:
    """Up to ``size`` (default ``BLOCK_BYTES``) bytes of ``stream``, fewer only at its end; names a truncated or
    corrupt gzip."""
    try:
        return stream.read(BLOCK_BYTES if size is None else size)
    except (EOFError, OSError, IsalError) as err:
        raise TruncatedTraceError(path, f"truncated or corrupt gzip ({err})") from None


class EventStream:
    """The events of a trace stream in chunks (``chunks()``), then the rest of its document (``trace_bytes()``).

    ``first``: bytes already read from the start of ``stream``. ``found`` is False when the document holds no
    events array the scan can see; ``document()`` then gives the whole document, read to its end.
    """

    def __init__(self, stream: BinaryIO, path, first: bytes, chunk_events: int) -> None:
        self.stream, self.path, self.chunk_events = stream, path, chunk_events
        self.buf = bytearray(first)
        self.head = b""
        self.tail = bytearray()
        self.found = self._find_array()

    def _find_array(self) -> bool:
        while True:
            at, depth = _find_events(self.buf)
            if at >= 0:
                self.head, self.depth = bytes(self.buf[:at + 1]), depth
                self._drop(at + 1)
                return True
            block = read_block(self.stream, self.path) if at == _NOT_FOUND else b""
            if not block:
                return False
            self._append(block)

    def _drop(self, n: int) -> None:
        """Drop the first ``n`` bytes, in place unless something (a debugger's frame) still views the buffer."""
        try:
            del self.buf[:n]
        except BufferError:
            self.buf = self.buf[n:]

    def _append(self, block: bytes) -> None:
        try:
            self.buf += block
        except BufferError:
            self.buf = self.buf + block

    def document(self) -> bytes:
        """The whole document, when ``found`` is False."""
        while block := read_block(self.stream, self.path):
            self._append(block)
        return bytes(self.buf)

    def chunks(self) -> Iterator[bytearray]:
        """Each chunk of up to ``chunk_events`` events as the bytes of a JSON array. Raises ValueError where the
        array holds something that is not an object."""
        state = np.array([0, 0, self.depth, self.depth], dtype=np.int64)  # in string, escaped, depth, target depth
        out = np.empty(_ENDS, dtype=np.int64)
        scanned, ends, first = 0, np.empty(0, dtype=np.int64), True
        while True:
            view = np.frombuffer(self.buf, dtype=np.uint8)
            found, closed, scanned = _scan(view, scanned, state, out)
            del view
            ends = np.concatenate([ends, out[:found]])  # positions in ``buf`` of the objects' closing braces
            while len(ends) >= self.chunk_events or (closed >= 0 and len(ends)):
                take = min(len(ends), self.chunk_events)
                cut = int(ends[take - 1]) + 1
                yield self._piece(cut, first)
                first = False
                self._drop(cut)
                ends = ends[take:] - cut
                scanned -= cut
                closed = closed - cut if closed >= 0 else closed
            if closed >= 0:
                if self.buf[:closed].strip():
                    raise ValueError("the events array holds an item that is not an object")
                self.tail = self.buf[closed + 1:]
                while block := read_block(self.stream, self.path):
                    self.tail += block
                self.buf = bytearray()
                return
            if scanned < len(self.buf):
                continue  # ``out`` was full
            block = read_block(self.stream, self.path)
            if not block:
                raise ValueError("the document ends inside its events array")
            self._append(block)

    def _piece(self, end: int, first: bool) -> bytearray:
        start = 0
        while start < end and self.buf[start] in _SPACE:
            start += 1
        if not first:
            if self.buf[start:start + 1] != b",":
                raise ValueError("events not separated by a comma")
            start += 1
        piece = bytearray(b"[")
        with memoryview(self.buf) as view:
            piece += view[start:end]
        piece += b"]"
        return piece

    def trace_bytes(self) -> bytes:
        """The document without its events (an empty events array), once ``chunks()`` is exhausted."""
        return self.head + b"]" + bytes(self.tail)


# The bytes the scan stops at: a quote, a backslash and the brackets. Every other byte (most of a trace) is passed
# over by one table lookup.
_SPECIAL = np.zeros(256, dtype=np.bool_)
_SPECIAL[np.frombuffer(b'"\\{}[]', dtype=np.uint8)] = True


@njit(cache=True, nogil=True)
def _scan(buf, begin, state, ends):
    """Scan ``buf[begin:]`` inside the events array: the index of every object's closing brace at the array's
    depth goes to ``ends``, until ``ends`` is full. Returns (ends found, index of the array's closing bracket or -1,
    where the scan stopped); ``state`` carries the tokenizer across calls (a backslash that ends ``buf`` escapes the
    first byte of the next call's)."""
    in_str, esc, depth, target = state[0], state[1], state[2], state[3]
    special = _SPECIAL
    found, n, i = 0, len(buf), begin
    if esc and i < n:
        esc, i = 0, i + 1
    while i < n:
        if found == len(ends):
            state[0], state[1], state[2] = in_str, esc, depth
            return found, -1, i
        c = buf[i]
        if not special[c]:
            i += 1
            continue
        if in_str:
            if c == 92:  # backslash: the next byte is escaped, whatever it is
                if i + 1 == n:
                    esc = 1
                i += 2
                continue
            if c == 34:  # quote
                in_str = 0
        elif c == 34:
            in_str = 1
        elif c == 123 or c == 91:  # { [
            depth += 1
        elif c == 125 or c == 93:  # } ]
            depth -= 1
            if depth == target:
                ends[found] = i
                found += 1
            elif depth < target:
                state[0], state[1], state[2] = in_str, esc, depth
                return found, i, i
        i += 1
    state[0], state[1], state[2] = in_str, esc, depth
    return found, -1, n


def _find_events(buf: bytearray) -> tuple[int, int]:
    """(index of the events array's opening bracket, the depth inside it) of a document's first bytes: a top-level
    array, or the value of the top-level key ``traceEvents``. (-1, 0): not in these bytes yet; (-2, 0): the document
    is neither an object nor an array. Plain Python: it reads only the header, a few KB before the events."""
    n, i = len(buf), _skip_space(buf, 0)
    if i == n:
        return _NOT_FOUND, 0
    if buf[i] == 0x5B:  # [
        return i, 1
    if buf[i] != 0x7B:  # {
        return -2, 0
    depth = 0
    while i < n:
        c = buf[i]
        if c == 0x22:  # a string: find its closing quote, one not escaped by an odd run of backslashes
            end = i
            while True:
                end = buf.find(b'"', end + 1)
                if end < 0:
                    return _NOT_FOUND, 0
                slashes = end - 1
                while buf[slashes] == 0x5C:
                    slashes -= 1
                if (end - 1 - slashes) % 2 == 0:
                    break
            if depth == 1 and buf[i + 1:end] == b"traceEvents":
                j = _skip_space(buf, end + 1)
                if j < n and buf[j] == 0x3A:  # the key's colon, then its value
                    j = _skip_space(buf, j + 1)
                    if j < n and buf[j] == 0x5B:
                        return j, 2
                if j >= n:
                    return _NOT_FOUND, 0
            i = end
        elif c == 0x7B or c == 0x5B:
            depth += 1
        elif c == 0x7D or c == 0x5D:
            depth -= 1
        i += 1
    return _NOT_FOUND, 0


def _skip_space(buf: bytearray, j: int) -> int:
    while j < len(buf) and buf[j] in _SPACE:
        j += 1
    return j
