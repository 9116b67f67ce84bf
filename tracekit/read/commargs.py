"""The args of a rank's communication calls -> its communication args table: the call's row, its collective, process
group, peer (a global rank, or gloo's group-local one from ``Concrete Inputs``), sequence number, message sizes and
the first input tensor's elements and type (from ``Input Dims`` / ``Input type``). Unknown values are NaN or None."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.read.kineto import Args, decode_raw
from tracekit.read.opcolumns import at_least


def comm_args_table(rows: list[int], args: dict[int, Args | None], names: dict[int, str], rank: int) -> pd.DataFrame:
    picked = [args[i] or Args() for i in rows]
    tensors = [_first_tensor_nelems(decode_raw(a.input_dims, list), decode_raw(a.input_type, list)) for a in picked]
    return pd.DataFrame({
        "rank": np.full(len(rows), rank, dtype=np.int32),
        "row": np.asarray(rows, dtype=np.int64),  # the comm call's row in this rank's events table
        "collective": [a.collective for a in picked],  # from args only; None when the args do not say
        "pg": [_pg(a) for a in picked],
        "pg_desc": [a.pg_desc if isinstance(a.pg_desc, str) else None for a in picked],
        "peer": _floats([_int(a.dst_rank if a.dst_rank is not None else a.src_rank) for a in picked]),
        "peer_local": _floats([_local_peer(a, names[i]) for a, i in zip(picked, rows)]),
        "seq": _floats([a.seq for a in picked]),
        "in_nelems": at_least(_floats([a.in_nelems for a in picked]), 0),
        "out_nelems": at_least(_floats([a.out_nelems for a in picked]), 0),
        "dtype": [a.dtype for a in picked],
        "group_size": at_least(_floats([a.group_size for a in picked]), 1),
        "input_nelems": at_least(_floats([t[0] for t in tensors]), 0),
        "input_type": [t[1] for t in tensors],
        "second_nelems": at_least(_floats([t[2] for t in tensors]), 0),
    })


def _pg(a: Args):
    value = a.pg_name if a.pg_name is not None else a.pg_id
    return None if value is None else str(value)


def _int(value) -> int | None:
    """An integer id (a rank), or None where absent or not an integer."""
    try:
        return int(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


_P2P_OPS = ("c10d::send", "c10d::recv_")


def _local_peer(a: Args, name: str) -> int | None:
    """gloo's ``c10d::send``/``c10d::recv_``: the peer's group-local rank, the third of its ``Concrete Inputs``
    (``["", "", "<peer>", "<tag>"]``, with ``record_shapes``); None for any other op or where it is not an integer."""
    if name not in _P2P_OPS:
        return None
    inputs = decode_raw(a.concrete_inputs, list)
    return _int(inputs[2]) if inputs and len(inputs) > 2 and str(inputs[2]).lstrip("-").isdigit() else None


# "Input type" of inputs that are not tensors (ints, strings, process groups), and of lists of tensors.
_NOT_TENSOR = ("", "Scalar", "ScalarList", "ScalarType", "None", "String")
_TENSOR_LIST = ("TensorList", "GenericList")


def _first_tensor_nelems(dims, types) -> tuple[float | None, str | None, float | None]:
    """From ``Input Dims``/``Input type``: (elements, type) of the first input tensor, and the elements of the input
    right after it when that is a plain tensor too (c10d's ``*_base_`` ops take output, input); None where unknown.

    Leading inputs that are not tensors are passed over (vLLM's ``_C_custom_ar::all_reduce`` takes a handle first);
    a list of tensors ends the search, since its tensors' sizes are not recorded. A 0-dim tensor (``[]`` with a
    dtype, as in ``dist.all_reduce(loss)``) has one element.
    """
    if not dims or not types:
        return None, None, None
    for i, (shape, kind) in enumerate(zip(dims, types)):
        if not isinstance(kind, str) or kind in _TENSOR_LIST:
            return None, None, None
        if kind in _NOT_TENSOR:
            continue
        nelems = _nelems(shape)
        if nelems is None:
            return None, None, None
        after = i + 1 < min(len(dims), len(types)) and isinstance(types[i + 1], str) and \
            types[i + 1] not in _NOT_TENSOR + _TENSOR_LIST
        return nelems, kind, _nelems(dims[i + 1]) if after else None
    return None, None, None


def _nelems(shape) -> float | None:
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        return None
    return float(np.prod(shape, dtype=np.float64))


def _floats(values: list) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
