"""Training on a 2-D device mesh, as torchtitan lays out large models, under torch.profiler: one trace per rank.

  --mesh dp=2,tp=2   tensor parallel inside FSDP2 (torchtitan's 2-D layout). In each transformer block, attention's
                     q, k and v projections are ColwiseParallel and its output projection RowwiseParallel; the MLP's
                     first layer ColwiseParallel and its second RowwiseParallel (each block: 2 all-reduces over tp in
                     forward, 4 in backward). Then each block, and the root, is fully_shard'ed over dp. The embeddings,
                     final norm and tied output layer are FSDP-sharded only. Attention has separate q/k/v layers
                     (gpt_model.HeadShardedAttention) so that a column shard holds whole heads.
  --mesh pp=2,dp=2   pipeline parallel over pp (workloads.pipeline's stages and --schedule, --microbatches, ...),
                     each stage FSDP2-sharded over its dp group with reshard_after_forward=False (gathered once per
                     step, as torchtitan does under pipelining).
Dims are laid out pp, dp, tp from outermost to innermost whatever the order given (rank = (pp index x dp size +
dp index) x tp size + tp index), so tp groups are neighbouring ranks, as a node's GPUs are. The sizes must multiply
to the job's ranks; --nproc defaults to that product.

Commands
  4 GPUs, one node:                   python -m workloads.hybrid --profile --mesh dp=2,tp=2
  the same under torchrun:            torchrun --standalone --nproc-per-node 4 -m workloads.hybrid --profile \\
                                               --mesh dp=2,tp=2
  pipeline x FSDP:                    python -m workloads.hybrid --profile --mesh pp=2,dp=2
  multi-node: as workloads.gpt, with -m workloads.hybrid
  CPU only (gloo, CPU-sized config):  python -m workloads.hybrid --profile --cpu --mesh dp=2,tp=2

Sizes are workloads.gpt's flags (--batch-size is sequences per dp replica per step; with pp, per microbatch).
--n-head and 4 x --n-embd must be multiples of tp. Output: --out (default runs/hybrid-<timestamp>/) holds
rank-<r>.pt.trace.json.gz per rank and run.json with the "layout" block (see workloads.pipeline); a tp run's layout
adds "comm_debug_counts": torch's CommDebugMode count of one training step's collectives on rank 0 (forward and
backward, after the profiled steps), split by dim: the functional collectives that DTensor's redistributions issue
are tp's, the c10d collectives FSDP2 calls directly are fsdp's; "ops" keeps torch's own names.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch
from torch.nn import functional as F

from workloads import pipeline, pipeline_run, record
from workloads.common import Rank
from workloads.common import main as launch
from workloads.config import ConfigError, base_parser, build
from workloads.data import SyntheticTokens, batches
from workloads.gpt_model import GPT, with_head_sharded_attention
from workloads.stages import layout, parse_stage_weights

MESH_DIMS = ("pp", "dp", "tp")  # outermost first
LAYOUTS = ({"dp", "tp"}, {"pp", "dp"})
TP_PLAN = {"attn.q": "colwise", "attn.k": "colwise", "attn.v": "colwise", "attn.proj": "rowwise",
           "mlp.0": "colwise", "mlp.2": "rowwise"}
OP_KINDS = {"all_reduce": "all_reduce", "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce",
            "all_gather_into_tensor": "all_gather", "_allgather_base_": "all_gather", "allgather_": "all_gather",
            "allgather_into_tensor_coalesced_": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
            "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_": "reduce_scatter",
            "reduce_scatter_tensor_coalesced_": "reduce_scatter", "all_to_all_single": "all_to_all",
            "alltoall_base_": "all_to_all", "broadcast": "broadcast", "broadcast_": "broadcast"}


def parse_mesh(text: str) -> tuple[tuple[str, int], ...]:
    """'tp=2,dp=2' -> (('dp', 2), ('tp', 2)): dims in MESH_DIMS order, sizes >= 2, one of LAYOUTS."""
    sizes: dict[str, int] = {}
    for item in text.split(","):
        dim, sep, size = item.strip().partition("=")
        if not sep or dim not in MESH_DIMS or dim in sizes or not size.isdigit() or int(size) < 2:
            raise ConfigError(f"--mesh wants DIM=SIZE pairs, DIM one of {MESH_DIMS} at most once, SIZE >= 2; "
                              f"got {text!r}")
        sizes[dim] = int(size)
    if set(sizes) not in LAYOUTS:
        raise ConfigError(f"--mesh {text}: the layouts built are dp,tp and pp,dp")
    return tuple((d, sizes[d]) for d in MESH_DIMS if d in sizes)


@dataclass(frozen=True, kw_only=True)
class HybridConfig(pipeline.PipelineConfig):
    mesh: tuple[tuple[str, int], ...] = (("dp", 2), ("tp", 2))

    @property
    def parallelism(self) -> str:
        return "hybrid"

    @property
    def workload_name(self) -> str:
        return "hybrid"

    def __post_init__(self) -> None:
        super().__post_init__()
        sizes = dict(self.mesh)
        if set(sizes) not in LAYOUTS:
            raise ConfigError(f"--mesh {self.mesh}: the layouts built are dp,tp and pp,dp")
        tp = sizes.get("tp", 1)
        if self.n_head % tp or (4 * self.n_embd) % tp:
            raise ConfigError(f"tp={tp} must divide --n-head {self.n_head} and 4 x --n-embd {self.n_embd}")
        if "pp" not in sizes and self.stage_weights:
            raise ConfigError("--stage-weights needs a pp dimension in --mesh")


def parse_config(argv: list[str] | None = None) -> tuple[HybridConfig, str]:
    """The config from the command line, and a line saying which defaults it took."""
    p = base_parser("workloads.hybrid", __doc__)
    pipeline.add_pipeline_flags(p)
    p.add_argument_group("mesh").add_argument("--mesh", default="dp=2,tp=2", help="dims and sizes, e.g. dp=2,tp=2")
    args = p.parse_args(argv)
    try:
        args.mesh = parse_mesh(args.mesh)
        args.stage_weights = parse_stage_weights(args.stage_weights)
    except ConfigError as e:
        p.error(str(e))
    if args.nproc is None:
        args.nproc = math.prod(size for _, size in args.mesh)
    gpu = torch.cuda.is_available() and not args.cpu
    cfg = build(HybridConfig, p, args, pipeline.GPU_DEFAULTS if gpu else pipeline.CPU_DEFAULTS)
    mesh = ",".join(f"{d}={n}" for d, n in cfg.mesh)
    if "pp" in dict(cfg.mesh):
        return cfg, f"mesh {mesh}: {pipeline.describe(cfg, gpu)}"
    return cfg, (f"mesh {mesh}: tensor parallel inside FSDP2, GPT {cfg.n_layer} layers x {cfg.n_embd} channels, vocab"
                 f" {cfg.vocab_size}, {cfg.seq_len} tokens, batch {cfg.batch_size} per dp replica, {cfg.steps} steps"
                 f" ({'GPU' if gpu else 'CPU'} defaults; flags override)")


def comm_counts_by_dim(ops: dict[str, int]) -> dict[str, dict[str, int]]:
    """CommDebugMode's {op: count} -> {"tp": {kind: n}, "fsdp": {kind: n}, "ops": {op: n}} (see the manual)."""
    out: dict[str, dict[str, int]] = {}
    for op, n in ops.items():
        namespace, _, name = op.rpartition(".")
        dim = "tp" if "functional" in namespace else "fsdp"
        kind = OP_KINDS.get(name, name)
        out.setdefault(dim, {})
        out[dim][kind] = out[dim].get(kind, 0) + n
    return {**out, "ops": dict(ops)}


def train(rank: Rank, cfg: HybridConfig) -> None:
    if "pp" in dict(cfg.mesh):
        pipeline_run.train(rank, cfg)
    else:
        train_tp_fsdp(rank, cfg)


def train_tp_fsdp(rank: Rank, cfg: HybridConfig) -> None:
    """Tensor parallel inside FSDP2 on the (dp, tp) mesh: `cfg.steps` steps, then CommDebugMode over one more."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    # FSDP2 warns that the root returns a view (the logits): nothing here writes into it in place
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    sizes = dict(cfg.mesh)
    mesh = pipeline_run.device_mesh(rank, sizes)
    torch.manual_seed(cfg.seed)
    model = with_head_sharded_attention(GPT(cfg.shape), cfg.shape).to(rank.device)
    params = sum(p.numel() for p in model.parameters())
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], {name: styles[s]() for name, s in TP_PLAN.items()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.1)
    dp = mesh["dp"]
    data = SyntheticTokens(cfg.batch_size * dp.size() * (cfg.steps + 1), cfg.seq_len, cfg.vocab_size, cfg.seed)
    stream = batches(data, batch_size=cfg.batch_size, rank=dp.get_local_rank(), world_size=dp.size(),
                     workers=cfg.workers, seed=cfg.seed, pin_memory=False)

    def forward_backward() -> torch.Tensor:
        x, y = (t.to(rank.device) for t in next(stream))
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        return loss

    clock = record.StepClock(cfg, rank, samples_per_step=cfg.batch_size * dp.size())
    with record.profiling(cfg, rank) as prof:
        for step in range(cfg.steps):
            clock.start()
            if rank.rank == cfg.fail_rank and step == 1:
                raise RuntimeError(f"deliberate failure on rank {rank.rank} at step {step} (--fail-rank)")
            loss = forward_backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            clock.stop(step, loss.item())
            if prof is not None:
                prof.step()
    counter = CommDebugMode()
    with counter:
        forward_backward()
    optimizer.zero_grad(set_to_none=True)
    if rank.is_main:
        counts = comm_counts_by_dim({str(op): n for op, n in counter.get_comm_counts().items()})
        block = layout(mesh=sizes, schedule=None, microbatches=None, stages_per_rank=None, stage_ranks={},
                       params_per_stage={}, stage_weights={}, activation_bytes=None, comm_debug_counts=counts)
        path = record.write_run_json(cfg, rank, clock, model, cfg.workload_name, None, layout=block,
                                     trainable_params=params)
        print(f"{clock.summary()}\nwrote {path}", flush=True)


def main(argv: list[str] | None = None) -> None:
    cfg, summary = parse_config(argv)
    launch(train, cfg, "hybrid", summary)


if __name__ == "__main__":
    main()
