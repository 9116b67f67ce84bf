"""One rank of a pipeline job (workloads.pipeline, and workloads.hybrid with a pp dimension): build the device mesh,
this rank's stages (FSDP2-sharded over a dp dimension if there is one), torch's schedule, then the profiled loop, and
on rank 0 run.json with the "layout" block.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.nn import functional as F

from workloads import record
from workloads.common import Rank
from workloads.config import ConfigError
from workloads.data import SyntheticTokens, batches
from workloads.stages import (MULTI_STAGE, SPLIT_BACKWARD, build_stage, intended_schedule, layout,
                              stages_of_rank)

if TYPE_CHECKING:
    from workloads.pipeline import PipelineConfig


def device_mesh(rank: Rank, sizes: dict[str, int]):
    """A DeviceMesh over every rank with the named dims, outermost first (ranks row-major, last dim innermost)."""
    from torch.distributed.device_mesh import init_device_mesh

    if math.prod(sizes.values()) != rank.world_size:
        raise ConfigError(f"--mesh {','.join(f'{k}={v}' for k, v in sizes.items())} needs "
                          f"{math.prod(sizes.values())} ranks, the job has {rank.world_size}")
    return init_device_mesh(rank.device.type, tuple(sizes.values()), mesh_dim_names=tuple(sizes))


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy of one microbatch, on the last stage."""
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def make_schedule(cfg: PipelineConfig, stages: list):
    from torch.distributed.pipelining import (Schedule1F1B, ScheduleDualPipeV, ScheduleGPipe,
                                              ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
                                              ScheduleLoopedBFS, ScheduleZBVZeroBubble)

    cls = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved": ScheduleInterleaved1F1B,
           "looped_bfs": ScheduleLoopedBFS, "interleaved_zb": ScheduleInterleavedZeroBubble,
           "zbv": ScheduleZBVZeroBubble, "dualpipev": ScheduleDualPipeV}[cfg.schedule]
    try:
        return cls(stages if cfg.schedule in MULTI_STAGE else stages[0], cfg.microbatches, loss_fn=lm_loss)
    except ValueError as e:
        raise ConfigError(f"--schedule {cfg.schedule} with --microbatches {cfg.microbatches}: {e}") from None


def train(rank: Rank, cfg: PipelineConfig) -> None:
    """The pipeline loop on one rank: `cfg.steps` optimizer steps of `cfg.microbatches` microbatches each."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage

    cfg.check_world(rank.world_size)
    sizes = dict(cfg.mesh) or {"pp": rank.world_size}
    mesh = device_mesh(rank, sizes)
    pp = mesh["pp"]
    dp = mesh["dp"] if "dp" in sizes else None
    num_stages = pp.size() * cfg.stages_per_rank
    weights = dict(cfg.stage_weights)
    ids = stages_of_rank(cfg.schedule, pp.get_local_rank(), pp.size(), cfg.stages_per_rank)
    copies = cfg.schedule in SPLIT_BACKWARD  # torch's weight-gradient pass cannot reuse a block's parameters
    modules = [build_stage(cfg.shape, s, num_stages, weights.get(s, 1.0), cfg.seed, copies).to(rank.device)
               for s in ids]
    params = {str(s): sum(p.numel() for p in m.parameters()) for s, m in zip(ids, modules)}
    if dp is not None:  # torchtitan's pp x dp: each stage is FSDP2-sharded over its dp group, gathered once per step
        for m in modules:
            for block in m.blocks:
                fully_shard(block, mesh=dp, reshard_after_forward=False)
            fully_shard(m, mesh=dp, reshard_after_forward=False)
    stages = [PipelineStage(m, s, num_stages, rank.device, group=pp.get_group()) for s, m in zip(ids, modules)]
    sched = make_schedule(cfg, stages)
    optimizer = torch.optim.AdamW([p for m in modules for p in m.parameters()], lr=cfg.lr, weight_decay=0.1)

    dp_rank, dp_size = (dp.get_local_rank(), dp.size()) if dp is not None else (0, 1)
    step_batch = cfg.batch_size * cfg.microbatches  # one step's sequences on this data-parallel replica
    data = SyntheticTokens(step_batch * dp_size * cfg.steps, cfg.seq_len, cfg.vocab_size, cfg.seed)
    stream = batches(data, batch_size=step_batch, rank=dp_rank, world_size=dp_size, workers=cfg.workers,
                     seed=cfg.seed, pin_memory=False)
    first, last = 0 in ids, num_stages - 1 in ids
    clock = record.StepClock(cfg, rank, samples_per_step=step_batch * dp_size)
    with record.profiling(cfg, rank) as prof:
        for step in range(cfg.steps):
            clock.start()
            x, y = (t.to(rank.device) for t in next(stream))
            if rank.rank == cfg.fail_rank and step == 1:
                raise RuntimeError(f"deliberate failure on rank {rank.rank} at step {step} (--fail-rank)")
            losses: list[torch.Tensor] = []
            sched.step(*([x] if first else []), **({"target": y, "losses": losses} if last else {}))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            clock.stop(step, torch.stack(losses).mean().item() if losses else math.nan)
            if prof is not None:
                prof.step()

    mine = {"params": params, "sent_bytes": {str(s): m.sent_bytes for s, m in zip(ids, modules) if not m.last}}
    everyone: list = [None] * rank.world_size
    dist.all_gather_object(everyone, mine)  # after the profiler: not in the trace
    if not rank.is_main:
        return
    sent = {s: b for d in everyone for s, b in d["sent_bytes"].items()}
    if len(set(sent.values())) != 1:
        raise RuntimeError(f"stages sent activations of different sizes: {sent}")
    intended, with_comms = intended_schedule(sched, cfg.schedule)
    to_rank = getattr(sched, "stage_index_to_group_rank", None) or {s: s for s in range(num_stages)}
    block = layout(mesh=sizes, schedule=cfg.schedule, microbatches=cfg.microbatches,
                   stages_per_rank=cfg.stages_per_rank,
                   stage_ranks={str(s): int(r) for s, r in sorted(to_rank.items())},
                   params_per_stage=dict(sorted(((s, n) for d in everyone for s, n in d["params"].items()),
                                                key=lambda item: int(item[0]))),
                   stage_weights={str(s): w for s, w in cfg.stage_weights},
                   activation_bytes=next(iter(sent.values())), intended=intended, intended_with_comms=with_comms)
    path = record.write_run_json(cfg, rank, clock, torch.nn.ModuleList(modules), cfg.workload_name, None,
                                 layout=block, trainable_params=sum(block["params_per_stage"].values()))
    print(f"{clock.summary()}\nwrote {path}", flush=True)
