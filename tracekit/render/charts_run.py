"""Charts of the whole run: every rank of one step on one clock, and the what-if scenarios side by side.

Pure, like ``tracekit.render.charts``: a ``Summary`` (or a ``tracekit.whatif`` table) in, a plotly ``Figure`` out, and
nothing read from files. The all-ranks timeline uses only the Summary's tables (``collectives``, ``gaps``,
``steps``, ``critical_path_events``), whose times are already on the corrected clock, so it draws a step of a
large run without re-reading any trace. Times are drawn in ms.

>>> import tracekit
>>> s = tracekit.summarize("sample_traces/gpt-gloo-2rank-straggler", cache=False)
>>> fig = allranks_timeline(s, default_step(s))
>>> {"wait", "transfer", "collective link"} <= {t.name for t in fig.data}
True
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tracekit.render import timeline
from tracekit.render.charts import COLORS, IDLE_CAUSES, TITLE, TOP
from tracekit.predict.critical_path import CATEGORIES

PATH_COLORS = {"compute": "#1F3B73", "comm_transfer": "#A11D21", "launch": "#6A3D9A", "host": "#B15928",
               "data": "#33691E", "sync": "#D81B60", "other": "#424242", "unknown": "#BDBDBD"}
PATH_PREFIX = "critical path: "
LANES = ("critical path", "collectives", "idle")


def lane(rank: int, part: str) -> str:
    """The y label of one of a rank's lanes (``part``: one of ``LANES``)."""
    return f"rank {rank} · {part}"


def default_step(summary) -> int | None:
    """The step the all-ranks timeline opens on: the first window step with a critical path, else the first window
    step, else the first step; None when the run has no steps."""
    steps = summary.steps
    if steps.empty:
        return None
    window = steps.loc[steps["in_window"].astype(bool), "step"]
    with_path = window[window.isin(summary.critical_path_events["step"])]
    for choice in (with_path, window, steps["step"]):
        if len(choice):
            return int(choice.min())
    return None


def step_span(summary, step: int) -> tuple[float, float]:
    """(start, end) in us of ``step`` across ranks: the earliest rank's start to the latest rank's end (the next
    step's start), widened to hold the step's critical path."""
    rows = summary.steps[summary.steps["step"] == step]
    path = summary.critical_path_events
    path = path[path["step"] == step]
    starts = np.concatenate([rows["start_us"].to_numpy(float), path["start_us"].to_numpy(float)])
    ends = np.concatenate([(rows["start_us"] + rows["step_us"]).to_numpy(float), path["end_us"].to_numpy(float)])
    if len(starts) == 0:
        raise ValueError(f"step {step} is in neither summary.steps nor summary.critical_path_events")
    return float(np.nanmin(starts)), float(np.nanmax(ends))


def collective_bars(summary, step: int) -> pd.DataFrame:
    """The step's collectives (by the step of their launch), one row per rank and call: rank, match_id, op,
    start_us, transfer_start_us (the last rank's arrival; NaN when not matched), end_us, wait_us, transfer_us,
    matched. A matched call waits from ``start_us`` to ``transfer_start_us`` and transfers from there to ``end_us``."""
    c = summary.collectives
    c = c[c["step"] == step]
    matched = (c["matched"].astype(bool) & c["wait_us"].notna()).to_numpy()
    start = c["start_us"].to_numpy(float)
    wait = c["wait_us"].to_numpy(float)
    return pd.DataFrame({
        "rank": c["rank"].to_numpy(), "match_id": c["match_id"].to_numpy(),
        "op": c["op"].astype(str).to_numpy(), "start_us": start,
        "transfer_start_us": np.where(matched, start + wait, np.nan),
        "end_us": start + c["dur_us"].to_numpy(float), "wait_us": np.where(matched, wait, np.nan),
        "transfer_us": np.where(matched, c["transfer_us"].to_numpy(float), np.nan),
        "matched": matched,
    })


def step_gaps(summary, step: int) -> pd.DataFrame:
    """The idle gaps (``summary.gaps`` rows) that start inside each rank's own span of ``step``."""
    steps = summary.steps[summary.steps["step"] == step][["rank", "start_us", "step_us"]]
    gaps = summary.gaps.merge(steps.rename(columns={"start_us": "s0"}), on="rank", how="inner")
    inside = (gaps["start_us"] >= gaps["s0"]) & (gaps["start_us"] < gaps["s0"] + gaps["step_us"])
    return gaps.loc[inside, list(summary.gaps.columns)].reset_index(drop=True)


def _segments(x0: np.ndarray, x1: np.ndarray, y0, y1) -> tuple[list, list]:
    """Line segments (x0, y0)-(x1, y1) as one trace's x and y, separated by None (x in ms)."""
    n = len(x0)
    xs = np.empty(3 * n, dtype=object)
    ys = np.empty(3 * n, dtype=object)
    xs[0::3], xs[1::3], xs[2::3] = np.asarray(x0) / 1e3, np.asarray(x1) / 1e3, None
    ys[0::3], ys[1::3], ys[2::3] = y0, y1, None
    return xs.tolist(), ys.tolist()


def allranks_timeline(summary, step: int, width_px: int = 1400) -> go.Figure:
    """One step of every rank on the corrected clock: per rank a lane of the critical path (coloured by category),
    one of collectives (waiting for the last rank shaded apart from transferring, the same call joined across
    ranks by a thin line at the last arrival), and one of idle gaps coloured by cause (gaps narrower than a pixel
    binned, as on the one-rank timeline)."""
    t0, t1 = step_span(summary, step)
    ranks = sorted(int(r) for r in summary.ranks["rank"])
    order = [lane(r, part) for r in ranks for part in LANES]
    fig = go.Figure()
    calls = collective_bars(summary, step)
    _collectives(fig, calls)
    _gaps(fig, step_gaps(summary, step), t0, t1, width_px)
    _path(fig, summary, step)
    fig.update_layout(
        title=dict(text=f"Step {step}, all ranks: {(t1 - t0) / 1e3:,.2f} ms (from the first rank's start to the last "
                        "rank's end, not one rank's step time)", **TITLE), barmode="overlay",
        template="plotly_white", height=max(480, 130 + 34 * len(order)), margin=dict(l=160, r=20, t=TOP, b=50),
        bargap=0.3,
        legend=dict(orientation="v", yanchor="top", y=1, xanchor="left", x=1.01),
        xaxis=dict(title="ms from the run's start (corrected clock)", range=[t0 / 1e3, t1 / 1e3]),
        yaxis=dict(type="category", categoryorder="array", categoryarray=order[::-1], tickmode="array",
                   tickvals=order, range=[-0.5, len(order) - 0.5]),
    )
    return fig


def _collectives(fig: go.Figure, calls: pd.DataFrame) -> None:
    y = [lane(r, "collectives") for r in calls["rank"]]
    calls = calls.assign(y=y)
    m = calls[calls["matched"]]
    text = m["op"] + " #" + m["match_id"].astype(str)
    fig.add_bar(orientation="h", y=m["y"], base=m["start_us"] / 1e3, x=m["wait_us"] / 1e3, name="wait",
                marker=dict(color=COLORS["wait"], opacity=0.55, pattern_shape="/"), hovertext=text,
                hovertemplate="%{hovertext}: waiting %{x:,.3f} ms<extra>%{y}</extra>")
    fig.add_bar(orientation="h", y=m["y"], base=m["transfer_start_us"] / 1e3, x=m["transfer_us"] / 1e3,
                name="transfer", marker_color=COLORS["transfer"], hovertext=text,
                hovertemplate="%{hovertext}: transferring %{x:,.3f} ms<extra>%{y}</extra>")
    alone = calls[~calls["matched"]]
    if len(alone):
        fig.add_bar(orientation="h", y=alone["y"], base=alone["start_us"] / 1e3,
                    x=(alone["end_us"] - alone["start_us"]) / 1e3, name="collective (not matched)",
                    marker_color="#9E9E9E", hovertext=alone["op"],
                    hovertemplate="%{hovertext}, not matched: %{x:,.3f} ms<extra>%{y}</extra>")
    # One thin vertical line per call seen on 2+ ranks, at the moment the last rank arrived (transfers start).
    spread = m.groupby("match_id").agg(at=("transfer_start_us", "max"), top=("rank", "min"), bottom=("rank", "max"))
    spread = spread[spread["top"] < spread["bottom"]]
    xs, ys = _segments(spread["at"].to_numpy(), spread["at"].to_numpy(),
                       [lane(r, "collectives") for r in spread["top"]],
                       [lane(r, "collectives") for r in spread["bottom"]])
    fig.add_scatter(x=xs, y=ys, mode="lines", name="collective link", line=dict(color="#555", width=1),
                    hoverinfo="skip")


def _gaps(fig: go.Figure, gaps: pd.DataFrame, t0: float, t1: float, width_px: int) -> None:
    cause = gaps["cause"].astype(str)
    rows = pd.DataFrame({"lane": [lane(r, "idle") for r in gaps["rank"]], "kind": cause.to_numpy(),
                         "start_us": gaps["start_us"].to_numpy(float), "dur_us": gaps["dur_us"].to_numpy(float),
                         "name": ("idle: " + cause).to_numpy()})
    drawn = timeline.bars(rows, t0, t1, width_px)
    for kind in [c for c in IDLE_CAUSES if c in set(drawn["kind"])]:
        group = drawn[drawn["kind"] == kind]
        name = f"idle: {kind}"
        fig.add_bar(orientation="h", y=group["lane"], base=group["start_us"] / 1e3, x=group["dur_us"] / 1e3,
                    name=name, marker_color=COLORS.get(name, COLORS["idle"]), marker_line_width=0,
                    hovertext=group["label"], hovertemplate="%{hovertext}<extra>%{y}</extra>")


def _path(fig: go.Figure, summary, step: int) -> None:
    events = summary.critical_path_events
    if events.empty:
        return
    events = events[events["step"] == step].sort_values("start_us")
    category = events["category"].astype(str)
    for cat in [c for c in CATEGORIES if c in set(category)]:
        part = events[category == cat]
        y = [lane(r, "critical path") for r in part["rank"]]
        xs, ys = _segments(part["start_us"].to_numpy(float), part["end_us"].to_numpy(float), y, y)
        fig.add_scatter(x=xs, y=ys, mode="lines", name=PATH_PREFIX + cat, legendgroup="critical path",
                        line=dict(color=PATH_COLORS[cat], width=7), hoverinfo="name")
    # Where the path moves to another rank (at a collective it waited for): a dashed hop between the ranks' lanes.
    ranks = events["rank"].to_numpy()
    hop = np.flatnonzero(ranks[1:] != ranks[:-1])
    if len(hop):
        at = events["start_us"].to_numpy(float)[hop + 1]
        xs, ys = _segments(at, at, [lane(r, "critical path") for r in ranks[hop]],
                           [lane(r, "critical path") for r in ranks[hop + 1]])
        fig.add_scatter(x=xs, y=ys, mode="lines", name="critical path: rank hop", legendgroup="critical path",
                        line=dict(color="#000", width=1, dash="dot"), hoverinfo="skip")


# ------------------------------------------------------------------------------------------------ what-if

def whatif_table(table: pd.DataFrame) -> pd.DataFrame:
    """A ``tracekit.whatif`` table for people: scenario, step_time_ms, speedup, saving_ms, saving_pct."""
    return pd.DataFrame({"scenario": table["scenario"].astype(str).to_numpy(),
                         "step_time_ms": table["step_time_us"].to_numpy(float) / 1e3,
                         "speedup": table["speedup"].to_numpy(float),
                         "saving_ms": table["saving_us"].to_numpy(float) / 1e3,
                         "saving_pct": table["saving_pct"].to_numpy(float)})


def whatif_bars(table: pd.DataFrame, measured_us: float | None = None) -> go.Figure:
    """The replayed step time of each scenario (ms), side by side; ``measured_us``: the measured mean step time,
    drawn as a dashed line (the baseline replay should sit on it)."""
    shown = whatif_table(table)
    colors = ["#4C78A8" if s == "baseline" else "#54A24B" for s in shown["scenario"]]
    text = [f"{ms:,.1f} ms" + ("" if not np.isfinite(x) or s == "baseline" else f" (x{x:.2f})")
            for s, ms, x in zip(shown["scenario"], shown["step_time_ms"], shown["speedup"])]
    fig = go.Figure(go.Bar(x=shown["scenario"], y=shown["step_time_ms"], marker_color=colors, text=text,
                           textposition="inside", insidetextanchor="end", name="replayed step time",
                           hovertemplate="%{x}: %{y:,.2f} ms per step<extra></extra>"))
    title = "What if: replayed step time per scenario"
    if measured_us is not None and np.isfinite(measured_us):
        fig.add_hline(y=measured_us / 1e3, line_dash="dash", line_color="#333")
        title += f" (dashed: measured, {measured_us / 1e3:,.1f} ms)"
    fig.update_layout(title=dict(text=title, **TITLE), yaxis_title="ms per step",
                      template="plotly_white", margin=dict(l=60, r=20, t=TOP, b=50), showlegend=False)
    fig.update_xaxes(type="category")
    return fig
