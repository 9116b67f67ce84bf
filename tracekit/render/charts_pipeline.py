"""The pipeline's charts: the schedule that ran as a stage x time grid (F/B/I/W blocks per microbatch, the time
no block runs marked as bubble, send->recv pairs where a table of them is given) and the bubble and compute per
stage. Shared by the viewer's Pipeline page and the HTML report; they read ``summary.pipeline`` and
``summary.pipeline_blocks`` (``tracekit.run.pipeschema``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tracekit.render.charts import TITLE, TOP, _note

PHASE_COLORS = {"F": "#4C78A8", "B": "#F58518", "I": "#E45756", "W": "#54A24B"}
PHASE_NAMES = {"F": "forward", "B": "backward", "I": "input grad", "W": "weight grad"}
BUBBLE_COLOR = "#D9D9D9"
PARTS = (("fwd_us", "forward", "#4C78A8"), ("bwd_us", "backward", "#F58518"), ("other_busy_us", "other busy", "#BAB0AC"),
         ("fill_us", "fill", "#EECA3B"), ("wait_us", "wait", "#E45756"), ("drain_us", "drain", "#B279A2"))


def pipeline_steps(summary) -> list[int]:
    """The steps the grid can show, window steps first."""
    rows = summary.pipeline
    if rows.empty:
        return []
    kept = sorted(int(s) for s in rows.loc[rows["in_window"].astype(bool), "step"].unique())
    return kept + sorted(int(s) for s in rows["step"].unique() if int(s) not in kept)


def _row_label(stage: int, rank: int) -> str:
    return f"stage {stage} (rank {rank})"


def schedule_grid(summary, step: int | None = None, p2p: pd.DataFrame | None = None) -> go.Figure:
    """One step's blocks, a row per stage and rank, in ms from the step's first block; the time a rank runs no
    block between its first and last is drawn as bubble. ``p2p``: ``summary.p2p``-shaped pairs (src_rank,
    dst_rank, step, send_start_us, recv_end_us), drawn as lines from the send to the receive's end."""
    fig = go.Figure()
    steps = pipeline_steps(summary)
    if step is None and steps:
        step = steps[0]
    blocks = summary.pipeline_blocks
    blocks = blocks[blocks["step"] == step] if step is not None else blocks.iloc[0:0]
    if blocks.empty:
        _note(fig, "no pipeline blocks in this run")
        fig.update_layout(title=dict(text="Pipeline schedule", **TITLE), template="plotly_white")
        return fig
    t0 = float(blocks["start_us"].min())
    labels = [_row_label(int(s), int(r)) for s, r in zip(blocks["stage"], blocks["rank"])]
    blocks = blocks.assign(y=labels, x0=(blocks["start_us"] - t0) / 1e3, dx=(blocks["end_us"] - blocks["start_us"]) / 1e3)
    order = sorted(set(labels), key=lambda label: (int(label.split()[1]), label))
    for rank, mine in blocks.groupby("rank"):
        gaps = _gaps(mine["x0"].to_numpy(), (mine["x0"] + mine["dx"]).to_numpy())
        rows = sorted(set(mine["y"]))
        if len(gaps):
            ys = [y for y in rows for _ in range(len(gaps))]
            fig.add_bar(y=ys, base=np.tile(gaps[:, 0], len(rows)), x=np.tile(gaps[:, 1] - gaps[:, 0], len(rows)),
                        orientation="h", marker=dict(color=BUBBLE_COLOR, pattern=dict(shape="/")), name="bubble",
                        legendgroup="bubble", showlegend=bool(rank == blocks["rank"].min()), width=0.5,
                        hovertemplate="bubble %{x:,.2f} ms<extra>rank " + str(rank) + "</extra>")
    for phase, part in blocks.groupby("phase", sort=False):
        fig.add_bar(y=part["y"], base=part["x0"], x=part["dx"], orientation="h", name=PHASE_NAMES.get(phase, phase),
                    marker=dict(color=PHASE_COLORS.get(phase, "#999"), line=dict(color="white", width=1)),
                    text=phase + part["microbatch"].astype(str), textposition="inside", insidetextanchor="middle",
                    customdata=np.stack([part["compute_us"] / 1e3, part["source"].astype(str)], axis=1),
                    hovertemplate="%{text}: %{x:,.3f} ms, compute %{customdata[0]:,.3f} ms<br>from %{customdata[1]}"
                                  "<extra>%{y}</extra>")
    _pairs(fig, blocks, p2p, step, t0)
    span = float((blocks["x0"] + blocks["dx"]).max())
    fig.update_layout(title=dict(text=f"Step {step}: the schedule that ran ({span:,.2f} ms from the first block)",
                                 **TITLE), barmode="overlay", template="plotly_white", bargap=0.3,
                      height=max(300, 120 + 45 * len(order)), margin=dict(l=140, r=20, t=TOP, b=50),
                      xaxis=dict(title="ms from the step's first block"),
                      yaxis=dict(type="category", categoryorder="array", categoryarray=order[::-1]),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def _gaps(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The gaps between a rank's blocks (x0, x1 pairs), from its first block's start to its last one's end."""
    order = np.argsort(starts)
    s, e = starts[order], np.maximum.accumulate(ends[order])
    open_gap = s[1:] > e[:-1]
    return np.stack([e[:-1][open_gap], s[1:][open_gap]], axis=1) if open_gap.any() else np.empty((0, 2))


def _pairs(fig: go.Figure, blocks: pd.DataFrame, p2p: pd.DataFrame | None, step: int, t0: float) -> None:
    """Each send->recv pair of the step as a line from the sender's row at the send to the receiver's at its end."""
    if p2p is None or p2p.empty or not {"src_rank", "dst_rank", "send_start_us", "recv_end_us"} <= set(p2p.columns):
        return
    row = blocks.drop_duplicates("rank").set_index("rank")["y"]  # a rank's first stage row
    pairs = p2p[(p2p["step"] == step) if "step" in p2p else slice(None)]
    pairs = pairs[pairs["src_rank"].isin(row.index) & pairs["dst_rank"].isin(row.index)].dropna(
        subset=["send_start_us", "recv_end_us"])
    if pairs.empty:
        return
    xs, ys = [], []
    for a, b, sr, dr in zip(pairs["send_start_us"], pairs["recv_end_us"], pairs["src_rank"], pairs["dst_rank"]):
        xs += [(a - t0) / 1e3, (b - t0) / 1e3, None]
        ys += [row[sr], row[dr], None]
    fig.add_scatter(x=xs, y=ys, mode="lines", name="send -> recv", line=dict(color="#333", width=1), opacity=0.5,
                    hoverinfo="skip")


def stage_parts(summary) -> pd.DataFrame:
    """Per stage, mean per window step: forward, backward, other busy time, fill, wait, drain (us), bubble %,
    the schedule's theory %, and the compute ratio to the other stages."""
    rows = summary.pipeline
    if rows.empty:
        return pd.DataFrame(columns=["stage", "rank", *[c for c, _, _ in PARTS], "bubble_pct", "theory_bubble_pct",
                                     "microbatch_compute_us", "imbalance_ratio"])
    kept = rows[rows["in_window"].astype(bool)]
    kept = kept if len(kept) else rows
    out = kept.groupby("stage").agg(
        rank=("rank", lambda r: ", ".join(str(x) for x in sorted(set(r)))),
        **{c: (c, "mean") for c, _, _ in PARTS}, bubble_pct=("bubble_pct", "mean"),
        theory_bubble_pct=("theory_bubble_pct", "mean"),
        microbatch_compute_us=("microbatch_compute_us", "first"), imbalance_ratio=("imbalance_ratio", "first"))
    return out.reset_index()


def stage_bars(summary) -> go.Figure:
    """Per stage, a stacked bar of its step: its compute (forward, backward), other busy time and the bubble's
    fill, wait and drain, ms per window step; on a rank with several stages the bubble is the rank's."""
    parts = stage_parts(summary)
    fig = go.Figure()
    if parts.empty:
        _note(fig, "no pipeline in this run")
    labels = [f"stage {s} (rank {r})" for s, r in zip(parts["stage"], parts["rank"])]
    for col, name, color in PARTS:
        fig.add_bar(x=labels, y=parts[col] / 1e3, name=name, marker_color=color,
                    hovertemplate=f"{name}: %{{y:,.2f}} ms<extra>%{{x}}</extra>")
    theory = parts["theory_bubble_pct"].dropna()
    said = f"; the schedule's own: {theory.mean():.0f}%" if len(theory) else ""
    fig.update_layout(barmode="stack", title=dict(text=f"Per stage: compute and bubble, ms per step{said}", **TITLE),
                      yaxis_title="ms per step", template="plotly_white", margin=dict(l=60, r=20, t=TOP, b=50),
                      legend=dict(orientation="h", y=-0.2))
    return fig
