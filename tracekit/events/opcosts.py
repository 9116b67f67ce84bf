"""The cost of each operator call (FLOPs, bytes, kind, dtype, the device's peak at that dtype), computed once per
distinct recorded call (name, Input Dims, Input type, Concrete Inputs) by ``tracekit.events.flops.op_cost``: a large
trace has millions of calls but a few thousand distinct ones."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from tracekit import devices
from tracekit.events.flops import op_cost
from tracekit.read.kineto import decode_raw


def op_costs(ops: pd.DataFrame, peaks: devices.DevicePeaks | None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(costs, inverse): op_cost (flops, bytes, kind, dtype) and the device's peak FLOP/s at its dtype
    (peak_flops) of each distinct (name, Input Dims, Input type, Concrete Inputs), and each op's distinct row:
    ``costs[c][inverse]`` is column ``c`` per op, made only when it is used (8 bytes an op each). The distinct rows
    are found from the columns' codes, with no object per op."""
    key = ["name", "input_dims", "input_type", "concrete_inputs"]
    combined = np.zeros(len(ops), dtype=np.int64)
    for col in key:  # one code per distinct tuple so far, then the next column's code within it (NaN: code -1)
        codes = ops[col].astype("category").cat.codes.to_numpy().astype(np.int64) + 1
        combined = pd.factorize(combined * (int(codes.max(initial=0)) + 1) + codes)[0].astype(np.int64)
    del codes
    # factorize numbers the distinct rows 0, 1, ... in order of first appearance, so the codes are each op's distinct
    # row, and a row first appears where its code first exceeds all before it: no sort of every op needed.
    inverse = combined
    seen = np.maximum.accumulate(np.concatenate([[-1], inverse[:-1]])) if len(inverse) else inverse
    first = np.flatnonzero(inverse > seen)
    del seen
    distinct = ops[key].iloc[first]
    rows = [_cost(str(n), *(v if isinstance(v, str) else None for v in (d, t, c)))
            for n, d, t, c in distinct.itertuples(index=False)]
    columns = {"flops": [r.flops for r in rows], "bytes": [r.bytes for r in rows], "kind": [r.kind for r in rows],
               "dtype": [r.dtype for r in rows]}
    distinct = {c: pd.Series(v, dtype=np.float64 if c in ("flops", "bytes") else None).to_numpy()
                for c, v in columns.items()}
    distinct["peak_flops"] = np.array([devices.peak_tflops(peaks, devices.dtype_key(d)) for d in distinct["dtype"]],
                                      dtype=np.float64) * 1e12  # per second, at the op's dtype
    return distinct, inverse.astype(np.int32 if len(ops) < 2**31 else np.int64)  # at most the ops: 4 bytes an op


@functools.lru_cache(maxsize=8192)
def _cost(name: str, dims: str | None, types: str | None, concrete: str | None):
    """``op_cost`` of one distinct call from its recorded text (None: not recorded). Kept for the next rank: the ranks
    of a run, and runs of one model, record mostly the same calls."""
    return op_cost(name, _decoded(dims), _decoded(types), _decoded(concrete))


def _decoded(text) -> list | None:
    """A recorded JSON list (``Input Dims``, ...), or None where absent or not a list."""
    return decode_raw(text.encode(), list) if isinstance(text, str) else None
