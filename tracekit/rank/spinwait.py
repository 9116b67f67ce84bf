"""Host waits on the device that no synchronizing call records: a spin-wait on mapped memory (DeepEP's dispatch and
combine busy-poll a pinned flag a kernel sets), a launch that blocks on a full launch queue.

Such a wait leaves no ``cudaStreamSynchronize`` behind, only host time: unrecorded time between two calls, or a call
that lasts. Read as host time, it puts a device-bound step's critical path on the host and lets ``no_host_gaps``
promise a gain the device cannot give. On a GPU rank, a host interval of at least ``MIN_SPIN_NS`` is a wait on the
device when

  - the rank's device is busy (any stream) for at least ``BUSY_SHARE`` of it, and
  - it ends at most ``SPIN_LAG_NS`` after a device event that ended inside it: the work it waited for.

The interval is the unrecorded time before a host node or step marker (from its lane predecessor's end to its start;
the node then starts after that device event ends, a ``pe`` edge) or a host node's own time (a host op or a launch call; it then
ends after that event ends, a ``dr`` edge, as a synchronizing call does). An edge the graph already has is kept.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit import intervals as iv

MIN_SPIN_NS = 20_000
BUSY_SHARE = 0.95
SPIN_LAG_NS = 5_000
_DEVICE = ("compute", "memory", "comm")
_OWN_WAIT = ("host", "launch")  # a host op or a launch call that lasts; a sync call has its edge already


def spin_waits(nodes: pd.DataFrame, pe: np.ndarray, dr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pe, dr) of a GPU rank's nodes (sorted by lane, then start) with the waits on the device added."""
    cat = nodes["cat"].to_numpy()
    device = np.flatnonzero(np.isin(cat, _DEVICE))
    if len(device) == 0:
        return pe, dr
    start, end = nodes["start_ns"].to_numpy().astype(np.int64), nodes["end_ns"].to_numpy().astype(np.int64)
    lane = nodes["lane"].to_numpy()
    first = np.ones(len(nodes), dtype=bool)
    first[1:] = lane[1:] != lane[:-1]
    prev_end = np.where(first, start, np.concatenate([[0], end[:-1]]))
    busy = iv.merge(start[device], end[device])
    order = device[np.argsort(end[device], kind="stable")]
    host = ~np.isin(cat, _DEVICE)  # a step marker too: a step whose host waited for its work ends with it
    pe, dr = pe.copy(), dr.copy()
    gap = np.flatnonzero(host & (pe < 0))
    waited = _waited(busy, order, end, prev_end[gap], start[gap])
    pe[gap[waited >= 0]] = waited[waited >= 0]
    own = np.flatnonzero(np.isin(cat, _OWN_WAIT) & (dr < 0))
    waited = _waited(busy, order, end, start[own], end[own])
    dr[own[waited >= 0]] = waited[waited >= 0]
    return pe, dr


def _waited(busy: iv.Intervals, order: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per interval [lo, hi): the device node it waited for (``order``: device nodes by end), or -1."""
    length = hi - lo
    covered = iv.covered_within(busy, lo, hi)
    at = np.searchsorted(end[order], hi, side="right") - 1  # the device node ending last at or before hi
    src = order[np.maximum(at, 0)]
    ok = ((length >= MIN_SPIN_NS) & (covered >= BUSY_SHARE * length) & (at >= 0) & (end[src] > lo)
          & (hi - end[src] <= SPIN_LAG_NS))
    return np.where(ok, src, -1)
