"""The pipeline's findings: the bubble against the schedule's theory (``pipeline_bubble``) and the slowest stage
(``stage_imbalance``), from ``summary.pipeline`` (``tracekit.run.pipeline``).

A stage's weight is what one microbatch costs it (``run.pipeline.microbatch_compute_us``). What a fix saves is
predicted afterwards, by ``predict.predicted.annotate_findings``: ``balanced_stages`` (a replay) for the slowest
stage, ``microbatches_x2`` (the schedule simulated) for the bubble. The evidence also keeps a closed-form estimate
of the rebalancing: with equal microbatches a pipeline runs at its slowest stage's pace, v·m + p − 1 slots of it
per step (m microbatches, p stages, v per rank), so bringing the slowest stage's microbatch cost down to the next
slowest's saves about (v·m + p − 1) × their difference, at most the step.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracekit import fmt
from tracekit.findings.finding import Finding, by_severity, severity
from tracekit.run.pipeline import theory_bubble_pct

BUBBLE_THRESHOLDS = (0.15, 0.40)  # share of the step a stage idles
IMBALANCE_THRESHOLDS = (0.20, 0.50)  # how much more the slowest stage computes than the median of the others


def merged(findings: tuple, pipeline: pd.DataFrame) -> tuple[Finding, ...]:
    """``findings`` and the pipeline's together, most severe first."""
    return by_severity(list(findings) + list(find(pipeline)))


def find(pipeline: pd.DataFrame) -> tuple[Finding, ...]:
    """The pipeline findings of a run; none without pipeline rows."""
    if pipeline is None or pipeline.empty:
        return ()
    rows = pipeline[pipeline["in_window"].astype(bool)]
    rows = rows if len(rows) else pipeline
    return tuple(f for f in (_bubble(rows), _imbalance(rows)) if f is not None)


def _bubble(rows: pd.DataFrame) -> Finding | None:
    per_rank = rows.drop_duplicates(["rank", "step"])  # the bubble columns are the rank's
    measured = float(per_rank["bubble_pct"].mean())
    level = severity(measured / 100, BUBBLE_THRESHOLDS)
    if level is None:
        return None
    theory = float(rows["theory_bubble_pct"].mean())
    schedule, p, v = str(rows["schedule"].iloc[0]), int(rows["stages"].iloc[0]), int(rows["stages_per_rank"].iloc[0])
    m = int(rows["microbatches"].median())
    parts = {k: float(per_rank[f"{k}_us"].mean()) for k in ("fill", "wait", "drain")}
    stages = f"{p} stages" if v == 1 else f"{p * v} stages on {p} ranks"
    said = (f"the {schedule} schedule's own bubble with {stages} and {m} microbatches is {theory:.0f}%"
            if not math.isnan(theory) else f"the {schedule} schedule has no closed-form bubble to compare with")
    excess = measured - theory if not math.isnan(theory) else float("nan")
    message = (f"Pipeline stages idle {measured:.0f}% of each step (per step: fill {fmt.ms(parts['fill'], unit=True)}, "
               f"wait {fmt.ms(parts['wait'], unit=True)}, drain {fmt.ms(parts['drain'], unit=True)}); {said}.")
    if excess >= 10:
        message += (f" The {excess:.0f} points above it are stages waiting on late neighbours (a slow stage, late "
                    "receives) or on the transfers themselves, not the schedule.")
    more = theory_bubble_pct(schedule, p, v, 2 * m)
    inter = theory_bubble_pct("interleaved", p, 2, m)
    advice = [f"more microbatches per step (2x: theory {more:.0f}%)" if not math.isnan(more) else "more microbatches",
              f"an interleaved schedule (ScheduleInterleaved1F1B with 2 stages per rank: theory {inter:.0f}%)"
              if schedule in ("gpipe", "1f1b") and not math.isnan(inter) else None,
              "a zero-bubble schedule (ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble) that fills the bubble "
              "with weight-gradient work" if schedule != "zero_bubble" else None,
              "receives posted earlier (before the compute they feed), so a late sender is waited for less"]
    recommendation = ("These waits are the pipeline's bubble, not communication that overlap can hide. Shrink it "
                      "with " + "; ".join(a for a in advice if a) + ".")
    return Finding(kind="pipeline_bubble", severity=level, ranks=tuple(sorted(int(r) for r in per_rank["rank"].unique())),
                   message=message, recommendation=recommendation,
                   evidence={"measured_bubble_pct": measured, "theory_bubble_pct": theory, "schedule": schedule,
                             "stages": p, "stages_per_rank": v, "microbatches": m, "share": measured / 100,
                             **{f"{k}_us": x for k, x in parts.items()}})


def stage_compute(rows: pd.DataFrame) -> pd.DataFrame:
    """Per stage: its mean compute per step and its microbatch cost (``run.pipeline.microbatch_compute_us``), its
    ranks and microbatches, and its imbalance ratio, heaviest first."""
    known = rows[rows["stage"] >= 0]
    per = known.groupby("stage").agg(compute_us=("compute_us", "mean"), microbatches=("microbatches", "median"),
                                     microbatch_us=("microbatch_compute_us", "first"), ratio=("imbalance_ratio", "first"),
                                     ranks=("rank", lambda r: tuple(sorted({int(x) for x in r})))).reset_index()
    return per.sort_values("ratio", ascending=False, ignore_index=True)


def _imbalance(rows: pd.DataFrame) -> Finding | None:
    per = stage_compute(rows)
    if len(per) < 2 or math.isnan(per["ratio"].iloc[0]):
        return None
    heavy = per.iloc[0]
    ratio = float(heavy["ratio"])
    level = severity(ratio - 1, IMBALANCE_THRESHOLDS)
    if level is None:
        return None
    p, v = int(rows["stages"].iloc[0]), int(rows["stages_per_rank"].iloc[0])
    m = max(float(heavy["microbatches"]), 1.0)
    median_others = float(np.median(per["microbatch_us"].to_numpy()[1:]))
    excess = float(heavy["microbatch_us"]) - float(per["microbatch_us"].iloc[1])
    step_us = float(rows.drop_duplicates(["rank", "step"])["step_us"].mean())
    saving = min(max((v * m + p - 1) * excess, 0.0), step_us)
    stage, ranks = int(heavy["stage"]), tuple(heavy["ranks"])
    message = (f"Stage {stage} (rank {', '.join(map(str, ranks))}) computes {ratio:.2f}x the median of the other "
               f"stages per microbatch ({fmt.ms(heavy['microbatch_us'], unit=True)} vs {fmt.ms(median_others, unit=True)}); every stage "
               "runs at its pace.")
    recommendation = (f"Move layers off stage {stage} to its neighbours, splitting the model by measured compute per "
                      "stage rather than by layer or parameter count (the loss and the embedding weigh on the last "
                      "and first stages), or give the stage fewer layers when the schedule has several stages per "
                      "rank.")
    return Finding(kind="stage_imbalance", severity=level, ranks=ranks, message=message, recommendation=recommendation,
                   evidence={"stage": stage, "compute_ratio": ratio, "stage_microbatch_us": float(heavy["microbatch_us"]),
                             "median_other_microbatch_us": median_others, "stage_compute_us": float(heavy["compute_us"]),
                             "estimated_saving_us": saving, "saving_is_estimate": True,
                             "share": saving / step_us if step_us > 0 else 0.0})
