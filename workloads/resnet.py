"""DDP training of a torchvision ResNet under torch.profiler: one trace per rank plus run.json.

Synthetic images by default; real data with --data DIR (an ImageFolder) or --cifar10 DIR (already downloaded).
Every process gets its shard through a DistributedSampler. Batch sizes are per rank.

Commands
  1 GPU (pick it on a bigger node):   CUDA_VISIBLE_DEVICES=0 python -m workloads.resnet --profile
  8 GPUs, one node:                   python -m workloads.resnet --profile                 (one NCCL rank per GPU)
  the same under torchrun:            torchrun --standalone --nproc-per-node 8 -m workloads.resnet --profile
  multi-node (run on every node, NODE_RANK 0..N-1, HEAD = node 0's address, --out on a shared disk):
      torchrun --nnodes 2 --nproc-per-node 8 --node-rank $NODE_RANK --rdzv-backend c10d \\
               --rdzv-endpoint $HEAD:29500 -m workloads.resnet --profile --out /shared/runs/resnet-2x8
  CPU only (gloo, CPU-sized config):  python -m workloads.resnet --profile --nproc 2
                                      (--cpu does the same on a machine with GPUs)

The classic experiments (compare run.json throughput and the traces):
  DDP vs DataParallel:     --mode dp            mixed precision:  --amp bf16   (fp16 adds a GradScaler)
  gradient accumulation:   --accum 4            bucket size:      --bucket-cap-mb 100
  data-loader workers:     --workers 8 --pin-memory               memory format:    --channels-last

Without a GPU the defaults shrink to a CPU-sized run (resnet18, 32x32 images, batch 8, 10 steps), and the first line
printed says which config was chosen. Output: --out (default runs/resnet-<timestamp>/) holds
rank-<r>.pt.trace.json.gz per rank (with --profile) and run.json.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from workloads import training
from workloads.config import ConfigError, TrainConfig, base_parser, build
from workloads.data import SyntheticImages
from workloads.training import Rank

MODELS = ("resnet18", "resnet34", "resnet50", "resnet101")
GPU_DEFAULTS = dict(model="resnet50", image_size=224, batch_size=64, steps=30, workers=4, classes=1000, lr=0.1)
CPU_DEFAULTS = dict(model="resnet18", image_size=32, batch_size=8, steps=10, workers=0, classes=10, lr=0.01)


# ----------------------------------------------------------------------------------------------- config

@dataclass(frozen=True, kw_only=True)
class ResNetConfig(TrainConfig):
    model: str
    image_size: int
    classes: int  # for synthetic data; real data brings its own
    channels_last: bool = False
    data: str | None = None
    cifar10: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model not in MODELS:
            raise ConfigError(f"--model must be one of {MODELS}, got {self.model!r}")
        if self.image_size < 16:
            raise ConfigError(f"--image-size must be >= 16, got {self.image_size}")
        if self.data and self.cifar10:
            raise ConfigError("give --data or --cifar10, not both")
        if self.data and not Path(self.data).is_dir():
            raise ConfigError(f"--data {self.data}: no such folder")
        if self.cifar10 and not (Path(self.cifar10) / "cifar-10-batches-py").is_dir():
            raise ConfigError(f"--cifar10 {self.cifar10}: no cifar-10-batches-py folder in it; "
                              "download CIFAR-10 (python version) there first")


def parse_config(argv: list[str] | None = None) -> tuple[ResNetConfig, str]:
    """The config from the command line, and a line saying which defaults it took."""
    p = base_parser("workloads.resnet", __doc__)
    m = p.add_argument_group("model and data")
    m.add_argument("--model", help=f"one of {', '.join(MODELS)}")
    m.add_argument("--image-size", type=int, help="image side in pixels")
    m.add_argument("--classes", type=int, help="classes of the synthetic data")
    m.add_argument("--channels-last", action="store_true", help="NHWC memory format for model and inputs")
    m.add_argument("--data", help="ImageFolder root (class sub-folders) instead of synthetic images")
    m.add_argument("--cifar10", help="folder holding the downloaded CIFAR-10 (cifar-10-batches-py)")
    args = p.parse_args(argv)
    gpu = torch.cuda.is_available() and not args.cpu
    cfg = build(ResNetConfig, p, args, GPU_DEFAULTS if gpu else CPU_DEFAULTS)
    summary = (f"{cfg.model}, {cfg.image_size}px images, batch {cfg.batch_size} per rank, {cfg.steps} steps"
               f" ({'GPU' if gpu else 'CPU'} defaults; flags override)")
    return cfg, summary


# ------------------------------------------------------------------------------------------------- data

def make_dataset(cfg: ResNetConfig, samples: int) -> torch.utils.data.Dataset:
    """`samples` synthetic images, or an ImageFolder, or CIFAR-10, at cfg.image_size."""
    if cfg.data is None and cfg.cifar10 is None:
        return SyntheticImages(samples, cfg.image_size, cfg.classes, cfg.seed)
    import torchvision  # imported where used: the command line's checks and --help need none of it (1.6 s)

    t = torchvision.transforms
    normalize = t.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    crop = t.RandomResizedCrop(cfg.image_size, antialias=True)
    transform = t.Compose([crop, t.RandomHorizontalFlip(), t.ToTensor(), normalize])
    if cfg.data is not None:
        return torchvision.datasets.ImageFolder(cfg.data, transform=transform)
    return torchvision.datasets.CIFAR10(cfg.cifar10, train=True, download=False, transform=transform)


# ------------------------------------------------------------------------------------ model and training

def build_model(cfg: ResNetConfig) -> nn.Module:
    """The torchvision ResNet, with as many classes as the data, in channels-last with --channels-last."""
    import torchvision

    model = torchvision.models.get_model(cfg.model, num_classes=_classes(cfg))
    return model.to(memory_format=_memory_format(cfg))


def images_to_device(batch: tuple[torch.Tensor, torch.Tensor], cfg: ResNetConfig, rank: Rank):
    """Images (in the model's memory format) and labels on the rank's device."""
    images, labels = batch
    return (images.to(rank.device, non_blocking=True, memory_format=_memory_format(cfg)),
            labels.to(rank.device, non_blocking=True))


def classification_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor],
                        cfg: ResNetConfig) -> torch.Tensor:
    """Cross-entropy of the model's logits against the labels."""
    images, labels = batch
    return nn.functional.cross_entropy(model(images), labels)


def sgd(params, cfg: ResNetConfig) -> torch.optim.Optimizer:
    """SGD with momentum 0.9 and weight decay 5e-5 at --lr."""
    return torch.optim.SGD(params, lr=cfg.lr, momentum=0.9, weight_decay=5e-5)


def _classes(cfg: ResNetConfig) -> int:
    """Classes of the data: real data brings its own (ImageFolder's sub-folders, CIFAR-10's ten)."""
    if cfg.data is not None:
        import torchvision

        return len(torchvision.datasets.folder.find_classes(cfg.data)[0])
    return 10 if cfg.cifar10 is not None else cfg.classes


def _memory_format(cfg: ResNetConfig) -> torch.memory_format:
    return torch.channels_last if cfg.channels_last else torch.contiguous_format


WORKLOAD = training.Workload(name="resnet", model=build_model, dataset=make_dataset, loss=classification_loss,
                             optimizer=sgd, to_device=images_to_device)


def main(argv: list[str] | None = None) -> None:
    cfg, summary = parse_config(argv)
    training.main(WORKLOAD, cfg, summary)


if __name__ == "__main__":
    main()
