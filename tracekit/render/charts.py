"""Chart functions: a ``Summary`` -> a plotly ``Figure``, and the small tables the charts draw. Shared by the
Streamlit viewer (``app/``) and the HTML report.

Pure: nothing here reads files, caches, or prints; inputs are never changed. The charts read the Summary's columns
as ``tracekit.schema`` lists them. Times are drawn in ms, sizes in MB, bandwidths in GB/s.

>>> import tracekit
>>> s = tracekit.summarize("sample_traces/resnet-gloo-2rank")
>>> [bar.name for bar in rank_breakdown(s).data][:3]
['compute only', 'overlapped comm', 'exposed comm']
>>> rank_breakdown(s).show()  # doctest: +SKIP
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tracekit.events.causes import CAUSES as IDLE_CAUSES  # the one order of the idle causes

COLORS = {
    "compute only": "#4C78A8", "overlapped comm": "#72B7B2", "exposed comm": "#E45756", "memory": "#F58518",
    "idle": "#BAB0AC", "idle: host": "#B279A2", "idle: sync": "#FF9DA6", "idle: data": "#9D755D",
    "idle: comm_wait": "#EECA3B", "idle: other": "#BAB0AC", "wait": "#EECA3B", "transfer": "#E45756",
    "idle: alloc": "#54A24B", "idle: host_unrecorded": "#D6CBD3",
}
TOP = 70  # px above the plot: the toolbar's row, then the title's (``TOP_NOTED`` with a subtitle under the title)
TOP_NOTED = 95
_LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=TOP, b=50),
               legend=dict(orientation="h", y=-0.2, traceorder="normal"))
# Every chart's title sits at the top left, just above the plot, in a top margin (``TOP``) tall enough that the row
# above it is free for the toolbar (plotly's modebar, at the top right, drawn over the top of the figure): a long
# title in a narrow column then runs under the toolbar's row, not into it.
TITLE = dict(x=0.01, xanchor="left", xref="container", y=1, yanchor="bottom", yref="paper", pad=dict(b=10))
# Log axes read in plain numbers with 3 significant digits (plotly's default writes 0.0001 as "100μ").
LOG_AXIS = dict(type="log", tickformat=",.3~r", exponentformat="none")


def title(text: str) -> dict:
    """A figure's ``layout.title``: ``text`` at the top left (``TITLE``)."""
    return dict(text=text, **TITLE)


def headline(summary) -> dict:
    """The run's headline numbers: step time (mean over ranks, us), exposed-comm, overlap and idle % summed over
    ranks, and the worst rank: the first straggler when the Summary names one, else the rank most often last to a
    collective, else the slowest step time; and the slowest rank (the largest mean step time)."""
    r = summary.ranks
    stepped = r[r["steps"] > 0]
    span, comm = r["span_us"].sum(), r["comm_us"].sum()
    straggler = len(summary.stragglers) > 0
    last = r["last_arrivals"].fillna(0)
    if straggler:
        worst = int(summary.stragglers["rank"].iloc[0])
    elif last.max() > 0:
        # No rank is a straggler by the test, but the one most often last is who the others wait for; the slowest
        # step time would name a rank that only waits.
        worst = int(r.loc[last.idxmax(), "rank"])
    elif len(stepped) and stepped["step_time_us"].notna().any():
        worst = int(stepped.loc[stepped["step_time_us"].idxmax(), "rank"])
    else:
        worst = None
    timed = stepped[stepped["step_time_us"].notna()]
    if len(r) < 2:  # one rank read: no rank to be slower than, or to wait for
        worst, timed = None, timed.iloc[:0]
    worst_row = r[r["rank"] == worst]
    slowest = timed.loc[timed["step_time_us"].idxmax()] if len(timed) else None
    return {
        "slowest_rank": None if slowest is None else int(slowest["rank"]),
        "slowest_step_time_us": math.nan if slowest is None else float(slowest["step_time_us"]),
        "step_time_us": float(stepped["step_time_us"].mean()) if len(stepped) else math.nan,
        "median_step_time_us": float(stepped["step_time_us"].median()) if len(stepped) else math.nan,
        "exposed_comm_pct": _pct(r["exposed_comm_us"].sum(), span),
        "overlap_pct": _pct(r["overlap_us"].sum(), comm),
        "idle_pct": _pct(r["idle_us"].sum(), span),
        "worst_rank": worst,
        "worst_is_straggler": straggler,
        "worst_is_last": not straggler and worst is not None and bool(last.max() > 0),
        "worst_step_time_us": float(worst_row["step_time_us"].iloc[0]) if len(worst_row) else math.nan,
    }


def _pct(part: float, whole: float) -> float:
    return float(part / whole * 100) if whole and whole > 0 and not math.isnan(whole) else math.nan


# ------------------------------------------------------------------------------------------------ ranks

def rank_segments(summary) -> pd.DataFrame:
    """Per rank, the span split into parts that add up to it (us): compute alone, comm under compute, exposed
    comm, memory alone (busy beyond compute and comm), and idle by cause."""
    r = summary.ranks
    out = pd.DataFrame({
        "rank": r["rank"].to_numpy(),
        "compute only": (r["compute_us"] - r["overlap_us"]).to_numpy(),
        "overlapped comm": r["overlap_us"].to_numpy(),
        "exposed comm": r["exposed_comm_us"].to_numpy(),
        "memory": (r["busy_us"] - r["compute_us"] - r["exposed_comm_us"]).clip(lower=0).to_numpy(),
    })
    causes = idle_causes(summary)
    for cause in IDLE_CAUSES:
        out[f"idle: {cause}"] = causes[cause].to_numpy()
    return out


def idle_causes(summary) -> pd.DataFrame:
    """Per rank, idle time by cause (us)."""
    r = summary.ranks
    columns = [f"idle_{c}_us" for c in IDLE_CAUSES]
    out = r[["rank", *columns]].copy()
    out.columns = ["rank", *IDLE_CAUSES]
    return out


def rank_breakdown(summary) -> go.Figure:
    """Stacked bar per rank: where its span goes, in ms."""
    seg = rank_segments(summary)
    labels = [f"rank {r}" for r in seg["rank"]]
    fig = go.Figure([
        go.Bar(name=part, x=labels, y=seg[part] / 1e3, marker_color=COLORS.get(part),
               hovertemplate=f"{part}: %{{y:,.2f}} ms<extra>%{{x}}</extra>")
        for part in seg.columns[1:]
    ])
    fig.update_layout(barmode="stack", title=title("Where each rank's time goes (window)"), yaxis_title="ms", **_LAYOUT)
    return fig


def step_heatmap(summary) -> go.Figure:
    """Rank x step heatmap of step time (ms); steps outside the window are left out."""
    steps = _window(summary.steps)
    grid = steps.pivot_table(index="rank", columns="step", values="step_us", aggfunc="first").sort_index()
    fig = go.Figure(go.Heatmap(
        z=grid.to_numpy() / 1e3, x=[str(s) for s in grid.columns], y=[f"rank {r}" for r in grid.index],
        colorscale="Viridis", colorbar_title="ms", hovertemplate="%{y}, step %{x}: %{z:,.2f} ms<extra></extra>"))
    fig.update_layout(title=title("Step time per rank and step"), xaxis_title="step", height=max(260, 120 + 40 * len(grid)),
                      **_LAYOUT)
    fig.update_xaxes(type="category")
    fig.update_yaxes(type="category", autorange="reversed")
    return fig


# ---------------------------------------------------------------------------------------- communication

def _window(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["in_window"].astype(bool)]


def op_table(summary) -> pd.DataFrame:
    """Per op in the window: calls, total time (us), total bytes (NaN when any size is unknown), median busbw."""
    calls = _window(summary.collectives)
    grouped = calls.groupby(calls["op"].astype(str))
    unknown = calls["bytes"].isna().groupby(calls["op"].astype(str)).any()
    return pd.DataFrame({
        "calls": grouped.size(),
        "total_us": grouped["dur_us"].sum(),
        "total_bytes": grouped["bytes"].sum().where(~unknown),
        "median_busbw_gbps": grouped["busbw_gbps"].median(),
    }).rename_axis("op").reset_index()


def busbw_vs_size(summary) -> go.Figure:
    """Bus bandwidth (GB/s) against message size (MB), one colour per op, log axes in plain numbers (``LOG_AXIS``);
    calls of unknown size are left out."""
    calls = _window(summary.collectives)
    calls = calls[(calls["bytes"] > 0) & (calls["busbw_gbps"] > 0)]
    fig = go.Figure([
        go.Scatter(x=group["bytes"] / 1e6, y=group["busbw_gbps"], mode="markers", name=str(op),
                   customdata=group["rank"], hovertemplate="%{x:,.3~r} MB, %{y:,.3~r} GB/s, rank %{customdata}"
                                                           "<extra></extra>")
        for op, group in calls.groupby(calls["op"].astype(str))
    ])
    fig.update_layout(title=title("Bus bandwidth against message size"), xaxis_title="message size (MB)",
                      yaxis_title="busbw (GB/s)", **_LAYOUT)
    fig.update_xaxes(**LOG_AXIS)
    fig.update_yaxes(**LOG_AXIS)
    if calls.empty:
        _note(fig, "no collective with a known size in the window")
    return fig


def wait_transfer(summary) -> pd.DataFrame:
    """Per rank, collective time spent waiting for the last rank and transferring (us)."""
    r = summary.ranks
    return pd.DataFrame({"rank": r["rank"], "wait": r["comm_wait_us"], "transfer": r["comm_transfer_us"]})


def wait_vs_transfer(summary) -> go.Figure:
    """Per rank, stacked wait and transfer time in collectives (ms)."""
    table = wait_transfer(summary)
    fig = go.Figure()
    for part in ("wait", "transfer"):
        fig.add_bar(name=part, x=[f"rank {r}" for r in table["rank"]], y=table[part] / 1e3,
                    marker_color=COLORS[part], hovertemplate=f"{part}: %{{y:,.2f}} ms<extra>%{{x}}</extra>")
    fig.update_layout(barmode="stack", title=title("Collectives: waiting for the last rank vs transferring"),
                      yaxis_title="ms", **_LAYOUT)
    if table[["wait", "transfer"]].isna().all().all():
        _note(fig, "unknown: waiting and transfer need each collective matched on two or more ranks"
                   + (" (one rank read)" if len(table) < 2 else ""))
    return fig


# ------------------------------------------------------------------------------------------------- idle

def gap_histogram(summary, bins: int = 40) -> go.Figure:
    """Histogram of idle-gap durations (ms) on log-spaced bins, stacked by each gap's largest cause (``cause``: the
    split of its time is in its ``idle_<cause>_us`` columns and ``idle_by_cause``)."""
    gaps = summary.gaps[summary.gaps["dur_us"] > 0]
    fig = go.Figure()
    if gaps.empty:
        _note(fig, "no idle gaps")
    else:
        lo, hi = np.log10(gaps["dur_us"].min()), np.log10(gaps["dur_us"].max())
        edges = np.logspace(lo, hi + 1e-9, bins + 1) if hi > lo else np.array([10**lo * 0.9, 10**lo * 1.1])
        centers, widths = np.sqrt(edges[:-1] * edges[1:]), np.diff(edges)
        for cause, group in gaps.groupby(gaps["cause"].astype(str)):
            counts, _ = np.histogram(group["dur_us"], edges)
            name = f"idle: {cause}"
            fig.add_bar(x=centers / 1e3, y=counts, width=widths / 1e3, name=name, marker_color=COLORS.get(name),
                        hovertemplate="%{x:,.3~r} ms: %{y} gaps")
    fig.update_layout(barmode="stack", title=title("Idle gaps by duration (coloured by each gap's largest cause)"), xaxis_title="gap (ms)",
                      yaxis_title="gaps", bargap=0, **_LAYOUT)
    fig.update_xaxes(**LOG_AXIS)
    return fig


def idle_by_cause(summary) -> go.Figure:
    """Per rank, stacked idle time by cause (ms): each gap's time split by what the launching thread did over it."""
    causes = idle_causes(summary)
    fig = go.Figure()
    for cause in IDLE_CAUSES:
        name = f"idle: {cause}"
        fig.add_bar(name=name, x=[f"rank {r}" for r in causes["rank"]], y=causes[cause] / 1e3,
                    marker_color=COLORS.get(name), hovertemplate=f"{name}: %{{y:,.2f}} ms<extra>%{{x}}</extra>")
    fig.update_layout(barmode="stack", title=title("Idle time by cause"), yaxis_title="ms", **_LAYOUT)
    return fig


def largest_gaps(summary, n: int = 20) -> pd.DataFrame:
    """The ``n`` longest idle gaps of the run (``summary.gaps`` rows: rank, start_us, dur_us, cause, its split).
    ``host_kind`` is left out where no gap has one (no host time before a launch: a CPU-only run launches nothing)."""
    gaps = summary.gaps.nlargest(n, "dur_us").reset_index(drop=True)
    if "host_kind" in gaps and not gaps["host_kind"].astype(str).ne("").any():
        gaps = gaps.drop(columns="host_kind")
    return gaps


# ---------------------------------------------------------------------------------------------- compare

def compare_bars(table: pd.DataFrame, a_label: str = "a", b_label: str = "b") -> go.Figure:
    """One stacked bar per run of a ``tracekit.compare`` table: the parts of its step (ms per step), which add up to
    its step time; idle is split by cause where the run's causes are known and add up to it, else one idle part."""
    value = table.set_index(table["metric"].astype(str))[["a", "b"]].apply(pd.to_numeric, errors="coerce")
    causes = [f"idle_{c}_ms" for c in IDLE_CAUSES]
    shown = {}
    for col in ("a", "b"):
        parts = value[col].reindex(["compute_only_ms", "overlapped_comm_ms", "exposed_comm_ms", "memory_ms"])
        split = value[col].reindex(causes)
        idle = value[col].get("idle_ms", float("nan"))
        by_cause = split.notna().all() and abs(split.sum() - idle) <= 1e-6 * max(abs(idle), 1.0)
        shown[col] = pd.concat([parts, split if by_cause else pd.Series({"idle_ms": idle})])
    fig = go.Figure()
    names = list(dict.fromkeys([*shown["a"].index, *shown["b"].index]))
    for name in names:
        part = name.removesuffix("_ms")
        label = f"idle: {part.removeprefix('idle_')}" if part.startswith("idle_") else part.replace("_", " ")
        y = [shown[col].get(name, float("nan")) for col in ("a", "b")]
        fig.add_bar(name=label, x=[a_label, b_label], y=y, marker_color=COLORS.get(label),
                    hovertemplate=f"{label}: %{{y:,.2f}} ms<extra>%{{x}}</extra>")
    fig.update_layout(barmode="stack", title=title("Side by side: where each step goes"), yaxis_title="ms per step",
                      **_LAYOUT)
    return fig


EMPTY_LINE_CHARS = 60  # an empty chart's message is wrapped to lines this long: it fits a half-width chart


def wrapped(message: str, width: int = EMPTY_LINE_CHARS) -> str:
    """``message`` in lines of at most ``width`` characters (words kept whole), joined by plotly's ``<br>``.

    >>> wrapped("no operator was recorded: record with record_shapes=True", 30)
    'no operator was recorded:<br>record with record_shapes=True'
    """
    return "<br>".join(textwrap.wrap(message, width, break_long_words=False, break_on_hyphens=False)) or message


def unwrapped(text: str) -> str:
    """A ``wrapped`` message as one line again (what tests and readers compare)."""
    return text.replace("<br>", " ")


def _note(fig: go.Figure, text: str) -> None:
    """Why a chart is empty, in its middle, wrapped (``wrapped``) so that a half-width chart shows it whole."""
    fig.add_annotation(text=wrapped(text), showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5, align="center")
