"""FSDP2 (`fully_shard`) training of the bundled GPT-style model under torch.profiler: one trace per rank.

Each transformer block is one FSDP unit, and the root (embeddings, final norm, the tied output layer) is another.
Parameters live sharded across ranks: before a unit computes, its parameters are all-gathered; after its backward,
its gradients are reduce-scattered (gloo has no reduce-scatter, so on CPU ranks that is an all-reduce of the full
gradient). The flags move the classic FSDP trade-offs:

  --reshard-after-forward true|false  free each block's gathered parameters after its forward (gather again in
                                      backward) or keep them until backward. The root keeps FSDP's own default,
                                      which never reshards the root after forward.
  --prefetch N                        explicit prefetch: the root and each block ask for the next N blocks' all-gathers
                                      (set_modules_to_forward_prefetch / set_modules_to_backward_prefetch); 0 for none,
                                      which leaves only FSDP's implicit backward prefetch of one unit. On CPU ranks
                                      gathers are issued with async_op=True, else a gloo gather blocks the thread
                                      and no prefetch could overlap compute.
  --mp bf16                           MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32): all-gathers
                                      move half the bytes, gradients are still reduced in float32.

Commands
  1 GPU (pick it on a bigger node):   CUDA_VISIBLE_DEVICES=0 python -m workloads.fsdp --profile
  8 GPUs, one node:                   python -m workloads.fsdp --profile                    (one NCCL rank per GPU)
  the same under torchrun:            torchrun --standalone --nproc-per-node 8 -m workloads.fsdp --profile
  multi-node (run on every node, NODE_RANK 0..N-1, HEAD = node 0's address, --out on a shared disk):
      torchrun --nnodes 2 --nproc-per-node 8 --node-rank $NODE_RANK --rdzv-backend c10d \\
               --rdzv-endpoint $HEAD:29500 -m workloads.fsdp --profile --out /shared/runs/fsdp-2x8
  CPU only (gloo, CPU-sized config):  python -m workloads.fsdp --profile --nproc 2
  the seeded fault (exposed gathers): python -m workloads.fsdp --profile --nproc 2 --prefetch 0 \
                                             --reshard-after-forward true

Sizes and the other flags are those of workloads.gpt (the same model and data). --mode dp is refused: FSDP needs a
process group. Output: --out (default runs/fsdp-<timestamp>/) holds rank-<r>.pt.trace.json.gz per rank (with
--profile) and run.json (its "config" holds the sharding flags; "trainable_params" counts each parameter once,
unpadded).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workloads import gpt, training
from workloads.config import ConfigError, base_parser, build
from workloads.gpt_model import GPT

MP_MODES = ("off", "bf16")
BOOL_FLAGS = {"true": True, "false": False}


@dataclass(frozen=True, kw_only=True)
class FSDPConfig(gpt.GPTConfig):
    reshard_after_forward: bool = True
    prefetch: int = 1
    mp: str = "off"

    @property
    def parallelism(self) -> str:
        return "fsdp"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode != "ddp":
            raise ConfigError("--mode dp cannot shard: FSDP needs a process group; drop --mode")
        if self.prefetch < 0:
            raise ConfigError(f"--prefetch must be >= 0, got {self.prefetch}")
        if self.mp not in MP_MODES:
            raise ConfigError(f"--mp must be one of {MP_MODES}, got {self.mp!r}")


def parse_config(argv: list[str] | None = None) -> tuple[FSDPConfig, str]:
    """The config from the command line, and a line saying which defaults it took."""
    p = base_parser("workloads.fsdp", __doc__)
    m = p.add_argument_group("model")
    for flag, text in (("--vocab-size", "tokens in the vocabulary"), ("--seq-len", "tokens per sequence"),
                       ("--n-layer", "transformer blocks (one FSDP unit each)"), ("--n-head", "attention heads"),
                       ("--n-embd", "channels")):
        m.add_argument(flag, type=int, help=text)
    f = p.add_argument_group("sharding")
    f.add_argument("--reshard-after-forward", choices=list(BOOL_FLAGS), default="true",
                   help="free each block's gathered parameters after forward (true) or keep them for backward")
    f.add_argument("--prefetch", type=int, default=1, help="blocks whose all-gather each block prefetches (0: none)")
    f.add_argument("--mp", choices=MP_MODES, default="off", help="bf16: gather parameters in bfloat16")
    args = p.parse_args(argv)
    args.reshard_after_forward = BOOL_FLAGS[args.reshard_after_forward]
    on_gpu = torch.cuda.is_available() and not args.cpu
    cfg = build(FSDPConfig, p, args, gpt.GPU_DEFAULTS if on_gpu else gpt.CPU_DEFAULTS)
    summary = (f"FSDP2 GPT {cfg.n_layer} blocks x {cfg.n_embd} channels, vocab {cfg.vocab_size},"
               f" {cfg.seq_len} tokens, batch {cfg.batch_size} per rank, {cfg.steps} steps;"
               f" reshard_after_forward={cfg.reshard_after_forward},"
               f" prefetch {cfg.prefetch}, mp {cfg.mp} ({'GPU' if on_gpu else 'CPU'} defaults; flags override)")
    return cfg, summary


# ----------------------------------------------------------------------------------------------- sharding

def shard(model: GPT, cfg: FSDPConfig, rank: training.Rank) -> torch.nn.Module:
    """`fully_shard` each block, then the root; wire the explicit prefetch of --prefetch blocks."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = model.to(rank.device)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if cfg.mp == "bf16" \
        else MixedPrecisionPolicy()
    blocks = list(model.blocks)
    for block in blocks:
        fully_shard(block, reshard_after_forward=cfg.reshard_after_forward, mp_policy=policy)
    fully_shard(model, mp_policy=policy)  # the root: FSDP's default keeps it unsharded between forward and backward
    if cfg.prefetch:
        model.set_modules_to_forward_prefetch(blocks[:cfg.prefetch])  # the root's forward asks for the first blocks
        for i, block in enumerate(blocks):
            block.set_modules_to_forward_prefetch(blocks[i + 1:i + 1 + cfg.prefetch])
            block.set_modules_to_backward_prefetch(blocks[max(0, i - cfg.prefetch):i][::-1])
    if rank.device.type == "cpu":
        # CPU ranks have no streams: a gather issued with async_op=False blocks the training thread until it ends,
        # so a prefetch could never overlap compute. Async gathers are waited for when the unit needs them.
        model._set_unshard_async_op(True)
    return model


# The model, data, loss and optimizer are workloads.gpt's: only the wrapping differs, so DDP and FSDP runs compare.
WORKLOAD = training.Workload(name="fsdp", model=gpt.build_model, wrap=shard, dataset=gpt.make_dataset,
                             loss=gpt.lm_loss, optimizer=gpt.adamw)


def main(argv: list[str] | None = None) -> None:
    cfg, summary = parse_config(argv)
    training.main(WORKLOAD, cfg, summary)


if __name__ == "__main__":
    main()
