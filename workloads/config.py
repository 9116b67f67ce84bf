"""The flags every workload shares, as one frozen config, and the command line that builds it.

Only the workload entry points read flags; everything below them gets a validated config object.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, fields
from typing import Any, NoReturn, TypeVar

AMP_MODES = ("off", "bf16", "fp16")
BACKENDS = ("auto", "nccl", "gloo")
PARALLEL_MODES = ("ddp", "dp")


class ConfigError(ValueError):
    """A flag value or combination of flags that cannot run; the message is one line for the user."""


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """What every workload needs: batch sizes, parallelism, precision, profiling and fault injection.

    Sizes are per rank; times are in the unit their name says. A workload extends this with its model and data fields.
    """

    steps: int
    batch_size: int
    workers: int = 0
    seed: int = 0
    lr: float = 0.01
    mode: str = "ddp"
    amp: str = "off"
    accum: int = 1
    bucket_cap_mb: float = 25.0
    pin_memory: bool = False
    nproc: int | None = None  # None: one rank per GPU, or 2 CPU ranks
    backend: str = "auto"
    cpu: bool = False
    timeout_s: float = 60.0
    profile: bool = False
    wait: int = 2
    warmup: int = 1
    active: int = 3
    out: str | None = None
    force: bool = False
    straggler_rank: int | None = None
    straggler_ms: float = 0.0
    fail_rank: int | None = None
    profile_memory: bool = True  # [memory] events: tracekit's memory tables and the viewer's Memory page
    with_flops: bool = False

    def __post_init__(self) -> None:
        _check(self.steps >= 1, f"--steps must be >= 1, got {self.steps}")
        _check(self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}")
        _check(self.accum >= 1, f"--accum must be >= 1, got {self.accum}")
        _check(self.workers >= 0, f"--workers must be >= 0, got {self.workers}")
        _check(self.nproc is None or self.nproc >= 1, f"--nproc must be >= 1, got {self.nproc}")
        _check(self.backend in BACKENDS, f"--backend must be one of {BACKENDS}, got {self.backend!r}")
        _check(not (self.backend == "nccl" and self.cpu), "--backend nccl runs on GPUs; drop --cpu")
        _check(self.bucket_cap_mb > 0, f"--bucket-cap-mb must be > 0, got {self.bucket_cap_mb}")
        _check(self.timeout_s > 0, f"--timeout-s must be > 0, got {self.timeout_s}")
        _check(self.mode in PARALLEL_MODES, f"--mode must be one of {PARALLEL_MODES}, got {self.mode!r}")
        _check(not (self.mode == "dp" and self.cpu), "--mode dp runs on GPUs; drop --cpu")
        _check(self.amp in AMP_MODES, f"--amp must be one of {AMP_MODES}, got {self.amp!r}")
        _check(min(self.wait, self.warmup) >= 0 and self.active >= 1,
               f"need --wait >= 0, --warmup >= 0, --active >= 1, got {self.wait}/{self.warmup}/{self.active}")
        _check(not self.profile or self.steps >= self.profiled_steps.stop,
               f"--steps {self.steps} ends before the profiled window (--wait {self.wait} + --warmup {self.warmup}"
               f" + --active {self.active} = {self.profiled_steps.stop} steps)")
        _check(self.straggler_ms >= 0, f"--straggler-ms must be >= 0, got {self.straggler_ms}")
        _check((self.straggler_rank is None) == (self.straggler_ms == 0),
               "--straggler-rank and --straggler-ms go together")

    @property
    def parallelism(self) -> str:
        """What run.json records as the mode: ``ddp`` or ``dp`` here; a sharding workload says ``fsdp``."""
        return self.mode

    @property
    def profiled_steps(self) -> range:
        """Optimizer steps the profiler records; step i is `ProfilerStep#i` in the trace."""
        start = self.wait + self.warmup
        return range(start, start + self.active)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (`prog: error: ...`) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        fail(self.prog, message)


def fail(prog: str, message: str) -> NoReturn:
    """Print `prog: error: message` to stderr and exit with code 2 (bad usage)."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(2)


def base_parser(prog: str, manual: str) -> Parser:
    """A parser with the shared flags; `manual` (the workload's docstring) is shown by --help.

    Flags whose default depends on the machine (GPU or CPU) default to None here and are filled by `build`.
    """
    p = Parser(prog=prog, description=manual, formatter_class=argparse.RawDescriptionHelpFormatter)
    run = p.add_argument_group("run")
    run.add_argument("--steps", type=int, help="optimizer steps")
    run.add_argument("--batch-size", type=int, help="samples per micro-batch per rank")
    run.add_argument("--workers", type=int, help="DataLoader worker processes per rank")
    run.add_argument("--pin-memory", action="store_true", help="pin host memory in the DataLoader (GPU only)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--lr", type=float, help="learning rate")
    run.add_argument("--out", help="output folder (default runs/<workload>-<timestamp>/); one holding a run is refused")
    run.add_argument("--force", action="store_true", help="let --out replace the run already in it")
    par = p.add_argument_group("parallelism and precision")
    par.add_argument("--mode", choices=PARALLEL_MODES, default="ddp",
                     help="ddp: one process per GPU (or CPU rank); dp: DataParallel in one process, needs GPUs")
    par.add_argument("--nproc", type=int,
                     help="ranks to start without torchrun (default: one per GPU, or 2 CPU ranks); on GPUs rank r uses"
                          " GPU r mod the GPU count")
    par.add_argument("--backend", choices=BACKENDS, default="auto",
                     help="process group backend: auto is nccl on GPUs and gloo on CPUs; gloo also runs on CUDA tensors")
    par.add_argument("--cpu", action="store_true", help="run CPU ranks with gloo even where there are GPUs")
    par.add_argument("--amp", choices=AMP_MODES, default="off", help="autocast dtype; fp16 adds a GradScaler")
    par.add_argument("--accum", type=int, default=1,
                     help="micro-batches per optimizer step (no_sync on all but the last)")
    par.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP all-reduce bucket size in MB")
    par.add_argument("--timeout-s", type=float, default=60.0,
                     help="collective timeout in seconds, so that a lost rank fails the run")
    prof = p.add_argument_group("profiling")
    prof.add_argument("--profile", action="store_true", help="write one trace per rank with torch.profiler")
    prof.add_argument("--wait", type=int, default=2, help="steps before the profiler starts")
    prof.add_argument("--warmup", type=int, default=1, help="profiler warm-up steps (recorded, then discarded)")
    prof.add_argument("--active", type=int, default=3, help="steps recorded in the trace")
    prof.add_argument("--profile-memory", action=argparse.BooleanOptionalAction, default=None,
                      help="record allocations ([memory] events) in the trace: tracekit's memory tables (on by "
                           "default; --no-profile-memory turns it off, for a lighter profiler)")
    prof.add_argument("--with-flops", action="store_true", default=None,
                      help="the profiler's own FLOPs estimate on matmul and conv ops (tracekit computes FLOPs from "
                           "shapes either way)")
    prof.add_argument("--straggler-rank", type=int, help="rank that sleeps before every forward pass")
    prof.add_argument("--straggler-ms", type=float, default=0.0, help="how long the straggler sleeps, in ms")
    prof.add_argument("--fail-rank", type=int, help=argparse.SUPPRESS)  # tests: this rank raises at step 1
    return p


C = TypeVar("C", bound=TrainConfig)


def build(cls: type[C], parser: Parser, args: argparse.Namespace, defaults: dict[str, Any]) -> C:
    """Make a `cls` from parsed flags, with `defaults` for those left unset; a bad value exits with one line."""
    names = {f.name for f in fields(cls)}
    given = {k: v for k, v in vars(args).items() if v is not None and k in names}
    try:
        return cls(**{**defaults, **given})
    except ConfigError as e:
        parser.error(str(e))
