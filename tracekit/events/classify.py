"""Which events are device events, and what each does: compute, comm (communication) or memory.

GPU traces: kernels, memcpys and memsets. A kernel is communication when its own args name a collective,
when its name is an NCCL/RCCL/HCCL kernel (every NCCL era: ``ncclKernel_*``, ``ncclDevKernel_*``,
``ncclDevKernel_Generic``, ncclx ``ncclKernel*Ctran*``) or a known all-reduce kernel that is not NCCL's
(symmetric memory's ``multimem_all_reduce_kernel``, inference engines' ``cross_device_reduce_*``, any name
with a word that starts ``all_reduce``/``allreduce``) or an expert-parallel all-to-all kernel
(``tracekit.commnames.EP_KERNELS``: DeepEP, pplx-kernels, NVSHMEM), or when the runtime call that launched it ran inside an ``nccl:*``/``rccl:*``
annotation or a host op that is a collective (``tracekit.commnames.COLLECTIVE_OP``: ``symm_mem::*``,
``_c10d_functional::*``, ``c10d::*``, ...; the copies such an op makes of its input excepted). Memcpy/memset
events, and kernels named like them, are memory.

CPU-only traces (gloo): the device is the training thread. Its CPU ops are compute, and the
``gloo:*`` collectives, which run on gloo's own threads, are communication.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.commnames import COLLECTIVE_OP, COMM_ANNOTATION, EP_KERNEL, HOST_COMM_PREFIXES
from tracekit.read.categories import DEVICE_API, DEVICE_CATEGORIES, RUNTIME_CATEGORIES
from tracekit.schema import KINDS
from tracekit.events.graphs import graph_kernels
from tracekit.events.steps import STEP_NAME, assign_steps, step_table  # noqa: F401 (read from here too)

COMM_KERNEL = re.compile(r"nccl|rccl|hccl|cross_device_reduce|quick_?reduce|(?:one|two)_?shot_?all_?reduce"
                         r"|multimem_\w*all_?(?:reduce|gather)|(?<![a-z])all_?reduce", re.IGNORECASE)
# Kernels a collective host op launches to copy its input (functional collectives clone it): not communication.
_COPY_KERNEL = re.compile(r"copy|memcpy|memset|fill", re.IGNORECASE)
MEMORY_KERNEL = re.compile(r"^(?:hip)?memcpy|^(?:hip)?memset|^dma", re.IGNORECASE)
def classify(events: pd.DataFrame, comm_args: pd.DataFrame, device_ranks=None,
             steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """A new events table with ``kind`` (device events only), ``launch_ns`` (start of the runtime call that
    launched a device event, -1 if unknown), ``launch_row`` (that call's row, -1 if unknown), ``pre_trace``
    (launched before the trace began: see ``launched_before_trace``) and ``step`` (every event) added.

    ``device_ranks``: the ranks whose traces are device traces (``categories.device_evidence``); the others are CPU-only,
    and their training thread plays the device. None: the ranks with an event only a device trace has.
    ``steps``: the steps (``steps.step_table``, e.g. of a ``step_pattern``); None: the trace's own.
    """
    out = events.copy(deep=False)  # copy-on-write: the columns added below leave ``events`` as it was
    launch = _launch_of_device_events(out)
    kind = np.full(len(out), -1, dtype=np.int8)  # codes of KINDS; -1: not a device event
    is_device = out["cat"].isin(DEVICE_CATEGORIES).to_numpy()
    if device_ranks is None:
        cats = out["cat"].cat.categories
        device_ranks = out.loc[out["cat"].isin(cats[cats.str.match(DEVICE_API.pattern)]), "rank"].unique()
    on_gpu = out["rank"].isin(list(device_ranks)).to_numpy()

    kernel = is_device & out["cat"].isin(("kernel", "mtia_ccp_events")).to_numpy()  # named by what they run
    comm = kernel & (_name_matches(out, COMM_KERNEL) | _name_matches(out, EP_KERNEL))
    named = comm_args["collective"].notna() & (comm_args["collective"].astype(str).str.lower() != "wait")
    comm |= kernel & _rows_mask(out, comm_args.loc[named, ["rank", "row"]])
    comm |= kernel & launch["in_comm_annotation"].to_numpy()
    comm |= kernel & _launched_inside(out, launch["launch_row"].to_numpy(), COLLECTIVE_OP) & ~_name_matches(
        out, _COPY_KERNEL)
    memory = is_device & ~comm & (~kernel | _name_matches(out, MEMORY_KERNEL))
    kind[is_device] = KINDS.index("compute")
    kind[memory] = KINDS.index("memory")
    kind[comm] = KINDS.index("comm")
    pre_trace = launched_before_trace(out, launch["launch_row"].to_numpy())
    kind[pre_trace] = -1  # work of an earlier, unprofiled step: no kind, no step, no collective

    # CPU-only ranks: training-thread ops are compute, gloo collectives are communication.
    cpu_compute, cpu_comm = _cpu_device_events(out, ~on_gpu)
    kind[cpu_compute] = KINDS.index("compute")
    kind[cpu_comm] = KINDS.index("comm")
    out["kind"] = pd.Categorical.from_codes(kind, categories=list(KINDS))

    out["launch_ns"] = launch["launch_ts_ns"].to_numpy()
    out["launch_row"] = launch["launch_row"].to_numpy()
    when = np.where(out["launch_ns"].to_numpy() >= 0, out["launch_ns"].to_numpy(), out["ts_ns"].to_numpy())
    out["step"] = np.where(pre_trace, -1, assign_steps(out["rank"].to_numpy(), when,
                                                          step_table(out) if steps is None else steps))
    out["pre_trace"] = pre_trace
    return out


def launched_before_trace(events: pd.DataFrame, launch_row: np.ndarray) -> np.ndarray:
    """Per row: a device event launched before the trace began (the device runs behind the host, so the first
    profiled step's device timeline starts with work launched in the last unprofiled one).

    Such an event's launch is not in the trace, and it was issued before the first launch the trace holds: its
    ``correlation`` id is below every launch call's of its rank (the ids count up per process), or, when it has
    none (or 0, unset: MTIA's ``dma_request``, ``event_record``, ...), it starts before the rank's first launch call
    (a runtime call with an id). One without an id that starts later may have been issued while the host was
    profiled, so it stays. Only ranks where at least one device event is linked to its launch are judged: a trace
    whose events carry no launch link at all (CPU-only, no runtime events, old formats) keeps every event.
    """
    rank = events["rank"].to_numpy().astype(np.int64)
    corr = events["correlation"].to_numpy()
    is_device = events["cat"].isin(DEVICE_CATEGORIES).to_numpy()
    linked = is_device & (launch_row >= 0)
    judged = is_device & (launch_row < 0) & np.isin(rank, np.unique(rank[linked]))
    if not judged.any():
        return judged
    rows = np.flatnonzero(judged)
    calls = events["cat"].isin(RUNTIME_CATEGORIES).to_numpy() & (corr > 0)
    below_ids = corr[rows] < _min_by(rank[calls], corr[calls], rank[rows])
    ts = events["ts_ns"].to_numpy()
    # A rank whose calls all lack an id gets int64's minimum here: nothing starts before it, all is kept.
    before_calls = ts[rows] < _min_by(rank[calls], ts[calls], rank[rows])
    out = np.zeros(len(events), dtype=bool)
    out[rows] = np.where(corr[rows] > 0, below_ids, before_calls)  # id 0: unset (CUPTI's ids start at 1)
    return out


def _min_by(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """For each query key: the least int64 value among ``values`` of that key; int64's minimum where it has none."""
    uniq, inverse = np.unique(keys, return_inverse=True)
    least = np.full(len(uniq), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(least, inverse, values.astype(np.int64))
    at = np.minimum(np.searchsorted(uniq, query), max(len(uniq) - 1, 0))
    found = (at < len(uniq)) & (uniq[at] == query) if len(uniq) else np.zeros(len(query), dtype=bool)
    return np.where(found, least[at] if len(uniq) else 0, np.iinfo(np.int64).min)


def _launch_of_device_events(events: pd.DataFrame) -> pd.DataFrame:
    """For each row: the events-table row of the runtime call that launched it (-1 if none, or not a device event),
    that call's start (-1 if none), and whether that call ran inside a comm annotation. The call is the one with the
    event's correlation id; a graph's kernels whose id links none go to their graph launch (``graphs.graph_kernels``)."""
    n = len(events)
    launch_row = np.full(n, -1, dtype=np.int64)
    in_comm = np.zeros(n, dtype=bool)
    corr = events["correlation"].to_numpy()
    rank = events["rank"].to_numpy()
    device = np.flatnonzero(events["cat"].isin(DEVICE_CATEGORIES).to_numpy() & (corr >= 0))
    # Launch calls in the order of RUNTIME_CATEGORIES (runtime before driver), table order within each.
    codes, cats = events["cat"].cat.codes.to_numpy(), list(events["cat"].cat.categories)
    runtime = np.concatenate([np.flatnonzero((codes == cats.index(c)) & (corr >= 0))
                              for c in RUNTIME_CATEGORIES if c in cats] + [np.empty(0, dtype=np.int64)])
    for r in np.unique(rank[device]):
        # Per rank, a correlation id names one runtime call (the first in the table where a trace repeats it).
        calls = runtime[rank[runtime] == r]
        if len(calls) == 0:
            continue
        ids, first = np.unique(corr[calls], return_index=True)
        launched = device[rank[device] == r]
        at = np.minimum(np.searchsorted(ids, corr[launched]), len(ids) - 1)
        found = ids[at] == corr[launched]
        launch_row[launched[found]] = calls[first[at[found]]]
    # A graph's kernels that no id links: its graph launch's (work launched before the trace excepted).
    launch_row = graph_kernels(events, launch_row, lambda rows: launched_before_trace(events, rows))
    linked = np.flatnonzero(launch_row >= 0)
    ts = events["ts_ns"].to_numpy()
    launch_ts = np.where(launch_row >= 0, ts[np.maximum(launch_row, 0)], -1)

    names = events["name"].cat.categories
    annotations = events[events["name"].isin(names[names.str.match(COMM_ANNOTATION.pattern)]) & (events["dur_ns"] >= 0)]
    if len(annotations) and len(linked):
        in_comm[linked[_inside(launch_points(events, launch_row[linked]), annotations)]] = True
    return pd.DataFrame({"launch_row": launch_row, "launch_ts_ns": launch_ts, "in_comm_annotation": in_comm})


def _launched_inside(events: pd.DataFrame, launch_row: np.ndarray, pattern: re.Pattern) -> np.ndarray:
    """Per row: whether the runtime call that launched it ran inside a host op whose name matches ``pattern``."""
    inside = np.zeros(len(events), dtype=bool)
    names = events["name"].cat.categories
    wanted = names[np.fromiter((pattern.search(n) is not None for n in names), dtype=bool, count=len(names))]
    spans = events[events["name"].isin(wanted) & (events["dur_ns"] >= 0)]
    linked = np.flatnonzero(launch_row >= 0)
    if len(spans) and len(linked):
        inside[linked[_inside(launch_points(events, launch_row[linked]), spans)]] = True
    return inside


def launch_points(events: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """(rank, tid, ts_ns) of the runtime calls at events-table positions ``rows``: where launches happened."""
    return pd.DataFrame({"rank": events["rank"].to_numpy()[rows], "tid": events["tid"].iloc[rows].to_numpy(),
                         "ts_ns": events["ts_ns"].to_numpy()[rows]})


def _inside(points: pd.DataFrame, spans: pd.DataFrame) -> np.ndarray:
    """Whether each point (rank, tid, ts_ns) falls inside one of ``spans`` on the same rank and thread."""
    return enclosing_span(points, spans) >= 0


def enclosing_span(points: pd.DataFrame, spans: pd.DataFrame) -> np.ndarray:
    """For each point (rank, tid, ts_ns; e.g. ``launch_points``): the events-table row (``spans``' index) of the
    latest-starting span of ``spans`` (rows of the events table) on its rank and thread that holds it, or -1."""
    left = pd.DataFrame({
        "rank": points["rank"].to_numpy(), "tid": points["tid"].astype(str).to_numpy(),
        "ts_ns": points["ts_ns"].to_numpy(), "_i": np.arange(len(points)),
    }).sort_values("ts_ns")
    right = pd.DataFrame({
        "rank": spans["rank"].to_numpy(), "tid": spans["tid"].astype(str).to_numpy(),
        "span_start": spans["ts_ns"].to_numpy(), "span_end": (spans["ts_ns"] + spans["dur_ns"]).to_numpy(),
        "span_row": spans.index.to_numpy(),
    }).sort_values("span_start")
    joined = pd.merge_asof(left, right, left_on="ts_ns", right_on="span_start", by=["rank", "tid"])
    hit = (joined["ts_ns"] < joined["span_end"]).fillna(False).to_numpy(dtype=bool)
    result = np.full(len(points), -1, dtype=np.int64)
    result[joined["_i"].to_numpy()[hit]] = joined["span_row"].to_numpy()[hit].astype(np.int64)
    return result


def _cpu_device_events(events: pd.DataFrame, on_cpu_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not on_cpu_rank.any():
        return on_cpu_rank, on_cpu_rank
    names = events["name"].cat.categories
    comm_names = names[names.str.match(r"^gloo:")]
    comm = on_cpu_rank & events["name"].isin(comm_names).to_numpy() & (events["dur_ns"] >= 0).to_numpy()
    step_names = names[names.str.match(STEP_NAME.pattern)]
    key = _thread_key(events)
    stepped = key[on_cpu_rank & events["name"].isin(step_names).to_numpy()]
    comm_threads = key[comm]
    # The training thread holds the ProfilerStep annotations; without them, every non-gloo thread with ops.
    training = np.isin(key, stepped) | (
        ~events["rank"].isin(events.loc[events["name"].isin(step_names), "rank"]).to_numpy()
        & ~np.isin(key, comm_threads)
    )
    # Host ops that only hand work to a communication backend, or are collectives: not compute on a CPU-only trace.
    host_comm = events["name"].isin(names[names.str.startswith(HOST_COMM_PREFIXES)
                                          | np.array([COLLECTIVE_OP.search(n) is not None for n in names], dtype=bool)])
    host_comm = host_comm.to_numpy()
    compute = on_cpu_rank & training & (events["cat"] == "cpu_op").to_numpy() & ~host_comm & (events["dur_ns"] >= 0).to_numpy()
    return compute, comm


def _thread_key(events: pd.DataFrame) -> np.ndarray:
    """One integer per row, equal exactly when rank, pid and tid are all equal as text."""
    codes = [_text_codes(events[col]) + 1 for col in ("rank", "pid", "tid")]
    sizes = [int(c.max()) + 1 if len(c) else 1 for c in codes]
    return (codes[0] * sizes[1] + codes[1]) * sizes[2] + codes[2]


def _text_codes(col: pd.Series) -> np.ndarray:
    """Codes (int64, from 0; -1 for NaN) equal exactly when the values are equal as text."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        of_category = pd.factorize(col.cat.categories.astype(str))[0].astype(np.int64)
        return np.append(of_category, -1)[col.cat.codes.to_numpy()]
    if pd.api.types.is_integer_dtype(col.dtype):
        return pd.factorize(col)[0].astype(np.int64)
    return pd.factorize(col.astype(str))[0].astype(np.int64)


def _name_matches(events: pd.DataFrame, pattern: re.Pattern) -> np.ndarray:
    """Regex over the distinct names only (a categorical's categories), then mapped to rows."""
    names = events["name"].cat.categories
    hits = np.fromiter((pattern.search(n) is not None for n in names), dtype=bool, count=len(names))
    codes = events["name"].cat.codes.to_numpy()
    return hits[codes] & (codes >= 0)


def _rows_mask(events: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    mask = np.zeros(len(events), dtype=bool)
    mask[rows["row"].to_numpy()] = True
    return mask
