"""The app's one door to tracekit's analysis: every read of a trace goes through these cached functions.

Pages never call tracekit's reader or ``summarize`` themselves; they get what these return and only read it.
The cached objects are shared between sessions, so nothing may change them. Each function takes the run
folder's ``paths.fingerprint`` as a key, so a run that is written again is read again.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

import tracekit
from app.paths import is_trace_name
from tracekit.render import timeline
from tracekit.events.classify import classify
from tracekit.api import read_run_json
from tracekit.read.reader import read_rank


SMALL_RUN = 8  # trace files read in this process; larger runs use summarize's worker processes


@st.cache_resource(max_entries=16, show_spinner="Reading the traces…")
def summary(folder: str, key: tuple) -> tracekit.Summary:
    """``tracekit.summarize`` of a run folder (``key``: its ``paths.fingerprint``)."""
    return tracekit.summarize(folder, **_options(key))


@st.cache_resource(max_entries=8, show_spinner="Replaying the run's scenarios…")
def whatif(folder: str, key: tuple) -> pd.DataFrame:
    """``tracekit.whatif`` of a run folder's Summary, every scenario (``key``: its ``paths.fingerprint``)."""
    return tracekit.whatif(summary(folder, key))


def _options(key: tuple) -> dict:
    """No on-disk cache (the viewer reads and writes nothing outside its root folders but a held Summary's event
    tables, kept in a temporary folder removed with it; this module caches in memory), and no worker processes for
    a small run, whose reading takes less time than starting them."""
    small = sum(is_trace_name(entry[0]) for entry in key) <= SMALL_RUN
    return {"cache": False, "workers": 1 if small else None}


@st.cache_resource(max_entries=4, show_spinner="Reading one rank's events…")
def rank_lanes(file: str, rank: int, origin_ns: int, key: tuple) -> pd.DataFrame:
    """The timeline rows (``tracekit.render.timeline.lanes``) of one rank's trace file, times from the run's origin."""
    meta, events, comm_args = read_rank(file, default_rank=rank)
    device_ranks = [meta.rank] if meta.device_evidence is not None else []  # as the analysis decides it
    return timeline.lanes(classify(events, comm_args, device_ranks=device_ranks), origin_ns)


@st.cache_resource(max_entries=4, show_spinner=False)
def thread_names(file: str, key: tuple) -> dict[str, str]:
    """The names of a trace file's CPU threads by thread id (``tracekit.render.timeline.thread_names``)."""
    return timeline.thread_names(file)


@st.cache_resource(max_entries=8, show_spinner="Comparing…")
def comparison(folder_a: str, key_a: tuple, folder_b: str, key_b: tuple):
    """``tracekit.compare`` of two runs: its ``table`` (metric, unit, a, b, ratio b / a) and its ``notes``."""
    return tracekit.compare(summary(folder_a, key_a), summary(folder_b, key_b))


@st.cache_resource(max_entries=256, show_spinner=False)
def workload_run(folder: str, stamp: int):
    """The workload's ``run.json`` beside a run's traces (a ``WorkloadRun``), None without a readable one (``stamp``:
    the file's modification time, so a rewritten file is read again)."""
    return read_run_json(folder)


def workload_of(folder) -> object:
    """``workload_run`` of a run folder, keyed by its run.json's modification time."""
    path = Path(folder) / "run.json"
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return None
    return workload_run(str(folder), stamp)
