"""Charts and tables of what runs on one rank: its kernels, its operators, each op's time per step, and its memory
over time (its operators on the device's roofline: ``tracekit.render.charts_roofline``). Shared by the viewer's
"Operators & kernels" and "Memory" pages and the report.

Pure, like ``tracekit.render.charts``: a ``Summary`` and a rank in, a plotly ``Figure`` or a display DataFrame out.
Display tables are in ms (totals), us (per call), MB, GB/s and TFLOPS/s, with long names shortened; an empty one
says why in ``table.attrs["note"]``, an empty chart in its annotation. The device's roofs come from
``tracekit.devices``, through the entry ``summary.data_quality["device_peaks"]`` names for the rank.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tracekit import devices
from tracekit.fmt import UNKNOWN, by_column, display_units, mb, ranks
from tracekit.render.charts import TITLE, TOP, TOP_NOTED, unwrapped, wrapped  # noqa: F401 (unwrapped: for readers)

KIND_COLORS = {"matmul": "#4C78A8", "conv": "#F58518", "attention": "#54A24B", "elementwise": "#B279A2",
               "norm": "#EECA3B", "other": "#9D755D"}
NO_MEMORY = "No [memory] events: the trace was recorded without profile_memory=True"
_PEAKS = {p.name: p for p in devices.PEAKS}


def short_name(name, width: int = 70) -> str:
    """A name longer than ``width`` cut to about that: ``void `` and namespaces dropped, parameter lists and template
    arguments inside template arguments folded (``kernel<4, Functor<…> >(…)``), then the middle cut out."""
    text = str(name)
    if len(text) <= width:
        return text
    text = _fold(_fold(text.removeprefix("void "), "(", ")", 0), "<", ">", 1)
    text = re.sub(r"(?:(?:\w+|\(…\))::)+", "", text)  # namespaces: at::native::, (anonymous namespace)::
    if len(text) > width:
        head = (width - 1) * 2 // 3
        text = text[:head] + "…" + text[len(text) - (width - 1 - head):]
    return text


def _fold(text: str, open_: str, close: str, keep: int) -> str:
    """``text`` with what is nested deeper than ``keep`` levels of ``open_ close`` replaced by ``open_…close``."""
    out, depth = [], 0
    for ch in text:
        depth += ch == open_
        if depth <= keep or (depth == keep + 1 and ch in (open_, close)):
            out.append(ch + ("…" if ch == open_ and depth == keep + 1 else ""))
        depth -= ch == close and depth > 0
    return "".join(out)


def _quality(summary, rank: int) -> dict:
    q = summary.data_quality
    rows = q[q["rank"] == rank] if "rank" in q else q.iloc[:0]
    return rows.iloc[0].to_dict() if len(rows) else {}


def device_peaks(summary, rank: int) -> tuple[devices.DevicePeaks | None, str]:
    """The rank's datasheet peaks, or None and why there are none."""
    named = _quality(summary, rank).get("device_peaks")
    if named in _PEAKS:
        return _PEAKS[named], ""
    if not named:
        return None, f"rank {rank} is a CPU-only rank: no device roofs (rates from host time)"
    return None, f"device {str(named).removeprefix('unknown: ')!r} is not in tracekit's datasheet table: no roofs"


def is_device_rank(summary, rank: int) -> bool:
    """Whether the rank ran on a device (its times are device times), as the analysis decided it."""
    return bool(_quality(summary, rank).get("device_peaks"))  # '' on a CPU-only rank


def _rows(frame: pd.DataFrame, rank: int) -> pd.DataFrame:
    return frame[frame["rank"] == rank].reset_index(drop=True) if len(frame) else frame


def _layout(fig: go.Figure, title: str, note: str = "", **layout) -> go.Figure:
    """Title at the top left (clear of the toolbar at the top right), a grey subtitle under it when ``note``."""
    text = title + (f"<br><sup style='color:#666'>{note}</sup>" if note else "")
    fig.update_layout(title=dict(text=text, **TITLE), template="plotly_white",
                      margin=dict(l=60, r=20, t=TOP_NOTED if note else TOP, b=50),
                      legend=dict(orientation="h", y=-0.2), **layout)
    return fig


def _empty(fig: go.Figure, title: str, message: str) -> go.Figure:
    """No data: the message in the middle of the chart, wrapped so that a half-width chart shows it whole."""
    fig.add_annotation(text=wrapped(message), showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
                       align="center")
    return _layout(fig.update_xaxes(visible=False).update_yaxes(visible=False), title)


def _noted(columns: list[str], note: str) -> pd.DataFrame:
    """An empty display table that says why in ``attrs["note"]``."""
    frame = pd.DataFrame(columns=columns)
    frame.attrs["note"] = note
    return frame


# ------------------------------------------------------------------------------------------------ kernels

def kernel_table(summary, rank: int) -> pd.DataFrame:
    """The rank's kernels (memcpys and memsets too), most window time first: times in ms, per call too."""
    k = _rows(summary.kernels, rank)
    columns = ["name", "kind", "calls", "total_ms", "mean_ms", "min_ms", "max_ms", "std_ms", "kind_share_pct",
               "streams", "trace_calls", "rank_spread_pct", "full_name"]
    if k.empty:
        q = _quality(summary, rank)
        why = ("kernels were not collected (no device event in the trace)" if q.get("device_events_absent")
               else "a CPU-only trace" if not q.get("device_peaks") else "no device event in the trace")
        return _noted(columns, f"No kernels on rank {rank}: {why}.")
    k = k.sort_values(["total_us", "trace_us"], ascending=False, kind="stable", ignore_index=True)
    out = pd.DataFrame({"name": [short_name(n) for n in k["name"]], "kind": k["kind"].astype(str),
                        "calls": k["calls"].astype(int), "total_ms": k["total_us"].astype(float) / 1e3})
    for col in columns[4:-1]:  # *_ms from the table's *_us
        out[col] = k[col[:-3] + "_us"] / 1e3 if col.endswith("_ms") else k[col].astype(
            int if col in ("streams", "trace_calls") else float)
    return out.assign(full_name=k["name"].astype(str).to_numpy())


# ------------------------------------------------------------------------------------------------ operators

def op_table(summary, rank: int, by_shape: bool = False) -> pd.DataFrame:
    """The rank's ops (by name, or by name and input shapes), most self time first (device self time on a device
    rank, host self time on a CPU-only one): times in ms, FLOPs in GFLOP, bytes in MB, rates in TFLOPS/s and GB/s.
    Device columns are left out on a CPU-only rank, the roofline ones where the device's peaks are unknown."""
    ops = _rows(summary.ops_by_shape if by_shape else summary.ops, rank)
    if ops.empty:
        return _noted(["name", "calls"], f"No host ops on rank {rank}: the trace holds no cpu_op or user_annotation.")
    device, (peaks, _) = is_device_rank(summary, rank), device_peaks(summary, rank)
    out = pd.DataFrame({"name": [short_name(n) for n in ops["name"]]})
    for col in (["input_dims", "input_type"] if by_shape else []) + ["kind", "dtype"]:
        out[col] = ops[col].astype(object).where(ops[col].notna(), "").to_numpy()  # '': not recorded or modelled
    out["calls"] = ops["calls"].astype(int)
    for col in ["host_self_us", "host_total_us"] + (["device_self_us", "device_us"] if device else []):
        out[col.removesuffix("_us") + "_ms"] = ops[col].astype(float) / 1e3
    out["GFLOP"], out["MB"] = ops["flops"].astype(float) / 1e9, ops["bytes"].astype(float) / 1e6
    for col in ["achieved_tflops", "achieved_gbps"] + (["roofline_us", "pct_of_roofline"] if peaks else []):
        out[col.replace("_us", "_ms")] = ops[col].astype(float) / (1e3 if col.endswith("_us") else 1)
    key = out["device_self_ms" if device else "host_self_ms"].fillna(0)
    return out.iloc[np.argsort(-key.to_numpy(), kind="stable")].reset_index(drop=True)


def op_time_per_step(summary, rank: int, top: int = 10) -> go.Figure:
    """Stacked bars, one per window step: the self time (ms) of the rank's ``top`` ops over the window (device self
    time on a device rank, host self time on a CPU-only one), the rest as "other ops". ProfilerStep annotations are
    left out: they are the steps themselves."""
    rows = _rows(summary.op_steps, rank)
    what = "device" if is_device_rank(summary, rank) else "host"
    title, fig = f"Rank {rank}: {what} self time of the top {top} ops per step", go.Figure()
    rows = rows[~rows["name"].astype(str).str.startswith("ProfilerStep#").to_numpy()]
    if rows.empty:
        return _empty(fig, title, f"No op in the window's steps on rank {rank} (the trace needs ProfilerStep "
                                  "annotations and host ops).")
    value = rows[f"{what}_self_us"].astype(float).fillna(0) / 1e3
    grid = (pd.DataFrame({"name": rows["name"].astype(str).to_numpy(), "step": rows["step"].astype(int).to_numpy(),
                          "ms": value.to_numpy()}).pivot_table(index="name", columns="step", values="ms", aggfunc="sum")
            .fillna(0.0))
    order = grid.sum(axis=1).sort_values(ascending=False, kind="stable")
    shown = [n for n in order.index[:top] if order[n] > 0]
    rest = grid.drop(index=shown).sum(axis=0)
    labels = [f"step {s}" for s in grid.columns]
    for name in shown:
        fig.add_bar(x=labels, y=grid.loc[name].to_numpy(), name=short_name(name, 40), hovertext=name,
                    hovertemplate="%{hovertext}: %{y:,.3f} ms<extra>%{x}</extra>")
    if rest.sum() > 0:
        fig.add_bar(x=labels, y=rest.to_numpy(), name="other ops", marker_color="#BAB0AC",
                    hovertemplate="other ops: %{y:,.3f} ms<extra>%{x}</extra>")
    fig.update_xaxes(type="category")
    return _layout(fig, title, barmode="stack", yaxis_title="ms")


# ------------------------------------------------------------------------------------------------- memory

def memory_note(summary, rank: int) -> str:
    """Why the rank has no memory rows ('' when it has some)."""
    if len(_rows(summary.memory, rank)):
        return ""
    others = sorted({int(r) for r in summary.memory["rank"]}) if len(summary.memory) else []
    return f"No [memory] events on rank {rank}; the run has them on {ranks(others)}." if others else NO_MEMORY + "."


def memory_over_time(summary, rank: int) -> go.Figure:
    """Allocated (solid) and reserved (dotted; left out when all 0, as the CPU allocator reports it) memory in MB over
    time per device, a vertical line at each step's start, and a dashed line at the device's memory when known (off
    the top, and said so, when it is over four times the largest value drawn)."""
    title, fig = f"Memory over time, rank {rank}", go.Figure()
    line = _rows(summary.memory_timeline, rank)
    note = memory_note(summary, rank)
    if note or line.empty:
        return _empty(fig, title, note or NO_MEMORY + ".")
    memory = _rows(summary.memory, rank)
    sizes = memory.groupby("device")["device_memory_bytes"].agg(lambda v: v.astype(float).max())
    colors = dict(zip(sorted(set(line["device"])), [*KIND_COLORS.values()] * 4))
    for device, part in line.sort_values("start_us").groupby("device", sort=True):
        for col, dash in (("allocated", "solid"), ("reserved", "dot"))[:1 + bool(part["reserved_bytes"].any())]:
            fig.add_scatter(x=part["start_us"].astype(float) / 1e3, y=part[f"{col}_bytes"].astype(float) / 1e6,
                            mode="lines", line=dict(color=colors[device], dash=dash, shape="hv"), name=f"{device} {col}",
                            hovertemplate=f"{device} {col}: %{{y:,.2f}} MB at %{{x:,.3f}} ms<extra></extra>")
    top, notes = float(line[["allocated_bytes", "reserved_bytes"]].astype(float).max().max()) / 1e6, []
    for device, size in sizes.dropna().items():
        fig.add_hline(y=size / 1e6, line_dash="dash", line_color=colors.get(device, "#333"),
                      annotation_text=f"{device} memory ({mb(size, unit=True)})")
        if size / 1e6 > 4 * top:
            notes.append(f"{device} memory, {mb(size, unit=True)}, is above the top")
    if notes:
        fig.update_yaxes(range=[0, top * 1.15])
    for start in _rows(summary.steps, rank)["start_us"].astype(float):
        fig.add_vline(x=start / 1e3, line_dash="dot", line_color="#999", line_width=1)
    fig.update_xaxes(title="ms from the run's start (dotted: step starts)")
    return _layout(fig, title, "; ".join(notes), yaxis_title="MB")


def memory_peaks(summary, rank: int) -> pd.DataFrame:
    """Per device and window step (the steps every other number covers): peak allocated and reserved, start, end and
    growth (MB), the peak's share of the device."""
    m = _rows(summary.memory, rank)
    if "in_window" in m:
        m = m[m["in_window"].astype(bool)]
    if m.empty:
        return _noted(["device", "step", "peak_allocated_MB"], memory_note(summary, rank))
    cols = ["peak_allocated_bytes", "peak_reserved_bytes", "start_allocated_bytes", "end_allocated_bytes", "growth_bytes"]
    out = m[["device", "step"]].astype({"step": int}).join(m[cols].astype(float))
    out["peak_reserved_of_device_pct"] = out["peak_reserved_bytes"] / m["device_memory_bytes"].astype(float) * 100
    return display_units(out)


def top_allocators(summary, rank: int) -> pd.DataFrame:
    """The ops whose allocations were still live at each device's peak, largest first (MB, share of the peak)."""
    t = _rows(summary.memory_top, rank)
    if t.empty:
        return _noted(["device", "step", "op", "live_MB"], memory_note(summary, rank)
                      or f"No allocation was live at the peak on rank {rank}.")
    peak = _rows(summary.memory, rank).groupby(["device", "step"])["peak_allocated_bytes"].max()
    at = peak.reindex(pd.MultiIndex.from_arrays([t["device"], t["step"]])).astype(float).to_numpy()
    live = t["live_bytes"].astype(float)
    out = pd.DataFrame({"device": t["device"].astype(str), "step": t["step"].astype(int),
                        "op": [short_name(o) for o in t["op"]], "live_MB": live / 1e6,
                        "allocations": t["allocations"].astype(int), "share_of_peak_pct": live / at * 100})
    return out.sort_values(["device", "live_MB"], ascending=[True, False], ignore_index=True)


def styled(table: pd.DataFrame):
    """A display table as a pandas Styler for ``st.dataframe``: numbers by their unit, ``unknown`` for NaN (the
    values, and so the sorting, stay numbers)."""
    formats = {c: by_column(c) for c in table.columns if table[c].dtype.kind == "f"}
    return table.style.format(formats, na_rep=UNKNOWN)
