"""Text renderer: reads a Summary, returns a string. No numbers are computed here beyond unit changes."""

from __future__ import annotations

import math

import pandas as pd

from tracekit.summary import Summary


def text_report(summary: Summary) -> str:
    """A readable report: run facts, one line per rank, and collectives per op. ``unknown`` marks numbers the trace cannot give."""
    run = summary.run
    lines = [
        f"tracekit summary of {run.get('source') or 'traces'}",
        f"  ranks read {run.get('ranks_read')} of world size {_v(run.get('world_size'))}, backend {_v(run.get('backend'))}, "
        f"devices: {', '.join(run.get('device_names') or []) or ', '.join(sorted(set(summary.ranks['device'].astype(str))))}",
        f"  window: {run.get('window')} (times below are per rank over the window)",
    ]
    workload = run.get("workload_run") or {}
    if workload:
        rates = workload.get("throughput_samples_per_s") or {}
        rates = rates if isinstance(rates, dict) else {"measured": rates}
        shown = ", ".join(f"{v:,.1f} samples/s {k}" for k, v in rates.items() if isinstance(v, (int, float)))
        lines.append(f"  workload run.json: {workload.get('workload', '?')}, mode {workload.get('mode', '?')}"
                     + (f"; {shown}" if shown else ""))
    for skipped in run.get("skipped", []):
        if workload and skipped["path"].endswith("run.json"):
            continue  # read above as the workload's description, not a trace
        lines.append(f"  skipped {skipped['path']}: {skipped['reason']}")
    lines += ["", "Per rank (ms; % of span)", _rank_lines(summary.ranks), ""]
    lines += ["Collectives in the window, per op, all ranks together", _op_lines(summary.collectives), ""]
    findings = getattr(summary, "findings", None)
    if findings:
        lines.append("Findings (most severe first)")
        lines += [f"  [{f.severity}] {f.message}\n      -> {f.recommendation}" for f in findings]
    return "\n".join(lines).rstrip() + "\n"


def _rank_lines(ranks: pd.DataFrame) -> str:
    if ranks.empty:
        return "  (no ranks)"
    shown = pd.DataFrame({
        "rank": ranks["rank"],
        "device": ranks["device"],
        "steps": ranks["steps"],
        "step": ranks["step_time_us"].map(_ms),
        "span": ranks["span_us"].map(_ms),
        "compute": [_share(a, b) for a, b in zip(ranks["compute_us"], ranks["span_us"])],
        "exposed comm": [_share(a, b) for a, b in zip(ranks["exposed_comm_us"], ranks["span_us"])],
        "memory": [_share(a, b) for a, b in zip(ranks["memory_us"], ranks["span_us"])],
        "idle": [_share(a, b) for a, b in zip(ranks["idle_us"], ranks["span_us"])],
        "overlap %": ranks["overlap_pct"].map(_pct),
        "all_reduce n": ranks["allreduce_count"],
        "all_reduce ms": ranks["allreduce_us"].map(_ms),
        "all_reduce MB": ranks["allreduce_bytes"].map(_mb),
    })
    return _indent(shown.to_string(index=False))


def _op_lines(collectives: pd.DataFrame) -> str:
    calls = collectives[collectives["in_window"]] if "in_window" in collectives else collectives
    if calls.empty:
        return "  (no collectives)"
    grouped = calls.groupby("op", observed=True)
    unknown = calls["bytes"].isna().groupby(calls["op"], observed=True).any()
    shown = pd.DataFrame({
        "calls": grouped.size(),
        "total ms": grouped["dur_us"].sum().map(_ms),
        "total MB": grouped["bytes"].sum().where(~unknown).map(_mb),
        "median busbw GB/s": grouped["busbw_gbps"].median().map(lambda v: _num(v, 2)),
    }).reset_index()
    return _indent(shown.to_string(index=False))


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _v(v) -> str:
    return "unknown" if _nan(v) else str(v)


def _num(v, digits: int) -> str:
    return "unknown" if _nan(v) else f"{v:,.{digits}f}"


def _ms(us) -> str:
    return "unknown" if _nan(us) else f"{us / 1e3:,.2f}"


def _mb(b) -> str:
    return "unknown" if _nan(b) else f"{b / 1e6:,.2f}"


def _pct(p) -> str:
    return "n/a" if _nan(p) else f"{p:.1f}"


def _share(part, whole) -> str:
    if _nan(part) or _nan(whole) or whole <= 0:
        return "unknown"
    return f"{part / 1e3:,.2f} ({part / whole * 100:.0f}%)"
