"""Synthetic datasets (deterministic per index, so every run sees the same data) and the per-rank loader."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from workloads.config import ConfigError


class SyntheticImages(Dataset):
    """`length` random images of shape (3, size, size), normalised like real ones, with labels `index % classes`.

    Each sample is generated when asked for, so DataLoader workers have real work to do, as with decoded images.
    `classes` holds class names, as in torchvision's datasets.
    """

    def __init__(self, length: int, size: int, classes: int, seed: int = 0):
        self.length, self.size, self.seed = length, size, seed
        self.classes = [str(c) for c in range(classes)]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        return torch.randn(3, self.size, self.size, generator=g), index % len(self.classes)


class SyntheticTokens(Dataset):
    """`length` random token sequences: input `x` and next-token targets `y`, each `seq_len` long."""

    def __init__(self, length: int, seq_len: int, vocab_size: int, seed: int = 0):
        self.length, self.seq_len, self.vocab_size, self.seed = length, seq_len, vocab_size, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        tokens = torch.randint(self.vocab_size, (self.seq_len + 1,), generator=g)
        return tokens[:-1], tokens[1:]


def batches(dataset: Dataset, *, batch_size: int, rank: int, world_size: int, workers: int,
            pin_memory: bool, seed: int) -> Iterator:
    """Endless batches of this rank's shard of `dataset` (DistributedSampler), reshuffled every epoch."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                        pin_memory=pin_memory, drop_last=True, persistent_workers=workers > 0)
    if len(loader) == 0:
        raise ConfigError(f"{len(dataset)} samples give no batch of {batch_size} on each of {world_size} ranks")
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1
