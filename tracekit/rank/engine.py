"""How the per-rank work of a run is mapped: in this process, in a local process pool, or as Dask tasks.

Each rank is read and reduced to a small ``RankResult`` where it runs; only those results (a few rows per step,
collective and gap) travel back, so the memory of the caller does not grow with the size or number of traces (but
for a small run read in the caller, where a pool would cost more than it saves: ``UNFORKED_POOL_FROM_BYTES``).
Results come back in file order whatever order the work finishes in, so every engine gives the same Summary.

    options = EngineOptions(workers=4, cache_dir=cache.resolve_dir(None))
    outcomes = map_ranks(files, Config(), None, options)

With ``kind="dask"`` the tasks run on an existing Dask cluster: ``client`` is a ``distributed.Client`` or a
scheduler address (``"tcp://host:8786"``). Every Dask worker must be able to import tracekit and read the trace
paths (a shared folder, or an fsspec URL such as ``s3://bucket/run``).
"""

from __future__ import annotations

import dataclasses
import gc
import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from tracekit.rank import cache
from tracekit.events.config import Config
from tracekit.errors import NotATraceError, TraceReadError
from tracekit.pystrings import python_strings
from tracekit.read.files import GZIP_MAGIC, is_url
from tracekit.read.parallel import context as fork_context
from tracekit.rank.analyze import RankResult, analyze_rank
from tracekit.rank.keys import rank_key

__all__ = ["EngineOptions", "map_ranks", "default_workers", "ENGINES"]

ENGINES = ("local", "dask")
Progress = Callable[[int, int], None]  # (ranks done, ranks in all)


# A pool that cannot be forked (another thread runs here: a notebook, the viewer, a test runner) starts fresh
# interpreters that import tracekit, about 1 to 3 s on 2 cores; analysing a rank here runs at about 30 to 45 MB of
# trace JSON a second (CPU-only ranks are the slowest). With the default workers, such a pool is started only for
# more JSON than that start-up buys back on 2 cores; a forked pool starts in milliseconds and is always used.
UNFORKED_POOL_FROM_BYTES = 128 * 2**20
GZIP_RATIO = 12  # JSON bytes per gzip byte assumed for a gzipped trace (Kineto's compress 12x to 17x)


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True, kw_only=True)
class EngineOptions:
    """Where and how per-rank work runs.

    kind: ``"local"`` (this machine) or ``"dask"`` (an existing Dask cluster).
    workers: local processes; ``None`` is one per core (but this process alone where the pool could not be forked
      and the run is small: ``UNFORKED_POOL_FROM_BYTES``), ``1`` runs everything in this process.
    client: for ``"dask"``: a ``distributed.Client``, or a scheduler address such as ``"tcp://host:8786"``.
    cache_dir: the cache folder, or ``None`` for no cache.
    cache_max_bytes: the cache folder is trimmed to this size after each run, least recently used entries first.
    progress: called as ``progress(done, total)`` in this process each time a rank is finished.
    skip_unreadable: return the read error of any file that cannot be read (truncated, not JSON, no rank) as its
      outcome, as a non-trace's is, instead of raising it at once.
    """

    kind: str = "local"
    workers: int | None = None
    client: Any = None
    cache_dir: str | Path | None = None
    cache_max_bytes: int = cache.DEFAULT_MAX_BYTES
    progress: Progress | None = None
    skip_unreadable: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {self.kind!r}")
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 1):
            raise ValueError(f"workers must be a positive integer or None; got {self.workers!r}")
        if self.kind == "dask" and self.client is None:
            raise ValueError('engine="dask" needs client= (a distributed.Client or a scheduler address)')
        if self.kind == "local" and self.client is not None:
            raise ValueError('client= is for engine="dask"')
        if self.progress is not None and not callable(self.progress):
            raise ValueError("progress must be a callable progress(done, total)")


@dataclass(frozen=True)
class _Failed:
    """A read error, carried back from a worker as plain values (the error classes take more than a message)."""

    kind: type
    path: str
    problem: str
    rank: int | None

    def error(self) -> TraceReadError:
        return self.kind(self.path, self.problem, self.rank)


@python_strings()  # in a worker process too
def _rank_task(path: str | Path, config: Config, default_rank: int | None, store: cache.Store | None = None,
               store_key: str | None = None, decode_workers: int = 1):
    """The unit of work, run wherever the engine puts it: analyse one rank, and keep the result under ``store_key``.
    ``decode_workers``: the processes that decode a large trace's chunks (the cores left to each file)."""
    try:
        result = analyze_rank(path, config, default_rank, decode_workers)
    except TraceReadError as err:
        return _Failed(type(err), err.path, err.problem, err.rank)
    if store is not None and store_key is not None and _key_here(path, config, default_rank) == store_key:
        store.put(store_key, result)  # only when the file did not change while it was read
    return result


def map_ranks(files: Sequence[str | Path], config: Config, default_rank: int | None,
              options: EngineOptions = EngineOptions(),
              waiting: Callable[[], None] | None = None) -> list[RankResult | NotATraceError]:
    """``analyze_rank`` over ``files``, in file order: a RankResult per trace, the NotATraceError of a non-trace
    (with ``options.skip_unreadable``: the TraceReadError of any file that cannot be read).

    With a cache folder, a rank whose key is in the store is read from it and not analysed; the others are
    analysed and put. Each result's file path is the one given here, whoever filled its entry. Any other read
    error (a truncated file, invalid JSON) is raised as soon as it is seen; the rest is cancelled.

    ``waiting()`` is called once, in this thread, when a local pool's workers have all started and this process only
    waits on them: the caller may then start work of its own (a thread). Not called where the ranks run here.
    """
    files = list(files)
    store = None if options.cache_dir is None else cache.Store(Path(options.cache_dir), RankResult,
                                                               options.cache_max_bytes)
    keys = [_key_here(file, config, default_rank) if store is not None else None for file in files]
    outcomes: list[Any] = [store.get(k) if k is not None else None for k in keys]
    todo = [i for i, hit in enumerate(outcomes) if hit is None]
    tick = _Ticker(len(files), options.progress)
    for _ in range(len(files) - len(todo)):  # hits are read here: no worker starts for a run that is all cached
        tick()
    if todo:
        run = _run_dask if options.kind == "dask" else _run_local
        run([files[i] for i in todo], config, default_rank, options, todo, outcomes, tick, store,
            [keys[i] for i in todo], *([waiting] if run is _run_local else []))
    if store is not None:
        store.trim()
    return [_outcome(o, file, options.skip_unreadable) for o, file in zip(outcomes, files)]


def _key_here(file, config, default_rank) -> str | None:
    try:
        return rank_key(file, config, default_rank)
    except OSError:  # gone, unreadable, or a path only the cluster sees: not cached; its read names the problem
        return None


def _outcome(value, file, skip_unreadable: bool = False):
    if isinstance(value, _Failed):
        error = value.error()
        if skip_unreadable or isinstance(error, NotATraceError):
            return error
        raise error
    # The path of this call, not of the call that filled the store entry (a relative path from another folder).
    return dataclasses.replace(value, meta=dataclasses.replace(value.meta, path=str(file)))


class _Ticker:
    def __init__(self, total: int, progress: Progress | None) -> None:
        self.done, self.total, self.progress = 0, total, progress

    def __call__(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)


def _run_local(files, config, default_rank, options, slots, outcomes, tick, store, keys, waiting=None) -> None:
    cores = options.workers or default_workers()
    workers = min(cores, len(files))
    # A daemonic process may start no pool at all; an unforked pool is started by default only for a large run.
    if workers > 1 and (_daemonic() or options.workers is None and fork_context() is None and _small(files)):
        workers = 1
    decode = max(1, cores // len(files))  # fewer files than workers: the rest decode chunks of large ones
    if workers == 1:
        for file, slot, key in zip(files, slots, keys):
            outcomes[slot] = _rank_task(file, config, default_rank, store, key, decode)
            _raise_if_fatal(outcomes[slot], options.skip_unreadable)
            tick()
        return
    # A worker is tracekit's own process: what it starts with is put out of the collector's reach (``cli.main.entry``).
    with ProcessPoolExecutor(max_workers=workers, mp_context=_context(), initializer=gc.freeze) as pool:
        pending = {pool.submit(_rank_task, file, config, default_rank, store, key, decode): slot
                   for file, slot, key in zip(files, slots, keys)}
        try:
            if waiting is not None:  # every worker has started (one per task up to max_workers; all at once under fork)
                waiting()
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    outcomes[pending.pop(future)] = future.result()
                    tick()
                for future in done:
                    _raise_if_fatal(future.result(), options.skip_unreadable)
        except BaseException:
            for future in pending:
                future.cancel()
            raise


def _daemonic() -> bool:
    return multiprocessing.current_process().daemon


def _small(files) -> bool:
    """Whether ``files`` hold too little JSON for an unforked pool to pay for its start (UNFORKED_POOL_FROM_BYTES).
    A URL's size is not asked for: unknown, it counts as large."""
    total = 0
    for file in files:
        if is_url(file):
            return False
        try:
            with open(file, "rb") as f:
                gzipped, size = f.read(2) == GZIP_MAGIC, os.fstat(f.fileno()).st_size
        except OSError:  # its read names the problem
            continue
        total += size * (GZIP_RATIO if gzipped else 1)
    return total < UNFORKED_POOL_FROM_BYTES


def _raise_if_fatal(value, skip_unreadable: bool = False) -> None:
    """Stop at the first read error that is not 'this JSON is not a trace' (that one is skipped by the caller)."""
    if isinstance(value, _Failed) and not skip_unreadable and not issubclass(value.kind, NotATraceError):
        raise value.error()


def _context():
    """fork where safe (``parallel.context``: workers start in ms, imports done), else forkserver or spawn."""
    forked = fork_context()
    if forked is not None:
        return forked
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    _preload()
    return multiprocessing.get_context("forkserver")


def _preload() -> None:
    """Have the fork server import this module before it forks a worker, so that each worker of each pool starts
    with tracekit imported (about a second of imports a worker otherwise, in every pool a notebook starts). Only
    when the server has not started yet and its preload list is Python's own (``["__main__"]``): a list the
    program set stays as it is."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    if getattr(server, "_forkserver_pid", 0) is None and getattr(server, "_preload_modules", None) == ["__main__"]:
        forkserver.set_forkserver_preload(["__main__", __name__])


def _run_dask(files, config, default_rank, options, slots, outcomes, tick, store, keys) -> None:
    try:
        from distributed import Client, as_completed
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError('engine="dask" needs Dask: pip install "tracekit[dask]"') from err
    own = not isinstance(options.client, Client)
    client = Client(options.client) if own else options.client
    try:
        # pure=False: a rerun after a trace changed must not be answered from the cluster's memory of the last one.
        # The store stays with the caller: entries are keyed on what this process sees of each file, before the run.
        futures = client.map(_rank_task, files, config=config, default_rank=default_rank, pure=False)
        index_of = {future.key: i for i, future in enumerate(futures)}
        for future in as_completed(futures):
            i = index_of[future.key]
            outcomes[slots[i]] = value = future.result()
            _raise_if_fatal(value, options.skip_unreadable)
            if store is not None and keys[i] is not None and isinstance(value, RankResult):
                store.put(keys[i], value)
            tick()
    finally:
        if own:
            client.close()
