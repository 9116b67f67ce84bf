"""Text renderer: reads a Summary, returns a string. No numbers are computed here beyond unit changes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from tracekit.findings import checks
from tracekit import quality
from tracekit.summary.facts import one_or_all
from tracekit.summary.text_runs import what_ran_lines
from tracekit.fmt import is_unknown, mb, ms, num, pct, share

if TYPE_CHECKING:  # a Summary is only read here; summary.py imports this module for Summary.__str__
    from tracekit.summary.model import Summary


def text_report(summary: Summary) -> str:
    """A readable report: run facts, one line per rank, and collectives per op. ``unknown`` marks numbers the trace cannot give."""
    run = summary.run
    lines = [
        f"tracekit summary of {run.source or 'traces'}",
        f"  ranks read {run.ranks_read} of world size {_v(one_or_all(run.world_sizes))}, "
        f"backend {_v(one_or_all(run.backends))}, "
        f"devices: {', '.join(run.device_names) or ', '.join(sorted(set(summary.ranks['device'].astype(str))))}",
        f"  window: {run.window} (times below are per rank over the window)",
    ]
    workload = run.workload
    if workload is not None:
        shown = ", ".join(f"{v:,.1f} samples/s {k}" for k, v in workload.throughputs().items())
        lines.append(f"  workload run.json: {_or_ask(workload.workload)}, mode {_or_ask(workload.mode)}"
                     + (f"; {shown}" if shown else ""))
    for skipped in run.skipped:
        lines.append(f"  skipped {skipped.path}: {skipped.reason}")
    lines += ["", "Per rank: times in ms, (%) their share of the rank's span; comm overlapped: % of comm under compute",
              _rank_lines(summary.ranks), ""]
    lines += ["Collectives in the window, per op, all ranks together", _op_lines(summary.collectives), ""]
    lines += what_ran_lines(summary)
    lines += _quality_lines(summary)
    lines += _findings_lines(summary.findings)
    return "\n".join(lines).rstrip() + "\n"


def checked() -> tuple[str, ...]:
    """What the findings look for, with their thresholds (``tracekit.findings.checks``): said when none is found."""
    return (
        f"exposed communication (>= {checks.EXPOSED_COMM_SHARE[0]:.0%} of the span)",
        f"stragglers (others wait >= {checks.STRAGGLER_WAIT_SHARE[0]:.0%} of a step for them)",
        f"data-loading idle (>= {checks.DATA_IDLE_SHARE[0]:.0%})",
        f"host-bound launch gaps on GPUs (>= {checks.HOST_IDLE_SHARE[0]:.0%})",
        f"synchronizations inside the step (idle >= {checks.SYNC_IDLE_SHARE:.0%})",
        "DataParallel",
        f"fp16/bf16 kernels on tensor-core GPUs (< {checks.REDUCED_PRECISION_SHARE:.0%} of compute)",
        f"all-reduce bus bandwidth (< {checks.BUSBW_SHARE:.0%} of the GPU link's: NVLink, Infinity Fabric; one node, known GPUs)",
    )


def _findings_lines(found) -> list[str]:
    if not found:
        return ["Findings", "  None: no check fired. Checked: " + "; ".join(checked()) + "."]
    return ["Findings (largest gain first: predicted by replay where a scenario models the fix)"] + [f"  [{f.severity}] {f.message}\n      -> {f.recommendation}"
                                              for f in found]


def _rank_lines(ranks: pd.DataFrame) -> str:
    if ranks.empty:
        return "  (no ranks)"
    shown = pd.DataFrame({
        "rank": ranks["rank"],
        "device": ranks["device"],
        "steps": ranks["steps"],
        "step": ranks["step_time_us"].map(ms),
        "span": ranks["span_us"].map(ms),
        "compute": [share(a, b) for a, b in zip(ranks["compute_us"], ranks["span_us"])],
        "exposed comm": [share(a, b) for a, b in zip(ranks["exposed_comm_us"], ranks["span_us"])],
        "memory": [share(a, b) for a, b in zip(ranks["memory_us"], ranks["span_us"])],
        "idle": [share(a, b) for a, b in zip(ranks["idle_us"], ranks["span_us"])],
        "comm overlapped %": ranks["overlap_pct"].map(pct),
        "all_reduce n": ranks["allreduce_count"],
        "all_reduce ms": ranks["allreduce_us"].map(ms),
        "all_reduce MB": ranks["allreduce_bytes"].map(mb),
    })
    return _indent(shown.to_string(index=False))


def _op_lines(collectives: pd.DataFrame) -> str:
    calls = collectives[collectives["in_window"]]
    if calls.empty:
        return "  (no collectives)"
    grouped = calls.groupby("op", observed=True)
    unknown = calls["bytes"].isna().groupby(calls["op"], observed=True).any()
    shown = pd.DataFrame({
        "calls": grouped.size(),
        "total ms": grouped["dur_us"].sum().map(ms),
        "total MB": grouped["bytes"].sum().where(~unknown).map(mb),
        "median busbw GB/s": grouped["busbw_gbps"].median().map(num),
    }).reset_index()
    return _indent(shown.to_string(index=False))


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _v(v) -> str:
    return "unknown" if is_unknown(v) else str(v)


def _or_ask(v: str | None) -> str:
    return "?" if v is None else v


def _quality_lines(summary: Summary) -> list[str]:
    """The data-quality notes that apply (``tracekit.quality``), or nothing when every rank is clean."""
    found = quality.notes(summary.data_quality)
    return ["Data quality (what the numbers above rest on)", *(f"  {n}" for n in found), ""] if found else []
