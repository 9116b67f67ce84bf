"""What a training step needs from the harness: the rank, the wrapped model, batch sizes, micro-batches, precision."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.nn.parallel import DataParallel, DistributedDataParallel

from workloads.config import TrainConfig


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


def wrap_model(model: torch.nn.Module, cfg: TrainConfig, rank: Rank) -> torch.nn.Module:
    """Move `model` to the rank's device and wrap it in DDP (or DataParallel for --mode dp)."""
    model = model.to(rank.device)
    if rank.backend is None:
        return DataParallel(model)
    ids = [rank.local_rank] if rank.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=cfg.bucket_cap_mb)


def process_batch(cfg: TrainConfig, rank: Rank) -> int:
    """Samples per micro-batch in this process: --batch-size, times the GPU count for DataParallel, which splits it."""
    return cfg.batch_size * (len(rank.device_names) if rank.backend is None else 1)


def global_batch(cfg: TrainConfig, rank: Rank) -> int:
    """Samples per optimizer step over all ranks and micro-batches."""
    return process_batch(cfg, rank) * cfg.accum * rank.world_size


@contextlib.contextmanager
def micro_batch(model: torch.nn.Module, cfg: TrainConfig, rank: Rank, step: int, i: int) -> Iterator[None]:
    """Run micro-batch `i` of optimizer `step`: labelled `microbatch#i`, gradients synced only on the last one.

    Also injects the test faults: the straggler's sleep before the forward pass, and the failing rank's error.
    """
    last = i == cfg.accum - 1
    sync = contextlib.nullcontext() if last or not isinstance(model, DistributedDataParallel) else model.no_sync()
    with sync, torch.profiler.record_function(f"microbatch#{i}"):
        if rank.rank == cfg.straggler_rank:
            with torch.profiler.record_function("straggler_sleep"):
                time.sleep(cfg.straggler_ms / 1e3)
        if rank.rank == cfg.fail_rank and step == 1:
            raise RuntimeError(f"deliberate failure on rank {rank.rank} at step {step} (--fail-rank)")
        yield


def autocast(cfg: TrainConfig, rank: Rank) -> torch.autocast:
    """Autocast for --amp (a no-op context with --amp off)."""
    dtype = torch.float16 if cfg.amp == "fp16" else torch.bfloat16
    return torch.autocast(device_type=rank.device.type, dtype=dtype, enabled=cfg.amp != "off")


def grad_scaler(cfg: TrainConfig, rank: Rank) -> torch.amp.GradScaler:
    """A GradScaler, enabled only for --amp fp16."""
    return torch.amp.GradScaler(rank.device.type, enabled=cfg.amp == "fp16")

