"""The compiled lane pass of ``tracekit.predict.scenarios`` (numba, cached on disk)."""

import numpy as np
from numba import njit


@njit(cache=True)
def latest_setter(lane, t, target, lanes):  # pragma: no cover (compiled)
    """Per row: ``target`` of the last row so far of its lane (rows in order, lane ids 0..lanes-1) whose finite
    ``t`` reached the lane's running latest ``t`` (its own included; on a tie the later row), -1 before any."""
    latest = np.full(lanes, -np.inf)
    current = np.full(lanes, -1, dtype=np.int64)
    out = np.empty(len(lane), dtype=np.int64)
    for i in range(len(lane)):
        k = lane[i]
        if t[i] > latest[k]:
            latest[k] = t[i]
        if t[i] >= latest[k] and np.isfinite(t[i]):
            current[k] = target[i]
        out[i] = current[k]
    return out
