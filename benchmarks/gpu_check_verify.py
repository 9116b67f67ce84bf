"""The GPU check's checks on one finished run: each returns a `Check` (pass, fail or n/a, with the numbers behind it).

Independent of tracekit where that is possible: NCCL kernels are counted straight from the trace files, and the
reference for idle, overlap and the kernel table is HolisticTraceAnalysis, called as `tests/test_hta_agreement.py`
calls it. HTA parses each run once, with HTA_DISABLE_NS_ROUNDING=1 (as that file's kernel and time comparisons do):
HTA 0.5.0 otherwise rounds fractional-us timestamps, shortening every kernel by up to 1 us, which is HTA's rounding
and not a difference of definitions. The checks of the newer tables (kernels, FLOPs, MFU, memory, the what-if
prediction) are in `gpu_check_tables.py`.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

PASS, FAIL, NA = "pass", "fail", "n/a"
HTA_TOLERANCE_PT = 1.0


@dataclass(frozen=True)
class Check:
    status: str  # PASS, FAIL or NA
    detail: str
    values: dict = field(default_factory=dict, compare=False)  # the numbers behind it, for the report and checks.json


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

def hta_analysis(traces: list[Path]):
    """HTA's parse of the run's traces (HTA_DISABLE_NS_ROUNDING=1), or the exception HTA raised: a check's result."""
    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    before = os.environ.get("HTA_DISABLE_NS_ROUNDING")
    with tempfile.TemporaryDirectory() as tmp:  # HTA would read run.json as a trace: give it the traces alone
        for t in traces:
            (Path(tmp) / t.name).symlink_to(t.resolve())
        os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"  # read while HTA parses
        try:
            return TraceAnalysis(trace_dir=tmp)
        except Exception as e:  # HTA's own failure is the checks' result, not the script's
            return e
        finally:
            if before is None:
                os.environ.pop("HTA_DISABLE_NS_ROUNDING", None)
            else:
                os.environ["HTA_DISABLE_NS_ROUNDING"] = before


def hta_numbers(analysis) -> dict[int, tuple[float, float]]:
    """HTA's idle % and overlap % per rank, called as tests/test_hta_agreement.py calls it."""
    temporal = analysis.get_temporal_breakdown(visualize=False)
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    idle = dict(zip(temporal["rank"].astype(int), temporal["idle_time_pctg"].astype(float)))
    over = dict(zip(overlap["rank"].astype(int), overlap["comp_comm_overlap_pctg"].astype(float)))
    return {r: (idle[r], over.get(r, math.nan)) for r in idle}


def check_hta(summary, analysis, overlap: bool = True) -> Check:
    """tracekit's idle_pct and overlap_pct within 1 point of HTA's, rank by rank (idle_pct alone without `overlap`).

    `analysis`: `hta_analysis` of the run's traces (an exception there fails the check)."""
    if isinstance(analysis, Exception):
        return Check(FAIL, f"HTA failed: {type(analysis).__name__}: {analysis}")
    try:
        theirs = hta_numbers(analysis)
    except Exception as e:
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
    return Check(status, f"max |diff| {worst:.2f} pt, tolerance {HTA_TOLERANCE_PT:g} pt ({'; '.join(diffs)}){skipped}")


def _pct(x: float) -> str:
    return "NaN" if math.isnan(x) else f"{x:.2f}"
