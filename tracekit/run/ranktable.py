"""The run's rank table: one row per rank, the columns ``schema.RANK_COLUMNS`` describe."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.events import metrics
from tracekit.rank.analyze import RankResult
from tracekit.run import crossrank, whatruns
from tracekit.schema import RANK_COLUMNS


def rank_table(results: list[RankResult], steps: pd.DataFrame, collectives: pd.DataFrame) -> pd.DataFrame:
    """``Summary.ranks`` before the P2P waits join it: one row per rank (``schema.RANK_COLUMNS`` first), from each
    rank's breakdown, its window steps, all-reduce totals, collective waits and FLOPs."""
    base = pd.DataFrame({"rank": [r.meta.rank for r in results], "device": [r.device for r in results]})
    in_window = steps[steps["in_window"].astype(bool)] if len(steps) else steps
    per_step = in_window.groupby("rank").agg(steps=("step", "size"), step_time_us=("step_us", "mean")).reset_index()
    breakdown = pd.concat([r.breakdown for r in results], ignore_index=True)
    in_window_calls = collectives[collectives["in_window"].astype(bool)]
    table = (base.merge(per_step, on="rank", how="left")
             .merge(breakdown, on="rank", how="left")
             .merge(metrics.allreduce_totals(in_window_calls), on="rank", how="left")
             .merge(crossrank.rank_waits(collectives), on="rank", how="left")
             .merge(whatruns.rank_flops(steps), on="rank", how="left"))
    table["steps"] = table["steps"].fillna(0).astype(int)
    table["allreduce_count"] = table["allreduce_count"].fillna(0).astype(int)
    # No all_reduce at all: zero calls, zero time and zero bytes are all known.
    none = table["allreduce_count"] == 0
    table.loc[none, "allreduce_us"] = 0.0
    table.loc[none, "allreduce_bytes"] = 0.0
    table["last_arrivals"] = table["last_arrivals"].astype("Int64")  # missing: no collective matched on another rank
    # A number column that only unknowns (NaN) reached as objects is a float one; text columns stay as they are.
    objects = [c for c in table.columns if table[c].dtype == object]
    retyped = table[objects].infer_objects()
    table = table.assign(**{c: t for c, t in retyped.items() if pd.api.types.is_numeric_dtype(t)})
    table["p2p_wait_us"] = np.nan  # filled by commdims.with_p2p_wait
    return table[list(RANK_COLUMNS) + [c for c in table.columns if c not in RANK_COLUMNS]]
