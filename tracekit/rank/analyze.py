"""One rank, start to finish: read its file, classify its events, and reduce them to small per-rank tables.

This is the unit of parallel work: only a ``RankResult`` (a handful of rows per step and per collective)
leaves the worker, so memory in the parent does not grow with trace size.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from tracekit.events import causes, gapsplit
from tracekit.events import metrics
from tracekit.events.graphs import capture_facts
from tracekit.events.ops import has_operators
from tracekit import intervals as iv
from tracekit.events.classify import classify
from tracekit.events.steps import find_steps
from tracekit.commnames import EP_KERNEL
from tracekit.events.batchp2p import split_batches
from tracekit.events.collectives import collective_table, dtype_bytes
from tracekit.events.config import Config
from tracekit.events.fsdp import unit_table as fsdp_unit_table
from tracekit.events import bubble
from tracekit.events.p2p import overlap_intervals, split_p2p
from tracekit.events.pgctx import with_groups
from tracekit.rank import beside
from tracekit.rank.drains import blocked_since
from tracekit.rank.graph import rank_graph
from tracekit.events.hostops import reads_host_op  # analyze_rank's filter; tests read it as rank.reads_host_op
from tracekit.events.kernels import kernel_table
from tracekit.rank.whatruns import what_runs
from tracekit.read.coded import distinct
from tracekit.read.reader import RankMeta, RankTables, ReadOptions, read_tables
from tracekit.read.release import release_memory
from tracekit.stageclock import Laps, stage, take


@dataclass(frozen=True)
class RankResult:
    """Everything the run-level summary needs from one rank. Times are absolute ns (``*_ns``) until combined."""

    meta: RankMeta
    device: str
    origin_ns: int              # the rank's earliest event
    breakdown: pd.DataFrame     # one row: metrics.rank_breakdown over the window
    steps: pd.DataFrame         # metrics.step_breakdown, with in_window
    collectives: pd.DataFrame   # collectives.collective_table, with in_window
    gaps: pd.DataFrame          # metrics.gap_table over the window
    quality: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row: data_quality_row
    graph: pd.DataFrame = field(default_factory=pd.DataFrame)  # graph.rank_graph: nodes, within-rank edges
    fsdp: pd.DataFrame = field(default_factory=pd.DataFrame)  # fsdp.unit_table, with in_window
    kernels: pd.DataFrame = field(default_factory=pd.DataFrame)  # kernels.kernel_table
    ops: pd.DataFrame = field(default_factory=pd.DataFrame)  # ops.op_tables: by name
    ops_by_shape: pd.DataFrame = field(default_factory=pd.DataFrame)  # ops.op_tables: by name and input shapes
    step_flops: pd.DataFrame = field(default_factory=pd.DataFrame)  # ops.op_tables: FLOPs per step
    memory: pd.DataFrame = field(default_factory=pd.DataFrame)  # memory.memory_table
    memory_top: pd.DataFrame = field(default_factory=pd.DataFrame)  # memory.top_allocators
    memory_timeline: pd.DataFrame = field(default_factory=pd.DataFrame)  # memory.memory_timeline (absolute ns)
    op_steps: pd.DataFrame = field(default_factory=pd.DataFrame)  # ops.op_tables: per window step
    kernel_ops: pd.DataFrame = field(default_factory=pd.DataFrame)  # ops.kernel_ops: each kernel's launching op
    pipeline_blocks: pd.DataFrame = field(default_factory=pd.DataFrame)  # pipeline.pipeline_blocks (absolute ns)
    pipeline: pd.DataFrame = field(default_factory=pd.DataFrame)  # bubble.stage_steps, with in_window
    p2p: pd.DataFrame = field(default_factory=pd.DataFrame)  # p2p.split_p2p: send/recv calls, with in_window and
    # blocked_ns (drains.blocked_since: when the call began to hold its thread)
    comm_overlap: pd.DataFrame = field(default_factory=pd.DataFrame)  # p2p.overlap_intervals over the window
    comm_overlap_all: pd.DataFrame = field(default_factory=pd.DataFrame)  # the same over every step (steps' split)
    # stageclock.StageTime of each stage when recording (--profile-stages): this run's, so never cached
    stage_times: tuple = field(default=(), metadata={"cached": False})


def analyze_rank(path: str | Path, config: Config, default_rank: int | None = None,
                 decode_workers: int = 1) -> RankResult:
    """Read and reduce one trace file; a large one's chunks are decoded by ``decode_workers`` helper processes
    (``ReadOptions``), with the same result."""
    with stage("read"):
        tables = [read_tables(path, default_rank=default_rank, host_ops=reads_host_op,
                              options=ReadOptions(decode_workers=decode_workers))]
        release_memory()  # the chunks' structs and columns: gone, and their pages with them (read.release)
    rank = tables[0].meta.rank
    result = _reduce_taken(tables, config, spare_cores=decode_workers > 1)
    times = take(rank)
    return dataclasses.replace(result, stage_times=times) if times else result


def reduce_rank(meta: RankMeta, events: pd.DataFrame, comm_args: pd.DataFrame, config: Config,
                ops: pd.DataFrame | None = None, memory: pd.DataFrame | None = None) -> RankResult:
    """The metric pipeline of one rank's events table; ``ops`` and ``memory``: the reader's (``RankTables``),
    None for none (the kernel table is then still made, the operator and memory tables empty)."""
    return _reduce_taken([RankTables(meta=meta, events=events, comm_args=comm_args, ops=ops, memory=memory)], config)


def _reduce_taken(box: list[RankTables], config: Config, spare_cores: bool = False) -> RankResult:
    """``reduce_rank`` of the tables in ``box``, taken out of it: where the caller keeps no other reference (as
    ``analyze_rank``), the ops and memory tables and the device-event views end once the stages that read them are
    done, not with the whole pipeline (a large trace's ops table is hundreds of MB). ``spare_cores``: the rank has
    cores of its own besides this process's; then the operator tables of a large ops table (``BESIDE_OPS`` rows or
    more) are made beside the other stages, in a forked process (``rank.beside``), with the same result."""
    laps = Laps()
    tables = box.pop()
    meta, events, comm_args, ops, memory = tables.meta, tables.events, tables.comm_args, tables.ops, tables.memory
    del tables
    for col in ("cat", "name", "pid", "tid"):
        if not isinstance(events[col].dtype, pd.CategoricalDtype):
            events = events.assign(**{col: events[col].astype("category")})
    device_rank = meta.device_evidence is not None
    steps, step_source = find_steps(events, config.step_pattern)
    events = classify(events, comm_args, device_ranks=[meta.rank] if device_rank else [], steps=steps)
    release_memory()
    valid = events["dur_ns"] >= 0
    # The earliest usable event, counting host ops the reader left out; from the table when the meta has none.
    origin_ns = meta.first_ts_ns
    if origin_ns is None:
        origin_ns = int(events.loc[valid, "ts_ns"].min()) if valid.any() else 0
    kept = metrics.window_steps(steps, config.window)
    dev_all = metrics.all_device_events(events)
    dev = metrics.in_window(dev_all, steps, config.window)
    laps("classify and steps")
    pending = None
    if spare_cores and ops is not None and len(ops) >= BESIDE_OPS and beside.memory_allows(
            BESIDE_MEMORY * (ops.memory_usage(deep=False).sum() + (memory.memory_usage(deep=False).sum()
                                                                  if memory is not None else 0))):
        pending = beside.start(_what_runs_beside, meta, events, ops, memory, steps, kept, device_rank)

    calls = split_batches(events, comm_args, collective_table(events, comm_args, _pg_sizes(meta)), dtype_bytes)
    calls, p2p = split_p2p(calls)
    calls = with_groups(events, calls, meta.pg_config)  # gloo names no group: what enqueued the call says
    p2p["in_window"] = _in_window(p2p["step"], steps, kept, config)
    collectives = calls.drop(columns=["row", "peer", "peer_local", "posted_ns"])
    collectives["in_window"] = _in_window(collectives["step"], steps, kept, config)
    fsdp = fsdp_unit_table(events, calls, comm_args, device_rank)
    fsdp["in_window"] = _in_window(fsdp["step"], steps, kept, config)
    laps("collectives, p2p, fsdp")
    step_rows = metrics.step_breakdown(dev_all, steps)
    if dev_all.empty:  # no device event at all (kernels not collected): the steps' device times are unknown
        step_rows = step_rows.assign(**{c: np.nan for c in _STEP_DEVICE_COLUMNS})
    step_rows["in_window"] = _in_window(step_rows["step"], steps, kept, config) if len(step_rows) else []
    names = sorted({n for n in meta.device_names if n})
    mtia = events["cat"].isin(["mtia_ccp_events", "mtia_runtime"]).any()
    device = (" / ".join(names) if names else "mtia" if mtia else "gpu") if device_rank else "cpu"

    pipe_blocks, pipe_steps = bubble.rank_pipeline(meta.pg_config, meta.rank, ops if ops is not None and len(ops)
                                                   else events, dev_all, steps, step_rows)
    gaps = metrics.gap_table(dev)
    gaps = pd.concat([gaps, gapsplit.split_gaps(gaps, dev, events, ops, device_rank)], axis=1)
    gaps["host_kind"] = causes.host_kinds(gaps, dev, events, device_rank)
    # A rank with no device event in its window still gets its row: times unknown (NaN), host facts real.
    laps("step breakdown, pipeline, gaps")
    breakdown = metrics.rank_breakdown(dev)
    comm_overlap, comm_overlap_all = overlap_intervals(dev), overlap_intervals(dev_all)
    if breakdown.empty:
        breakdown = breakdown.reindex([0]).assign(rank=meta.rank)
    whole = config.window == "trace" or steps.empty
    extras = {**causes.idle_by_cause(gaps), **causes.host_facts(events, dev, None if whole else kept),
              "compute_major": float("nan") if meta.compute_major is None else float(meta.compute_major),
              "training": trains(events, ops)}
    if dev.empty:  # no device time to split: unknown, not zero
        extras.update({k: np.nan for k in extras if k.startswith("idle_") or k in _DEVICE_TIME_FACTS})
    device_events, kernels = len(dev_all), kernel_table(events, dev)
    del dev, dev_all  # read by no later stage: gone before the operator tables' working arrays are made
    release_memory()
    laps("rank breakdown, kernels")
    if pending is None:
        ran = what_runs(meta, events, ops, memory, steps, kept, device_rank)
    del ops, memory  # read by no later stage (here)
    release_memory()
    if pending is None:
        laps("ops, flops, memory")
    graph = rank_graph(events, calls, steps, p2p)  # ``calls``: the collectives, with their event rows
    p2p["blocked_ns"] = blocked_since(graph, len(p2p))  # where each call began to hold its thread
    release_memory()
    if pending is not None:
        laps("graph")
        ran = pending()
        laps("waiting for ops, flops, memory")
    extras.update(ran.pop("facts"))
    breakdown = _assigned(breakdown, {k: [v] * len(breakdown) for k, v in extras.items()})
    quality = _assigned(data_quality_row(meta, events, device_rank, device_events),
                        {"step_source": step_source, **ran.pop("quality"),
                         **capture_facts(events, steps, None if whole else kept)})
    laps("quality, graph" if pending is None else "quality")
    return RankResult(meta=meta, device=device, origin_ns=origin_ns, breakdown=breakdown,
                      steps=step_rows, collectives=collectives, gaps=gaps, quality=quality,
                      graph=graph, fsdp=fsdp, pipeline_blocks=pipe_blocks, pipeline=pipe_steps,
                      p2p=p2p, comm_overlap=comm_overlap, comm_overlap_all=comm_overlap_all, kernels=kernels, **ran)


# Ops of a rank above which, with cores to spare, the operator tables are made beside the other stages: about 0.8 s
# of work at 500,000 ops, against a fork and the tables' way back (tens of ms).
BESIDE_OPS = 500_000
# The memory that running them beside adds to the run's peak, per byte of the ops and memory tables: the child's
# working arrays and the other stages' at once, where one after the other they reuse the same pages (measured
# +250 MB on a 1 GB trace and +1.1 GB on a 4 GB one, 3.0x and 3.1x their ops tables).
BESIDE_MEMORY = 3.5


def _what_runs_beside(meta, events, ops, memory, steps, kept, device_rank) -> dict:
    """``what_runs``, timed as its own stage: run in the forked process of ``rank.beside``."""
    with stage("ops, flops, memory (beside)"):
        return what_runs(meta, events, ops, memory, steps, kept, device_rank)


_STEP_DEVICE_COLUMNS = ("device_step_us", "compute_us", "overlap_us", "exposed_comm_us", "other_us", "comm_us")
# What only training runs: autograd's backward (``autograd::engine::evaluate_function: MmBackward0``, the nodes
# ``*Backward0``), DDP's reducer copying reduced gradients back (``torch.distributed.ddp.reducer::copy_bucket_to_grad``,
# at the end of backward; not its ``search_unused_parameters``, which DDP's forward runs whenever grad is enabled),
# and the optimizer (``Optimizer.step#SGD.step``, ``Optimizer.zero_grad#...``).
TRAINING_OP = re.compile(r"Backward\d*\b|^autograd::engine|^torch\.distributed\.ddp\.reducer::copy_bucket_to_grad"
                         r"|^Optimizer\.(?:step|zero_grad)")


def trains(events: pd.DataFrame, ops: pd.DataFrame | None) -> bool | None:
    """Whether the rank trains: a backward or optimizer op among its events or its host ops (a GPU rank's events
    leave most CPU ops out; ``ops`` has them all). False: forward only (inference, an evaluation loop), known only
    where operators (``cpu_op``) were recorded; None (unknown) for a trace of kernels and annotations alone."""
    names = set(events["name"].cat.categories.astype(str))
    if ops is not None and len(ops):
        names.update(str(n) for n in distinct(ops["name"]))  # without a string per op
    if any(TRAINING_OP.search(n) for n in names):
        return True
    return False if ops is not None and has_operators(ops) else None


def _assigned(frame: pd.DataFrame, columns: dict) -> pd.DataFrame:
    """``frame.assign(**columns)``, made in one step: pandas inserts assigned columns one at a time, and with a
    string column index each insert copies the whole index (2.6 against 0.5 ms for the breakdown's 21 facts)."""
    return pd.DataFrame({**{c: frame[c] for c in frame.columns}, **columns}, index=frame.index)


_DEVICE_TIME_FACTS = ("reduced_precision_us", "compute_kernel_us")


def data_quality_row(meta: RankMeta, events: pd.DataFrame, device_rank: bool, device_events: int) -> pd.DataFrame:
    """One row of ``Summary.data_quality``: what this rank's numbers rest on (columns: schema.DATA_QUALITY_COLUMNS).

    ``events`` is classified; ``device_events`` counts the rank's device events with a usable duration.
    """
    early = events[events["pre_trace"].to_numpy() & (events["dur_ns"] >= 0).to_numpy()]
    early_ns = iv.total(*iv.merge(early["ts_ns"].to_numpy(), (early["ts_ns"] + early["dur_ns"]).to_numpy()))
    return pd.DataFrame({
        "rank": [meta.rank],
        "device_evidence": [meta.device_evidence or "none: a CPU-only trace"],
        "device_events": [device_events],
        "device_events_absent": [device_rank and device_events == 0],
        "pre_trace_events": [int(events["pre_trace"].sum())],
        "pre_trace_device_us": [early_ns / 1e3],
        "unsized_ep_comm": [_ep_comm_kernels(events)],
        "dropped_events": [meta.dropped_events],
        "unknown_categories": [", ".join(f"{c} ({n})" for c, n in meta.unknown_categories)],
        "unknown_category_events": [sum(n for _, n in meta.unknown_categories)],
        "rank_source": [meta.rank_source],
        "rank_out_of_range": [_out_of_range(meta.rank, meta.world_size)],
        "shapes_recorded": pd.array([meta.shapes_recorded], dtype="boolean"),
    })


def _out_of_range(rank: int, world_size: int | None) -> str:
    """Why ``rank`` lies outside 0..world_size-1 (``data_quality.rank_out_of_range``), '' when it does not or the
    trace states no world size to check it against."""
    if rank < 0:
        return "negative"
    return f"not below its world_size {world_size}" if world_size is not None and rank >= world_size else ""


def _ep_comm_kernels(events: pd.DataFrame) -> int:
    """Communication kernels known only by their name as expert-parallel all-to-all (``commnames.EP_KERNELS``)."""
    names = events["name"].cat.categories
    ep = names[np.fromiter((EP_KERNEL.search(n) is not None for n in names), dtype=bool, count=len(names))]
    return int(((events["kind"] == "comm") & events["name"].isin(ep)).sum())


def _in_window(step: pd.Series, steps: pd.DataFrame, kept: pd.DataFrame, config: Config) -> np.ndarray:
    if config.window == "trace" or steps.empty:
        return np.ones(len(step), dtype=bool)  # no ProfilerStep: the whole trace is the window
    return step.isin(kept["step"]).to_numpy()


def _pg_sizes(meta: RankMeta) -> dict:
    """(rank, pg name) -> size from distributedInfo.pg_config; (rank, None) -> the size to assume for a call whose
    group is not listed: with pg_config, known only when every group listed has the same size; without it (older
    traces: ``{backend, rank, world_size}``), the default group's, which has ``world_size`` members."""
    configs = [c for c in meta.pg_config if isinstance(c, dict) and "pg_size" in c]
    sizes = {(meta.rank, str(c["pg_name"])): float(c["pg_size"]) for c in configs if "pg_name" in c}
    if configs and len({float(c["pg_size"]) for c in configs}) == 1:
        sizes[(meta.rank, None)] = float(configs[0]["pg_size"])
    elif not meta.pg_config and meta.world_size is not None and meta.world_size > 0:
        sizes[(meta.rank, None)] = float(meta.world_size)
    return sizes
