"""Which ops leave which steps' FLOPs unknown, in words (``data_quality.unknown_flops``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

UNKNOWN_FLOPS_LISTED = 5  # steps named in ``unknown_flops_text``, and op names per step; the others counted


def _listed(texts: pd.Series) -> str:
    more = len(texts) - UNKNOWN_FLOPS_LISTED
    return ", ".join(texts.head(UNKNOWN_FLOPS_LISTED)) + (f" and {more} more ops" if more > 0 else "")


def unknown_flops_text(names, steps: np.ndarray, matmul_flops: np.ndarray) -> str:
    """Which matmul-class ops, with no FLOP count from their recorded shapes, make which steps' FLOPs unknown: per
    step, its op names with their calls, most calls first, ``'551: aten::linear x3; 560: aten::mm x1'`` ('' when
    none); ``UNKNOWN_FLOPS_LISTED`` steps and names a step at most, the others counted.
    ``matmul_flops``: each op's contribution to its step's FLOPs (NaN: unknown).

    >>> unknown_flops_text(["aten::mm", "aten::linear", "aten::linear", "aten::mm"], np.array([551, 551, 551, 552]),
    ...                    np.array([2e9, np.nan, np.nan, 4e9]))
    '551: aten::linear x2'
    """
    unknown = np.isnan(np.asarray(matmul_flops, dtype=float))
    if not unknown.any():
        return ""
    rows = np.flatnonzero(unknown)  # these rows' names only: an object per op is ~200 MB on a 1 GB trace
    picked = names.take(rows) if hasattr(names, "take") else [names[i] for i in rows]
    calls = (pd.DataFrame({"step": np.asarray(steps)[rows], "name": np.asarray(picked, dtype=object)})
             .groupby(["step", "name"], sort=True).size().reset_index(name="calls"))
    calls = calls.sort_values(["step", "calls", "name"], ascending=[True, False, True], ignore_index=True)
    calls["text"] = calls["name"].astype(str) + " x" + calls["calls"].astype(str)
    per_step = calls.groupby("step", sort=True)["text"].agg(_listed)
    listed = [f"{int(n)}: {t}" for n, t in per_step.head(UNKNOWN_FLOPS_LISTED).items()]
    more = len(per_step) - UNKNOWN_FLOPS_LISTED
    return "; ".join(listed) + (f"; and {more} more steps" if more > 0 else "")
