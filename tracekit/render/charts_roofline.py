"""The roofline chart of one rank: each op's achieved TFLOPS/s against its arithmetic intensity, under the device's
roofs. Shared by the viewer's "Operators & kernels" page and the report.

Pure, like ``tracekit.render.charts_ops`` (whose look and per-rank helpers it uses): a ``Summary`` and a rank in, a
plotly ``Figure`` out. A chart with no point says why in its annotation (``empty_reason``), from the rank's
``summary.data_quality`` and ops table: what the user can change to get points.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tracekit import devices
from tracekit.events.flops import MATMUL_CLASS
from tracekit.fmt import UNKNOWN
from tracekit.render.charts import LOG_AXIS
from tracekit.render.charts_ops import KIND_COLORS, _empty, _layout, _quality, _rows, device_peaks, is_device_rank

RECORD = "record with torch.profiler's ProfilerActivity.CPU and record_shapes=True"


def roofline(summary, rank: int, by_shape: bool = False) -> go.Figure:
    """The rank's ops on log-log axes: arithmetic intensity (FLOPs / bytes) against achieved TFLOPS/s, one trace per
    op kind, with the device's memory roof (y = bandwidth x intensity) and a flat compute roof per dtype the ops ran
    in. Ops whose FLOPs are all counted at an op inside them (a linear around its addmm) are left out."""
    ops = _rows(summary.ops_by_shape if by_shape else summary.ops, rank)
    title, fig = f"Roofline, rank {rank}: each op's achieved TFLOPS/s", go.Figure()
    points = _points(ops)
    if points.empty:
        return _empty(fig, title, f"No op to place on the roofline on rank {rank}: {empty_reason(summary, rank)}.")
    device, (peaks, why) = is_device_rank(summary, rank), device_peaks(summary, rank)
    time = points["device_us" if device else "host_total_us"].astype(float) / 1e3
    hover = pd.DataFrame({"name": points["name"].astype(str), "calls": points["calls"].astype(int),
                          "dtype": points["dtype"].astype(object).fillna(UNKNOWN), "ms": time.to_numpy()})
    kind = points["kind"].astype(object).fillna("other")
    for name in [k for k in KIND_COLORS if k in set(kind)]:
        part = (kind == name).to_numpy()
        fig.add_scatter(x=points["intensity"][part], y=points["achieved_tflops"][part], mode="markers", name=name,
                        marker=dict(color=KIND_COLORS[name], size=9, opacity=0.8), customdata=hover[part].to_numpy(),
                        hovertemplate="%{customdata[0]}<br>%{customdata[1]} calls, %{customdata[2]}, "
                                      f"%{{customdata[3]:,.3f}} ms {'device' if device else 'host'} time<br>"
                                      "%{x:.3g} FLOP/byte, %{y:.3g} TFLOPS/s<extra>" + name + "</extra>")
    lo, hi = points["intensity"].min() / 3, points["intensity"].max() * 3
    if peaks is not None:
        _roofs(fig, peaks, [devices.dtype_key(d) for d in points["dtype"].astype(object)], lo, hi)
    fig.update_xaxes(**LOG_AXIS, **log_ticks([x for t in fig.data for x in t.x]),
                     title="arithmetic intensity (FLOP/byte)")
    fig.update_yaxes(**LOG_AXIS, **log_ticks([y for t in fig.data for y in t.y]), title="achieved TFLOPS/s")
    note = why or f"{peaks.name}: {peaks.memory_gbps:,.0f} GB/s; dense peaks per dtype (tracekit.devices)"
    return _layout(fig, title, note, height=480)


def log_ticks(values) -> dict:
    """Where a log axis over ``values`` puts its labels: at 1, 2 and 5 of each decade over two decades or less, at each
    power of ten over more. Plotly's own choice labels every digit of a short range (0.07, 0.08, 0.09, 0.1 touch on a
    report's roofline).

    >>> log_ticks([0.07, 9.0]), log_ticks([0.5, 2000.0])
    ({'dtick': 'D2'}, {'dtick': 1})
    """
    shown = np.asarray([v for v in values if v is not None], dtype=float)
    shown = shown[np.isfinite(shown) & (shown > 0)]
    if not len(shown):
        return {}
    return {"dtick": "D2" if np.log10(shown.max() / shown.min()) <= 2.5 else 1}


def _counted(ops: pd.DataFrame) -> pd.Series:
    """The ops with a FLOP and a byte count, less those whose FLOPs are all counted at an op inside them."""
    wrapper = ops["name"].isin(MATMUL_CLASS) & (ops["counted_flops"].astype(float) == 0)
    return (ops["flops"].astype(float) > 0) & (ops["bytes"].astype(float) > 0) & ~wrapper


def _points(ops: pd.DataFrame) -> pd.DataFrame:
    """The ops the chart places: counted ones with a measured rate, and their intensity (FLOP/byte)."""
    if ops.empty:
        return ops
    keep = (_counted(ops) & (ops["achieved_tflops"].astype(float) > 0)).to_numpy()
    return ops[keep].assign(intensity=(ops["flops"].astype(float) / ops["bytes"].astype(float))[keep].to_numpy())


def empty_reason(summary, rank: int) -> str:
    """Why the rank's roofline has no point, in words that say what to change: no operator recorded, operators of
    no usable duration, record_shapes off, ops with FLOPs but no measured time, ops with FLOPs but no bytes, or no
    op tracekit has FLOPs for."""
    q, ops = _quality(summary, rank), _rows(summary.ops, rank)
    shapes = q.get("shapes_recorded")
    if q.get("operators_unusable") is True:
        return ("its CPU ops were recorded, but none had a usable duration (all dropped for no, negative or "
                "impossible durations), so none can be rated")
    if ops.empty or shapes is None or pd.isna(shapes):  # no cpu_op in the trace: its ops are annotations, if any
        return f"no operator was recorded (no cpu_op events; annotations such as ProfilerStep are not ops): {RECORD}"
    if shapes is False:
        return "record_shapes=True was off, so FLOPs and bytes are unknown"
    if _counted(ops).any():
        if q.get("device_events_absent") is True:
            return "its ops with a FLOP count have no device time: the trace holds no kernel (not collected)"
        what = "device time (no kernel of the trace is linked to them)" if is_device_rank(summary, rank) else \
            "host time"
        return f"its ops with a FLOP count have no measured {what}"
    if (ops["flops"].astype(float) > 0).any():  # FLOPs from the shapes, bytes unknown: no intensity to place
        return ("its ops' FLOPs are counted, but their bytes are not: the inputs' dtypes (Input type) were not "
                "recorded, or an input is a list of tensors")
    return "none of its ops is one tracekit has FLOPs for (matmul, conv, attention, elementwise, norm)"


def _roofs(fig: go.Figure, peaks: devices.DevicePeaks, keys: list, lo: float, hi: float) -> None:
    """The memory roof from ``lo`` up to the last ridge point, and each dtype's compute roof from its ridge on."""
    bw = peaks.memory_gbps  # GB/s x FLOP/byte = GFLOP/s: / 1e3 for TFLOPS/s
    flat = {k: peaks.tflops[k] for k in dict.fromkeys(keys) if k is not None and k in peaks.tflops}
    ridges = {k: tf * 1e3 / bw for k, tf in flat.items()}
    lo = min([lo, *(r / 10 for r in ridges.values())])
    hi = max([hi, *(r * 10 for r in ridges.values())])
    end = max(ridges.values(), default=hi)
    fig.add_scatter(x=[lo, end], y=[bw * lo / 1e3, bw * end / 1e3], mode="lines", name=f"memory roof ({bw:,.0f} GB/s)",
                    line=dict(color="#333", width=2), hoverinfo="name")
    for key, tf in flat.items():
        fig.add_scatter(x=[ridges[key], hi], y=[tf, tf], mode="lines", name=f"{key} roof ({tf:,.4g} TFLOPS/s)",
                        line=dict(color="#333", width=2, dash="dash"), hoverinfo="name")
