"""A streamed trace's chunks turned into columns by a pool of helper processes, with the result of one process.

Decoding a chunk and making its columns is most of the time a large trace takes to read, and chunks are
independent but for one fact: once a device event has been seen, CPU ops start being left out
(``columns._NameFilter``). Each chunk is sent with what is known of that fact when it is sent, the device events seen
in the chunks already back. A chunk sent before an earlier one turned out to hold the first device event is made
again with the true state, here. That happens to at most the chunks in flight, once per trace, and every chunk's
columns are those the one-process read makes (``columns.collect_parts``).

    parts = collect_parallel(stream.chunks(), reader._complete_events, host_ops, workers=4)

Helpers are forked, and only from a single-threaded process: a forkserver or spawned helper would import the
caller's main module again, which a script without an ``if __name__ == "__main__"`` guard cannot survive. Elsewhere
(a thread running, no fork, a ``host_ops`` that cannot be pickled) the chunks are made here, one after another.
At most ``MAX_HELPERS`` helpers run, each with up to ``_IN_FLIGHT`` chunks waiting: this process's own share of the
work (the scan, sending chunks, joining their columns) bounds the speed-up well before that, and memory grows with
every chunk in flight.
"""

from __future__ import annotations

import multiprocessing
import pickle
import threading
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Iterable

from tracekit.read.bytecolumns import NotTaken, chunk_parts
from tracekit.read.columns import _chunk_columns, _NameFilter, collect_chunks
from tracekit.read.opcolumns import memory_columns, op_columns

MAX_HELPERS = 4
_IN_FLIGHT = 2  # chunks per helper: enough to keep each busy, few enough to bound the bytes waiting
_FILTERS: dict = {}  # host_ops -> its _NameFilter, kept in each helper: a name is asked about once per process


def collect_parallel(pieces: Iterable[bytes], decode: Callable, host_ops, workers: int,
                     cap: int | None = None) -> tuple[list, list, list]:
    """``columns.collect_chunks`` of the chunks ``pieces`` (each the bytes of a JSON array of events, of at most
    ``cap`` events; what the compiled pass does not take is decoded by ``decode`` into (complete events, memory
    events)), made by up to ``workers`` helper processes (at most ``MAX_HELPERS``) where they can be forked, else
    here; in chunk order."""
    workers, fork = min(workers, MAX_HELPERS), context()
    if workers < 2 or fork is None or not _picklable(host_ops):
        return collect_chunks(pieces, decode, host_ops, cap)
    parts, ops, memory = [], [], []
    seen = False  # a device event in the chunks whose columns are in
    with ProcessPoolExecutor(max_workers=workers, mp_context=fork) as pool:
        pending: deque = deque()

        def take() -> None:
            nonlocal seen
            piece, future, sent = pending.popleft()
            op, part, mem, device = future.result()
            if sent != seen:  # an earlier chunk held the first device event: make this one as one process would
                op, part, mem, device = chunk_columns(piece, decode, host_ops, seen, cap)
            ops.append(op)
            parts.append(part)
            memory.append(mem)
            seen = seen or device

        try:
            for piece in pieces:
                pending.append((piece, pool.submit(chunk_columns, piece, decode, host_ops, seen, cap), seen))
                while len(pending) >= _IN_FLIGHT * workers:
                    take()
            while pending:
                take()
        except BaseException:
            for _, future, _ in pending:
                future.cancel()
            raise
    return parts, ops, memory


def chunk_columns(piece: bytes, decode: Callable, host_ops, device_seen: bool,
                  cap: int | None = None) -> tuple[dict, dict, dict, bool]:
    """(op columns, event columns, memory columns, device event seen by its end) of one chunk, read after chunks
    that held a device event (``device_seen``) or not."""
    keep = _name_filter(host_ops)
    keep.device_seen = device_seen
    try:
        part, op, mem = chunk_parts(piece, keep, cap)
    except NotTaken:
        events, instants = decode(piece)
        keep.device_seen = device_seen  # as the pass may have left it
        op, part, mem = op_columns(events), _chunk_columns(events, keep), memory_columns(instants)
    return op, part, mem, keep.device_seen


def _name_filter(host_ops) -> _NameFilter:
    """This process's filter for ``host_ops`` (kept: each name is asked about once), or a new one for a
    ``host_ops`` that cannot be a dict key."""
    try:
        keep = _FILTERS.get(host_ops)
    except TypeError:  # unhashable
        return _NameFilter(host_ops)
    if keep is None:
        keep = _FILTERS[host_ops] = _NameFilter(host_ops)
    return keep


def _picklable(value) -> bool:
    try:
        pickle.dumps(value)
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    return True


def context():
    """The fork context where forking is safe (a single-threaded process where fork exists: helpers start in
    milliseconds, imports done, and the caller's main module is not imported again), else None."""
    if ("fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1
            and not multiprocessing.current_process().daemon):  # a daemonic process may not have children
        return multiprocessing.get_context("fork")
    return None
