"""One row per collective call per rank, with its size and the nccl-tests bandwidths.

GPU ranks: each communication kernel is one call. Its op, size and group come from the kernel's own args
(newer traces), else from the ``record_param_comms`` op around the runtime call that launched it, else from the
``nccl:*`` annotation around that call (op from the name, size from ``Input Dims``), else from the collective
host op around it (``symm_mem::*``, ``_c10d_functional::*``, ``c10d::*``: op from the name, size from the input
tensor in ``Input Dims``; c10d's ``*_base_`` ops take output, input, which also gives the output's size).
CPU (gloo) ranks: each ``gloo:*`` annotation is one call, sized from its ``Input Dims`` (``record_shapes=True``).

Sizes (nccl-tests' S): all_reduce, broadcast, reduce_scatter, all_to_all, send and recv count their input;
all_gather its output, which is the input x the group size where the output is not recorded. The group size is
the args' ``Group size``, else its process group's size in ``pg_config``, else what the call's own shapes say
(all_gather output / input, reduce_scatter input / output), else the size of the group a call that names none is
taken to run in (see ``rank._pg_sizes``). Expert-parallel all-to-all kernels (``commnames.EP_KERNELS``: DeepEP,
pplx-kernels, NVSHMEM) carry no args and run under no collective op: their op is their name's, and their size and
group are unknown (NaN), never 0 or the default group's.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.events.classify import enclosing_span, launch_points
from tracekit.commnames import COLLECTIVE_OP, COMM_ANNOTATION, OPS, OUTPUT_FIRST_OP, ep_kernel_op

_OP_PATTERNS = (
    ("barrier", r"barrier"),
    ("all_reduce", r"all_?reduce|cross_device_reduce|quick_?reduce"),
    ("reduce_scatter", r"reduce_?scatter"),
    ("all_gather", r"all_?gather"),
    ("all_to_all", r"all_?to_?all"),
    ("broadcast", r"broadcast"),
    ("other", r"sendrecv"),
    ("send", r"send"),
    ("recv", r"recv"),
)

_DTYPE_BYTES = {
    "float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8,
    "long": 8, "int64": 8, "long int": 8, "int": 4, "int32": 4, "short": 2, "int16": 2,
    "unsigned char": 1, "byte": 1, "uint8": 1, "signed char": 1, "char": 1, "int8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "complexfloat": 8, "complexdouble": 16,
}

# busbw / algbw (nccl-tests PERFORMANCE.md), n = group size.
_BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0 + 0 * n,
    "send": lambda n: 1.0 + 0 * n,
    "recv": lambda n: 1.0 + 0 * n,
}


def normalize_op(name: str | None) -> str:
    """``nccl:_all_gather_base``, ``allgather``, ``ncclDevKernel_AllGather_RING_LL`` -> ``all_gather``; an
    expert-parallel kernel's from ``commnames.EP_KERNELS`` (``deep_ep::intranode::dispatch<...>`` -> ``all_to_all``)."""
    if not isinstance(name, str) or not name:
        return "other"
    if (ep := ep_kernel_op(name)) is not None:
        return ep
    text = name.lower()
    for op, pattern in _OP_PATTERNS:
        if re.search(pattern, text):
            return op
    return "other"


def dtype_bytes(dtype: str | None) -> float:
    """Bytes per element of a dtype as traces write it (``Float``, ``c10::BFloat16``, ``unsigned char``); NaN if unknown."""
    if not isinstance(dtype, str) or not dtype:
        return np.nan
    key = dtype.lower().removeprefix("c10::").removeprefix("at::").removeprefix("torch.")
    return float(_DTYPE_BYTES.get(key, np.nan))


def collective_table(events: pd.DataFrame, comm_args: pd.DataFrame, pg_sizes: dict) -> pd.DataFrame:
    """Collectives of every rank. ``events`` is classified; ``pg_sizes`` maps (rank, pg) -> size, and (rank, None) -> size of the only pg."""
    # A call without a usable duration is a dropped event (data quality's ``dropped_events``), as everywhere else.
    calls = events[(events["kind"] == "comm").to_numpy() & (events["dur_ns"] >= 0).to_numpy()]
    calls = calls[(calls["cat"] == "kernel") | calls["name"].astype(str).str.match(COMM_ANNOTATION.pattern)]
    return _table(events, comm_args, pg_sizes, calls) if len(calls) else _no_calls(calls)


def _no_calls(calls: pd.DataFrame) -> pd.DataFrame:
    """The collective table of a rank without a call: ``_table``'s columns and types, without its passes."""
    none, text = np.empty(0), np.empty(0, dtype=object)
    return pd.DataFrame({
        "rank": calls["rank"].to_numpy(), "step": calls["step"].to_numpy(),
        "op": pd.Categorical([], categories=list(OPS)),
        "pg": text, "pg_desc": text, "peer": none, "peer_local": none, "posted_ns": none, "seq": none,
        "start_ns": calls["ts_ns"].to_numpy(), "dur_us": none, "bytes": none, "dtype": text, "group_size": none,
        "algbw_gbps": none, "busbw_gbps": none, "name": text, "row": calls.index.to_numpy(),
    })


def _table(events: pd.DataFrame, comm_args: pd.DataFrame, pg_sizes: dict, calls: pd.DataFrame) -> pd.DataFrame:
    """The collective table of ``calls`` (the rows of ``events`` that are collective calls)."""
    meta = _metadata(events, comm_args, calls)
    op = [normalize_op(c) for c in meta["collective"]]
    in_n, out_n = meta["in_nelems"].to_numpy(), meta["out_nelems"].to_numpy()
    of_pg = np.array([np.nan if p is None or p != p else pg_sizes.get((r, p), np.nan)
                      for r, p in zip(calls["rank"], meta["pg"])], dtype=float)
    default = np.array([pg_sizes.get((r, None), np.nan) for r in calls["rank"]], dtype=float)
    # An expert-parallel kernel names no group, and its EP group is rarely the default one: unknown.
    ep = np.array([ep_kernel_op(n) is not None for n in calls["name"].astype(str)], dtype=bool)
    default = np.where(ep, np.nan, default)
    group = meta["group_size"].to_numpy(dtype=float)
    for known in (of_pg, _group_from_shapes(np.array(op), in_n, out_n), default):
        group = np.where(np.isnan(group), known, group)
    size = np.array([dtype_bytes(d) for d in meta["dtype"]])
    nbytes = _payload_bytes(np.array(op), in_n, out_n, group) * size
    nbytes = np.where(np.array(op) == "barrier", 0.0, nbytes)
    dur_us = calls["dur_ns"].to_numpy() / 1e3
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(dur_us > 0, nbytes / dur_us / 1e3, np.nan)
    algbw = np.where(np.array(op) == "barrier", np.nan, algbw)
    factor = np.array([_BUS_FACTOR[o](n) if o in _BUS_FACTOR and n > 0 else np.nan for o, n in zip(op, group)])
    return pd.DataFrame({
        "rank": calls["rank"].to_numpy(),
        "step": calls["step"].to_numpy(),
        "op": pd.Categorical(op, categories=list(OPS)),
        "pg": meta["pg"].to_numpy(),
        "pg_desc": meta["pg_desc"].to_numpy(),
        "peer": meta["peer"].to_numpy(dtype=float),
        "peer_local": meta["peer_local"].to_numpy(dtype=float),
        "posted_ns": meta["posted_ns"].to_numpy(dtype=float),
        "seq": meta["seq"].to_numpy(),
        "start_ns": calls["ts_ns"].to_numpy(),
        "dur_us": dur_us,
        "bytes": nbytes,
        "dtype": meta["dtype"].to_numpy(),
        "group_size": group,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * factor,
        "name": calls["name"].astype(str).to_numpy(),
        "row": calls.index.to_numpy(),
    }).sort_values(["rank", "start_ns"], ignore_index=True)


def _group_from_shapes(op, in_n, out_n):
    """The group size a call's own sizes imply: all_gather output / input, reduce_scatter input / output."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.select([op == "all_gather", op == "reduce_scatter"], [out_n / in_n, in_n / out_n], default=np.nan)
    whole = np.isfinite(ratio) & (ratio >= 1) & (ratio == np.round(ratio))
    return np.where(whole, ratio, np.nan)


def _payload_bytes(op, in_n, out_n, group):
    """Elements that nccl-tests' S counts: the input, but all_gather's output (input x group where the output is not
    recorded); reduce_scatter's input (output x group where only that is); recv's buffer."""
    return np.select(
        [op == "all_gather", op == "reduce_scatter", op == "recv"],
        [np.where(np.isnan(out_n), in_n * group, out_n), np.where(np.isnan(in_n), out_n * group, in_n),
         np.where(np.isnan(out_n), in_n, out_n)],
        default=in_n,
    )


def _metadata(events, comm_args, calls) -> pd.DataFrame:
    """Per call, each field from the first source that knows it: the call's own args, then the
    ``record_param_comms`` around its launch, then the ``nccl:*`` annotation around its launch, then the
    collective host op around its launch (op and Input Dims only). Each field is an object array per source, with
    the missing value its source holds (None or NaN): the first known value is picked with no pandas Series made
    per field and source."""
    own = _args_of(comm_args, calls.index.to_numpy())
    outer = _enclosing(events, comm_args, calls, re.compile(r"^record_param_comms$"))
    annotation = _enclosing(events, comm_args, calls, COMM_ANNOTATION)
    launcher = _enclosing(events, comm_args, calls, COLLECTIVE_OP)
    sources = (own, outer, annotation)
    not_wait = [_where(src["collective"], ~_named(src["collective"], lambda text: text.lower() == "wait"))
                for src in sources]
    # The op: a collective named in args beats an annotation's name, then the host op's, then a bare kernel name.
    merged = {"collective": _first(*not_wait, annotation["name"], launcher["name"],
                                   calls["name"].astype(str).to_numpy(dtype=object))}
    for f in ("pg", "pg_desc", "peer", "seq", "in_nelems", "out_nelems", "dtype", "group_size"):
        merged[f] = _first(*(src[f] for src in sources))
    # gloo's send/recv annotation starts inside the c10d op that posted it, on its thread: the peer is that op's.
    posted = _posted_by(events, comm_args, calls)
    merged["peer_local"] = _first(own["peer_local"], posted["peer_local"].to_numpy(dtype=object))
    # Input Dims: the first tensor is the input everywhere but in c10d's ops, whose *_base_ forms take
    # (output, input) and whose others take tensor lists (sizes not recorded).
    output_first = _named(launcher["name"], lambda text: OUTPUT_FIRST_OP.match(text) is not None)
    base = output_first & pd.notna(launcher["second_nelems"])
    first = [src["input_nelems"] for src in (own, annotation, outer)] + [_where(launcher["input_nelems"], ~output_first)]
    types = [src["input_type"] for src in (own, annotation, outer, launcher)]
    dims = _first(*first, _where(launcher["second_nelems"], base))
    dims_type = _first(*(_where(t, pd.notna(n)) for t, n in zip(types, first)), _where(launcher["input_type"], base))
    take = pd.isna(merged["in_nelems"]) & pd.notna(dims)
    merged["in_nelems"][take] = dims[take]
    typed = take & pd.isna(merged["dtype"])
    merged["dtype"][typed] = dims_type[typed]
    take_out = pd.isna(merged["out_nelems"]) & base
    merged["out_nelems"][take_out] = launcher["input_nelems"][take_out]
    for f in ("peer", "peer_local", "seq", "in_nelems", "out_nelems", "group_size"):
        merged[f] = pd.to_numeric(merged[f]).astype(float)
    merged["posted_ns"] = posted["posted_ns"].to_numpy()
    columns = ("collective", "pg", "pg_desc", "peer", "seq", "in_nelems", "out_nelems", "dtype", "group_size",
               "peer_local", "posted_ns")
    return pd.DataFrame({c: pd.Series(merged[c], index=calls.index, dtype=merged[c].dtype) for c in columns},
                        index=calls.index)


# The ops that post a gloo P2P call; its async annotation (gloo:send/recv) begins as the op ends.
P2P_POSTS = re.compile(r"^c10d::(?:send|recv_)$")


def _posted_by(events, comm_args, calls) -> pd.DataFrame:
    """The ``c10d::send``/``c10d::recv_`` op that holds each call's own start (or ends there) on its thread (gloo P2P annotations
    have no launch): its peer (``peer_local``) and start (``posted_ns``: the call was posted then); NaN where none."""
    result = pd.DataFrame(index=calls.index, columns=["peer_local", "posted_ns"], dtype=float)
    names = events["name"].cat.categories
    wanted = names[np.fromiter((P2P_POSTS.search(n) is not None for n in names), dtype=bool, count=len(names))]
    spans = events[events["name"].isin(wanted) & (events["dur_ns"] >= 0)]
    if len(spans) == 0 or len(calls) == 0:
        return result
    points = launch_points(events, events.index.get_indexer(calls.index))
    span_row = enclosing_span(points.assign(ts_ns=points["ts_ns"] - 1), spans)  # inside it, or as it ends
    found = span_row >= 0
    args = comm_args.set_index("row").reindex(span_row[found])
    result.loc[calls.index[found], "peer_local"] = args["peer_local"].to_numpy(dtype=float)
    result.loc[calls.index[found], "posted_ns"] = events["ts_ns"].to_numpy()[span_row[found]].astype(float)
    return result


def _first(*values: np.ndarray) -> np.ndarray:
    """Element-wise first non-missing value across aligned object arrays (the last one's value where none is)."""
    out = np.array(values[0], dtype=object)
    for v in values[1:]:
        missing = pd.isna(out)
        out[missing] = v[missing]
    return out


def _where(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``values`` with NaN where ``keep`` is False (``Series.where``)."""
    out = np.array(values, dtype=object)
    out[~keep] = np.nan
    return out


def _named(values: np.ndarray, test) -> np.ndarray:
    """Whether each value is text that passes ``test`` (missing values do not)."""
    return np.fromiter((isinstance(v, str) and test(v) for v in values), dtype=bool, count=len(values))


_ARG_FIELDS = ("collective", "pg", "pg_desc", "peer", "peer_local", "seq", "in_nelems", "out_nelems", "dtype",
               "group_size", "input_nelems", "input_type", "second_nelems")


def _args_of(comm_args: pd.DataFrame, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Per events-table row of ``rows``, each comm-args field as an object array; NaN where the row has no args."""
    at = pd.Index(comm_args["row"].to_numpy()).get_indexer(rows)
    has = at >= 0
    out = {}
    for f in _ARG_FIELDS:
        column = np.full(len(rows), np.nan, dtype=object)
        column[has] = comm_args[f].to_numpy(dtype=object)[at[has]]
        out[f] = column
    return out


def _enclosing(events, comm_args, calls, pattern: re.Pattern) -> dict[str, np.ndarray]:
    """Comm args (and ``name``) of the host op whose name matches ``pattern`` that encloses each call's launch, as
    object arrays aligned with ``calls`` (NaN where none)."""
    result = {f: np.full(len(calls), np.nan, dtype=object) for f in (*_ARG_FIELDS, "name")}
    names = events["name"].cat.categories
    wanted = names[np.fromiter((pattern.search(n) is not None for n in names), dtype=bool, count=len(names))]
    spans = events[events["name"].isin(wanted) & (events["dur_ns"] >= 0)]
    launched = np.flatnonzero(calls["launch_row"].to_numpy() >= 0)  # positions in calls
    if len(spans) == 0 or len(launched) == 0:
        return result
    rows = events["launch_row"].to_numpy()[calls.index.to_numpy()[launched]]
    span_row = enclosing_span(launch_points(events, rows), spans)
    found = span_row >= 0
    at, span_row = launched[found], span_row[found]
    for f, values in _args_of(comm_args, span_row).items():
        result[f][at] = values
    codes = events["name"].cat.codes.to_numpy()[span_row]
    result["name"][at] = names.to_numpy(dtype=object)[codes]
    return result
