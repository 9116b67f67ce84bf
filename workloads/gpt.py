"""DDP training of a small GPT-style language model on synthetic tokens under torch.profiler: one trace per rank.

Communication-heavy on purpose: the tied token embedding (vocab x n_embd) is most of the parameters, so every step
all-reduces a large gradient for little compute, and its overlap picture differs from the ResNet's. Batch sizes are
per rank, in sequences of --seq-len tokens.

Commands
  1 GPU (pick it on a bigger node):   CUDA_VISIBLE_DEVICES=0 python -m workloads.gpt --profile
  8 GPUs, one node:                   python -m workloads.gpt --profile                    (one NCCL rank per GPU)
  the same under torchrun:            torchrun --standalone --nproc-per-node 8 -m workloads.gpt --profile
  multi-node (run on every node, NODE_RANK 0..N-1, HEAD = node 0's address, --out on a shared disk):
      torchrun --nnodes 2 --nproc-per-node 8 --node-rank $NODE_RANK --rdzv-backend c10d \\
               --rdzv-endpoint $HEAD:29500 -m workloads.gpt --profile --out /shared/runs/gpt-2x8
  CPU only (gloo, CPU-sized config):  python -m workloads.gpt --profile --nproc 2
                                      (--cpu does the same on a machine with GPUs)

The classic experiments: --mode dp, --amp bf16, --accum 4, --bucket-cap-mb 100 (see workloads.resnet).

On a GPU the default is GPT-2 small (12 layers, 768 channels, 50304 tokens, 1024 positions); without one it shrinks to
2 layers, 128 channels, 16384 tokens, 64 positions, and the first line printed says which config was chosen.
Output: --out (default runs/gpt-<timestamp>/) holds rank-<r>.pt.trace.json.gz per rank (with --profile) and run.json.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from workloads import training
from workloads.config import ConfigError, TrainConfig, base_parser, build
from workloads.data import SyntheticTokens
from workloads.gpt_model import GPT, GPTShape

GPU_DEFAULTS = dict(vocab_size=50304, seq_len=1024, n_layer=12, n_head=12, n_embd=768,
                    batch_size=8, steps=30, workers=2, lr=6e-4)
CPU_DEFAULTS = dict(vocab_size=16384, seq_len=64, n_layer=2, n_head=4, n_embd=128,
                    batch_size=8, steps=10, workers=0, lr=6e-4)


# ----------------------------------------------------------------------------------------------- config

@dataclass(frozen=True, kw_only=True)
class GPTConfig(TrainConfig):
    vocab_size: int
    seq_len: int
    n_layer: int
    n_head: int
    n_embd: int

    def __post_init__(self) -> None:
        super().__post_init__()
        sizes = dict(vocab_size=self.vocab_size, seq_len=self.seq_len, n_layer=self.n_layer,
                     n_head=self.n_head, n_embd=self.n_embd)
        for name, value in sizes.items():
            if value < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        if self.n_embd % self.n_head:
            raise ConfigError(f"--n-embd {self.n_embd} is not a multiple of --n-head {self.n_head}")

    @property
    def shape(self) -> GPTShape:
        return GPTShape(vocab_size=self.vocab_size, seq_len=self.seq_len, n_layer=self.n_layer,
                        n_head=self.n_head, n_embd=self.n_embd)


def parse_config(argv: list[str] | None = None) -> tuple[GPTConfig, str]:
    """The config from the command line, and a line saying which defaults it took."""
    p = base_parser("workloads.gpt", __doc__)
    m = p.add_argument_group("model")
    m.add_argument("--vocab-size", type=int, help="tokens in the vocabulary (the embedding's rows)")
    m.add_argument("--seq-len", type=int, help="tokens per sequence")
    m.add_argument("--n-layer", type=int, help="transformer blocks")
    m.add_argument("--n-head", type=int, help="attention heads")
    m.add_argument("--n-embd", type=int, help="channels")
    args = p.parse_args(argv)
    gpu = torch.cuda.is_available() and not args.cpu
    cfg = build(GPTConfig, p, args, GPU_DEFAULTS if gpu else CPU_DEFAULTS)
    summary = (f"GPT {cfg.n_layer} layers x {cfg.n_embd} channels, vocab {cfg.vocab_size}, {cfg.seq_len} tokens,"
               f" batch {cfg.batch_size} per rank, {cfg.steps} steps"
               f" ({'GPU' if gpu else 'CPU'} defaults; flags override)")
    return cfg, summary


# ------------------------------------------------------------------------------------ model and training

def build_model(cfg: GPTConfig) -> torch.nn.Module:
    """The GPT of the configured shape."""
    return GPT(cfg.shape)


def make_dataset(cfg: GPTConfig, samples: int) -> SyntheticTokens:
    """`samples` synthetic token sequences."""
    return SyntheticTokens(samples, cfg.seq_len, cfg.vocab_size, cfg.seed)


def lm_loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor], cfg: GPTConfig) -> torch.Tensor:
    """Next-token cross-entropy over every position."""
    x, y = batch
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())


def adamw(params, cfg: GPTConfig) -> torch.optim.Optimizer:
    """AdamW at --lr with weight decay 0.1."""
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.1)


WORKLOAD = training.Workload(name="gpt", model=build_model, dataset=make_dataset, loss=lm_loss, optimizer=adamw)


def main(argv: list[str] | None = None) -> None:
    cfg, summary = parse_config(argv)
    training.main(WORKLOAD, cfg, summary)


if __name__ == "__main__":
    main()
