"""CUDA and HIP graphs: which kernels a graph launch issued, and where a trace was recorded while graphs were captured.

One ``cudaGraphLaunch``/``hipGraphLaunch`` (``cuGraphLaunch``, suffixes such as ``_v10000`` or ``_spt``) issues every
kernel of its graph: hundreds on an inference engine's decode step, also torch.compile's cudagraph trees (replays
under ``CUDAGraphNode.replay`` / ``## Call CompiledFxGraph ...``). Most of them carry the launch's correlation id; some
carry an id that links no runtime call. ``graph_kernels`` gives those to their graph launch (the rule is in its doc).

During capture (``cudaStreamBeginCapture`` to ``cudaStreamEndCapture``, then ``*GraphInstantiate*``) launches are
recorded and nothing runs, and the steps around it run warm-ups: that part of a trace is not the job's steady work.
``capture_facts`` says which of the window's steps overlap it (``Summary.data_quality``).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.read.categories import DEVICE_CATEGORIES, RUNTIME_CATEGORIES

GRAPH_LAUNCH = re.compile(r"^(?:cuda|hip|cu)GraphLaunch(?:_\w+)?$")
BEGIN_CAPTURE = re.compile(r"^(?:cuda|hip|cu)StreamBeginCapture\w*$")
END_CAPTURE = re.compile(r"^(?:cuda|hip|cu)StreamEndCapture\w*$")
INSTANTIATE = re.compile(r"^(?:cuda|hip|cu)GraphInstantiate\w*$")


def runtime_calls(events: pd.DataFrame, pattern: re.Pattern) -> np.ndarray:
    """Per row: a runtime (or driver) call whose name matches ``pattern``."""
    names = events["name"].cat.categories
    wanted = np.fromiter((pattern.search(n) is not None for n in names), dtype=bool, count=len(names))
    if not wanted.any():  # most traces: no such call at all, so no pass over every event
        return np.zeros(len(events), dtype=bool)
    codes = events["name"].cat.codes.to_numpy()
    return events["cat"].isin(RUNTIME_CATEGORIES).to_numpy() & wanted[codes] & (codes >= 0)


def graph_kernels(events: pd.DataFrame, launch_row: np.ndarray, before_trace) -> np.ndarray:
    """``launch_row`` (the correlation links) with the device events that link no launch given to a graph launch.

    A device event E on rank r and stream s, starting at t, that no correlation id links, and that is not work
    launched before the trace (``before_trace(launch_row)``: ``classify.launched_before_trace``), belongs to the
    latest launch of s issued in [L_P, min(L_N, t)] when that launch is a graph launch. The launches of s are the
    calls that launched its linked events, and every graph launch of r (a graph's kernels run on the graph's own
    streams). L_P is the latest launch of a linked event of s starting at or before t, L_N the earliest launch of one
    starting after it (a stream runs in issue order): with the graph's other kernels linked, E falls between them.
    Where s has no linked event it is the latest graph launch before t: right when the host is late (the gaps that
    matter), possibly a later graph than the true one when the host runs far ahead of the device.
    """
    out = launch_row.copy()
    graph = runtime_calls(events, GRAPH_LAUNCH)
    if not graph.any():
        return out
    rank = events["rank"].to_numpy()
    ts = events["ts_ns"].to_numpy()
    device = events["cat"].isin(DEVICE_CATEGORIES).to_numpy()
    stream = events["stream"].to_numpy()
    early = before_trace(launch_row)
    for r in np.unique(rank[graph]):
        graph_rows = np.flatnonzero(graph & (rank == r))
        on_rank = device & (rank == r)
        loose = on_rank & (launch_row < 0) & ~early
        for s in np.unique(stream[loose]):
            _attribute(out, np.flatnonzero(loose & (stream == s)),
                       np.flatnonzero(on_rank & (stream == s) & (launch_row >= 0)), graph_rows, ts, launch_row)
    return out


def _attribute(out, loose, linked, graph_rows, ts, launch_row) -> None:
    """``graph_kernels`` on one stream: ``loose`` rows (no link), ``linked`` rows, the rank's graph launch rows."""
    linked = linked[np.argsort(ts[linked], kind="stable")]
    t = ts[loose]
    big = np.iinfo(np.int64).max
    lo, hi = np.full(len(t), -big), t.copy()
    if len(linked):
        lts = ts[launch_row[linked]]
        at = np.searchsorted(ts[linked], t, side="right")  # linked events starting at or before t: [0, at)
        before, after = at > 0, at < len(lts)
        lo[before] = np.maximum.accumulate(lts)[at[before] - 1]
        hi[after] = np.minimum(hi[after], np.minimum.accumulate(lts[::-1])[::-1][at[after]])
    # The stream's launches, by start, and which are graph launches.
    rows = np.union1d(launch_row[linked], graph_rows)
    rows = rows[np.argsort(ts[rows], kind="stable")]
    is_graph = np.isin(rows, graph_rows)
    i = np.searchsorted(ts[rows], hi, side="right") - 1
    j = np.maximum(i, 0)
    ok = (i >= 0) & (ts[rows[j]] >= lo) & is_graph[j]
    out[loose[ok]] = rows[j[ok]]


def capture_spans(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) ns of the trace's graph captures: each BeginCapture to the next EndCapture on its thread (to the
    trace's end when none follows; from its start for an EndCapture with no BeginCapture before it), and each
    GraphInstantiate call."""
    ts = events["ts_ns"].to_numpy()
    end = ts + np.maximum(events["dur_ns"].to_numpy(), 0)
    first, last = (int(ts.min()), int(end.max())) if len(events) else (0, 0)
    starts, ends = [], []
    begin, finish = runtime_calls(events, BEGIN_CAPTURE), runtime_calls(events, END_CAPTURE)
    either = np.flatnonzero(begin | finish)
    thread = (events["rank"].iloc[either].astype(str) + ":" + events["tid"].iloc[either].astype(str)).to_numpy()
    for one in np.unique(thread):
        rows = either[thread == one]
        rows = rows[np.argsort(ts[rows], kind="stable")]
        open_at = None
        for row in rows:  # a handful of calls per thread
            if begin[row]:
                open_at = ts[row] if open_at is None else open_at
            else:
                starts.append(first if open_at is None else open_at)
                ends.append(end[row])
                open_at = None
        if open_at is not None:
            starts.append(open_at)
            ends.append(last)
    inst = runtime_calls(events, INSTANTIATE)
    starts += list(ts[inst])
    ends += list(end[inst])
    return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


def capture_facts(events: pd.DataFrame, steps: pd.DataFrame, kept: pd.DataFrame | None) -> dict:
    """The data-quality facts of graph capture: ``graph_capture_calls`` (BeginCapture, EndCapture, Instantiate calls)
    and ``captured_steps``, the window's steps (``kept``; None: the whole trace is the window) that overlap a
    capture, as text: ``''`` none, ``'1, 2'``, or ``'the window'`` for a window without steps that holds one."""
    calls = (runtime_calls(events, BEGIN_CAPTURE) | runtime_calls(events, END_CAPTURE)
             | runtime_calls(events, INSTANTIATE))
    starts, ends = capture_spans(events)
    window = steps if kept is None else kept
    s, e = window["start_ns"].to_numpy(), window["end_ns"].to_numpy()
    hit = ((starts[None, :] < e[:, None]) & (ends[None, :] > s[:, None])).any(axis=1)
    captured = ", ".join(str(int(n)) for n in window["step"].to_numpy()[hit])
    if not captured and kept is None and len(starts):  # the whole trace is the window
        captured = "the window"
    return {"graph_capture_calls": int(calls.sum()), "captured_steps": captured}
