"""The GPU check's checks on one finished run: each returns a `Check` (pass, fail or n/a, with the numbers behind it).

Independent of tracekit where that is possible: NCCL kernels are counted straight from the trace files, and the
reference for idle and overlap is HolisticTraceAnalysis, called as `tests/test_hta_agreement.py` calls it.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

PASS, FAIL, NA = "pass", "fail", "n/a"
HTA_TOLERANCE_PT = 1.0


@dataclass(frozen=True)
class Check:
    status: str  # PASS, FAIL or NA
    detail: str


def trace_files(run: Path) -> list[Path]:
    return sorted(run.glob("rank-*.pt.trace.json.gz"))


# ------------------------------------------------------------------------------------------- comm kernels

def nccl_kernels(trace: Path) -> dict[str, int]:
    """Kernels named like NCCL's (any era: `ncclKernel_*`, `ncclDevKernel_*`, ...) launched inside the trace, by name.

    A kernel counts when its launch (a runtime or driver event with the same correlation id) is in the trace too, as
    tracekit leaves out kernels launched before the trace began.
    """
    with gzip.open(trace) as f:
        events = json.load(f)["traceEvents"]
    launched = {e["args"]["correlation"] for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    names: dict[str, int] = {}
    for e in events:
        if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower() \
                and e.get("args", {}).get("correlation") in launched:
            names[e["name"]] = names.get(e["name"], 0) + 1
    return names


def check_comm_kernels(summary, run: Path) -> Check:
    """Every NCCL kernel in each rank's trace is one of tracekit's collectives of that rank."""
    problems, seen = [], {}
    for trace in trace_files(run):
        rank = int(trace.name.split(".")[0].removeprefix("rank-"))
        kernels = nccl_kernels(trace)
        seen.update(kernels)
        rows = summary.collectives[summary.collectives["rank"] == rank]
        found = rows["name"].value_counts().to_dict()
        missing = {n: c - found.get(n, 0) for n, c in kernels.items() if found.get(n, 0) < c}
        if missing:
            problems.append(f"rank {rank}: {sum(missing.values())} NCCL kernels not read as comm ({', '.join(missing)})")
    if problems:
        return Check(FAIL, "; ".join(problems))
    if not seen:
        return Check(NA, "no kernel named nccl* in the traces")
    return Check(PASS, f"{sum(seen.values())} NCCL kernels, all comm: " + ", ".join(sorted(seen)))


# ------------------------------------------------------------------------------------- all-reduce bytes

def check_allreduce_bytes(summary, run_json: dict, has_nccl_kernels: bool) -> Check:
    """All-reduced bytes per rank and profiled step = 4 x trainable parameters (float32 gradients)."""
    expected = 4 * run_json["trainable_params"]
    c = summary.collectives
    per_step = c[(c["op"] == "all_reduce") & (c["step"] >= 0)].groupby(["rank", "step"])["bytes"].sum(min_count=1)
    if per_step.empty:
        if run_json.get("backend") == "nccl" and not has_nccl_kernels:
            return Check(NA, "no all-reduce in the traces and no NCCL kernel: nothing to compare")
        return Check(FAIL, f"no all-reduce read; expected {expected} bytes per step")
    wanted = {(r, s) for r in range(run_json["world_size"]) for s in run_json["profiled_steps"]}
    got = set(per_step.index)
    wrong = per_step[per_step != expected]
    if not wanted <= got:
        return Check(FAIL, f"steps without all-reduce: {sorted(wanted - got)}")
    if len(wrong):
        return Check(FAIL, f"expected {expected} bytes per step, got {wrong.to_dict()}")
    return Check(PASS, f"{expected} bytes per step = 4 x {run_json['trainable_params']} params, "
                       f"{len(per_step)} rank-steps")


# ------------------------------------------------------------------------------------ HTA agreement

def hta_numbers(trace_dir: Path) -> dict[int, tuple[float, float]]:
    """HTA's idle % and overlap % per rank, called as tests/test_hta_agreement.py calls it."""
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    analysis = TraceAnalysis(trace_dir=str(trace_dir))
    temporal = analysis.get_temporal_breakdown(visualize=False)
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    idle = dict(zip(temporal["rank"].astype(int), temporal["idle_time_pctg"].astype(float)))
    over = dict(zip(overlap["rank"].astype(int), overlap["comp_comm_overlap_pctg"].astype(float)))
    return {r: (idle[r], over.get(r, math.nan)) for r in idle}


def check_hta(summary, traces: list[Path], overlap: bool = True) -> Check:
    """tracekit's idle_pct and overlap_pct within 1 point of HTA's, rank by rank (idle_pct alone without `overlap`)."""
    with tempfile.TemporaryDirectory() as tmp:  # HTA would read run.json as a trace: give it the traces alone
        for t in traces:
            (Path(tmp) / t.name).symlink_to(t.resolve())
        try:
            theirs = hta_numbers(Path(tmp))
        except Exception as e:  # HTA's own failure is the check's result, not the script's
            return Check(FAIL, f"HTA failed: {type(e).__name__}: {e}")
    ours = summary.ranks.set_index("rank")
    if set(theirs) != set(ours.index):
        return Check(FAIL, f"ranks differ: HTA {sorted(theirs)}, tracekit {sorted(ours.index)}")
    diffs, worst = [], 0.0
    for rank, (idle, over) in sorted(theirs.items()):
        pairs = [("idle", ours.loc[rank, "idle_pct"], idle), ("overlap", ours.loc[rank, "overlap_pct"], over)]
        for what, mine, ref in pairs[:2 if overlap else 1]:
            if math.isnan(mine) and math.isnan(ref):
                continue
            d = abs(mine - ref) if not (math.isnan(mine) or math.isnan(ref)) else math.inf
            worst = max(worst, d)
            diffs.append(f"r{rank} {what} {_pct(mine)} vs {_pct(ref)}")
    status = PASS if worst <= HTA_TOLERANCE_PT else FAIL
    skipped = "" if overlap else "; overlap not compared: HTA counts only NCCL kernels as communication"
    return Check(status, f"max |diff| {worst:.2f} pt ({'; '.join(diffs)}){skipped}")


def _pct(x: float) -> str:
    return "NaN" if math.isnan(x) else f"{x:.2f}"
