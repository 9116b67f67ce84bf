"""The pipeline's pieces: a GPT split into stages, which rank holds which stage, the seeded heavy stage, and the
"layout" block of run.json (what the analysis may cross-check against, and must never need).

Stage s of S holds a contiguous run of the GPT's blocks (`layer_split`); stage 0 adds the token and position
embeddings, stage S-1 the final norm and the output layer (not tied to the embedding: they live on different ranks).
What a non-last stage sends forward (and receives back as its gradient) is the residual stream of one microbatch,
(batch, seq_len, n_embd) float32: `activation_bytes`.

The seeded fault: a stage of weight w applies its blocks w x blocks times in turn (blocks 0, 1, .., 0, 1, ..), with
the same parameters, so its block compute, forward and backward, is w times the unweighted one while its parameters
and the bytes it sends do not change. w x blocks must be a whole number (2 blocks: weights in steps of 0.5).
Under a schedule that splits backward into input and weight gradients (`SPLIT_BACKWARD`), torch's weight-gradient
pass cannot run through parameters used twice ("backward through the graph a second time"): there the passes past
the first w = 1 use copies of the blocks (same initial values), so the stage's parameters grow w times too.
"""

from __future__ import annotations

import copy
import re

import torch
from torch import nn

from workloads.config import ConfigError
from workloads.gpt_model import GPT, Block, GPTShape

SCHEDULES = ("gpipe", "1f1b", "interleaved", "looped_bfs", "interleaved_zb", "zbv", "dualpipev")
MULTI_STAGE = ("interleaved", "looped_bfs", "interleaved_zb", "zbv", "dualpipev")  # several stages on one rank
V_SHAPED = ("zbv", "dualpipev")  # two stages per rank in a V: rank r holds stages r and 2 x ranks - 1 - r
SPLIT_BACKWARD = ("interleaved_zb", "zbv", "dualpipev")  # backward run as I (input grad) and W (weight grad)
_ACTION = re.compile(r"(\d+)(F|B)(\d+)")


def parse_stage_weights(text: str | None) -> tuple[tuple[int, float], ...]:
    """'1=3.0,2=1.5' -> ((1, 3.0), (2, 1.5)): stage index and weight, sorted by stage; '' or None -> ()."""
    if not text:
        return ()
    weights: dict[int, float] = {}
    for item in text.split(","):
        stage, sep, weight = item.strip().partition("=")
        try:
            s, w = int(stage), float(weight)
        except ValueError:
            raise ConfigError(f"--stage-weights wants STAGE=WEIGHT[,STAGE=WEIGHT...], got {text!r}") from None
        if not sep or s < 0 or not w > 0 or s in weights:
            raise ConfigError(f"--stage-weights wants distinct STAGE>=0 with WEIGHT>0, got {item.strip()!r}")
        weights[s] = w
    return tuple(sorted(weights.items()))


def layer_split(n_layer: int, num_stages: int) -> list[int]:
    """Blocks per stage: as even as possible, the earlier stages taking the remainder."""
    if n_layer < num_stages:
        raise ConfigError(f"--n-layer {n_layer} gives no block to some of the {num_stages} stages")
    base, extra = divmod(n_layer, num_stages)
    return [base + (s < extra) for s in range(num_stages)]


def block_passes(blocks: int, weight: float, stage: int) -> int:
    """How many block applications a stage of `blocks` blocks and weight `weight` makes per forward."""
    passes = weight * blocks
    if abs(passes - round(passes)) > 1e-9:
        raise ConfigError(f"--stage-weights {stage}={weight:g}: stage {stage} has {blocks} block(s), so its weight "
                          f"must be a multiple of 1/{blocks}")
    return round(passes)


class PipeStage(nn.Module):
    """One stage cut from a whole `GPT` (so every layout starts from the same initial weights for a seed):
    [embeddings] + its blocks applied `passes` times in turn + [final norm and output layer].

    The output layer of the last stage is a copy of the embedding's initial weights, not tied to it. `copies`: the
    passes past the stage's own blocks apply copies of them (see the module docstring), not the blocks again.
    """

    def __init__(self, gpt: GPT, *, first: bool, last: bool, blocks: range, passes: int, copies: bool = False):
        super().__init__()
        self.first, self.last, self.passes = first, last, passes
        own = [gpt.blocks[i] for i in blocks]
        extra = [copy.deepcopy(own[k % len(own)]) for k in range(len(own), passes)] if copies else []
        self.blocks = nn.ModuleList(own + extra)
        if first:
            self.tok, self.pos = gpt.tok, gpt.pos
        if last:
            self.ln_f = gpt.ln_f
            self.head = nn.Linear(gpt.tok.weight.shape[1], gpt.tok.weight.shape[0], bias=False)
            self.head.weight = nn.Parameter(gpt.tok.weight.detach().clone())
        self.sent_bytes = 0  # bytes of the last activation this stage produced for the next one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            x = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for i in range(self.passes):
            block: Block = self.blocks[i % len(self.blocks)]  # type: ignore[assignment]
            x = block(x)
        if self.last:
            return self.head(self.ln_f(x))
        self.sent_bytes = x.numel() * x.element_size()
        return x


def build_stage(shape: GPTShape, stage: int, num_stages: int, weight: float, seed: int,
                copies: bool = False) -> PipeStage:
    """Stage `stage` of `num_stages`, cut from the GPT that `seed` initialises, with the seeded `weight` (its extra
    passes through copies of its blocks with `copies`)."""
    torch.manual_seed(seed)
    gpt = GPT(shape)
    split = layer_split(shape.n_layer, num_stages)
    start = sum(split[:stage])
    return PipeStage(gpt, first=stage == 0, last=stage == num_stages - 1, blocks=range(start, start + split[stage]),
                     passes=block_passes(split[stage], weight, stage), copies=copies)


def stages_of_rank(schedule: str, pp_rank: int, pp_size: int, stages_per_rank: int) -> list[int]:
    """Stage indices on pipeline rank `pp_rank`: loop style (r, r+p, ..) or, for zbv and dualpipev, the V
    (r, 2p-1-r)."""
    if schedule in V_SHAPED:
        return [pp_rank, 2 * pp_size - 1 - pp_rank]
    return [pp_rank + k * pp_size for k in range(stages_per_rank)]


def stage_to_rank(schedule: str, pp_size: int, stages_per_rank: int) -> dict[str, int]:
    """{stage: position along the pp dimension} for every stage."""
    return {str(s): r for r in range(pp_size) for s in stages_of_rank(schedule, r, pp_size, stages_per_rank)}


def intended_schedule(sched, schedule: str) -> tuple[dict[str, list[str]], dict[str, list[str]] | None]:
    """torch's own action order per pp rank, keyed by the position along pp (idle slots dropped; GPipe's and 1F1B's
    lists end with torch's REDUCE_GRAD), and for the runtime schedules the order with communication (SEND_F, RECV_B,
    UNSHARD, ...), as `str(_Action)` strings.

    torch 2.14's `Schedule1F1B._get_pipeline_order` numbers the last stage's forwards 1..M instead of 0..M-1; GPipe
    and 1F1B run each stage's forwards and backwards in microbatch order, so those are numbered in order here.
    """
    order = sched.pipeline_order if schedule in MULTI_STAGE else sched._get_pipeline_order()
    actions = {str(r): [str(a) for a in acts if a is not None] for r, acts in sorted(order.items())}
    if schedule not in MULTI_STAGE:
        actions = {r: _in_order(acts) for r, acts in actions.items()}
    comms = getattr(sched, "pipeline_order_with_comms", None) if schedule in MULTI_STAGE else None
    with_comms = {str(r): [str(a) for a in acts if a is not None] for r, acts in sorted(comms.items())} \
        if comms else None
    return actions, with_comms


def _in_order(actions: list[str]) -> list[str]:
    seen: dict[tuple[str, str], int] = {}
    out = []
    for a in actions:
        m = _ACTION.fullmatch(a)
        if m:
            key = (m[1], m[2])
            seen[key] = seen.get(key, -1) + 1
            a = f"{m[1]}{m[2]}{seen[key]}"
        out.append(a)
    return out


def mesh_ranks(mesh: dict[str, int]) -> dict[str, list[list[int]]]:
    """The global ranks of each group of each mesh dim, for a row-major mesh over ranks 0..n-1 (dims in order)."""
    dims, sizes = list(mesh), list(mesh.values())
    grid = torch.arange(int(torch.tensor(sizes).prod())).reshape(sizes)
    out = {}
    for i, dim in enumerate(dims):
        moved = grid.movedim(i, -1).reshape(-1, sizes[i])
        out[dim] = sorted(moved.tolist())
    return out


def layout(*, mesh: dict[str, int], schedule: str | None, microbatches: int | None, stages_per_rank: int | None,
           stage_ranks: dict[str, int], params_per_stage: dict[str, int], stage_weights: dict[str, float],
           activation_bytes: int | None, intended: dict | None = None, intended_with_comms: dict | None = None,
           comm_debug_counts: dict | None = None) -> dict:
    """The "layout" block of run.json (names shared with the analysis). `stage_ranks` maps each stage to its position
    along the pp dimension, which is the global rank when the mesh is pp alone; "stage_to_global_ranks" lists the
    global ranks that hold each stage (one per dp replica), "mesh_ranks" the global ranks of each group of each dim.
    "intended_schedule" is keyed, like `stage_ranks`' values, by the position along pp."""
    groups = mesh_ranks(mesh)
    block = {
        "mesh": mesh, "mesh_ranks": groups, "schedule": schedule, "microbatches": microbatches,
        "stages_per_rank": stages_per_rank, "num_stages": len(stage_ranks) or None,
        "stage_to_rank": stage_ranks,
        "stage_to_global_ranks": {s: sorted(g[r] for g in groups["pp"]) for s, r in stage_ranks.items()}
        if "pp" in groups else {},
        "params_per_stage": params_per_stage, "stage_weights": stage_weights,
        "activation_bytes_per_microbatch": activation_bytes, "intended_schedule": intended or {},
    }
    if intended_with_comms:
        block["intended_schedule_with_comms"] = intended_with_comms
    if comm_debug_counts is not None:
        block["comm_debug_counts"] = comm_debug_counts
    return block
