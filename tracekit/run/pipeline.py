"""The run's pipeline: every rank's stage x step rows and blocks joined, the schedule that ran, its theory, the
stages' imbalance, and the order torch intended (run.json's ``layout``, a cross-check only).

The schedule is read from the blocks: W or I blocks: ``zero_bubble``; a rank holding several stages:
``interleaved``, or ``looped_bfs`` where every rank runs all its forwards before any backward; one stage per rank:
``gpipe`` where every rank runs all its forwards first (or GPipe's own annotations say so), else ``1f1b``. With p
stages (v per rank) and m microbatches of equal time, the schedules' papers give the bubble's share of the step:
(p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v m+p-1) for interleaved 1F1B; zero-bubble and looped-BFS schedules get
none here (NaN, with a note).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.run.pipeschema import PIPELINE_BLOCK_COLUMNS, PIPELINE_COLUMNS

_ACTION = re.compile(r"^(\d+)(F|B|I|W)(\d+)$")
_OVERLAP = re.compile(r"^\((\d+[FBIW]\d+);(\d+[FBIW]\d+)\)OVERLAP_F_B$")


def of_ranks(results, shift: dict[int, int], origin_ns: int, workload=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``pipeline_tables`` of the ranks' results (``RankResult``), with the layout of ``workload`` (run.json)."""
    layout = workload.extra.get("layout") if workload is not None else None
    rows, blocks = ([r.pipeline for r in results if len(r.pipeline)], [r.pipeline_blocks for r in results
                                                                          if len(r.pipeline_blocks)])
    return pipeline_tables(pd.concat(rows, ignore_index=True) if rows else None,
                           pd.concat(blocks, ignore_index=True) if blocks else None, shift, origin_ns,
                           layout if isinstance(layout, dict) else None)


def pipeline_tables(rows: pd.DataFrame, blocks: pd.DataFrame, shift: dict[int, int], origin_ns: int,
                    layout: dict | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(``summary.pipeline``, ``summary.pipeline_blocks``) from the ranks' stacked ``bubble.stage_steps`` rows and
    ``pipeline.pipeline_blocks`` (absolute ns), put on the run's clock (``shift``, ``origin_ns``). ``layout``:
    run.json's, or None."""
    if rows is None or rows.empty or blocks is None or blocks.empty:
        return _empty(PIPELINE_COLUMNS), _empty(PIPELINE_BLOCK_COLUMNS)
    moved = blocks["rank"].map(shift).fillna(0).to_numpy(dtype=np.int64)
    grid = blocks.assign(start_us=(blocks["start_ns"].to_numpy() - moved - origin_ns) / 1e3,
                         end_us=(blocks["end_ns"].to_numpy() - moved - origin_ns) / 1e3)
    grid = grid[list(PIPELINE_BLOCK_COLUMNS)].sort_values(["step", "stage", "start_us"], ignore_index=True)
    facts = schedule_facts(grid)
    out = rows.assign(schedule=facts["schedule"], stages=facts["stages"], stages_per_rank=facts["stages_per_rank"],
                      theory_bubble_pct=theory_bubble_pct(facts["schedule"], facts["stages"],
                                                          facts["stages_per_rank"], facts["microbatches"]))
    per_stage = microbatch_compute_us(grid, out)
    out["microbatch_compute_us"] = out["stage"].map(per_stage).to_numpy(dtype=np.float64)
    out["imbalance_ratio"] = out["stage"].map(imbalance_ratio(per_stage)).to_numpy(dtype=np.float64)
    out["order_agreement_pct"] = _agreement(grid, out, layout)
    out["note"] = _notes(out, layout)
    return out[list(PIPELINE_COLUMNS)].sort_values(["step", "stage", "rank"], ignore_index=True), grid


def schedule_facts(blocks: pd.DataFrame) -> dict:
    """schedule, stages (p), stages_per_rank (v) and microbatches (m) of the run's blocks (``pipeline_blocks``)."""
    known = blocks[blocks["stage"] >= 0]
    v = int(known.groupby("rank")["stage"].nunique().max()) if len(known) else 1
    n_stages = int(known["stage"].nunique())
    m = int(known[known["phase"] == "F"].groupby(["step", "stage"])["microbatch"].nunique().median()) \
        if (known["phase"] == "F").any() else 0
    if blocks["phase"].isin(["I", "W"]).any():
        schedule = "zero_bubble"
    elif v > 1:
        schedule = "looped_bfs" if _all_forward_first(blocks) else "interleaved"
    elif (blocks["source"] == "gpipe_annotation").all() or _all_forward_first(blocks):
        schedule = "gpipe"
    else:
        schedule = "1f1b"
    return {"schedule": schedule, "stages": max(n_stages // max(v, 1), 1) if n_stages else 0, "stages_per_rank": v,
            "microbatches": m}


def _all_forward_first(blocks: pd.DataFrame) -> bool:
    """Whether on every rank and step every forward starts before the first backward."""
    last_f = blocks["start_us"].where(blocks["phase"] == "F").groupby([blocks["rank"], blocks["step"]]).max()
    first_b = blocks["start_us"].where(blocks["phase"] != "F").groupby([blocks["rank"], blocks["step"]]).min()
    both = pd.concat([last_f, first_b], axis=1).dropna()
    return bool((both.iloc[:, 0] < both.iloc[:, 1]).all())


def theory_bubble_pct(schedule: str, p: int, v: int, m: int) -> float:
    """The schedule's bubble share of the step (%) for p stages, v per rank, m microbatches; NaN without a form.

    >>> round(theory_bubble_pct("1f1b", 4, 1, 8), 2), round(theory_bubble_pct("interleaved", 2, 2, 8), 2)
    (27.27, 5.88)
    """
    if p < 1 or m < 1 or schedule not in ("gpipe", "1f1b", "interleaved"):
        return float("nan")
    slots = (v if schedule == "interleaved" else 1) * m + p - 1
    return (p - 1) / slots * 100


def microbatch_compute_us(blocks: pd.DataFrame, rows: pd.DataFrame) -> pd.Series:
    """Per stage: what one microbatch costs it, over the window's steps: the lower quartile of its microbatches'
    forward compute plus that of their backward compute (a microbatch's B block, or its I and W blocks together:
    DualPipeV runs some microbatches as B and others as I + W on one stage, and a first stage's I computes nothing,
    its W doing the whole backward). A block's compute includes any time the host ran something else (a time-shared
    CPU rank), which only ever adds: the lower quartile reads through it where a mean or a sum would not, and
    equals them where the blocks are alike."""
    kept = rows.loc[rows["in_window"].astype(bool), ["rank", "step"]].drop_duplicates()
    mine = blocks.merge(kept, on=["rank", "step"]) if len(kept) else blocks
    mine = mine[mine["stage"] >= 0]
    mine = mine.assign(part=np.where(mine["phase"] == "F", "F", "B"))
    per_microbatch = mine.groupby(["stage", "rank", "step", "microbatch", "part"])["compute_us"].sum()
    return per_microbatch.groupby(level=["stage", "part"]).quantile(0.25).groupby(level="stage").sum()


def imbalance_ratio(per_stage: pd.Series) -> pd.Series:
    """Per stage: its microbatch compute over the median of the other stages'; NaN with one stage or none."""
    values = per_stage.to_numpy(dtype=np.float64)
    others = [np.median(np.delete(values, i)) if len(values) > 1 else np.nan for i in range(len(values))]
    with np.errstate(divide="ignore", invalid="ignore"):
        return pd.Series(np.where(np.asarray(others) > 0, values / np.asarray(others), np.nan), index=per_stage.index)


def _agreement(blocks: pd.DataFrame, rows: pd.DataFrame, layout: dict | None) -> np.ndarray:
    """Per row: % of its rank's blocks of the step at the position run.json's intended order puts them (of the
    longer of the two lists). An intended action with no block (it computed nothing: ZBV's first stage's ``I``, its
    input needing no gradient) is left out of the order, so it does not shift every later block one place."""
    intended = (layout or {}).get("intended_schedule") if isinstance(layout, dict) else None
    if not isinstance(intended, dict):
        return np.full(len(rows), np.nan)
    # torch keys its order by the rank's place along the pipeline, which is its lowest stage (stage s of an
    # interleaved schedule runs on place s mod p, of a V-shaped one on s or 2p-1-s); a global rank only when pp is alone.
    place = blocks.groupby("rank")["stage"].min()
    scores = {}
    for (rank, step), group in blocks.sort_values("start_us").groupby(["rank", "step"]):  # one per rank and step
        ran = (group["stage"].astype(str) + group["phase"] + group["microbatch"].astype(str)).tolist()
        want = [a for a in _expanded(intended.get(str(place[rank]), [])) if _ACTION.match(a)]
        if want:
            kept = set(ran)
            want = [a for a in want if a in kept]
            same = sum(a == b for a, b in zip(want, ran))
            scores[(rank, step)] = same / max(len(want), len(ran)) * 100
    keys = list(zip(rows["rank"], rows["step"]))
    return np.array([scores.get(k, np.nan) for k in keys], dtype=np.float64)


def _expanded(actions) -> list[str]:
    """The intended actions with DualPipeV's ``(0F3;3B1)OVERLAP_F_B`` as its two actions in the order they run (the
    blocks split it so, ``events.pipeline``); other entries as they are, non-strings left out."""
    out: list[str] = []
    for a in actions if isinstance(actions, list) else []:
        pair = _OVERLAP.match(a) if isinstance(a, str) else None
        out += [pair[1], pair[2]] if pair else [a] if isinstance(a, str) else []
    return out


def _notes(rows: pd.DataFrame, layout: dict | None) -> list[str]:
    """Per row: why its theory or stage is unknown, and where run.json's layout disagrees."""
    notes = [[] for _ in range(len(rows))]
    schedule = rows["schedule"].to_numpy()
    stage, rank = rows["stage"].to_numpy(), rows["rank"].to_numpy()
    layout = layout if isinstance(layout, dict) else {}
    # stage -> global ranks; stage_to_rank is the place along the pipeline dimension, a rank only when pp is alone
    to_ranks = layout.get("stage_to_global_ranks")
    if not isinstance(to_ranks, dict) and isinstance(layout.get("stage_to_rank"), dict) and \
            set((layout.get("mesh") or {"pp": 0}).keys()) <= {"pp"}:
        to_ranks = {k: [r] for k, r in layout["stage_to_rank"].items()}
    intended = layout.get("schedule")
    for i in range(len(rows)):  # a few rows per step
        if schedule[i] in ("zero_bubble", "looped_bfs"):
            notes[i].append(f"{schedule[i].replace('_', ' ')} schedule: no closed-form bubble to compare with")
        if stage[i] < 0:
            notes[i].append("stage unknown: no PP: action names it and no pipeline group in pg_config")
        elif isinstance(to_ranks, dict) and isinstance(to_ranks.get(str(stage[i])), list) \
                and rank[i] not in to_ranks[str(stage[i])]:
            notes[i].append(f"run.json puts stage {stage[i]} on rank(s) {to_ranks[str(stage[i])]}")
        if isinstance(intended, str) and _schedule_kind(intended) != schedule[i]:
            notes[i].append(f"run.json's schedule is {intended}; the blocks read as {schedule[i]}")
    return ["; ".join(n) for n in notes]


def _schedule_kind(name: str) -> str:
    """run.json's schedule name (torch's class, or the workload's flag) as the kinds read from the blocks."""
    low = name.lower().replace("schedule", "")
    if "zb" in low or "zero" in low or "dualpipe" in low:
        return "zero_bubble"
    if "bfs" in low:
        return "looped_bfs"
    return "interleaved" if "interleaved" in low else "1f1b" if "1f1b" in low else low


def _empty(columns) -> pd.DataFrame:
    return pd.DataFrame(columns=list(columns))
