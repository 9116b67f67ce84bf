"""The vocabulary and the tables: every column tracekit produces, with its dtype and unit.

Glossary
--------
rank        One process of the job; its trace is one file. ``distributedInfo.rank`` names it.
device      Where a rank's work runs: a GPU, or the CPU training thread(s) on CPU-only (gloo) runs.
device event  A kernel, memcpy or memset on a GPU; on CPU-only traces, a CPU op or a gloo collective.
kind        What a device event does: ``compute``, ``comm`` (communication) or ``memory``.
step        One ``ProfilerStep#N`` annotation; the workloads make one step one optimizer step.
window      The time range metrics are computed over (see ``Config.window``).
span        Last device end minus first device start inside the window.
busy        Time when at least one device event runs (union over streams).
overlap     Time when communication and compute run at once.
exposed     Communication time with no compute under it: ``comm - overlap``.
idle        ``span - busy``; a *gap* is one maximal idle interval.
collective  One communication call (all_reduce, all_gather, ...) on one rank.
pg          The process group a collective runs in.
seq         A collective's sequence number within its process group, when the trace records it.

Units are in the column names: ``_us`` microseconds, ``_ns`` nanoseconds, ``_pct`` percent,
``_gbps`` GB/s (1e9 bytes per second), ``bytes`` bytes. Unknown numbers are NaN, never 0.
"""

from __future__ import annotations

KINDS = ("compute", "comm", "memory")

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send", "recv", "barrier", "other")

# The events table: one row per complete ("X") event of every rank.
EVENT_COLUMNS = {
    "rank": ("int32", "rank of the trace the event came from"),
    "cat": ("category", "Kineto category, normalised to today's names (kernel, cuda_runtime, cpu_op, ...)"),
    "name": ("category", "event name"),
    "pid": ("category", "process id, as text"),
    "tid": ("category", "thread id (CPU) or stream lane (GPU), as text"),
    "ts_ns": ("int64", "start, ns on the job's common clock (baseTimeNanoseconds added when present)"),
    "dur_ns": ("int64", "duration, ns; -1 when the trace gives none or an impossible one"),
    "correlation": ("int64", "CUDA/HIP correlation id linking a launch to its kernel; -1 when absent"),
    "external_id": ("int64", "Kineto external id; -1 when absent"),
    "stream": ("int64", "GPU stream of a device event; -1 when absent or not numeric"),
    "kind": ("category", "compute / comm / memory for device events; missing for host events"),
    "launch_ns": ("int64", "start of the runtime call that launched a device event; -1 when unknown"),
    "step": ("int64", "ProfilerStep number the event belongs to (device events: by their launch); -1 outside steps"),
}

# Communication metadata, one row per communication-related event (annotation, record_param_comms, kernel).
COMM_ARG_COLUMNS = {
    "rank": ("int32", ""),
    "row": ("int64", "row of the event in the events table"),
    "collective": ("object", "raw collective name from the args or the annotation"),
    "pg": ("object", "process group name or id, as text"),
    "seq": ("float64", "sequence number in the process group (NaN when absent)"),
    "in_nelems": ("float64", "input elements (NaN when unknown)"),
    "out_nelems": ("float64", "output elements (NaN when unknown)"),
    "dtype": ("object", "element type as written in the trace"),
    "group_size": ("float64", "ranks in the process group (NaN when unknown)"),
}

RANK_COLUMNS = (
    "rank", "device", "steps", "step_time_us", "span_us", "busy_us", "compute_us", "comm_us", "overlap_us",
    "exposed_comm_us", "memory_us", "idle_us", "overlap_pct", "idle_pct", "allreduce_count", "allreduce_us",
    "allreduce_bytes",
)

STEP_COLUMNS = ("rank", "step", "step_us", "compute_us", "overlap_us", "exposed_comm_us", "other_us", "comm_us")

COLLECTIVE_COLUMNS = (
    "rank", "step", "op", "pg", "seq", "start_us", "dur_us", "bytes", "dtype", "group_size",
    "algbw_gbps", "busbw_gbps", "name",
)

GAP_COLUMNS = ("rank", "step", "start_us", "dur_us")
