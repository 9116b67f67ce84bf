"""A small GPT-style decoder language model (after nanoGPT), with the token embedding tied to the output layer.

No torch.distributed here: the harness wraps the model. The tied embedding is the largest tensor by far, which makes
the workload communication-heavy: its gradient is all-reduced every step while the blocks are cheap to compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True, kw_only=True)
class GPTShape:
    """Sizes: `vocab_size` tokens, `seq_len` positions, `n_layer` blocks of `n_head` heads over `n_embd` channels."""

    vocab_size: int
    seq_len: int
    n_layer: int
    n_head: int
    n_embd: int

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")


class CausalSelfAttention(nn.Module):
    def __init__(self, shape: GPTShape):
        super().__init__()
        self.n_head = shape.n_head
        self.qkv = nn.Linear(shape.n_embd, 3 * shape.n_embd)
        self.proj = nn.Linear(shape.n_embd, shape.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, shape: GPTShape):
        super().__init__()
        self.ln1 = nn.LayerNorm(shape.n_embd)
        self.attn = CausalSelfAttention(shape)
        self.ln2 = nn.LayerNorm(shape.n_embd)
        self.mlp = nn.Sequential(nn.Linear(shape.n_embd, 4 * shape.n_embd), nn.GELU(),
                                 nn.Linear(4 * shape.n_embd, shape.n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token ids (batch, seq_len) -> next-token logits (batch, seq_len, vocab_size)."""

    def __init__(self, shape: GPTShape):
        super().__init__()
        self.tok = nn.Embedding(shape.vocab_size, shape.n_embd)
        self.pos = nn.Embedding(shape.seq_len, shape.n_embd)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.n_layer))
        self.ln_f = nn.LayerNorm(shape.n_embd)
        self.head = nn.Linear(shape.n_embd, shape.vocab_size, bias=False)
        self.head.weight = self.tok.weight  # tied: one tensor, one gradient to all-reduce
        self.apply(_init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):  # residual outputs, as in GPT-2
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * shape.n_layer))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _init(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


class HeadShardedAttention(nn.Module):
    """`CausalSelfAttention` with separate q, k and v projections, for tensor parallelism.

    Column-sharding a fused qkv layer would cut across q, k and v; with three layers each shard holds whole heads.
    The head count is read from the (possibly sharded) projection's output, so the same code runs on a full layer and
    on a ColwiseParallel shard of it. Same parameter count and FLOPs as `CausalSelfAttention`.
    """

    def __init__(self, shape: GPTShape):
        super().__init__()
        self.head_dim = shape.n_embd // shape.n_head
        self.q, self.k, self.v = (nn.Linear(shape.n_embd, shape.n_embd) for _ in range(3))
        self.proj = nn.Linear(shape.n_embd, shape.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)
        heads = q.shape[-1] // self.head_dim  # n_head, or n_head / tp on a shard
        q, k, v = (z.view(b, t, heads, self.head_dim).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, heads * self.head_dim))


def with_head_sharded_attention(model: GPT, shape: GPTShape) -> GPT:
    """`model` with each block's attention replaced by a freshly initialised `HeadShardedAttention` (GPT-2 init)."""
    for block in model.blocks:
        block.attn = HeadShardedAttention(shape)
        block.attn.apply(_init)
        nn.init.normal_(block.attn.proj.weight, std=0.02 / math.sqrt(2 * shape.n_layer))
    return model
