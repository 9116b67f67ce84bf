"""A pipeline rank's step, split into its stages' compute and its bubble: fill, wait and drain.

The bubble is the step's time in which the rank runs nothing but stage-to-stage transfers (``pipeline.P2P_DEVICE``)
or nothing at all: ``bubble_us = step_us - busy``, where busy is the union of every other device event (compute,
copies, the collectives of other parallel dimensions). It is split at the rank's first forward block (``fill``:
before it) and its last block's end (``drain``: after it); ``wait`` is the bubble between. A P2P transfer that no
other work overlaps is inside the bubble: from one rank's trace it cannot be told from the wait for the peer.

One row per stage and step. ``fwd_us`` and ``bwd_us`` (B, I and W blocks) are the stage's own compute; on a rank
that holds several stages (interleaved schedules) the bubble columns and ``other_busy_us`` are the rank's, the same on
each of its stages' rows (the rank idles for all of them at once). ``other_busy_us``: the rank's busy time outside its
blocks (the optimizer, the loss outside a block, other dimensions' collectives), so for one stage per rank
``compute_us + other_busy_us + bubble_us = step_us``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit import intervals as iv
from tracekit.events import pipeline
from tracekit.events.pipeline import P2P_DEVICE

STAGE_STEP_COLUMNS = ("rank", "stage", "step", "microbatches", "fwd_us", "bwd_us", "compute_us", "bubble_us",
                      "fill_us", "drain_us", "wait_us", "bubble_pct", "other_busy_us", "step_us")


def busy_intervals(dev: pd.DataFrame) -> iv.Intervals:
    """The union of a rank's device events (start_ns, end_ns, kind, name) but its P2P transfers."""
    names = dev["name"].astype("category").cat.categories.astype(str)
    p2p_names = names[np.fromiter((P2P_DEVICE.search(n) is not None for n in names), dtype=bool, count=len(names))]
    p2p = (dev["kind"] == "comm").to_numpy() & dev["name"].isin(p2p_names).to_numpy()
    return iv.merge(dev["start_ns"].to_numpy()[~p2p], dev["end_ns"].to_numpy()[~p2p])


def stage_steps(blocks: pd.DataFrame, busy: iv.Intervals, steps: pd.DataFrame) -> pd.DataFrame:
    """``STAGE_STEP_COLUMNS`` of one rank: ``blocks`` (``pipeline.pipeline_blocks``), its busy time
    (``busy_intervals``) and its steps (step, start_ns, step_us as ``metrics.step_breakdown``). Steps without a
    block have no row."""
    if blocks.empty or steps.empty:
        return _empty()
    windows = steps[steps["step"].isin(blocks["step"])].sort_values("step", ignore_index=True)
    lo = windows["start_ns"].to_numpy(dtype=np.int64)
    hi = lo + np.round(windows["step_us"].to_numpy(dtype=np.float64) * 1e3).astype(np.int64)
    mine = blocks[blocks["step"].isin(windows["step"])]
    forward = mine[mine["phase"] == "F"].groupby("step")["start_ns"].min()
    first = mine.groupby("step")["start_ns"].min()
    first = forward.reindex(windows["step"]).fillna(first.reindex(windows["step"])).to_numpy(dtype=np.int64)
    last = mine.groupby("step")["end_ns"].max().reindex(windows["step"]).to_numpy(dtype=np.int64)
    first, last = np.clip(first, lo, hi), np.clip(np.maximum(last, first), lo, hi)
    busy_in = iv.covered_within(busy, lo, hi)
    # Idle time in each part: the part's length less the busy time in it.
    fill = (first - lo) - iv.covered_within(busy, lo, first)
    drain = (hi - last) - iv.covered_within(busy, last, hi)
    wait = (last - first) - iv.covered_within(busy, first, last)
    step_ns = hi - lo
    rank_rows = pd.DataFrame({"step": windows["step"].to_numpy(), "fill_us": fill / 1e3, "drain_us": drain / 1e3,
                              "wait_us": wait / 1e3, "bubble_us": (step_ns - busy_in) / 1e3,
                              "busy_us": busy_in / 1e3, "step_us": windows["step_us"].to_numpy(dtype=np.float64)})
    per_stage = (mine.assign(fwd=np.where(mine["phase"] == "F", mine["compute_us"], 0.0),
                             bwd=np.where(mine["phase"] != "F", mine["compute_us"], 0.0),
                             fmb=mine["microbatch"].where(mine["phase"] == "F"))
                 .groupby(["stage", "step"], as_index=False)
                 .agg(fwd_us=("fwd", "sum"), bwd_us=("bwd", "sum"), microbatches=("fmb", "nunique")))
    per_stage["compute_us"] = per_stage["fwd_us"] + per_stage["bwd_us"]
    in_blocks = mine.groupby("step")["compute_us"].sum()
    out = per_stage.merge(rank_rows, on="step", how="left")
    out["other_busy_us"] = np.maximum(out["busy_us"] - out["step"].map(in_blocks).to_numpy(), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["bubble_pct"] = np.where(out["step_us"] > 0, out["bubble_us"] / out["step_us"] * 100, np.nan)
    out["rank"] = int(blocks["rank"].iloc[0])
    return out[list(STAGE_STEP_COLUMNS)].sort_values(["step", "stage"], ignore_index=True)


def rank_pipeline(pg_config, rank: int, host: pd.DataFrame, dev_all: pd.DataFrame, steps: pd.DataFrame,
                  step_rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One rank's pipeline blocks (``pipeline.pipeline_blocks``) and stage x step rows (``stage_steps``, with
    in_window), both empty on a rank that runs no pipeline. ``host``: its host ops (the reader's ops table, or the
    events table); ``dev_all``: its device events (``metrics.all_device_events``); ``steps``: its step table;
    ``step_rows``: ``metrics.step_breakdown`` with in_window."""
    marks = pipeline.pipeline_marks(host)
    compute = dev_all[(dev_all["kind"] == "compute").to_numpy()]
    launch = compute["launch_ns"].to_numpy()
    compute = pd.DataFrame({"start_ns": compute["start_ns"].to_numpy(), "end_ns": compute["end_ns"].to_numpy(),
                            "when_ns": np.where(launch >= 0, launch, compute["start_ns"].to_numpy())})
    place = pipeline.pipeline_position(pg_config, rank)
    blocks = pipeline.pipeline_blocks(marks, compute, steps, None if place is None else place[0])
    windows = step_rows
    if steps.empty and len(blocks):  # no steps: the rank's whole trace is one window, step -1 (as the blocks')
        lo, hi = int(dev_all["start_ns"].min()), int(dev_all["end_ns"].max())
        windows = pd.DataFrame({"step": [-1], "start_ns": [lo], "step_us": [(hi - lo) / 1e3], "in_window": [True]})
    rows = stage_steps(blocks, busy_intervals(dev_all), windows)
    rows["in_window"] = rows["step"].isin(windows.loc[windows["in_window"].astype(bool), "step"]).to_numpy()
    return blocks, rows



def _empty() -> pd.DataFrame:
    ints = ("rank", "stage", "step", "microbatches")
    return pd.DataFrame({c: pd.Series(dtype=np.int64 if c in ints else np.float64) for c in STAGE_STEP_COLUMNS})
