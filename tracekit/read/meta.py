"""What the reader gives of one rank: ``RankMeta`` (what its file says besides its events) and ``RankTables`` (the
meta and the rank's tables)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class RankMeta:
    """What one trace file says about its rank, besides its events."""

    path: str
    rank: int
    backend: str | None
    world_size: int | None
    nccl_version: str | None
    device_names: tuple[str, ...]
    compute_major: int | None  # CUDA compute capability major of the devices (7+ has tensor cores)
    host_name: str | None
    pg_config: tuple[dict, ...]
    dropped_events: int  # events with no or impossible duration
    first_ts_ns: int | None = None  # start of the earliest event with a usable duration (None: there is none)
    rank_source: str = "distributedInfo"  # where the rank came from: distributedInfo, file name, or only file
    shapes_recorded: bool | None = None  # Input Dims on CPU ops (record_shapes=True); None: no CPU op to tell
    unknown_categories: tuple[tuple[str, int], ...] = ()  # (category, events) of categories tracekit does not know
    device_evidence: str | None = None  # why this is a device rank (None: a CPU-only rank); see categories.device_evidence()
    device_memory_bytes: tuple[float, ...] = ()  # deviceProperties totalGlobalMem of each device listed


@dataclass(frozen=True)
class RankTables:
    """Everything ``read_tables`` reads of one rank: its meta, events and comm args (as ``read_rank``), every host
    op and annotation with its shapes (``columns.OP_COLUMNS``: the operator table's input, whatever ``host_ops``
    left out of ``events``) and the ``[memory]`` events (``columns.MEMORY_COLUMNS``; empty without
    ``profile_memory``)."""

    meta: RankMeta
    events: pd.DataFrame
    comm_args: pd.DataFrame
    ops: pd.DataFrame
    memory: pd.DataFrame
