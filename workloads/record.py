"""What a run leaves behind: the output folder, one profiler trace per rank, step times, and run.json.

`claim_out` guards the folder (a run in it is replaced only with --force), `profiling` is the one context manager
that yields the profiler (or None), `StepClock` times optimizer steps and prints progress, `write_run_json` records
the run. The trace file name is defined here and nowhere else.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from workloads.config import ConfigError, TrainConfig

if TYPE_CHECKING:
    from workloads.common import Rank

TRACE_NAME = "rank-{rank}.pt.trace.json.gz"
TRACE_GLOB = "rank-*.pt.trace.json.gz"
RUN_JSON = "run.json"
# Kineto's own log lines on CPU ranks: two `USDT ... profiler_start/stop` markers per rank, and, where torch is a CUDA
# build on a machine without the NVIDIA driver, `ERROR ... gpuGetDeviceCount failed with code 35` (cudaErrorInsufficient
# Driver) when it looks for device properties to put in the trace. Neither affects the trace. Level 6 is above all of
# Kineto's levels; a KINETO_LOG_LEVEL already set (e.g. 0 for everything) wins. GPU ranks keep Kineto's default, where
# an ERROR line (CUPTI failing, say) can mean kernels are missing from the trace.
KINETO_QUIET_LEVEL = "6"


def trace_name(rank: int) -> str:
    """File name of rank `rank`'s trace inside the output folder."""
    return TRACE_NAME.format(rank=rank)


def claim_out(out: Path, *, force: bool) -> None:
    """Make sure writing a run into `out` loses nothing: refuse a folder that holds a run, unless `force`.

    A run is a `run.json` or a rank trace. With `force` those files (and only those) are deleted first, so that traces
    of an earlier run with more ranks cannot mix with the new ones.
    """
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a folder")
    ours = sorted([*out.glob(RUN_JSON), *out.glob(TRACE_GLOB)]) if out.is_dir() else []
    if not ours:
        return
    if not force:
        raise ConfigError(f"--out {out} already holds a run ({', '.join(p.name for p in ours[:3])}"
                          f"{', ...' if len(ours) > 3 else ''}); pick another folder, or add --force to replace it")
    for path in ours:
        path.unlink()


# ------------------------------------------------------------------------------------------ profiling

@contextlib.contextmanager
def profiling(cfg: TrainConfig, rank: Rank) -> Iterator[torch.profiler.profile | None]:
    """Yield a torch.profiler (wait/warmup/active schedule) that writes this rank's gzip trace; None without --profile.

    Call `prof.step()` once per optimizer step, so that `ProfilerStep#i` is optimizer step i.
    """
    if not cfg.profile:
        yield None
        return
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    path = str(Path(cfg.out) / trace_name(rank.rank))
    activities = [torch.profiler.ProfilerActivity.CPU]
    if rank.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    else:
        os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET_LEVEL)  # read when Kineto starts, just below
    schedule = torch.profiler.schedule(wait=cfg.wait, warmup=cfg.warmup, active=cfg.active, repeat=1)
    with torch.profiler.profile(activities=activities, schedule=schedule, record_shapes=True,
                                profile_memory=cfg.profile_memory, with_flops=cfg.with_flops,
                                on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        yield prof
    if hasattr(prof, "wait_for_exports"):
        prof.wait_for_exports()


# ------------------------------------------------------------------------------------ timing and run.json

class StepClock:
    """Times optimizer steps on this rank and prints progress on rank 0."""

    def __init__(self, cfg: TrainConfig, rank: Rank, samples_per_step: int):
        self.cfg, self.rank = cfg, rank
        self.samples_per_step = samples_per_step
        self.step_ms: list[float] = []
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self, step: int, loss: float) -> None:
        """End `step`; `loss` is a Python float, so the device has finished the step."""
        ms = (time.perf_counter() - self._t0) * 1e3
        self.step_ms.append(ms)
        if self.rank.is_main:
            # Numbered as the trace numbers it (ProfilerStep#<step>, from 0), so the steps said profiled here are
            # the steps tracekit reports.
            tag = f" [profiled: ProfilerStep#{step}]" if self.cfg.profile and step in self.cfg.profiled_steps else ""
            said = f"{loss:8.4f}" if loss == loss else "     n/a"  # NaN: the loss lives on another rank
            print(f"step {step:>4} of 0-{self.cfg.steps - 1} | loss {said} | "
                  f"{self.samples_per_step / ms * 1e3:9.1f} samples/s | {ms:8.1f} ms{tag}", flush=True)

    def throughput(self) -> dict[str, float | None]:
        """Samples/s over steps with the profiler off and over recorded steps; step 0 (start-up) is left out."""
        cfg = self.cfg
        window = range(cfg.wait, cfg.profiled_steps.stop) if cfg.profile else range(0)
        off = [ms for i, ms in enumerate(self.step_ms) if i > 0 and i not in window]
        on = [ms for i, ms in enumerate(self.step_ms) if cfg.profile and i in cfg.profiled_steps]
        return {"unprofiled": self._rate(off), "profiled": self._rate(on)}

    def profiler_overhead(self) -> float | None:
        """How much longer a recorded step takes than an un-profiled one: the mean step time over the recorded
        steps over the mean over the un-profiled steps (step 0 left out), less 1; 0.25 is 25% slower. None without
        both kinds of steps."""
        rates = self.throughput()
        on, off = rates["profiled"], rates["unprofiled"]
        return None if not on or not off else round(off / on - 1, 4)

    def summary(self) -> str:
        """One line for the end of the run: the throughputs run.json records, and the profiler's overhead."""
        rates = self.throughput()
        said = [f"{v:.1f} samples/s {k}" for k, v in rates.items() if v is not None]
        overhead = self.profiler_overhead()
        memory = "with" if self.cfg.profile_memory else "without"
        return "throughput: " + (", ".join(said) if said else "unknown (no step after the first outside the profiler)") \
            + (f"; profiler overhead {overhead:+.1%} per step ({memory} profile_memory)" if overhead is not None else "")

    def _rate(self, step_ms: list[float]) -> float | None:
        return round(self.samples_per_step * len(step_ms) / sum(step_ms) * 1e3, 3) if step_ms else None


def write_run_json(cfg: TrainConfig, rank: Rank, clock: StepClock, model: torch.nn.Module, workload: str,
                   flops_per_step: float | None = None, *, layout: dict | None = None,
                   trainable_params: int | None = None) -> Path:
    """Write run.json into cfg.out (rank 0 only): config, job, versions, parameter count, step times, throughput,
    and ``flop_counter_flops_per_step``: FlopCounterMode's count of one optimizer step on one rank (None if not
    counted). Model-parallel workloads add ``layout`` (mesh, stages, schedule: see workloads.stages.layout) and give
    `trainable_params` of the whole model, which no one rank holds."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    run = {
        "workload": workload,
        "config": asdict(cfg),
        "world_size": rank.world_size,
        "backend": rank.backend,
        "mode": cfg.parallelism,
        "devices": list(rank.device_names),
        "versions": _versions(),
        "trainable_params": (trainable_params if trainable_params is not None
                             else sum(p.numel() for p in model.parameters() if p.requires_grad)),
        "optimizer_steps": cfg.steps,
        "micro_batches_per_step": cfg.accum,
        "samples_per_step": clock.samples_per_step,
        "profiled_steps": list(cfg.profiled_steps) if cfg.profile else [],
        "traces": [trace_name(r) for r in range(rank.world_size)] if cfg.profile else [],
        "step_ms": [round(ms, 3) for ms in clock.step_ms],
        "throughput_samples_per_s": clock.throughput(),
        # recorded step time over un-profiled step time, less 1 (config.profile_memory says what was recorded)
        "profiler_overhead": clock.profiler_overhead(),
        "flop_counter_flops_per_step": flops_per_step,
        # torch's own memory peak on this rank's GPU (None on CPU ranks): the reference for tracekit's memory table
        "cuda_max_memory_allocated_bytes": (torch.cuda.max_memory_allocated(rank.device)
                                            if rank.device.type == "cuda" else None),
        "argv": sys.argv[1:],
        "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    if layout is not None:
        run["layout"] = layout
    path = out / RUN_JSON
    path.write_text(json.dumps(run, indent=2) + "\n")
    return path


def _versions() -> dict[str, str | None]:
    nccl = None
    with contextlib.suppress(Exception):  # builds without NCCL
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl, "python": sys.version.split()[0]}
