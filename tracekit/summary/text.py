"""Text renderer: reads a Summary, returns a string. No numbers are computed here beyond unit changes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from tracekit.findings import checks
from tracekit import quality
from tracekit.summary.facts import one_or_all
from tracekit.summary.text_pipeline import pipeline_lines
from tracekit.summary.text_comm import model_parallel_lines
from tracekit.summary.text_runs import what_ran_lines
from tracekit.fmt import figure, is_unknown, mb, ms, pct, share

if TYPE_CHECKING:  # a Summary is only read here; summary.py imports this module for Summary.__str__
    from tracekit.summary.model import Summary


def text_report(summary: Summary) -> str:
    """A readable report: run facts, one line per rank, and collectives per op. ``unknown`` marks numbers the trace cannot give."""
    run = summary.run
    lines = [
        f"tracekit summary of {run.source or 'traces'}",
        # A trace taken while graphs were captured misleads about speed: said first (tracekit.findings.capture).
        *(f"  WARNING {note}" for note in quality.capture_notes(summary.data_quality)),
        f"  ranks read {run.ranks_read} of world size {_v(one_or_all(run.world_sizes))}, "
        f"backend {_v(one_or_all(run.backends))}, "
        f"devices: {', '.join(run.device_names) or ', '.join(sorted(set(summary.ranks['device'].astype(str))))}",
        f"  window: {_window(summary)}",
        *_step_clock(summary.steps),
    ]
    workload = run.workload
    if workload is not None:
        shown = ", ".join(f"{v:,.1f} samples/s {k}" for k, v in workload.throughputs().items())
        lines.append(f"  workload run.json: {_or_ask(workload.workload)}, mode {_or_ask(workload.mode)}"
                     + (f"; {shown}" if shown else ""))
    for skipped in run.skipped:
        rank = "" if skipped.rank is None else f" (rank {skipped.rank})"
        lines.append(f"  skipped {skipped.path}{rank}: {skipped.reason}")
    lines += ["", "Per rank: times in ms, (%) their share of the rank's span; comm overlapped: % of comm under compute",
              _rank_lines(summary.ranks), ""]
    lines += ["Collectives in the window, per op, all ranks together", _op_lines(summary.collectives), ""]
    lines += pipeline_lines(summary)
    lines += model_parallel_lines(summary.comm_by_dim, summary.p2p)
    lines += what_ran_lines(summary)
    lines += _quality_lines(summary)
    lines += _findings_lines(summary.findings, summary.data_quality)
    return "\n".join(lines).rstrip() + "\n"


def _window(summary: Summary) -> str:
    """The window and what it covers: with no steps on a rank, its window is the whole trace, whatever was asked."""
    run = summary.run
    if run.window == "trace":
        return "trace (the whole trace; times below are per rank)"
    ranks = sorted(int(r) for r in summary.ranks["rank"])
    bare = sorted(set(ranks) - set(int(r) for r in summary.steps["rank"]))
    if ranks and len(bare) == len(ranks):
        return (f"{run.window} asked, but the trace has no steps: the window is the whole trace (times below are per "
                "rank over it)")
    said = f"{run.window} (times below are per rank over the window)"
    if bare:
        said += f"; {'rank' if len(bare) == 1 else 'ranks'} {', '.join(map(str, bare))} without steps: the whole trace"
    return said


def _step_clock(steps: pd.DataFrame) -> list[str]:
    """Which clock ended the window's steps (``Summary.steps.ended_by``): one line, none without steps."""
    if steps.empty or "ended_by" not in steps:
        return []
    window = steps[steps["in_window"].astype(bool)]
    device = window[(window["ended_by"] == "device").to_numpy()]
    if window.empty:
        return []
    if device.empty:
        return ["  step clock: host (each step ends where the next step's annotation begins)"]
    which = "; ".join(f"rank {int(r)}: {', '.join(str(int(n)) for n in g['step'])}"
                      for r, g in device.groupby("rank", sort=True))
    if len(which) > 120:
        which = f"{device['rank'].nunique()} ranks"
    rest = len(window) - len(device)
    return [f"  step clock: device for {len(device)} of {len(window)} window steps ({which}): their device work ran "
            "past the next step's annotation, so they end when it does" + (f"; host for the other {rest}" if rest else "")]


def checked() -> tuple[str, ...]:
    """What the findings look for, with their thresholds (``tracekit.findings.checks``): said when none is found."""
    return (
        f"exposed communication (>= {checks.EXPOSED_COMM_SHARE[0]:.0%} of the span)",
        f"stragglers (others wait >= {checks.STRAGGLER_WAIT_SHARE[0]:.0%} of a step for them)",
        f"data-loading idle (>= {checks.DATA_IDLE_SHARE[0]:.0%})",
        f"allocator stalls on GPUs (idle >= {checks.ALLOC_IDLE_SHARE[0]:.0%})",
        f"host-bound launch gaps on GPUs (>= {checks.HOST_IDLE_SHARE[0]:.0%})",
        f"unrecorded host time before launches on GPUs (>= {checks.HOST_IDLE_SHARE[0]:.0%})",
        f"synchronizations inside the step (idle >= {checks.SYNC_IDLE_SHARE:.0%})",
        "DataParallel",
        f"fp16/bf16 kernels on tensor-core GPUs (< {checks.REDUCED_PRECISION_SHARE:.0%} of compute)",
        f"all-reduce bus bandwidth (< {checks.BUSBW_SHARE:.0%} of the GPU link's: NVLink, Infinity Fabric; one node, known GPUs)",
    )


def _findings_lines(found, data_quality: pd.DataFrame) -> list[str]:
    held = data_quality.get("held_back_findings", pd.Series(dtype=object)).dropna().astype(str)
    held = sorted({kind for text in held if text for kind in text.split(", ")})
    held_line = ["  Held back, the window overlaps a graph capture (see the top): " + ", ".join(held) + "."]
    held_line = held_line if held else []
    if not found:
        return ["Findings"] + (held_line or ["  None: no check fired. Checked: " + "; ".join(checked()) + "."])
    return ["Findings (largest gain first: predicted by replay where a scenario models the fix)"] + [f"  [{f.severity}] {f.message}\n      -> {f.recommendation}"
                                              for f in found] + held_line


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
        **({"p2p wait": [share(a, b) for a, b in zip(ranks["p2p_wait_us"], ranks["span_us"])]}
           if "p2p_wait_us" in ranks and (ranks["p2p_wait_us"] > 0).any() else {}),
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
        "median busbw GB/s": grouped["busbw_gbps"].median().map(figure),
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
    found = quality.notes(summary.data_quality) + quality.mismatch_notes(summary.mismatches)
    run = summary.run
    if run.skipped:  # a rank whose file could not be read is missing from every run-level number
        found.append(f"ranks read {run.ranks_read} of world size {_v(one_or_all(run.world_sizes))}: "
                     f"{len(run.skipped)} file(s) skipped (listed above); waits, stragglers and matched collectives "
                     "cover the ranks read only")
    return ["Data quality (what the numbers above rest on)", *(f"  {n}" for n in found), ""] if found else []
