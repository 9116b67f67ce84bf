"""The text report's pipeline section: stages x microbatches, the schedule, the bubble against theory, the slowest
stage. Empty for a run without pipeline parallelism."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tracekit.fmt import figure, is_unknown, ms, pct, ratio

if TYPE_CHECKING:
    from tracekit.summary.model import Summary


def pipeline_lines(summary: Summary) -> list[str]:
    """The section's lines (with a blank line after), or none without a pipeline."""
    table = summary.pipeline
    if table.empty:
        return []
    rows = table[table["in_window"].astype(bool)]
    rows = rows if len(rows) else table
    first = rows.iloc[0]
    p, v, schedule = int(first["stages"]), int(first["stages_per_rank"]), str(first["schedule"])
    m = int(rows["microbatches"].median())
    blocks = summary.pipeline_blocks
    sources = ", ".join(sorted(set(blocks["source"].astype(str)))) if len(blocks) else "none"
    lines = [f"Pipeline: {schedule} schedule read from the blocks ({sources}), {p * v} stages on {p} pipeline ranks "
             f"({v} per rank), {m} microbatches; per window step, mean over steps"]
    per_stage = rows.groupby(["stage"]).agg(
        ranks=("rank", lambda r: ", ".join(str(x) for x in sorted(set(r)))), mb=("microbatches", "median"),
        fwd=("fwd_us", "mean"), bwd=("bwd_us", "mean"), compute=("compute_us", "mean"), bubble=("bubble_pct", "mean"),
        fill=("fill_us", "mean"), wait=("wait_us", "mean"), drain=("drain_us", "mean"),
        cost=("microbatch_compute_us", "first"), ratio=("imbalance_ratio", "first")).reset_index()
    with np.errstate(divide="ignore", invalid="ignore"):
        per_mb_f, per_mb_b = per_stage["fwd"] / per_stage["mb"], per_stage["bwd"] / per_stage["mb"]
    shown = pd.DataFrame({
        "stage": per_stage["stage"], "rank": per_stage["ranks"], "microbatches": per_stage["mb"].astype(int),
        "F/mb ms": per_mb_f.map(ms), "B/mb ms": per_mb_b.map(ms), "compute ms": per_stage["compute"].map(ms),
        "bubble %": per_stage["bubble"].map(pct), "fill ms": per_stage["fill"].map(ms),
        "wait ms": per_stage["wait"].map(ms), "drain ms": per_stage["drain"].map(ms),
        "mb cost ms": per_stage["cost"].map(ms), "x others": per_stage["ratio"].map(figure),
    })
    lines.append("\n".join("  " + line for line in shown.to_string(index=False).splitlines()))
    measured = float(rows.drop_duplicates(["rank", "step"])["bubble_pct"].mean())
    theory = float(rows["theory_bubble_pct"].mean())
    theory_text = "unknown (no closed form)" if is_unknown(theory) else f"{theory:.1f}%"
    lines.append(f"  bubble: {measured:.1f}% of the step measured (mean of ranks) vs {theory_text} in theory "
                 f"for {schedule} with p={p}, m={m}" + (f", v={v}" if v > 1 else "")
                 + _predicted(summary, "pipeline_bubble", f"{2 * m} microbatches"))
    known = per_stage[per_stage["stage"] >= 0].dropna(subset=["ratio"])
    if len(known) > 1:
        slow = known.sort_values("ratio", ascending=False).iloc[0]
        lines.append(f"  slowest stage: {int(slow['stage'])} (rank {slow['ranks']}), {ratio(slow['ratio'])} the median "
                     "of the other stages' per microbatch" + _predicted(summary, "stage_imbalance", "balanced"))
    agreement = rows["order_agreement_pct"].dropna()
    if len(agreement):
        lines.append(f"  order vs run.json's intended schedule: {agreement.mean():.0f}% of blocks in place")
    notes = sorted({n for n in rows["note"].astype(str) if n})
    lines += [f"  note: {n}" for n in notes]
    return lines + [""]


def _predicted(summary: Summary, kind: str, label: str) -> str:
    """'; <label>: -X ms/step predicted' from the finding of ``kind`` whose fix a what-if predicts, else ''."""
    for f in summary.findings:
        saving = f.evidence.get("predicted_saving_us") if f.kind == kind else None
        if saving is not None and not is_unknown(saving):
            return f"; {label}: {-saving / 1e3:+,.2f} ms/step predicted ({f.evidence['scenario']})"
    return ""
