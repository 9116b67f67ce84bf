"""``summarize``: the front door. Files -> per-rank reduction -> run-level tables -> a frozen Summary."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import threading

import msgspec
import numpy as np
import pandas as pd

from tracekit import stageclock
from tracekit.rank import cache as tracekit_cache
from tracekit.run import clocks, commdims, crossrank, pgjoin, whatruns
from tracekit.run import pipeline as run_pipeline
from tracekit.run.ranktable import rank_table
from tracekit.findings import capture
from tracekit.findings.collect import run_findings
from tracekit.findings import order, pipeline_findings, roofline_findings, tp_findings
from tracekit.predict import replay
from tracekit.predict import predicted, scenarios as predict
from tracekit.render.compare import Comparison
from tracekit.render.compare import compare as compare_summaries
from tracekit.events.config import Config
from tracekit.rank.engine import EngineOptions, map_ranks
from tracekit.rank.keys import run_key
from tracekit.errors import NoTracesError, TraceReadError
from tracekit.summary.facts import RunFacts, SkippedFile, TraceFile, WorkloadRun
from tracekit.rank.analyze import RankResult
from tracekit.read.files import check_unique_ranks, find_trace_files, is_url, rank_in_file_name
from tracekit import quality
from tracekit.pystrings import python_strings
from tracekit.schema import DATA_QUALITY_COLUMNS
from tracekit.summary import offheap
from tracekit.summary import model
from tracekit.summary.model import Summary


@python_strings()
def summarize(trace_dir: str | Path, *, window: str = "drop_last", step_pattern: str | None = None,
              workers: int | None = None,
              engine: str = "local", client: object | None = None, cache: bool = True, cache_dir: str | Path | None = None,
              progress: Callable[[int, int], None] | None = None, strict: bool = False,
              _tables_in_memory: bool = False) -> Summary:
    """Summarize one run: a folder of per-rank traces (``*.json``/``*.json.gz``) or one trace file.

    Args:
      trace_dir: folder or file, a local path or an fsspec URL (``s3://bucket/run``). In a folder, a file that is
        not a readable trace (not JSON, truncated, empty, no rank) is skipped and listed in ``summary.run.skipped``
        with its reason and rank if known; a workload's ``run.json`` is read as the run's facts. A file given
        alone that is not a trace raises its error, and so does a folder where no file is (``NoTracesError``).
      window: the time metrics cover; see ``tracekit.Config``.
      step_pattern: a regex; each host annotation whose name it matches (``re.search``) is a step, in place of
        ProfilerStep. None: ProfilerStep, else an engine's own step annotations (``Config.step_pattern``).
      workers: processes that read ranks in parallel (local engine); default one per core (a small run in a process
        with other threads: this one, ``engine.UNFORKED_POOL_FROM_BYTES``), 1 for none.
      engine: ``"local"`` (this machine) or ``"dask"`` (the ranks are Dask tasks on the cluster of ``client``).
      client: for ``engine="dask"``: a ``distributed.Client`` or a scheduler address (``"tcp://host:8786"``).
      cache: keep per-rank results in an on-disk cache, so a second summary of an unchanged run is fast.
      cache_dir: the cache folder (default: ``$TRACEKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/tracekit``, else
        ``~/.cache/tracekit``; ``tracekit.rank.cache.resolve_dir``); nothing is written in the trace folder.
      progress: called as ``progress(done, total)`` each time a rank is finished; if it also has a ``stage(name)``
        method, that is called as each later stage begins ("joining ranks", then "replaying") and with "done";
        a ``reading(files, total_bytes)`` method is called first, with the files' size on disk (None for URLs).
      strict: raise the named error (``tracekit.TraceReadError`` and subclasses) of the first file in the folder
        that would be skipped, instead of skipping it.
    The result is the same whatever the engine, the workers and the cache. The tables that grow with the trace
    (``Summary`` and ``tracekit.summary.offheap``) are kept in Arrow files, under ``cache_dir`` (``tables/``), or
    with ``cache=False`` in a temporary folder removed with the Summary, and read on first access.
    (``_tables_in_memory``: keep them as DataFrames instead; the tests' reference.) Text columns are ``str`` held as
    Python objects (``tracekit.pystrings``); the caller's pandas ``mode.string_storage`` is as it was after.

    Example:
      >>> s = summarize("sample_traces/resnet-gloo-2rank")
      >>> list(s.ranks["rank"])
      [0, 1]
    """
    config = Config(window=window, step_pattern=step_pattern)
    files = find_trace_files(trace_dir)
    default_rank = 0 if len(files) == 1 else None
    one_file = files == [trace_dir] if is_url(trace_dir) else Path(trace_dir).is_file()
    options = EngineOptions(kind=engine, workers=workers, client=client, progress=progress,
                            cache_dir=tracekit_cache.resolve_dir(cache_dir) if cache else None,
                            skip_unreadable=not (strict or one_file))
    workload = read_run_json(trace_dir)
    if hasattr(progress, "reading"):
        progress.reading(len(files), _size_on_disk(files))
    results, skipped, warming = [], [], []

    def warm_up() -> None:  # the replay's compiled pass, loaded in a thread once: while the workers read the ranks
        if not warming and len(files) > 1:
            warming.append(threading.Thread(target=replay.warm_up, daemon=True, name="tracekit-replay-warm-up"))
            warming[0].start()

    laps = stageclock.Laps()
    for file, outcome in zip(files, map_ranks(files, config, default_rank, options, waiting=warm_up)):
        warm_up()  # where the ranks ran in this process (or on a cluster): now, beside the run's own stages
        if isinstance(outcome, TraceReadError):
            # Strict: any file but the workload's run.json is an error; the engine raised the unreadable ones.
            if one_file or (strict and not (workload is not None and Path(file).name == "run.json")):
                raise outcome
            skipped.append((str(file), outcome.problem, outcome.rank if outcome.rank is not None
                            else rank_in_file_name(file)))
        else:
            results.append(outcome)
            stageclock.add(outcome.stage_times)
    outcome = None  # the last rank's result: held by ``results`` alone, which ``combine`` empties before the replays
    laps("analyse ranks (parallel)")
    if not results:
        raise NoTracesError(f"{trace_dir}: no trace files; skipped: " + "; ".join(f"{f} ({r})" for f, r, _ in skipped))
    stage = getattr(progress, "stage", None)
    if workload is not None:  # read as the run's facts: not a skipped file
        skipped = [s for s in skipped if Path(s[0]).name != "run.json"]
    summary = combine(results, skipped, config, source=str(trace_dir), workload_run=workload, stage=stage)
    if not _tables_in_memory:
        summary = _off_heap(summary, files, config, default_rank, options)
    if stage is not None:
        stage("done")
    return summary


def _off_heap(summary: Summary, files, config: Config, default_rank: int | None, options: EngineOptions) -> Summary:
    """The Summary with its event tables in the cache (keyed on the run's files and options; then trimmed to the
    cache's cap), or with no cache or no key (files this process cannot identify) in a temporary folder."""
    key = run_key(files, config, default_rank, Summary) if options.cache_dir is not None else None
    if key is None:
        return offheap.kept(summary)
    summary = offheap.kept(summary, tracekit_cache.tables_entry(Path(options.cache_dir), key))
    tracekit_cache.trim(Path(options.cache_dir), options.cache_max_bytes)
    return summary


def _size_on_disk(files) -> int | None:
    """The files' bytes on disk; None where one is a URL or cannot be stat'ed."""
    try:
        return None if any(is_url(f) for f in files) else sum(Path(f).stat().st_size for f in files)
    except OSError:
        return None


@python_strings()
def whatif(run: Summary | str | Path, scenarios=None, compute_scale: dict[int, float] | None = None,
           **summarize_kwargs) -> pd.DataFrame:
    """``tracekit.predict.scenarios.whatif`` of a Summary, or of a run folder summarized with ``summarize_kwargs``.

    One row per scenario; where step_time_us is NaN (the trace cannot tell), ``reason`` says why (the data-quality
    notes that the CLI prints under its table), '' where it is known.

    Example:
      >>> table = whatif("sample_traces/gpt-gloo-2rank-straggler", ["baseline", "no_straggler"], cache=False)
      >>> list(table.columns)
      ['scenario', 'step_time_us', 'speedup', 'saving_us', 'saving_pct', 'reason']
      >>> table["reason"].tolist()  # both predicted
      ['', '']
    """
    return predict.whatif(_summary(run, summarize_kwargs), scenarios, compute_scale)


@python_strings()
def compare(a: Summary | str | Path, b: Summary | str | Path, **summarize_kwargs) -> Comparison:
    """``tracekit.render.compare.compare`` of two runs, each a Summary or a run folder summarized with ``summarize_kwargs``."""
    return compare_summaries(_summary(a, summarize_kwargs), _summary(b, summarize_kwargs))


def _summary(run: Summary | str | Path, summarize_kwargs: dict) -> Summary:
    return run if isinstance(run, Summary) else summarize(run, **summarize_kwargs)


def read_run_json(trace_dir: str | Path) -> WorkloadRun | None:
    """The workload's own ``run.json`` beside the traces (throughput, config), or None when absent or unreadable."""
    path = Path(trace_dir) / "run.json"
    if not path.is_file():
        return None
    try:
        value = msgspec.json.decode(path.read_bytes())
    except (OSError, msgspec.DecodeError):
        return None
    return WorkloadRun.from_json(value) if isinstance(value, dict) else None


def combine(results: list[RankResult], skipped, config: Config, source: str = "",
            workload_run: WorkloadRun | None = None, stage: Callable[[str], None] | None = None) -> Summary:
    """Join per-rank results into the run's Summary: match collectives across ranks, correct clock offsets
    between hosts, and find stragglers. Two files with the same rank are refused. ``stage(name)`` is told as
    the cross-rank join and the replay begin. ``results`` is emptied before the replays, which need none of the
    ranks' own tables (node tables and gaps: tens of MB a rank)."""
    stage = stage or (lambda name: None)
    stage("joining ranks")
    laps = stageclock.Laps()
    check_unique_ranks(r.meta for r in results)
    results.sort(key=lambda r: r.meta.rank)
    steps, collectives, gaps = (_stacked([getattr(r, t) for r in results]) for t in ("steps", "collectives", "gaps"))

    group = crossrank.match_keys(collectives)
    offsets = clocks.clock_offsets(collectives, group, {r.meta.rank: r.meta.host_name for r in results})
    shift = clocks.offsets_to_correct(offsets)
    steps, collectives, gaps = (_shift(t, shift) for t in (steps, collectives, gaps))
    start_ns = collectives["start_ns"].to_numpy()
    mismatches = crossrank.mismatches(collectives, group, crossrank.expected_ranks([r.meta for r in results]),
                                      crossrank.implausible(collectives, group, start_ns))
    unreliable = mismatches.loc[mismatches["kind"].isin(crossrank.UNRELIABLE_KINDS), "match_id"]
    collectives = pd.concat([collectives, crossrank.timing(collectives, group, start_ns, set(unreliable))], axis=1)
    origin_ns = min(r.origin_ns - shift.get(r.meta.rank, 0) for r in results)
    joined = pgjoin.join(results, collectives, steps, shift, origin_ns)  # groups, dims, send/recv pairs
    collectives = joined.collectives
    mismatches = pd.concat([mismatches, joined.mismatches], ignore_index=True) if len(joined.mismatches) else mismatches
    steps, collectives, gaps = (_relative(t, origin_ns) for t in (steps, collectives, gaps))
    fsdp = _relative(_shift(_stacked([r.fsdp for r in results]), shift), origin_ns)
    laps("cross-rank join, clocks, p2p pairs")

    pipeline, pipeline_blocks = run_pipeline.of_ranks(results, shift, origin_ns, workload_run)
    steps = whatruns.with_step_flops(commdims.with_step_p2p_wait(steps, joined.step_waits), results)
    ranks = commdims.with_p2p_wait(rank_table(results, steps, collectives), joined.waits)
    tables = whatruns.joined_tables(results, lambda t: _relative(_shift(t, shift), origin_ns))
    laps("pipeline, rank and op tables")
    window_steps = int(ranks["steps"].max()) if len(ranks) else 0
    offsets["corrected"] = offsets["rank"].isin(list(shift))
    evidence = crossrank.arrival_evidence(collectives, window_steps)
    slow = crossrank.verdict(evidence, "straggler")
    run = _run_facts(results, skipped, config, source, origin_ns, clock_offsets=offsets, workload=workload_run,
                     straggler_suspicions=crossrank.verdict(evidence, "suspected"))
    summary = Summary(ranks=ranks, steps=steps, collectives=collectives, gaps=gaps, run=run, stragglers=slow,
                   imbalance=crossrank.imbalance(steps), mismatches=mismatches, p2p=joined.p2p,
                   comm_by_dim=joined.comm_by_dim,
                   findings=pipeline_findings.merged(run_findings(ranks, collectives, slow, run, joined.comm_by_dim,
                                                                  fsdp, steps, tables["memory"]), pipeline),
                   data_quality=_data_quality(results, steps), fsdp=fsdp, pipeline=pipeline,
                   pipeline_blocks=pipeline_blocks, **tables)
    laps("stragglers, findings, Summary")
    stage("replaying")
    parts, graphs = [r.kernel_ops for r in results if len(r.kernel_ops)], [r.graph for r in results]
    results.clear()  # the Summary holds what it needs of them: each rank's tables go, its graph once joined
    summary = model.replace(summary, **predicted.predictions(
        summary, graphs, shift, pd.concat(parts, ignore_index=True) if parts else None, joined.calls))
    laps("graph replays, critical path, what-ifs")
    found = roofline_findings.merged(summary.findings, summary.optimization)
    found = tp_findings.merged(found, summary)  # the critical path says how long TP calls bind the step
    found, data_quality = capture.hold_back(found, summary.data_quality)  # none for steps that capture graphs
    summary = model.replace(summary, findings=order.by_gain(found, summary.critical_path), data_quality=data_quality)
    laps("findings' order")
    return summary


def _stacked(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The ranks' rows of one table, in order. A rank's empty table is left out, so its untyped (object) columns do
    not turn the others' numbers into Python objects (whose 0.0 / 0 raises); all empty: the first."""
    parts = [f for f in frames if len(f)]
    return pd.concat(parts, ignore_index=True) if parts else frames[0]


def _data_quality(results: list[RankResult], steps: pd.DataFrame) -> pd.DataFrame:
    """One row per rank (schema.DATA_QUALITY_COLUMNS), in rank order, with the steps each rank lacks (seen across
    ranks: ``quality.missing_steps``)."""
    rows = [r.quality for r in results if len(r.quality)]
    table = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    if len(table):
        # Only ProfilerStep numbers name the same step on every rank; steps found by a pattern are numbered in
        # each rank's own time order, so a rank whose trace begins later lacks no step.
        numbered = table.loc[table["step_source"] == "ProfilerStep", "rank"] if "step_source" in table else []
        lacking = quality.missing_steps(steps[steps["rank"].isin(numbered)])
        table["missing_steps"] = [", ".join(str(n) for n in lacking.get(int(r), [])) for r in table["rank"]]
    return table.reindex(columns=list(DATA_QUALITY_COLUMNS))


def _shift(frame: pd.DataFrame, shift: dict[int, int]) -> pd.DataFrame:
    """Move each rank's absolute times onto the reference rank's clock."""
    if not shift or "start_ns" not in frame:
        return frame
    return frame.assign(start_ns=frame["start_ns"] - frame["rank"].map(shift).fillna(0).astype(np.int64))


def _relative(frame: pd.DataFrame, origin_ns: int) -> pd.DataFrame:
    """Absolute ``start_ns`` -> ``start_us`` from the run's origin, in the column's place."""
    if "start_ns" not in frame:
        return frame
    at = frame.columns.get_loc("start_ns")
    out = frame.drop(columns=["start_ns"])
    out.insert(at, "start_us", (frame["start_ns"].to_numpy() - origin_ns) / 1e3)
    return out


def _run_facts(results: list[RankResult], skipped, config: Config, source: str, origin_ns: int, **tables) -> RunFacts:
    metas = [r.meta for r in results]
    return RunFacts(
        source=source,
        world_sizes=tuple(sorted({m.world_size for m in metas if m.world_size is not None})),
        ranks_read=len(metas),
        backends=tuple(sorted({m.backend for m in metas if m.backend})),
        nccl_version=next((m.nccl_version for m in metas if m.nccl_version), None),
        device_names=tuple(sorted({n for m in metas for n in m.device_names if n})),
        host_names=tuple(sorted({m.host_name for m in metas if m.host_name})),
        files=tuple(TraceFile(rank=m.rank, path=m.path, dropped_events=m.dropped_events) for m in metas),
        skipped=tuple(SkippedFile(path=p, reason=r, rank=k) for p, r, k in skipped),
        window=config.window,
        origin_ns=origin_ns,
        **tables,
    )
