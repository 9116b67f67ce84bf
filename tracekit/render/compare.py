"""Two runs side by side (a DataParallel run against DDP, fp32 against AMP, ``--accum 1`` against ``--accum 2``).

Times are per optimizer step, averaged over the window's steps and then over ranks. The step time is split as
the steps table splits it (the TensorBoard plugin's view): compute not overlapped, overlapped communication,
exposed communication, and the rest of the step, which is shared between memory-only device time and idle in the
proportions of the rank's window totals; idle is split again by its causes. So ``compute_only_ms + overlapped_comm_ms +
exposed_comm_ms + memory_ms + idle_ms == step_time_ms``, and runs with different step counts compare fairly.
Collective counts and sizes per step are 0 for an op a run never calls; its bandwidth is then n/a.
``throughput_samples_per_s`` is the un-profiled throughput from the workload's run.json (unknown without one); every
other row is measured on the profiled steps of the traces. The ``source`` column says which, and ``notes`` flags a
pair whose two sources disagree in direction (a slower profiled step beside a higher un-profiled throughput).
``compute_only_ms`` is compute with no communication under it (the ``compute`` of the ranks table is all compute).
``ratio`` is b / a: below 1 means run b spends less (or, for throughput and bandwidth, reaches less).
``ops`` and ``kernels`` are the same per op and per device kernel name, per window step (``compare_ops``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit.events.causes import CAUSES as IDLE_CAUSES  # idle_<cause>_ms add up to idle_ms
from tracekit.fmt import NOT_APPLICABLE, figure, is_unknown, ratio
from tracekit.render import compare_ops
from tracekit.summary.model import Summary

TRACE_SOURCE = "trace"  # measured on the traces' profiled steps
THROUGHPUT_SOURCE = "run.json"  # timed by the workload on its un-profiled steps
PARTS = ("compute_only_ms", "overlapped_comm_ms", "exposed_comm_ms", "memory_ms", "idle_ms")  # add up to step_time_ms


@dataclass(frozen=True)
class Comparison:
    """``table``: one row per metric with columns metric, unit, a, b, ratio (b / a) and source. ``ops`` and ``kernels``: one
    row per op (device kernel) name with each run's calls and ms per window step, ``change_ms`` (b - a), ``ratio``
    and ``status`` (both / added / removed), largest change first; ``op_time``: which self time the ops' ms are in
    each run (device, or host on CPU-only runs). ``has_ops``/``has_kernels``: whether either run has any at all."""

    a: str
    b: str
    table: pd.DataFrame
    ops: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(compare_ops.COLUMNS)))
    kernels: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(compare_ops.COLUMNS)))
    op_time: tuple[str, str] = ("host", "host")
    has_ops: bool = False
    has_kernels: bool = False
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """Plain values: the two sources and one record per metric (NaN as None)."""
        rows = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                for r in self.table.to_dict("records")]
        return {"a": self.a, "b": self.b, "metrics": rows, "notes": list(self.notes), "op_time": {"a": self.op_time[0], "b": self.op_time[1]},
                "ops": compare_ops.records(self.ops), "kernels": compare_ops.records(self.kernels)}

    def __str__(self) -> str:
        table = self.table
        calls = table["metric"].str.replace("_median_busbw_gbps", "_calls_per_step", regex=False)
        counts = table.set_index("metric")[["a", "b"]].reindex(calls)
        shown = table.assign(**{side: [NOT_APPLICABLE if n == 0 and is_unknown(v) else figure(v)
                                       for v, n in zip(table[side], counts[side].to_numpy())] for side in ("a", "b")},
                             ratio=table["ratio"].map(ratio))
        header = (f"a: {self.a}\nb: {self.b}\n(ratio = b / a; times per optimizer step, mean over ranks; "
                  f"{' + '.join(PARTS)} = step_time_ms; n/a: no calls; source: trace = the traces' profiled steps, "
                  "run.json = the un-profiled steps the workload timed)\n")
        notes = "".join(f"note: {n}\n" for n in self.notes)
        return (header + shown.to_string(index=False) + "\n" + notes + "\n"
                + compare_ops.text(self.ops, self.kernels, self.op_time, self.has_ops, self.has_kernels))


def compare(sa: Summary, sb: Summary) -> Comparison:
    """Compare two runs' Summaries (``tracekit.compare`` also takes run folders and summarizes them first)."""
    ops = sorted(set(_calls(sa)["op"].astype(str)) | set(_calls(sb)["op"].astype(str)))
    rows, other = _metrics(sa, ops), _metrics(sb, ops)
    names = list(dict.fromkeys([m for m, _ in rows] + [m for m, _ in other]))
    va, vb = dict(rows), dict(other)
    table = pd.DataFrame({
        "metric": names,
        "unit": [_unit(n) for n in names],
        "a": [va.get(n, math.nan) for n in names],
        "b": [vb.get(n, math.nan) for n in names],
    })
    with np.errstate(divide="ignore", invalid="ignore"):
        table["ratio"] = np.where(table["a"] != 0, table["b"] / table["a"], np.nan)
    table["source"] = [THROUGHPUT_SOURCE if n == "throughput_samples_per_s" else TRACE_SOURCE for n in names]
    return Comparison(a=sa.run.source or "a", b=sb.run.source or "b", table=table, notes=_disagreements(table, sa, sb),
                      ops=compare_ops.op_table(sa, sb), kernels=compare_ops.kernel_table(sa, sb),
                      op_time=(compare_ops.op_time(sa), compare_ops.op_time(sb)),
                      has_ops=bool(len(sa.ops) or len(sb.ops)), has_kernels=bool(len(sa.kernels) or len(sb.kernels)))


def _disagreements(table: pd.DataFrame, sa: Summary, sb: Summary) -> tuple[str, ...]:
    """A note where the profiled step time and the un-profiled throughput move the wrong way for each other: with the
    samples per step of each run, b's throughput over a's should be (samples b / samples a) / (step b / step a)."""
    value = table.set_index("metric")["ratio"]
    step, rate = value.get("step_time_ms", math.nan), value.get("throughput_samples_per_s", math.nan)
    samples = [s.run.workload.samples_per_step if s.run.workload is not None else None for s in (sa, sb)]
    if is_unknown(step) or is_unknown(rate) or step <= 0 or None in samples or 0 in samples:
        return ()
    implied = samples[1] / samples[0] / step
    if (implied - 1) * (rate - 1) >= 0 or abs(implied - 1) < 0.02 or abs(rate - 1) < 0.02:
        return ()
    return (f"the profiled step time ({ratio(step)}) implies {ratio(implied)} the throughput, but the un-profiled steps "
            f"of run.json measured {ratio(rate)}: the two disagree in direction (profiler overhead, or a different "
            "load on the machine between the runs)",)


def _calls(s: Summary) -> pd.DataFrame:
    return s.collectives[s.collectives["in_window"].astype(bool)]


def step_parts(s: Summary) -> pd.DataFrame:
    """Per rank, the mean over the window's steps of the step time and its parts (us); the parts add up to it.

    ``compute_only``, ``overlapped_comm`` and ``exposed_comm`` come from the steps table; the rest of each step is
    memory-only device time and idle, shared in the proportions of the rank's window totals (``busy - compute -
    exposed_comm`` against ``idle``), and idle is shared between its causes likewise.
    """
    steps = s.steps[s.steps["in_window"].astype(bool)] if len(s.steps) else s.steps
    if "p2p_wait_us" in steps:  # a P2P call's waiting is busy, neither comm nor idle: memory-only's side, as the ranks'
        steps = steps.assign(other_us=steps["other_us"] + steps["p2p_wait_us"].fillna(0.0))
    per_rank = (steps.groupby("rank")[["step_us", "compute_us", "overlap_us", "exposed_comm_us", "other_us"]].mean()
                .reindex(s.ranks["rank"]).reset_index(drop=True))
    r = s.ranks.reset_index(drop=True)
    # Whole ns (the tables' times are ns / 1e3), so a union equal to its parts leaves 0, not rounding noise.
    memory_only = (r["busy_us"] - r["compute_us"] - r["exposed_comm_us"]).round(3).clip(lower=0)
    rest = memory_only + r["idle_us"]
    memory = per_rank["other_us"] * (memory_only / rest.where(rest > 0)).where(rest > 0, 0.0)
    idle = per_rank["other_us"] - memory
    out = pd.DataFrame({"rank": r["rank"], "step_time": per_rank["step_us"], "compute_only": per_rank["compute_us"],
                        "overlapped_comm": per_rank["overlap_us"], "exposed_comm": per_rank["exposed_comm_us"],
                        "memory": memory, "idle": idle})
    for cause in IDLE_CAUSES:  # no idle: 0 of each cause; idle in the steps but none in the totals: unknown
        cause_share = r[f"idle_{cause}_us"] / r["idle_us"].where(r["idle_us"] > 0)
        out[f"idle_{cause}"] = np.where(idle == 0, 0.0, idle * cause_share)
    return out


def _metrics(s: Summary, ops: list[str]) -> list[tuple[str, float]]:
    parts = step_parts(s)
    workload = s.run.workload
    out = [("step_time_ms", float(parts["step_time"].mean()) / 1e3),
           ("throughput_samples_per_s", math.nan if workload is None else workload.throughput_unprofiled)]
    for name in [p.removesuffix("_ms") for p in PARTS] + [f"idle_{c}" for c in IDLE_CAUSES]:
        out.append((f"{name}_ms", float(parts[name].mean()) / 1e3))
    r = s.ranks
    steps = r["steps"].where(r["steps"] > 0)
    calls = _calls(s)
    n_steps = float(steps.mean()) if steps.notna().any() else math.nan
    n_ranks = max(int(r["rank"].nunique()), 1)
    for op in ops:
        c = calls[calls["op"].astype(str) == op]
        unknown = c["bytes"].isna().any()
        out.append((f"{op}_MB_per_step", math.nan if unknown else float(c["bytes"].sum()) / n_ranks / n_steps / 1e6))
        out.append((f"{op}_calls_per_step", len(c) / n_ranks / n_steps))
        out.append((f"{op}_median_busbw_gbps", float(c["busbw_gbps"].median()) if len(c) else math.nan))
    return out


def _unit(name: str) -> str:
    for suffix, unit in (("_ms", "ms/step"), ("_per_s", "samples/s"), ("_gbps", "GB/s"), ("_MB_per_step", "MB/step"),
                         ("_calls_per_step", "calls/step")):
        if name.endswith(suffix):
            return unit
    return ""
