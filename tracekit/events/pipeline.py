"""A pipeline-parallel rank's schedule as it ran: one block per stage, step, microbatch and phase (F, B, I, W).

Where the blocks come from, best first (``source``):
  ``pp_action``         torch.distributed.pipelining's runtime schedules (interleaved 1F1B, looped BFS, zero bubble,
                        ZBV, DualPipeV) annotate each action ``PP:{stage}{F|B|I|W}{mb}``; SEND/RECV actions only post
                        a transfer (the receive's wait happens inside the next F/B) and make no block. DualPipeV's
                        ``PP:({a};{b})OVERLAP_F_B`` runs its two actions in turn: split at its first autograd op.
  ``gpipe_annotation``  ``ScheduleGPipe``'s ``Forward {i}`` / ``Backward {i}``: no stage index (the rank's place in its
                        pipeline group gives it), and each includes its receive wait.
  ``inferred``          ``Schedule1F1B`` writes nothing: the compute between two P2P calls (``c10d::send``/``recv_``)
                        is one block, forward up to its first autograd op and backward from there; microbatches are
                        numbered in order per phase (both 1F1B and GPipe run each stage's microbatches in order).
A block is the compute that ran inside it: the rank's compute events whose launch (a CPU rank: its start) falls in
the annotation or segment. It starts at its first compute and ends at its last, and ``compute_us`` is their union,
so the receive wait an annotation includes is never compute. The optimizer's ops (``Optimizer.*``) are in no block.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit import intervals as iv

PP_ACTION = re.compile(r"^PP:(\d+)(F|B|I|W)(\d+)$")
# DualPipeV's overlapped pair: one annotation, its two actions run one after the other (forward, then backward).
PP_OVERLAP = re.compile(r"^PP:\((\d+)(F|B|I|W)(\d+);(\d+)(F|B|I|W)(\d+)\)OVERLAP_F_B$")
GPIPE_ACTION = re.compile(r"^(Forward|Backward) (\d+)$")
P2P_CALL = re.compile(r"^(?:c10d::(?:send|recv_|recv_any_source_)|(?:nccl|gloo):(?:send|recv))$")
BACKWARD_OP = re.compile(r"^autograd::engine::evaluate_function|Backward\d*$")
OPTIMIZER_OP = re.compile(r"^Optimizer\.")
# Device time that only moves activations between stages: the stage is not busy during it.
P2P_DEVICE = re.compile(r"(?i)^gloo:(?:send|recv)$|sendrecv|nccl(?:Dev)?Kernel_(?:Send|Recv)")
# The group whose members are the pipeline's ranks, by its description (DeviceMesh's mesh_pp, NCCL's pp_p2p_*).
PP_GROUP = re.compile(r"(?i)(?:^|_)(?:pp|pipe\w*)(?:_|$)")
BLOCK_COLUMNS = ("rank", "stage", "step", "microbatch", "phase", "start_ns", "end_ns", "compute_us", "source")
_MARKS = {"action": PP_ACTION, "overlap": PP_OVERLAP, "gpipe": GPIPE_ACTION, "p2p": P2P_CALL, "backward": BACKWARD_OP,
          "optimizer": OPTIMIZER_OP}


def pipeline_marks(host: pd.DataFrame) -> pd.DataFrame:
    """The host ops and annotations a schedule is read from (``_MARKS``), from a table with rank, name, ts_ns and
    dur_ns (the reader's ops table, or the events table): rank, mark, name (the actions' only: '' for the others),
    start_ns, end_ns, in time order. A rank with neither a PP: action nor a P2P call runs no pipeline: its autograd
    and optimizer ops (a large trace has millions) are not looked at."""
    names = host["name"].astype("category").cat.categories.astype(str)
    usable = (host["dur_ns"] >= 0).to_numpy()
    parts = []
    for mark, pattern in _MARKS.items():
        if mark == "backward" and not parts:
            break  # no action and no transfer
        wanted = names[np.fromiter((pattern.search(n) is not None for n in names), dtype=bool, count=len(names))]
        rows = host[host["name"].isin(wanted).to_numpy() & usable]
        if len(rows) or mark in ("backward", "optimizer"):
            named = rows["name"].astype(str).to_numpy() if mark in ("action", "overlap", "gpipe", "p2p") else ""
            parts.append(pd.DataFrame({"rank": rows["rank"].to_numpy(), "mark": mark, "name": named,
                                       "start_ns": rows["ts_ns"].to_numpy(),
                                       "end_ns": (rows["ts_ns"] + rows["dur_ns"]).to_numpy()}))
    if not parts:
        return pd.DataFrame({"rank": pd.Series(dtype=np.int64), "mark": pd.Series(dtype=object),
                             "name": pd.Series(dtype=object), "start_ns": pd.Series(dtype=np.int64),
                             "end_ns": pd.Series(dtype=np.int64)})
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(["start_ns", "end_ns"], kind="stable", ignore_index=True)


def pipeline_position(pg_config, rank: int) -> tuple[int, int, str] | None:
    """(the rank's place in its pipeline group, the group's size, the group's description), or None where no group
    says: a group described as pipeline (``mesh_pp``, ``pp_p2p_*``), else the only group of two or more ranks."""
    groups = [c for c in pg_config if isinstance(c, dict) and isinstance(c.get("ranks"), list)
              and all(isinstance(r, int) for r in c["ranks"]) and rank in c["ranks"]]
    named = [c for c in groups if PP_GROUP.search(str(c.get("pg_desc", "")))]
    wide = [c for c in groups if len(c["ranks"]) > 1]
    chosen = named[:1] or (wide if len(wide) == 1 else [])
    if not chosen:
        return None
    ranks = sorted(chosen[0]["ranks"])
    return ranks.index(rank), len(ranks), str(chosen[0].get("pg_desc", ""))


def block_source(marks: pd.DataFrame) -> str | None:
    """Where this rank's blocks come from (module docstring), or None: no pipeline on this rank."""
    kinds = set(marks["mark"])
    if kinds & {"action", "overlap"}:
        return "pp_action"
    if "p2p" not in kinds:
        return None  # a Forward/Backward annotation without stage-to-stage transfers is some other loop's
    return "gpipe_annotation" if "gpipe" in kinds else "inferred"


def pipeline_blocks(marks: pd.DataFrame, compute: pd.DataFrame, steps: pd.DataFrame,
                    stage: int | None) -> pd.DataFrame:
    """The blocks (``BLOCK_COLUMNS``) of one rank.

    Args:
      marks: ``pipeline_marks`` of the rank.
      compute: its compute events: start_ns, end_ns and when_ns (the launch, or the start on a CPU rank).
      steps: its steps: step, start_ns, end_ns (a block belongs to the step it starts in; none: step -1).
      stage: the rank's stage from its pipeline group (``pipeline_position``), used where the blocks name none;
        None: unknown (stage -1; inferred blocks then tell the first stage by its transfers, ``_sends_first``).
    """
    source = block_source(marks)
    if source is None or compute.empty:
        return _empty()
    if source == "inferred":
        spans = _inferred_spans(marks, compute, steps, stage == 0 if stage is not None else _sends_first(marks, steps))
    else:
        pattern = PP_ACTION if source == "pp_action" else GPIPE_ACTION
        rows = marks[marks["mark"] == ("action" if source == "pp_action" else "gpipe")]
        parts = rows["name"].str.extract(pattern.pattern)
        if source == "pp_action":
            stage_of, phase, mb = parts[0].astype(np.int64), parts[1], parts[2].astype(np.int64)
        else:
            stage_of = np.full(len(rows), -1 if stage is None else stage, dtype=np.int64)
            phase, mb = parts[0].str[0], parts[1].astype(np.int64)
        spans = pd.DataFrame({"stage": np.asarray(stage_of), "phase": np.asarray(phase), "microbatch": np.asarray(mb),
                              "start_ns": rows["start_ns"].to_numpy(), "end_ns": rows["end_ns"].to_numpy()})
        spans = _fill_spans(pd.concat([spans, _overlap_spans(marks)], ignore_index=True), compute)
    if spans.empty:
        return _empty()
    spans["stage"] = spans["stage"].fillna(-1 if stage is None else stage).astype(np.int64)
    spans["step"] = _step_of(spans["start_ns"].to_numpy(), steps)
    spans["rank"] = int(marks["rank"].iloc[0])
    spans["source"] = source
    spans = spans[list(BLOCK_COLUMNS)].sort_values(["start_ns", "stage"], ignore_index=True)
    return number_microbatches(spans) if source == "inferred" else spans


def _sends_first(marks: pd.DataFrame, steps: pd.DataFrame) -> bool:
    """Whether the rank is a pipeline's first stage, where no group says: in every step its first transfer is a send
    (the first stage has no input to receive; every later stage's first transfer receives its input)."""
    p2p = marks[marks["mark"] == "p2p"]
    first = p2p.groupby(_step_of(p2p["start_ns"].to_numpy(), steps), sort=False)["name"].first()
    return bool(len(first)) and bool(first.str.contains("send").all())


def _overlap_spans(marks: pd.DataFrame) -> pd.DataFrame:
    """Each ``OVERLAP_F_B`` annotation as its two actions' spans, split where its first autograd op starts (its end
    where it has none): torch runs the pair one after the other inside the one annotation."""
    rows = marks[marks["mark"] == "overlap"]
    parts = rows["name"].str.extract(PP_OVERLAP.pattern)
    back = np.sort(marks.loc[marks["mark"] == "backward", "start_ns"].to_numpy())
    start, end = rows["start_ns"].to_numpy(), rows["end_ns"].to_numpy()
    at = np.searchsorted(back, start)
    first_back = np.where(at < len(back), back[np.minimum(at, len(back) - 1)], end) if len(back) else end
    cut = np.clip(first_back, start, end)  # a first autograd op past the annotation's end: all forward
    return pd.DataFrame({"stage": np.concatenate([parts[0], parts[3]]).astype(np.int64),
                         "phase": np.concatenate([parts[1], parts[4]]),
                         "microbatch": np.concatenate([parts[2], parts[5]]).astype(np.int64),
                         "start_ns": np.concatenate([start, cut]), "end_ns": np.concatenate([cut, end])})


def _fill_spans(spans: pd.DataFrame, compute: pd.DataFrame) -> pd.DataFrame:
    """Each annotated span's compute: its first start, last end and union; spans without compute are left out."""
    spans = spans.sort_values("start_ns", kind="stable", ignore_index=True)
    at = np.searchsorted(spans["start_ns"].to_numpy(), compute["when_ns"].to_numpy(), side="right") - 1
    inside = (at >= 0) & (compute["when_ns"].to_numpy() < spans["end_ns"].to_numpy()[np.maximum(at, 0)])
    return _reduce_groups(spans.drop(columns=["start_ns", "end_ns"]), at[inside],
                          compute["start_ns"].to_numpy()[inside], compute["end_ns"].to_numpy()[inside])


def _inferred_spans(marks: pd.DataFrame, compute: pd.DataFrame, steps: pd.DataFrame, first_stage: bool) -> pd.DataFrame:
    """Schedule1F1B: segments of compute between P2P calls (and step starts). In each segment, the compute from its
    first autograd op's start to its last one's end is backward, the compute before it forward; after it, forward
    only on the first stage and when a transfer closes the segment (it runs B(j) then F(i+1) with no transfer
    between; elsewhere it is backward's tail). A forward hands its output on, so a segment without backward is a
    forward block only when a transfer closes it; before its first transfer in a step a stage other than the first
    has no input, so that compute (chunking the targets) is no block either. Microbatches are numbered later
    (``number_microbatches``)."""
    p2p = marks.loc[marks["mark"] == "p2p", "start_ns"].to_numpy().astype(np.int64)
    starts = steps["start_ns"].to_numpy().astype(np.int64)
    edges = np.concatenate([p2p, starts])
    order = np.argsort(edges, kind="stable")
    edges, opens_step = edges[order], np.concatenate([np.zeros(len(p2p), bool), np.ones(len(starts), bool)])[order]
    opt = marks[marks["mark"] == "optimizer"]
    when = compute["when_ns"].to_numpy()
    in_opt = iv.covered_within(iv.merge(opt["start_ns"].to_numpy(), opt["end_ns"].to_numpy()), when, when + 1) > 0
    segment = np.searchsorted(edges, when, side="right")
    back = marks[marks["mark"] == "backward"]
    back_seg = np.searchsorted(edges, back["start_ns"].to_numpy(), side="right")
    region = pd.DataFrame({"seg": back_seg, "lo": back["start_ns"].to_numpy(), "hi": back["end_ns"].to_numpy()})
    region = region.groupby("seg").agg(lo=("lo", "min"), hi=("hi", "max"))
    lo = region["lo"].reindex(segment).to_numpy(dtype=np.float64)
    hi = region["hi"].reindex(segment).to_numpy(dtype=np.float64)
    has_back = ~np.isnan(lo)
    part = np.where(~has_back | (when < np.nan_to_num(lo, nan=np.inf)), 0, np.where(when < hi, 1, 2))
    # A forward block hands its output on: a transfer closes its segment, or (last stage) its backward follows.
    sends_on = np.append(~opens_step, False)[segment]
    part = np.where((part == 2) & ~(first_stage & sends_on), 1, part)  # backward's tail, not a forward
    loose = (part == 0) & ~has_back & ~sends_on
    if not first_stage:  # a segment opened by a step's start, not by a transfer: no input yet
        loose |= (segment > 0) & opens_step[np.maximum(segment - 1, 0)]
    keep = ~in_opt & ~loose
    keys = pd.DataFrame({"segment": segment[keep], "part": part[keep]})
    group = keys.groupby(["segment", "part"], sort=True).ngroup().to_numpy()
    heads = keys.drop_duplicates().sort_values(["segment", "part"], ignore_index=True)  # ngroup's order
    heads = heads.assign(phase=np.where(heads["part"] == 1, "B", "F"), stage=np.nan, microbatch=0)
    out = _reduce_groups(heads, group, compute["start_ns"].to_numpy()[keep], compute["end_ns"].to_numpy()[keep])
    return out.drop(columns=["segment", "part"])


def number_microbatches(blocks: pd.DataFrame) -> pd.DataFrame:
    """Inferred blocks numbered 0, 1, ... per rank, step, stage and phase in time order (annotated ones keep theirs)."""
    inferred = (blocks["source"] == "inferred").to_numpy()
    order = blocks.sort_values("start_ns", kind="stable").groupby(["rank", "step", "stage", "phase"]).cumcount()
    numbered = order.reindex(blocks.index).to_numpy()
    return blocks.assign(microbatch=np.where(inferred, numbered, blocks["microbatch"].to_numpy()).astype(np.int64))


def _reduce_groups(heads: pd.DataFrame, group: np.ndarray, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """``heads`` (one row per group id 0..n-1) with start_ns, end_ns and compute_us (the union of its intervals),
    the groups with no interval left out."""
    if len(group) == 0:
        return heads.iloc[0:0].assign(start_ns=np.int64(0), end_ns=np.int64(0), compute_us=0.0)
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order].astype(np.int64), end[order].astype(np.int64)
    reach = pd.Series(e).groupby(g).cummax().to_numpy()
    prev = np.concatenate([[np.iinfo(np.int64).min], reach[:-1]])
    new_group = np.concatenate([[True], g[1:] != g[:-1]])
    prev = np.where(new_group, np.iinfo(np.int64).min, prev)
    # Each event adds what it reaches past everything of its group before it: the union's length.
    added = np.where(prev == np.iinfo(np.int64).min, e - s, np.maximum(e - np.maximum(s, prev), 0))
    frame = pd.DataFrame({"g": g, "s": s, "e": e, "added": added})
    agg = frame.groupby("g").agg(start_ns=("s", "min"), end_ns=("e", "max"), union_ns=("added", "sum"))
    out = heads.iloc[agg.index.to_numpy()].reset_index(drop=True)
    return out.assign(start_ns=agg["start_ns"].to_numpy(), end_ns=agg["end_ns"].to_numpy(),
                      compute_us=agg["union_ns"].to_numpy() / 1e3)


def _step_of(t: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """The step each time falls in (from a step's start to the next's); -1 before the first or without steps."""
    if steps.empty:
        return np.full(len(t), -1, dtype=np.int64)
    ordered = steps.sort_values("start_ns")
    at = np.searchsorted(ordered["start_ns"].to_numpy(), t, side="right") - 1
    return np.where(at >= 0, ordered["step"].to_numpy()[np.maximum(at, 0)], -1).astype(np.int64)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"rank": pd.Series(dtype=np.int64), "stage": pd.Series(dtype=np.int64),
                         "step": pd.Series(dtype=np.int64), "microbatch": pd.Series(dtype=np.int64),
                         "phase": pd.Series(dtype=object), "start_ns": pd.Series(dtype=np.int64),
                         "end_ns": pd.Series(dtype=np.int64), "compute_us": pd.Series(dtype=np.float64),
                         "source": pd.Series(dtype=object)})
