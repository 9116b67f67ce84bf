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
    # Grouped by the name's code, not its text (no string per event); an event without a name has no row.
    name = dev["name"].astype("category")  # the reader's already is
    names = name.cat.categories
    code = name.cat.codes.to_numpy().astype(np.int64)
    named = code >= 0
    kind = dev["kind"].astype("category")
    every = pd.DataFrame({"rank": dev["rank"].to_numpy()[named], "code": code[named],
                          "kind": kind.cat.codes.to_numpy()[named], "stream": dev["stream"].to_numpy()[named],
                          "us": dev["dur_ns"].to_numpy()[named] / 1e3, "pre_trace": dev["pre_trace"].to_numpy()[named]})
    grouped = every.groupby(["rank", "code"], sort=False)
    out = grouped["us"].agg(trace_calls="size", trace_us="sum").reset_index()
    key = pd.MultiIndex.from_frame(out[["rank", "code"]])
    out["kind"] = _kinds(every, kind.cat.categories).reindex(key).fillna("unknown").to_numpy()
    out["streams"] = grouped["stream"].nunique().to_numpy()
    out["pre_trace_calls"] = grouped["pre_trace"].sum().astype(np.int64).to_numpy()
    window_code = pd.Categorical(window_device["name"], categories=names).codes.astype(np.int64)
    window = pd.DataFrame({"rank": window_device["rank"].to_numpy(), "code": window_code,
                           "us": (window_device["end_ns"] - window_device["start_ns"]).to_numpy() / 1e3})
    stats = window[window_code >= 0].groupby(["rank", "code"])["us"].agg(
        calls="size", total_us="sum", mean_us="mean", min_us="min", max_us="max", std_us="std").reindex(key)
    stats["calls"] = stats["calls"].fillna(0).astype(np.int64)
    stats["total_us"] = stats["total_us"].fillna(0.0)
    # One call: 0, as HolisticTraceAnalysis fills it; none in the window: no spread to speak of (NaN).
    stats["std_us"] = np.where(stats["calls"] == 1, 0.0, stats["std_us"])
    out.insert(1, "name", pd.array(names.astype(str)[out["code"].to_numpy()], dtype=str))
    out = out.drop(columns="code")
    out = pd.concat([out, stats.reset_index(drop=True)], axis=1)
    kind_total = out.groupby(["rank", "kind"])["total_us"].transform("sum")
    out["kind_share_pct"] = np.where(kind_total > 0, out["total_us"] / kind_total * 100, np.nan)
    out = out.sort_values(["rank", "total_us", "trace_us"], ascending=[True, False, False], ignore_index=True)
    return out[_OWN]


def _kinds(every: pd.DataFrame, kinds: pd.Index) -> pd.Series:
    """Per (rank, code): a name's kind, the one most of its classified events have (ties: the first in text order,
    as ``Series.mode`` orders them); events launched before the trace have none of their own."""
    counts = every[every["kind"].to_numpy() >= 0].groupby(["rank", "code", "kind"]).size().reset_index(name="n")
    counts["text"] = np.asarray(kinds, dtype=object)[counts["kind"].to_numpy()]
    counts = counts.sort_values(["rank", "code", "n", "text"], ascending=[True, True, False, True])
    return counts.drop_duplicates(["rank", "code"]).set_index(["rank", "code"])["text"]


def rank_spread(kernels: pd.DataFrame) -> pd.DataFrame:
    """The run's kernel table with ``rank_spread_pct``: (largest - smallest) / mean of each name's total_us over
    the ranks that run it (0 on one rank)."""
    totals = kernels.groupby("name")["total_us"]
    spread = (totals.transform("max") - totals.transform("min")) / totals.transform("mean") * 100
    return kernels.assign(rank_spread_pct=spread.where(totals.transform("mean") > 0))[list(KERNEL_COLUMNS)]
