"""What a run is, beside its tables: where its traces came from, its job, its clocks, and the workload's ``run.json``.

``RunFacts`` is ``Summary.run``; ``WorkloadRun`` is the ``run.json`` a workload (``workloads/record.py``) writes beside
its traces, read once, with its throughput as numbers. ``to_dict()`` of each gives the Summary JSON's ``run`` and
``run.workload`` objects.

>>> w = WorkloadRun.from_json({"workload": "resnet", "notes": "a newer key",
...                            "throughput_samples_per_s": {"unprofiled": 120.5, "profiled": None}})
>>> w.workload, w.throughput_unprofiled, w.throughput_profiled, w.extra
('resnet', 120.5, nan, {'notes': 'a newer key'})
>>> w.throughputs()
{'unprofiled': 120.5}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import pandas as pd

from tracekit.events.config import Config
from tracekit.schema import CLOCK_OFFSET_FIELDS, STRAGGLER_COLUMNS

THROUGHPUT_KINDS = ("unprofiled", "profiled")  # the keys of run.json's throughput_samples_per_s, in its order


@dataclass(frozen=True, kw_only=True)
class TraceFile:
    """A trace file read: its rank, its path (as given, local or a URL), and the events dropped for bad durations."""

    rank: int
    path: str
    dropped_events: int


@dataclass(frozen=True, kw_only=True)
class SkippedFile:
    """A file in the run folder that is not a readable profiler trace, why, and its rank where known (from the
    trace or its file name)."""

    path: str
    reason: str
    rank: int | None = None


@dataclass(frozen=True, kw_only=True)
class WorkloadRun:
    """A workload's ``run.json`` (``workloads/record.py`` writes it): each key it knows as a typed value, None when
    the file does not give it. A key tracekit does not know, or whose value is not of the type below (a null
    included), is kept as written in ``extra``, so ``to_dict()`` gives back everything the file says.

    Throughput is read here and nowhere else: ``throughput_unprofiled`` and ``throughput_profiled`` are samples/s
    (steps without and with the profiler, step 0 left out), NaN when ``throughput_samples_per_s`` does not give a
    finite number for that kind (it is null when the run had no such step).
    """

    workload: str | None = None
    config: dict[str, Any] | None = None  # the workload's TrainConfig, as written
    world_size: int | None = None
    backend: str | None = None
    mode: str | None = None
    devices: tuple[str, ...] | None = None
    versions: dict[str, Any] | None = None
    trainable_params: int | None = None
    optimizer_steps: int | None = None
    micro_batches_per_step: int | None = None
    samples_per_step: int | None = None
    profiled_steps: tuple[int, ...] | None = None
    traces: tuple[str, ...] | None = None
    step_ms: tuple[float, ...] | None = None
    throughput_samples_per_s: dict[str, float | None] | None = None  # as written; read it as the two fields below
    argv: tuple[str, ...] | None = None
    created: str | None = None  # ISO 8601 with the UTC offset
    flop_counter_flops_per_step: float | None = None  # FlopCounterMode's count of one optimizer step on one rank
    extra: dict[str, Any] = field(default_factory=dict)
    throughput_unprofiled: float = field(init=False)
    throughput_profiled: float = field(init=False)

    def __post_init__(self):
        rates = self.throughput_samples_per_s or {}
        for kind in THROUGHPUT_KINDS:
            value = rates.get(kind)
            object.__setattr__(self, f"throughput_{kind}", float(value) if _is_number(value) else math.nan)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> WorkloadRun:
        """From the decoded ``run.json`` object."""
        known, extra = {}, {}
        for key, value in doc.items():
            typed = _READ[key](value) if key in _READ else None
            if typed is None:
                extra[key] = value
            else:
                known[key] = typed
        return cls(**known, extra=extra)

    def throughputs(self) -> dict[str, float]:
        """Samples/s by kind (``unprofiled``, ``profiled``), the known ones only."""
        values = {kind: getattr(self, f"throughput_{kind}") for kind in THROUGHPUT_KINDS}
        return {kind: v for kind, v in values.items() if not math.isnan(v)}

    def to_dict(self) -> dict[str, Any]:
        """The run.json object again: the keys the file gave, as written (lists as lists)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.init and f.name != "extra" and value is not None:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out | self.extra


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """Facts about a run (``Summary.run``): where it came from, the job the traces describe, and its clocks.

    world_sizes, backends   every distinct world size / backend the traces' distributedInfo states, sorted
    world_size, backend     the one the traces state, or None when none states one or they disagree
    origin_ns               the run's time origin: every ``start_us`` in the Summary is from it, on the reference
                            rank's clock (``Summary.clock_shift_ns`` moves a rank's own times onto it)
    clock_offsets           one row per rank (``schema.CLOCK_OFFSET_FIELDS``, ``tracekit.run.clocks``)
    straggler_suspicions    ranks over the straggler bar with too little evidence (``schema.STRAGGLER_COLUMNS``)
    workload                the workload's ``run.json`` beside the traces; None when there is none or it is unreadable
    """

    source: str = ""
    world_sizes: tuple[int, ...] = ()
    ranks_read: int = 0
    backends: tuple[str, ...] = ()
    nccl_version: str | None = None
    device_names: tuple[str, ...] = ()
    host_names: tuple[str, ...] = ()
    files: tuple[TraceFile, ...] = ()
    skipped: tuple[SkippedFile, ...] = ()
    window: str = Config().window
    origin_ns: int = 0
    clock_offsets: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(CLOCK_OFFSET_FIELDS)))
    workload: WorkloadRun | None = None
    straggler_suspicions: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(STRAGGLER_COLUMNS)))

    @property
    def world_size(self) -> int | None:
        return self.world_sizes[0] if len(self.world_sizes) == 1 else None

    @property
    def backend(self) -> str | None:
        return self.backends[0] if len(self.backends) == 1 else None

    @property
    def origin_us(self) -> float:
        return self.origin_ns / 1e3

    def to_dict(self) -> dict[str, Any]:
        """The Summary JSON's ``run`` object (before NaN becomes None): world_size and backend are the one value,
        None, or the list of all when the traces disagree; files, skipped and the tables are lists of records."""
        return {
            "source": self.source,
            "world_size": one_or_all(self.world_sizes),
            "ranks_read": self.ranks_read,
            "backend": one_or_all(self.backends),
            "nccl_version": self.nccl_version,
            "device_names": list(self.device_names),
            "host_names": list(self.host_names),
            "files": [{"rank": f.rank, "path": f.path, "dropped_events": f.dropped_events} for f in self.files],
            "skipped": [{"path": s.path, "reason": s.reason, "rank": s.rank} for s in self.skipped],
            "window": self.window,
            "origin_ns": self.origin_ns,
            "origin_us": self.origin_us,
            "clock_offsets": self.clock_offsets.to_dict("records"),
            "workload": None if self.workload is None else self.workload.to_dict(),
            "straggler_suspicions": self.straggler_suspicions.to_dict("records"),
        }


def one_or_all(values: tuple) -> Any:
    """How the JSON (and the reports) say a fact the traces may disagree on: the one value, None for none, or the
    list of all of them."""
    return values[0] if len(values) == 1 else (list(values) or None)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _of(kind: type):
    return lambda v: v if isinstance(v, kind) and not isinstance(v, bool) else None


def _tuple_of(kind: type):
    def read(v):
        ok = isinstance(v, list) and all(isinstance(x, kind) and not isinstance(x, bool) for x in v)
        return tuple(v) if ok else None
    return read


def _rates(v):
    ok = isinstance(v, dict) and all(x is None or _is_number(x) for x in v.values())
    return dict(v) if ok else None


_READ = {
    "workload": _of(str), "config": _of(dict), "world_size": _of(int), "backend": _of(str), "mode": _of(str),
    "devices": _tuple_of(str), "versions": _of(dict), "trainable_params": _of(int), "optimizer_steps": _of(int),
    "micro_batches_per_step": _of(int), "samples_per_step": _of(int), "profiled_steps": _tuple_of(int),
    "traces": _tuple_of(str), "step_ms": _tuple_of((int, float)), "throughput_samples_per_s": _rates,
    "argv": _tuple_of(str), "created": _of(str), "flop_counter_flops_per_step": _of((int, float)),
}
