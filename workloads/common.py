"""The harness every workload shares: launch, distributed setup, and where each rank sits in the job (`Rank`).

`main(train, cfg, name, summary)` runs `train(rank, cfg)` in every rank with the process group up; workloads use it
through `training.main`, which supplies the shared loop as `train`. Launching:
- under `torchrun` (RANK and WORLD_SIZE in the environment) each process is one rank;
- otherwise one process per visible GPU with NCCL, or 2 CPU ranks with gloo, started with `torch.multiprocessing`;
  `--nproc N` starts N ranks instead (rank r on GPU r mod the GPU count) and `--backend` picks nccl or gloo;
- `--mode dp` runs one process with DataParallel and no process group.
If a rank raises, it reports first, then the launcher stops the others and names it.
The process group is always destroyed. `--out` never overwrites an earlier run unless `--force` is given.
What a run writes (traces, run.json) is `record`'s.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from workloads.config import ConfigError, TrainConfig, fail
from workloads.ports import free_port
from workloads.record import claim_out

STOP_GRACE_S = 3.0


@dataclass(frozen=True, kw_only=True)
class Rank:
    """Where this process sits in the job."""

    rank: int
    local_rank: int
    world_size: int
    backend: str | None  # None: no process group (DataParallel)
    device: torch.device
    device_names: tuple[str, ...]  # one per rank

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def process_batch(cfg: TrainConfig, rank: Rank) -> int:
    """Samples per micro-batch in this process: --batch-size, times the GPU count for DataParallel, which splits it."""
    return cfg.batch_size * (len(rank.device_names) if rank.backend is None else 1)


def global_batch(cfg: TrainConfig, rank: Rank) -> int:
    """Samples per optimizer step over all ranks and micro-batches."""
    return process_batch(cfg, rank) * cfg.accum * rank.world_size


# ---------------------------------------------------------------------------------------------- launch

def main(train: Callable[[Rank, Any], None], cfg: TrainConfig, name: str, summary: str) -> None:
    """Run `train` on every rank of the job `cfg` describes, after one line saying where and what (`summary`).

    Exits with code 2 and one line when the machine cannot run `cfg` or `--out` holds a run (without `--force`), with
    code 1 naming the rank when a rank fails.
    """
    prog = f"workloads.{name}"
    try:
        _check_machine(cfg)
        if cfg.out is None:  # under torchrun every rank makes one; rank 0's wins in `_run_rank`
            cfg = replace(cfg, out=default_out(name))
        if os.environ.get("RANK", "0") == "0":
            claim_out(Path(cfg.out), force=cfg.force)
        announce(f"{prog}: {machine(cfg)}; {summary}")
        _launch(train, cfg)
    except ConfigError as e:
        fail(prog, str(e))
    except RankFailed as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        sys.exit(1)


def _check_machine(cfg: TrainConfig) -> None:
    if cfg.backend == "nccl" and gpu_count(cfg) == 0:
        raise ConfigError("--backend nccl needs CUDA GPUs and this machine has none; use gloo")
    if cfg.mode == "dp" and gpu_count(cfg) == 0:
        raise ConfigError("--mode dp (DataParallel) needs CUDA GPUs and this machine has none; use --mode ddp")
    if cfg.mode == "dp" and "RANK" in os.environ:
        raise ConfigError("--mode dp runs in one process; start it with python, not torchrun")


def default_out(name: str) -> str:
    return f"runs/{name}-{datetime.datetime.now():%Y%m%d-%H%M%S}"


class RankFailed(RuntimeError):
    """A rank of a spawned job raised or died; the message names it."""


def gpu_count(cfg: TrainConfig) -> int:
    """GPUs the job uses: all visible ones, or none with --cpu."""
    return 0 if cfg.cpu else torch.cuda.device_count()


def _launch(train: Callable, cfg: TrainConfig) -> None:
    gpus = gpu_count(cfg)
    if cfg.mode == "dp":
        names = tuple(torch.cuda.get_device_name(i) for i in range(gpus))
        train(Rank(rank=0, local_rank=0, world_size=1, backend=None, device=torch.device("cuda", 0),
                   device_names=names), cfg)
        return
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun stops the other ranks itself
        env = os.environ
        _in_process(train, cfg, int(env["RANK"]), int(env.get("LOCAL_RANK", 0)), int(env["WORLD_SIZE"]))
        _leave()  # a rank of torchrun's, done: as a spawned rank leaves
    world = cfg.nproc or gpus or 2
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    if world == 1:
        os.environ.update(env)
        _in_process(train, cfg, 0, 0, 1)
        return
    _spawn(train, cfg, world, env)


def _in_process(train: Callable, cfg: TrainConfig, rank: int, local_rank: int, world: int) -> None:
    try:
        _run_rank(train, cfg, rank, local_rank, world)
    except Exception as e:
        raise RankFailed(f"rank {rank} failed: {_describe(e)}") from None


def _spawn(train: Callable, cfg: TrainConfig, world: int, env: dict[str, str]) -> None:
    """Start `world` ranks with torch.multiprocessing; if one fails, stop the rest and raise `RankFailed` naming it.

    torch.multiprocessing names the first process whose exit it sees, which can be a rank that failed only because the
    culprit's sockets closed. So each rank also reports its own failure, before tearing its group down, to `reports`:
    the first report is the root cause.
    """
    reports = mp.get_context("spawn").SimpleQueue()
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)  # "Terminating process ..." lines
    job = mp.start_processes(_child, args=(world, env, train, cfg, reports), nprocs=world, join=False,
                             start_method="spawn")
    try:
        while not job.join(grace_period=STOP_GRACE_S):
            pass
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
        rank, trace = reports.get() if not reports.empty() else (e.error_index, f"{e}\n")
        print(trace, file=sys.stderr, end="")
        raise RankFailed(f"rank {rank} failed: {_last_line(trace)} (the other {world - 1} ranks were stopped)") from None


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def _describe(e: Exception) -> str:
    return _last_line(f"{type(e).__name__}: {e}")


def _child(rank: int, world: int, env: dict[str, str], train: Callable, cfg: TrainConfig, reports) -> None:
    os.environ.update(env)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))  # CPU ranks share the cores
    try:
        _run_rank(train, cfg, rank, rank, world, reports)
    except Exception:
        sys.exit(1)  # `_run_rank` has reported it to the launcher
    _leave()


def _leave() -> None:
    """End a rank's process whose work is done, its files closed and its group destroyed, without the interpreter's
    teardown: there, now and then (about 1 run in 15 on 2 cores), a native thread torch left behind aborts the
    process ("terminate called without an active exception", SIGABRT, no Python frame), failing a run that
    succeeded."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: as the teardown would, ignored
            stream.flush()
    os._exit(0)


# ------------------------------------------------------------------------------------- distributed setup

def _run_rank(train: Callable, cfg: TrainConfig, rank: int, local_rank: int, world: int, reports=None) -> None:
    """Bring the process group up, run `train`, report a failure before tearing down, always destroy the group."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    gpus = gpu_count(cfg)
    device = torch.device("cuda", local_rank % gpus) if gpus else torch.device("cpu")
    if gpus:
        torch.cuda.set_device(device)
    backend = backend_name(cfg)
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=cfg.timeout_s))
    try:
        names: list[Any] = [None] * world
        dist.all_gather_object(names, _device_name(device))
        out = [cfg.out]
        dist.broadcast_object_list(out, src=0)  # torchrun ranks may have made different timestamped folders
        me = Rank(rank=rank, local_rank=local_rank, world_size=world, backend=backend, device=device,
                  device_names=tuple(names))
        train(me, replace(cfg, out=out[0]))
    except Exception as e:
        trace = _describe(e) + "\n" if isinstance(e, ConfigError) else traceback.format_exc()
        if reports is not None:
            reports.put((rank, trace))  # the launcher prints the first failure only
        else:
            print(trace, file=sys.stderr, end="", flush=True)
        raise
    finally:
        dist.destroy_process_group()


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through `finally`, so the process group is destroyed


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "cpu: " + line.split(":", 1)[1].strip()
    return "cpu"


def announce(message: str) -> None:
    """Print `message` once per job: in the launching process, or on rank 0 under torchrun."""
    if os.environ.get("RANK", "0") == "0":
        print(message, flush=True)


def backend_name(cfg: TrainConfig) -> str:
    """The process group's backend: --backend, or nccl on GPUs and gloo on CPUs."""
    if cfg.backend != "auto":
        return cfg.backend
    return "nccl" if gpu_count(cfg) else "gloo"


def machine(cfg: TrainConfig) -> str:
    """Where the job will run, in words, for the line that says which config was chosen."""
    if "WORLD_SIZE" in os.environ:
        return f"torchrun, {os.environ['WORLD_SIZE']} ranks, {backend_name(cfg)}"
    gpus = gpu_count(cfg)
    if cfg.mode == "dp":
        return f"DataParallel over {gpus} GPUs"
    world = cfg.nproc or gpus or 2
    if gpus:
        return f"{_count(world, 'rank')} on {_count(gpus, 'GPU')}, {backend_name(cfg)}"
    return f"no CUDA GPU, {world} CPU ranks with gloo"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
