"""Text report sections for model-parallel runs: communication by parallelism dimension, and the send/recv pairs.

Shown where the run has P2P calls or more than one dimension (a DDP or FSDP run's report stays as it was).
"""

from __future__ import annotations

import pandas as pd

from tracekit.fmt import mb, ms


def model_parallel_lines(comm_by_dim: pd.DataFrame, p2p: pd.DataFrame) -> list[str]:
    """The two sections, or nothing for a run with one dimension and no P2P call."""
    if p2p.empty and (comm_by_dim.empty or comm_by_dim["dim"].nunique() <= 1):
        return []
    lines = []
    if len(comm_by_dim):
        shown = pd.DataFrame({
            "rank": comm_by_dim["rank"], "dim": comm_by_dim["dim"], "calls": comm_by_dim["calls"],
            "comm ms": comm_by_dim["comm_us"].map(ms), "exposed ms": comm_by_dim["exposed_us"].map(ms),
            "MB": comm_by_dim["bytes"].map(mb)})
        lines += ["Communication by parallelism dimension, per rank in the window (P2P: transfer only, its waiting "
                  "is the p2p_wait_us bubble)", _indent(shown.to_string(index=False)), ""]
    if len(p2p):
        status = p2p["status"].value_counts()
        said = ", ".join(f"{int(status.get(k, 0))} {k}" for k in ("matched", "unmatched", "cut") if status.get(k, 0))
        window = p2p[p2p["in_window"].astype(bool)]
        pairs = window.groupby(["src_rank", "dst_rank"], dropna=False)
        shown = pd.DataFrame({
            "pairs": pairs.size(), "MB": pairs["bytes"].sum(min_count=1).map(mb),
            "transfer ms": pairs["transfer_us"].sum(min_count=1).map(ms),
            "receiver waited ms": pairs["recv_wait_us"].sum(min_count=1).map(ms),
            "sender waited ms": pairs["send_wait_us"].sum(min_count=1).map(ms)}).reset_index()
        shown = shown.rename(columns={"src_rank": "from", "dst_rank": "to"}).astype({"from": "Int64", "to": "Int64"})
        lines += [f"Send/recv pairs ({said}); in the window, per sender -> receiver", _indent(shown.to_string(index=False)), ""]
    return lines


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
