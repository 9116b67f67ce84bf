"""Pipeline-parallel training (torch.distributed.pipelining) of the bundled GPT-style model under torch.profiler:
the model is cut into stages, each rank runs its stages, and activations and their gradients go between neighbouring
stages as send/recv. One trace per rank.

  --schedule gpipe|1f1b|interleaved|looped_bfs|interleaved_zb|zbv|dualpipev
                                         ScheduleGPipe, Schedule1F1B (one stage per rank); ScheduleInterleaved1F1B,
                                         ScheduleLoopedBFS, ScheduleInterleavedZeroBubble (--stages-per-rank V >= 2,
                                         stage s on rank s mod ranks); ScheduleZBVZeroBubble, ScheduleDualPipeV (two
                                         stages per rank in a V: rank r holds stages r and 2 x ranks - 1 - r;
                                         DualPipeV needs --microbatches >= 2 x ranks)
  --microbatches M                       each optimizer step is M microbatches of --batch-size sequences
  --stages-per-rank V                    stages = ranks x V; the --n-layer blocks are split as evenly as possible
  --stage-weights 1=3.0[,2=1.5]          the seeded fault: stage 1 applies its blocks 3 times in turn (same weights),
                                         so its block compute, forward and backward, is 3x; its parameters and the
                                         bytes it sends do not change. weight x blocks must be whole.
                                         (interleaved_zb, zbv, dualpipev: the extra passes use copies of the
                                         blocks, as torch's weight-gradient pass cannot reuse parameters)

Stage 0 holds the embeddings, the last stage the final norm, the output layer (untied) and the loss. What a stage
sends is one microbatch's residual stream, --batch-size x --seq-len x --n-embd float32 values, forward as activation
and backward as its gradient. The loss lives on the last stage only, so the progress line shows it as n/a.

Commands
  4 GPUs, one node:                   python -m workloads.pipeline --profile          (one NCCL rank per GPU)
  the same under torchrun:            torchrun --standalone --nproc-per-node 4 -m workloads.pipeline --profile
  multi-node: as workloads.gpt, with -m workloads.pipeline
  CPU only (gloo, CPU-sized config):  python -m workloads.pipeline --profile --nproc 4
                                      (--cpu does the same on a machine with GPUs)
  the seeded fault (a heavy stage):   python -m workloads.pipeline --profile --nproc 4 --stage-weights 1=3.0
  interleaved, 2 stages per rank:     python -m workloads.pipeline --profile --nproc 2 --schedule interleaved \\
                                             --stages-per-rank 2
  pipeline x data parallel (FSDP2):   see workloads.hybrid --mesh pp=2,dp=2

On a GPU the default is GPT-2 small's widths with 16 blocks (so 8 ranks x 2 stages have one each), 4 sequences per
microbatch; without one it shrinks to 4 blocks x 128 channels, vocab 256, 64 tokens, 4 sequences per microbatch, and
the first line printed says which config was chosen. Sizes are workloads.gpt's flags; --batch-size is sequences per
microbatch. --accum, --amp, --mode dp and --straggler-* are refused (microbatches are the pipeline's accumulation;
--stage-weights is its seeded fault).
Output: --out (default runs/pipeline-<timestamp>/) holds rank-<r>.pt.trace.json.gz per rank (with --profile) and
run.json, whose "layout" holds the mesh, schedule, microbatches, stage-to-rank map, parameters per stage, the seeded
weights, the bytes one microbatch's activation takes ("activation_bytes_per_microbatch", measured on the tensor),
and torch's intended action order per rank ("intended_schedule", from the schedule object).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workloads import gpt, pipeline_run
from workloads.common import main as launch
from workloads.config import ConfigError, base_parser, build
from workloads.stages import MULTI_STAGE, SCHEDULES, V_SHAPED, parse_stage_weights

GPU_DEFAULTS = {**gpt.GPU_DEFAULTS, "n_layer": 16, "batch_size": 4, "steps": 20}
CPU_DEFAULTS = dict(vocab_size=256, seq_len=64, n_layer=4, n_head=4, n_embd=128, batch_size=4, steps=6, workers=0,
                    lr=6e-4)


@dataclass(frozen=True, kw_only=True)
class PipelineConfig(gpt.GPTConfig):
    schedule: str = "1f1b"
    microbatches: int = 8
    stages_per_rank: int = 1
    stage_weights: tuple[tuple[int, float], ...] = ()
    mesh: tuple[tuple[str, int], ...] = ()  # (): one pp dimension over every rank; workloads.hybrid sets it

    @property
    def parallelism(self) -> str:
        return "pipeline"

    @property
    def workload_name(self) -> str:
        return "pipeline"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"--schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.microbatches < 1 or self.stages_per_rank < 1:
            raise ConfigError(f"--microbatches and --stages-per-rank must be >= 1, got {self.microbatches} and "
                              f"{self.stages_per_rank}")
        if self.schedule not in MULTI_STAGE and self.stages_per_rank != 1:
            raise ConfigError(f"--schedule {self.schedule} holds one stage per rank; --stages-per-rank "
                              f"{self.stages_per_rank} needs --schedule interleaved (or zbv, 2)")
        if self.schedule in V_SHAPED and self.stages_per_rank != 2:
            raise ConfigError(f"--schedule {self.schedule} holds exactly 2 stages per rank, got --stages-per-rank "
                              f"{self.stages_per_rank}")
        if self.schedule in MULTI_STAGE and self.stages_per_rank < 2:
            raise ConfigError(f"--schedule {self.schedule} needs --stages-per-rank >= 2")
        for flag, bad in (("--accum", self.accum != 1), ("--amp", self.amp != "off"), ("--mode dp", self.mode != "ddp"),
                          ("--straggler-rank", self.straggler_rank is not None)):
            if bad:
                raise ConfigError(f"{flag} is not supported by the pipeline workloads (use --microbatches, float32, "
                                  "a process group, --stage-weights)")

    def pp_size(self, world: int) -> int:
        """Ranks along the pipeline: the mesh's pp size, or every rank."""
        return dict(self.mesh).get("pp", world) if self.mesh else world

    def check_world(self, world: int) -> None:
        """What can only be checked once the world size is known: every seeded stage exists."""
        stages = self.pp_size(world) * self.stages_per_rank
        if stages < 2:
            raise ConfigError(f"a pipeline needs >= 2 stages; {world} rank(s) x {self.stages_per_rank} gives {stages}")
        for s, _ in self.stage_weights:
            if s >= stages:
                raise ConfigError(f"--stage-weights names stage {s}, but there are {stages} stages (0-{stages - 1})")


def add_pipeline_flags(p) -> None:
    """The model and pipeline flags (shared with workloads.hybrid)."""
    m = p.add_argument_group("model")
    for flag, text in (("--vocab-size", "tokens in the vocabulary"), ("--seq-len", "tokens per sequence"),
                       ("--n-layer", "transformer blocks, split over the stages"), ("--n-head", "attention heads"),
                       ("--n-embd", "channels")):
        m.add_argument(flag, type=int, help=text)
    q = p.add_argument_group("pipeline")
    q.add_argument("--schedule", choices=SCHEDULES, default="1f1b", help="torch.distributed.pipelining schedule")
    q.add_argument("--microbatches", type=int, default=8, help="microbatches per optimizer step")
    q.add_argument("--stages-per-rank", type=int, default=1, help="stages each rank holds (interleaved: >= 2)")
    q.add_argument("--stage-weights", default="", help="seeded heavy stages, e.g. 1=3.0: stage 1 computes 3x")


def parse_config(argv: list[str] | None = None) -> tuple[PipelineConfig, str]:
    """The config from the command line, and a line saying which defaults it took."""
    p = base_parser("workloads.pipeline", __doc__)
    add_pipeline_flags(p)
    args = p.parse_args(argv)
    try:
        args.stage_weights = parse_stage_weights(args.stage_weights)
    except ConfigError as e:
        p.error(str(e))
    gpu = torch.cuda.is_available() and not args.cpu
    cfg = build(PipelineConfig, p, args, GPU_DEFAULTS if gpu else CPU_DEFAULTS)
    return cfg, describe(cfg, gpu)


def describe(cfg: PipelineConfig, gpu: bool) -> str:
    weights = ", ".join(f"stage {s} x{w:g}" for s, w in cfg.stage_weights) or "no seeded weight"
    return (f"pipeline {cfg.schedule}, {cfg.microbatches} microbatches of {cfg.batch_size}, {cfg.stages_per_rank}"
            f" stage(s) per rank, {weights}; GPT {cfg.n_layer} layers x {cfg.n_embd} channels, vocab"
            f" {cfg.vocab_size}, {cfg.seq_len} tokens, {cfg.steps} steps ({'GPU' if gpu else 'CPU'} defaults;"
            " flags override)")


def main(argv: list[str] | None = None) -> None:
    cfg, summary = parse_config(argv)
    launch(pipeline_run.train, cfg, "pipeline", summary)


if __name__ == "__main__":
    main()
