"""Where optimisation pays: each op's time on the critical path, and what the step would save if it ran at its
roofline, by replaying the run with that op's events shortened to their roofline time.

An op's events in the graph are its own (CPU-only ranks: the ops are the device work) or the kernels it launched
(``kernel_ops``: each kernel name's launching op). Its roofline factor on a rank is ``roofline_us / measured``
(``summary.ops``: device time on device ranks, host time on CPU-only ranks), at most 1. The replay scales the own
time (``tail``) of the op's nodes by it; everything else moves as the graph says, so an op off the critical path
saves nothing. Only ops whose roofline is known (a known device, shapes recorded) are candidates, the ``top`` of
them by critical-path time times their gap to the roofline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.opschema import OPTIMIZATION_COLUMNS
from tracekit.predict import replay, stepbounds



def optimization(graph: pd.DataFrame, model: replay.Model, window_steps: pd.DataFrame, ops: pd.DataFrame,
                 kernel_ops: pd.DataFrame, device_ranks: set[int], path_events: pd.DataFrame,
                 top: int = 5) -> pd.DataFrame:
    """One row per candidate op, largest predicted saving first (``OPTIMIZATION_COLUMNS``)."""
    empty = pd.DataFrame(columns=list(OPTIMIZATION_COLUMNS))
    if graph.empty or ops.empty or not ops["roofline_us"].notna().any():
        return empty
    measured = np.where(ops["rank"].isin(device_ranks), ops["device_us"], ops["host_total_us"]).astype(float)
    known = ops.assign(measured_us=measured)
    known = known[np.isfinite(known["roofline_us"]) & (known["measured_us"] > 0)]
    if known.empty:  # rooflines known only for ops that took no measured time: nothing to shorten
        return empty
    factor = {(int(r), str(n)): min(float(f), 1.0) for r, n, f in
              zip(known["rank"], known["name"], known["roofline_us"] / known["measured_us"])}
    node_op = _node_ops(graph, kernel_ops, device_ranks)
    rank = graph["rank"].to_numpy()
    own = np.isin(graph["cat"].astype(str).to_numpy(), ("compute", "memory"))
    steps = max(len(window_steps[["step"]].drop_duplicates()), 1)
    on_path = _path_time(path_events, graph, node_op) / steps
    candidates = known.groupby("name", observed=True).agg(
        ranks=("rank", lambda r: tuple(sorted(int(x) for x in r))), measured_us=("measured_us", "sum"),
        roofline_us=("roofline_us", "sum"), host_copy=("host_link_bytes", lambda b: bool((b > 0).any()))).reset_index()
    candidates["critical_path_us"] = candidates["name"].map(on_path).astype(float).fillna(0.0)
    gap = candidates["critical_path_us"] * (1 - candidates["roofline_us"] / candidates["measured_us"])
    # gap is set before the filter: assigned to an empty frame, a Series would bring its index (a row of NaN)
    candidates = candidates.assign(gap=gap)[(gap > 0).to_numpy()].nlargest(top, "gap")
    if candidates.empty:
        return empty
    at = stepbounds.marks(graph)  # the same for every candidate
    base = _step_us(graph, model, model.tail, window_steps, at)
    rows = []
    for row in candidates.itertuples(index=False):
        per_rank = {r: f for (r, n), f in factor.items() if n == row.name}
        mine = own & (node_op == row.name)
        scale = np.where(mine, pd.Series(rank).map(per_rank).fillna(1.0).to_numpy(), 1.0)
        predicted = _step_us(graph, model, replay.cut(model.tail, model.tail * scale), window_steps, at)
        rows.append({"name": row.name, "ranks": row.ranks, "critical_path_us": row.critical_path_us,
                     "measured_us": row.measured_us, "roofline_us": row.roofline_us,
                     "pct_of_roofline": row.roofline_us / row.measured_us * 100, "predicted_step_us": predicted,
                     "predicted_saving_us": base - predicted,
                     "saving_pct": (base - predicted) / base * 100 if base > 0 else np.nan,  # 0 us steps: no %
                     "host_copy": row.host_copy})
    out = pd.DataFrame(rows, columns=list(OPTIMIZATION_COLUMNS))
    return out.sort_values("predicted_saving_us", ascending=False, ignore_index=True)


def _node_ops(graph: pd.DataFrame, kernel_ops: pd.DataFrame, device_ranks: set[int]) -> np.ndarray:
    """Each node's op: a kernel's launching op on device ranks, the node's own name on CPU-only ranks."""
    nodes = pd.DataFrame({"rank": graph["rank"].to_numpy().astype(np.int64),
                          "kernel": graph["name"].astype(str).to_numpy()})
    launched = nodes.merge(kernel_ops.astype({"rank": np.int64}), on=["rank", "kernel"], how="left")["op"]
    device = nodes["rank"].isin(device_ranks).to_numpy()
    return np.where(device, launched.fillna("").to_numpy(dtype=object), nodes["kernel"].to_numpy(dtype=object))


def _path_time(path_events: pd.DataFrame, graph: pd.DataFrame, node_op: np.ndarray) -> pd.Series:
    """Per op: the own time (not delays) of its events on the critical paths, us, summed over the paths."""
    own = path_events[path_events["kind"].isin(["compute", "memory"])]
    if own.empty:
        return pd.Series(dtype=float)
    op_of = dict(zip(zip(graph["rank"].astype(int), graph["name"].astype(str)), node_op))
    ops = [op_of.get((int(r), str(n)), "") for r, n in zip(own["rank"], own["name"])]
    return (own["end_us"] - own["start_us"]).groupby(np.asarray(ops, dtype=object)).sum()


def _step_us(graph, model, tail, window_steps, at: stepbounds.Marks) -> float:
    start, end = replay.simulate(model, tail=tail)
    return stepbounds.mean_step_us(stepbounds.step_times(graph, start, end, window_steps, at))
