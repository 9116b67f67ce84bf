"""One rank's timeline: device events in lanes (GPU streams, CPU threads), coloured by kind, drawn with plotly. On a
GPU rank the host threads' ops and runtime calls (the launches) get lanes of their own under the streams.

It stays responsive on 100k+ events because it never draws more than about two bars per pixel per lane:
events nested inside a longer one on the same lane are hidden by it, events at least a pixel wide are drawn
one by one, and the rest are binned per lane and kind into bars that say how many events they hold.
The events come from ``tracekit.read.reader.read_rank`` + ``tracekit.events.classify.classify``; the one file read here
is for the names of the CPU threads (``thread_names``: Kineto's ``thread_name`` metadata, which the reader skips).

>>> events = pd.DataFrame({"lane": "stream 7", "kind": "compute", "start_us": [0.0, 10.0, 10.5],
...                        "dur_us": [8.0, 0.2, 0.2], "name": ["gemm", "a", "b"], "step": 1})
>>> bars(events, 0, 20, width_px=10)[["start_us", "n", "label"]].values.tolist()  # 2 us per pixel
[[0.0, 1, 'gemm (8.0 us)'], [10.0, 2, '2 compute events, 0.4 us busy']]
"""

from __future__ import annotations

import re

import msgspec
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tracekit.errors import TracekitError
from tracekit.events.classify import STEP_NAME
from tracekit.read.categories import DEVICE_CATEGORIES, RUNTIME_CATEGORIES
from tracekit.read.files import as_path, load_bytes
from tracekit.render.charts import TITLE, TOP

KIND_COLORS = {"step": "#D3D3D3", "compute": "#4C78A8", "comm": "#E45756", "memory": "#F58518", "idle": "#BAB0AC",
               "host": "#72B7B2", "launch": "#B279A2"}
# A GPU rank's host events drawn on their thread's lane: operators and annotations ("host"), runtime calls ("launch").
HOST_KINDS = {"cpu_op": "host", "user_annotation": "host", **{c: "launch" for c in RUNTIME_CATEGORIES}}
LANE_COLUMNS = ("lane", "kind", "start_us", "dur_us", "name", "step")
BAR_COLUMNS = ("lane", "kind", "start_us", "dur_us", "n", "label")
MAX_SHADED_GAPS = 200
MAIN_THREAD = "main thread"  # the thread whose id is its process's: the one that runs the Python script


class _Meta(msgspec.Struct, gc=False):
    ph: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    args: msgspec.Raw = msgspec.Raw()


class _Named(msgspec.Struct, gc=False):
    name: str = ""


class _MetaTrace(msgspec.Struct, gc=False):
    traceEvents: list[_Meta] | None = None


_META_DECODER = msgspec.json.Decoder(_MetaTrace | list[_Meta])
_KINETO_NAME = re.compile(r"thread \S+ \((.*)\)")  # Kineto writes "thread 1124 (pt_gloo_runloop)"


def thread_names(path) -> dict[str, str]:
    """The CPU threads' names in a trace file, by thread id as the events table writes it (``'1124'``), from its
    ``thread_name`` metadata events (``"ph": "M"``): ``main thread`` for the thread whose id is its process's, else
    the name the thread gave itself (a thread inherits its process's name until it sets its own, so a later name
    equal to the main thread's is the inherited one). Empty when the file holds none or cannot be read."""
    try:
        trace = _META_DECODER.decode(load_bytes(as_path(path)))
    except (msgspec.MsgspecError, TracekitError):
        return {}
    events = trace if isinstance(trace, list) else trace.traceEvents or []
    seen: dict[tuple[str, str], list[str]] = {}
    for e in events:
        if e.ph == "M" and e.name == "thread_name" and e.tid is not None:
            try:
                name = msgspec.json.decode(e.args, type=_Named).name.strip() if len(e.args) else ""
            except msgspec.MsgspecError:
                continue
            match = _KINETO_NAME.fullmatch(name)
            if match and match.group(1).strip():
                name = match.group(1).strip()
            if name:
                seen.setdefault((str(e.pid), str(e.tid)), []).append(name)
    out: dict[str, str] = {}
    for (pid, tid), names in seen.items():
        inherited = seen.get((pid, pid), [None])[0]
        own = [n for n in names if n != inherited]
        out.setdefault(tid, MAIN_THREAD if tid == pid else (own or names)[-1])
    return out


def lane_names(lanes, threads: dict[str, str] | None = None) -> dict[str, str]:
    """The label of each lane: a ``thread T`` lane by its thread's name in ``threads`` (``thread_names``), with
    ``· T`` added where two threads share a name; other lanes (and threads without a name) as they are."""
    threads = threads or {}
    named = {lane: threads.get(lane.split(" ", 1)[1], "") if lane.startswith("thread ") else ""
             for lane in dict.fromkeys(lanes)}
    twice = {n for n in named.values() if n and list(named.values()).count(n) > 1}
    return {lane: (f"{n} · {lane.split(' ', 1)[1]}" if n in twice else n) if n else lane for lane, n in named.items()}


def lanes(events: pd.DataFrame, origin_ns: int) -> pd.DataFrame:
    """Classified events of one rank -> one row per drawn event: lane, kind, start_us (from ``origin_ns``), dur_us,
    name, step. Device events go to ``stream N`` (GPU) or ``thread T`` (CPU-only ranks); ProfilerSteps to ``steps``.
    On a GPU rank the host threads' operators, annotations and runtime calls (``HOST_KINDS``) go to ``thread T``."""
    ok = (events["dur_ns"] >= 0).to_numpy()
    classified = events["kind"].notna().to_numpy()
    dev = events[ok & classified]
    on_gpu = dev["cat"].isin(DEVICE_CATEGORIES).to_numpy()
    lane = np.where(on_gpu, "stream " + dev["stream"].astype(str), "thread " + dev["tid"].astype(str))
    names = events["name"].cat.categories if isinstance(events["name"].dtype, pd.CategoricalDtype) else None
    is_step = (events["name"].isin(names[names.str.match(STEP_NAME.pattern)]) if names is not None
               else events["name"].astype(str).str.match(STEP_NAME.pattern)).to_numpy()
    steps = events[ok & is_step]
    steps = steps[steps["cat"].astype(str) != "gpu_user_annotation"].drop_duplicates("name")  # the CPU copy
    # A CPU-only rank's threads are its device lanes already; a GPU rank's host work is drawn beside its streams.
    cat = events["cat"].astype(str)
    host = events[ok & ~classified & ~is_step & cat.isin(list(HOST_KINDS)).to_numpy()] if on_gpu.any() \
        else events.iloc[:0]
    out = pd.concat([
        pd.DataFrame({"lane": lane, "kind": dev["kind"].astype(str).to_numpy(), "ts_ns": dev["ts_ns"].to_numpy(),
                      "dur_ns": dev["dur_ns"].to_numpy(), "name": dev["name"].astype(str).to_numpy(),
                      "step": dev["step"].to_numpy()}),
        pd.DataFrame({"lane": ("thread " + host["tid"].astype(str)).to_numpy(),
                      "kind": host["cat"].astype(str).map(HOST_KINDS).to_numpy(), "ts_ns": host["ts_ns"].to_numpy(),
                      "dur_ns": host["dur_ns"].to_numpy(), "name": host["name"].astype(str).to_numpy(),
                      "step": host["step"].to_numpy() if "step" in host else -1}),
        pd.DataFrame({"lane": "steps", "kind": "step", "ts_ns": steps["ts_ns"].to_numpy(),
                      "dur_ns": steps["dur_ns"].to_numpy(), "name": steps["name"].astype(str).to_numpy(),
                      "step": steps["step"].to_numpy() if "step" in steps else -1}),
    ], ignore_index=True)
    return pd.DataFrame({
        "lane": out["lane"], "kind": out["kind"], "start_us": (out["ts_ns"].to_numpy() - origin_ns) / 1e3,
        "dur_us": out["dur_ns"].to_numpy() / 1e3, "name": out["name"], "step": out["step"],
    }).sort_values("start_us", ignore_index=True)


def bars(events: pd.DataFrame, t0_us: float, t1_us: float, width_px: int = 1200, bin_px: int = 2) -> pd.DataFrame:
    """What to draw of ``events`` (``lanes()`` rows) between ``t0_us`` and ``t1_us`` on ``width_px`` pixels.

    Returns lane, kind, start_us, dur_us, n (events the bar stands for: 1 = one event), label (for hovering).
    At most about ``width_px / bin_px`` binned bars per lane and kind, plus at most ``width_px`` single ones.
    """
    if t1_us <= t0_us or events.empty:
        return pd.DataFrame(columns=list(BAR_COLUMNS))
    start = events["start_us"].to_numpy()
    end = start + events["dur_us"].to_numpy()
    seen = (start < t1_us) & (end > t0_us)
    ev = pd.DataFrame({"lane": events["lane"].to_numpy()[seen], "kind": events["kind"].to_numpy()[seen],
                       "s": np.maximum(start[seen], t0_us), "e": np.minimum(end[seen], t1_us),
                       "name": events["name"].to_numpy()[seen]})
    # Longest first at equal starts, so a parent hides its children; a partial overlap keeps its uncovered tail.
    ev = ev.assign(neg=ev["s"] - ev["e"]).sort_values(["lane", "s", "neg"], ignore_index=True)
    reach = ev.groupby("lane", sort=False)["e"].cummax().groupby(ev["lane"], sort=False).shift()
    ev["s"] = np.maximum(ev["s"].to_numpy(), reach.fillna(-np.inf).to_numpy())
    ev = ev[ev["e"] > ev["s"]]
    us_per_px = (t1_us - t0_us) / width_px
    wide = (ev["e"] - ev["s"]) >= us_per_px
    single = ev[wide]
    single = pd.DataFrame({
        "lane": single["lane"], "kind": single["kind"], "start_us": single["s"], "dur_us": single["e"] - single["s"],
        "n": 1, "label": single["name"].astype(str) + _text(" (%.1f us)", single["e"] - single["s"]),
    })
    small = ev[~wide]
    bin_ = np.floor((small["s"].to_numpy() - t0_us) / (us_per_px * bin_px)).astype(np.int64)
    binned = small.assign(bin=bin_, busy=small["e"] - small["s"]).groupby(["lane", "kind", "bin"], sort=False).agg(
        start_us=("s", "min"), end=("e", "max"), n=("s", "size"), busy=("busy", "sum")).reset_index()
    binned = pd.DataFrame({
        "lane": binned["lane"], "kind": binned["kind"], "start_us": binned["start_us"],
        "dur_us": np.maximum(binned["end"] - binned["start_us"], us_per_px), "n": binned["n"],
        "label": _text("%d ", binned["n"]) + binned["kind"].astype(str) + _text(" events, %.1f us busy", binned["busy"]),
    })
    return pd.concat([single, binned], ignore_index=True)[list(BAR_COLUMNS)]


def _text(pattern: str, values: pd.Series) -> pd.Series:
    """Numbers as text by a printf pattern, index kept; empty in, empty strings out."""
    return pd.Series(np.char.mod(pattern, values.to_numpy()), index=values.index, dtype=object)


def lane_order(names) -> list[str]:
    """Steps on top, then GPU streams and CPU threads by number, then idle."""
    def key(name: str):
        group = {"steps": 0, "stream": 1, "thread": 2, "idle": 3}.get(name.split(" ")[0], 2)
        number = name.split(" ", 1)[1] if " " in name else ""
        return (group, int(number) if number.lstrip("-").isdigit() else float("inf"), name)
    return sorted(set(names), key=key)


def figure(drawn: pd.DataFrame, t0_us: float, t1_us: float, gaps: pd.DataFrame | None = None,
           title: str = "Timeline", threads: dict[str, str] | None = None) -> go.Figure:
    """The timeline of ``bars()`` output: one lane per row, times in ms; the longest gaps in view shaded. CPU thread
    lanes are labelled by ``threads`` (``thread_names``: name by thread id), the thread id in the hover."""
    order = lane_order(drawn["lane"])
    labels = lane_names(order, threads)
    fig = go.Figure()
    for (kind, many), group in drawn.groupby([drawn["kind"], drawn["n"] > 1], sort=True):
        where = [f"{labels[lane]} (tid {lane.split(' ', 1)[1]})" if lane.startswith("thread ") and labels[lane] != lane
                 else lane for lane in group["lane"]]
        fig.add_bar(orientation="h", y=group["lane"], x=group["dur_us"] / 1e3, base=group["start_us"] / 1e3,
                    name=f"{kind} (binned)" if many else kind, marker_color=KIND_COLORS.get(kind, "#888"),
                    marker_line_width=0, opacity=0.55 if many else 1.0, hovertext=group["label"], customdata=where,
                    hovertemplate="%{hovertext}<br>%{base:,.3f} ms<extra>%{customdata}</extra>")
    shapes = []
    if gaps is not None and len(gaps):
        in_view = gaps[(gaps["start_us"] < t1_us) & (gaps["start_us"] + gaps["dur_us"] > t0_us)]
        min_us = (t1_us - t0_us) / 600  # narrower than a couple of pixels: the idle lane shows it
        for g in in_view[in_view["dur_us"] >= min_us].nlargest(MAX_SHADED_GAPS, "dur_us").itertuples():
            shapes.append(dict(type="rect", xref="x", yref="paper", x0=g.start_us / 1e3, x1=(g.start_us + g.dur_us) / 1e3,
                               y0=0, y1=1, fillcolor=KIND_COLORS["idle"], opacity=0.25, line_width=0, layer="below"))
    # The title at the top left and the legend under the chart: the top right is the toolbar's (modebar).
    fig.update_layout(
        title=dict(text=title, **TITLE), barmode="overlay", template="plotly_white", shapes=shapes,
        height=180 + 36 * max(len(order), 1), margin=dict(l=90, r=20, t=TOP, b=100), bargap=0.25,
        legend=dict(orientation="h", yref="container", yanchor="bottom", y=0.01, xanchor="left", x=0),
        xaxis=dict(title="ms from the run's start", range=[t0_us / 1e3, t1_us / 1e3]),
        yaxis=dict(type="category", categoryorder="array", categoryarray=order[::-1], tickmode="array",
                   tickvals=order, ticktext=[labels[lane] for lane in order], automargin=True),
    )
    return fig


def gap_lane(gaps: pd.DataFrame) -> pd.DataFrame:
    """A rank's gaps (``summary.gaps`` rows) as ``lanes()`` rows on the ``idle`` lane, so they bin like events."""
    cause = gaps["cause"].astype(str) if "cause" in gaps else pd.Series("", index=gaps.index)
    return pd.DataFrame({"lane": "idle", "kind": "idle", "start_us": gaps["start_us"].to_numpy(),
                         "dur_us": gaps["dur_us"].to_numpy(), "name": ("idle " + cause).str.strip().to_numpy(),
                         "step": gaps["step"].to_numpy() if "step" in gaps else -1})
