"""Which host annotations are a rank's steps (``ProfilerStep#N``, an engine's own, or a user's pattern), and the
step of each timestamp."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
# The steps of a trace without ProfilerStep: engines' own step annotations, tried in this order (the first that
# names an annotation is used). Each is a full-name match (``re.fullmatch``).
ENGINE_STEPS = (
    # vLLM/SGLang-style scheduler steps, one per batch: ``step[DECODE bs=16]``, ``step[PREFILL bs=1]``.
    re.compile(r"step\[.*\]"),
    # vLLM V1's GPU model runner, one per batch: ``execute_context_2(512)_generation_14(14)``.
    re.compile(r"execute_context_\d+\(\d+\)_generation_\d+\(\d+\)"),
    # The model runner's entry point, as engines and custom loops annotate it (``record_function("execute_model")``).
    re.compile(r"execute_model"),
)
_STEP_CATS = ("user_annotation", "cpu_op", "Operator")  # host annotations (2021-era traces: Operator)
STEP_COLUMNS = ["rank", "step", "start_ns", "end_ns", "row"]


def step_table(events: pd.DataFrame, pattern: str | None = None) -> pd.DataFrame:
    """One row per step (``find_steps``): rank, step, start_ns, end_ns, row (its events-table row)."""
    return find_steps(events, pattern)[0]


def find_steps(events: pd.DataFrame, pattern: str | None = None) -> tuple[pd.DataFrame, str]:
    """(step table, where the steps came from) of one rank's events.

    Without ``pattern``: each ``ProfilerStep#N`` annotation is step N; a trace with none takes its steps from the
    first of ``ENGINE_STEPS`` that names a host annotation, numbered 0, 1, ... in time order. ``pattern``: a regex;
    each host annotation whose name it matches (``re.search``: anchor it with ^ and $ for a whole name) is a
    step, numbered in time order, whether or not the trace has ProfilerStep. An annotation that starts inside an
    earlier step of the same rank is nested in it, not a step. The source is ``"ProfilerStep"``,
    ``"detected: <regex>"``, ``"step_pattern: <regex>"``, ``"none"``, or ``"none: step_pattern <regex> matched no
    annotation"``.
    """
    names = events["name"].cat.categories
    host = events["cat"].isin(_STEP_CATS).to_numpy() & (events["dur_ns"] >= 0).to_numpy()
    if pattern is not None:
        regex = re.compile(pattern)
        steps = _numbered(events, host, names[[regex.search(n) is not None for n in names]])
        return steps, f"step_pattern: {pattern}" if len(steps) else f"none: step_pattern {pattern} matched no annotation"
    # A number near or past int64's end (ProfilerStep#99999999999999999999) names no step a profiler counted: an
    # annotation (the numbers are added to and subtracted: #N + 1 must still be an int64).
    step_names = names[[(m := STEP_NAME.match(n)) is not None and int(m.group(1)) < 2**62 for n in names]]
    # The host annotation defines the step; a device-side copy (gpu_user_annotation) would move it onto GPU time.
    at = np.flatnonzero(events["name"].isin(step_names).to_numpy() & (events["dur_ns"] >= 0).to_numpy()
                        & (events["cat"] != "gpu_user_annotation").to_numpy())
    if len(at):
        rows = events.iloc[at]
        out = pd.DataFrame({
            "rank": rows["rank"].to_numpy(),
            "step": rows["name"].astype(str).str.extract(STEP_NAME.pattern, expand=False).astype(np.int64).to_numpy(),
            "start_ns": rows["ts_ns"].to_numpy(),
            "end_ns": (rows["ts_ns"] + rows["dur_ns"]).to_numpy(),
            "row": at.astype(np.int64),
        })
        # A step recorded twice on the host counts once.
        return (out.drop_duplicates(["rank", "step"]).sort_values(["rank", "start_ns"], ignore_index=True),
                "ProfilerStep")
    for regex in ENGINE_STEPS:
        wanted = names[[regex.fullmatch(n) is not None for n in names]]
        if len(wanted) and (host & events["name"].isin(wanted).to_numpy()).any():
            return _numbered(events, host, wanted), f"detected: {regex.pattern}"
    return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in STEP_COLUMNS}), "none"


def _numbered(events: pd.DataFrame, host: np.ndarray, wanted: pd.Index) -> pd.DataFrame:
    """The host annotations named ``wanted`` as steps 0, 1, ... per rank in time order, nested ones left out."""
    at = np.flatnonzero(host & events["name"].isin(wanted).to_numpy())
    rows = events.iloc[at]
    out = pd.DataFrame({"rank": rows["rank"].to_numpy(), "start_ns": rows["ts_ns"].to_numpy(),
                        "end_ns": (rows["ts_ns"] + rows["dur_ns"]).to_numpy(), "row": at.astype(np.int64)})
    out = out.sort_values(["rank", "start_ns", "end_ns"], ascending=[True, True, False], ignore_index=True)
    reach = out.groupby("rank")["end_ns"].cummax().groupby(out["rank"]).shift(1)
    out = out[~(out["start_ns"] < reach).to_numpy()].reset_index(drop=True)  # starts inside an earlier step
    out.insert(1, "step", out.groupby("rank").cumcount().astype(np.int64))
    return out[STEP_COLUMNS]


def assign_steps(rank: np.ndarray, ts_ns: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """The step whose annotation contains each timestamp, or -1."""
    result = np.full(len(ts_ns), -1, dtype=np.int64)
    for r, group in steps.groupby("rank", sort=False):
        rows = np.flatnonzero(rank == r)
        starts = group["start_ns"].to_numpy()
        i = np.searchsorted(starts, ts_ns[rows], side="right") - 1
        inside = (i >= 0) & (ts_ns[rows] < group["end_ns"].to_numpy()[np.maximum(i, 0)])
        result[rows[inside]] = group["step"].to_numpy()[i[inside]]
    return result
