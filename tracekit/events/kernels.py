"""The kernel table of one rank: per device event name (kernels, memcpys, memsets), its calls and durations.

Over the metrics' window, as HolisticTraceAnalysis' ``get_gpu_kernel_breakdown`` counts them (its parser keeps the
kernels launched before the last ProfilerStep, which is tracekit's default window), so that where both classify a
kernel alike, sums and counts are equal; ``trace_calls`` and ``trace_us`` count every device event of the trace,
those launched before it included. The spread across ranks is added when ranks are joined (``rank_spread``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.opschema import KERNEL_COLUMNS
from tracekit.read.categories import DEVICE_CATEGORIES

_OWN = [c for c in KERNEL_COLUMNS if c != "rank_spread_pct"]


def kernel_table(events: pd.DataFrame, window_device: pd.DataFrame) -> pd.DataFrame:
    """One row per device event name of a classified events table; ``window_device``: the window's device events
    (``metrics.in_window`` of ``metrics.all_device_events``)."""
    dev = events[events["cat"].isin(DEVICE_CATEGORIES).to_numpy() & (events["dur_ns"].to_numpy() >= 0)]
    if dev.empty:
        return pd.DataFrame(columns=_OWN)
    every = pd.DataFrame({"rank": dev["rank"].to_numpy(), "name": dev["name"].astype(str).to_numpy(),
                          "kind": dev["kind"].astype(object).to_numpy(), "stream": dev["stream"].to_numpy(),
                          "us": dev["dur_ns"].to_numpy() / 1e3, "pre_trace": dev["pre_trace"].to_numpy()})
    grouped = every.groupby(["rank", "name"], sort=False)
    out = grouped["us"].agg(trace_calls="size", trace_us="sum").reset_index()
    key = pd.MultiIndex.from_frame(out[["rank", "name"]])
    # A name's kind is what its classified events are; events launched before the trace have none of their own.
    kind = every.dropna(subset=["kind"]).groupby(["rank", "name"])["kind"].agg(lambda k: k.mode().iloc[0])
    out["kind"] = kind.reindex(key).fillna("unknown").to_numpy()
    out["streams"] = grouped["stream"].nunique().to_numpy()
    out["pre_trace_calls"] = grouped["pre_trace"].sum().astype(np.int64).to_numpy()
    window = pd.DataFrame({"rank": window_device["rank"].to_numpy(), "name": window_device["name"].astype(str),
                           "us": (window_device["end_ns"] - window_device["start_ns"]).to_numpy() / 1e3})
    stats = window.groupby(["rank", "name"])["us"].agg(calls="size", total_us="sum", mean_us="mean", min_us="min",
                                                       max_us="max", std_us="std").reindex(key)
    stats["calls"] = stats["calls"].fillna(0).astype(np.int64)
    stats["total_us"] = stats["total_us"].fillna(0.0)
    # One call: 0, as HolisticTraceAnalysis fills it; none in the window: no spread to speak of (NaN).
    stats["std_us"] = np.where(stats["calls"] == 1, 0.0, stats["std_us"])
    out = pd.concat([out, stats.reset_index(drop=True)], axis=1)
    kind_total = out.groupby(["rank", "kind"])["total_us"].transform("sum")
    out["kind_share_pct"] = np.where(kind_total > 0, out["total_us"] / kind_total * 100, np.nan)
    out = out.sort_values(["rank", "total_us", "trace_us"], ascending=[True, False, False], ignore_index=True)
    return out[_OWN]


def rank_spread(kernels: pd.DataFrame) -> pd.DataFrame:
    """The run's kernel table with ``rank_spread_pct``: (largest - smallest) / mean of each name's total_us over
    the ranks that run it (0 on one rank)."""
    totals = kernels.groupby("name")["total_us"]
    spread = (totals.transform("max") - totals.transform("min")) / totals.transform("mean") * 100
    return kernels.assign(rank_spread_pct=spread.where(totals.transform("mean") > 0))[list(KERNEL_COLUMNS)]
