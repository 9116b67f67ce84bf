"""The training loop every workload shares; a workload file holds only its model, data, loss and flags.

A workload describes itself once, as a `Workload` of module-level functions (spawned ranks pickle it), and starts it:

    WORKLOAD = training.Workload(name="gpt", model=build_model, dataset=make_dataset, loss=lm_loss,
                                 optimizer=adamw)
    training.main(WORKLOAD, cfg, summary)       # launch, one `run` per rank, run.json

The hooks, each called once per rank unless said otherwise:
- `model(cfg)`: the bare `nn.Module`, on the CPU, in float32.
- `wrap(model, cfg, rank)`: the parallel model. Default `wrap_model`: DDP, or DataParallel for `--mode dp`.
  A sharded workload puts `fully_shard` / FSDP here; the loop only calls `forward`, `backward` and the optimizer.
- `dataset(cfg, samples)`: a Dataset with at least `samples` items; `batches` shards it over the ranks.
- `to_device(batch, cfg, rank)`: per micro-batch, the batch on the rank's device. Default moves every tensor.
- `loss(model, batch, cfg)`: per micro-batch, the scalar loss, called under autocast (`--amp`).
- `optimizer(params, cfg)`: the optimizer over the wrapped model's parameters.

One optimizer step is one `ProfilerStep`; each micro-batch is a `microbatch#<i>` annotation, and gradients are
synchronised only in the last one (DDP's `no_sync`, FSDP2's `set_requires_gradient_sync`).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.parallel import DataParallel, DistributedDataParallel

from workloads import common, record
from workloads.common import Rank, global_batch, process_batch
from workloads.config import TrainConfig
from workloads.data import batches

__all__ = ["Rank", "Workload", "autocast", "global_batch", "grad_scaler", "main", "micro_batch", "process_batch",
           "run", "to_device", "wrap_model"]


def wrap_model(model: torch.nn.Module, cfg: TrainConfig, rank: Rank) -> torch.nn.Module:
    """Move `model` to the rank's device and wrap it in DDP (or DataParallel for --mode dp)."""
    model = model.to(rank.device)
    if rank.backend is None:
        return DataParallel(model)
    ids = [rank.device.index] if rank.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=cfg.bucket_cap_mb)


def to_device(batch: Any, cfg: TrainConfig, rank: Rank) -> Any:
    """Every tensor of `batch` (a tensor or a tuple/list of them) on the rank's device, copied asynchronously."""
    if isinstance(batch, torch.Tensor):
        return batch.to(rank.device, non_blocking=True)
    return type(batch)(to_device(t, cfg, rank) for t in batch)


@dataclass(frozen=True, kw_only=True)
class Workload:
    """What one workload brings to the shared loop (see the module docstring for each hook)."""

    name: str
    model: Callable[[Any], torch.nn.Module]
    dataset: Callable[[Any, int], torch.utils.data.Dataset]
    loss: Callable[[torch.nn.Module, Any, Any], torch.Tensor]
    optimizer: Callable[[Iterable[torch.nn.Parameter], Any], torch.optim.Optimizer]
    wrap: Callable[[torch.nn.Module, Any, Rank], torch.nn.Module] = wrap_model
    to_device: Callable[[Any, Any, Rank], Any] = to_device


def main(workload: Workload, cfg: TrainConfig, summary: str) -> None:
    """Run `workload` on every rank of the job `cfg` describes (see `common.main` for launching and failures)."""
    common.main(functools.partial(run, workload), cfg, workload.name, summary)


def run(workload: Workload, rank: Rank, cfg: TrainConfig) -> None:
    """The loop on one rank: data -> model -> optimizer, `cfg.steps` optimizer steps under the profiler, run.json."""
    torch.manual_seed(cfg.seed)
    dataset = workload.dataset(cfg, global_batch(cfg, rank) * cfg.steps)
    stream = batches(dataset, batch_size=process_batch(cfg, rank), rank=rank.rank, world_size=rank.world_size,
                     workers=cfg.workers, seed=cfg.seed, pin_memory=cfg.pin_memory and rank.device.type == "cuda")
    model = workload.wrap(workload.model(cfg), cfg, rank)
    optimizer = workload.optimizer(model.parameters(), cfg)
    scaler = grad_scaler(cfg, rank)

    clock = record.StepClock(cfg, rank, samples_per_step=global_batch(cfg, rank))
    with record.profiling(cfg, rank) as prof:
        for step in range(cfg.steps):
            clock.start()
            for i in range(cfg.accum):
                batch = workload.to_device(next(stream), cfg, rank)
                with micro_batch(model, cfg, rank, step, i):
                    with autocast(cfg, rank):
                        loss = workload.loss(model, batch, cfg) / cfg.accum
                    scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            clock.stop(step, loss.item() * cfg.accum)
            if prof is not None:
                prof.step()
    flops = count_step_flops(workload, model, batch, cfg, rank)
    optimizer.zero_grad(set_to_none=True)
    if rank.is_main:
        path = record.write_run_json(cfg, rank, clock, model, workload.name, flops)
        print(f"{clock.summary()}\nwrote {path}", flush=True)


def count_step_flops(workload: Workload, model: torch.nn.Module, batch: Any, cfg: TrainConfig, rank: Rank) -> float:
    """torch's own FLOPs count (``FlopCounterMode``) of one optimizer step on this rank: forward and backward of the
    last micro-batch, times the micro-batches per step. Every rank runs it (a sharded model's backward is
    collective); the gradients it leaves are zeroed by the caller. The reference tracekit's FLOPs are checked
    against."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        with autocast(cfg, rank):
            loss = workload.loss(model, batch, cfg) / cfg.accum
        loss.backward()
    return float(counter.get_total_flops() * cfg.accum)


@contextlib.contextmanager
def micro_batch(model: torch.nn.Module, cfg: TrainConfig, rank: Rank, step: int, i: int) -> Iterator[None]:
    """Run micro-batch `i` of optimizer `step`: labelled `microbatch#i`, gradients synced only on the last one.

    Also injects the test faults: the straggler's sleep before the forward pass, and the failing rank's error.
    """
    last = i == cfg.accum - 1
    with _gradient_sync(model, last), torch.profiler.record_function(f"microbatch#{i}"):
        if rank.rank == cfg.straggler_rank:
            with torch.profiler.record_function("straggler_sleep"):
                time.sleep(cfg.straggler_ms / 1e3)
        if rank.rank == cfg.fail_rank and step == 1:
            raise RuntimeError(f"deliberate failure on rank {rank.rank} at step {step} (--fail-rank)")
        yield


def _gradient_sync(model: torch.nn.Module, sync: bool) -> contextlib.AbstractContextManager:
    if isinstance(model, DistributedDataParallel):
        return contextlib.nullcontext() if sync else model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2 (`fully_shard`) modules
        model.set_requires_gradient_sync(sync)
    return contextlib.nullcontext()


def autocast(cfg: TrainConfig, rank: Rank) -> torch.autocast:
    """Autocast for --amp (a no-op context with --amp off)."""
    dtype = torch.float16 if cfg.amp == "fp16" else torch.bfloat16
    return torch.autocast(device_type=rank.device.type, dtype=dtype, enabled=cfg.amp != "off")


def grad_scaler(cfg: TrainConfig, rank: Rank) -> torch.amp.GradScaler:
    """A GradScaler, enabled only for --amp fp16."""
    return torch.amp.GradScaler(rank.device.type, enabled=cfg.amp == "fp16")
