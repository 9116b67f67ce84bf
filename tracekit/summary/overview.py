"""A Summary at a glance: the headline numbers that ``repr(summary)`` lists and a notebook shows as cards
(``Summary._repr_html_``), and the findings as one table (``Summary.findings_table``).

Nothing is computed here beyond means over ranks and unit changes; ``print(summary)`` is the full report
(``tracekit.summary.text``).
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

import pandas as pd

from tracekit.findings.finding import SEVERITY_ORDER
from tracekit.fmt import UNKNOWN, is_unknown, ms, pct
from tracekit.summary.facts import one_or_all

if TYPE_CHECKING:  # a Summary is only read here; model.py imports this module for repr and the notebook view
    from tracekit.summary.model import Summary

FINDING_COLUMNS = ("kind", "severity", "ranks", "message", "recommendation", "predicted_saving_us", "scenario")
TOP_FINDINGS = 5  # findings the notebook view lists
# The span's parts the overview gives, as (label, ranks column); each is a mean over ranks of the rank's share.
SHARES = (("compute", "compute_us"), ("exposed comm", "exposed_comm_us"), ("idle", "idle_us"))
HINT = "print(summary) for the full report, summary.findings_table() for the findings"


def headline(summary: Summary) -> dict[str, str]:
    """The overview's numbers as text, by label, in the order shown; ``MFU`` only when some rank's is known."""
    run, ranks = summary.run, summary.ranks
    out = {
        "source": run.source or "traces",
        "ranks read": f"{run.ranks_read} of world size {_v(one_or_all(run.world_sizes))}",
        "backend": _v(one_or_all(run.backends)),
        "devices": ", ".join(run.device_names) or _devices(ranks),
        "window": str(run.window),
        "steps per rank": _steps(ranks),
        "mean step time": ms(_mean(ranks, "step_time_us"), unit=True),
    }
    for label, column in SHARES:
        out[label] = _share(ranks, column)
    mfu = _mean(ranks, "mfu_pct")
    if not is_unknown(mfu):
        out["MFU"] = pct(mfu, unit=True)
    out["findings"] = _severities(summary.findings)
    return out


def overview_text(summary: Summary) -> str:
    """``repr(summary)``: the headline numbers in a few lines."""
    h = headline(summary)
    lines = [
        f"tracekit Summary of {h['source']}",
        f"  ranks read {h['ranks read']}, backend {h['backend']}, devices: {h['devices']}",
        f"  window {h['window']}, steps per rank {h['steps per rank']}, mean step time {h['mean step time']}",
        "  share of the span, mean over ranks: " + ", ".join(f"{label} {h[label]}" for label, _ in SHARES),
    ]
    if "MFU" in h:
        lines.append(f"  MFU {h['MFU']} (mean over ranks)")
    lines += [f"  findings: {h['findings']}", f"  {HINT}"]
    return "\n".join(lines)


def overview_html(summary: Summary) -> str:
    """A notebook's view of a Summary: the headline numbers as cards and the most severe findings; plain HTML with
    inline styles, no scripts, every text escaped."""
    h = headline(summary)
    cards = "".join(
        '<div class="tracekit-card" style="border:1px solid #ccc;border-radius:4px;padding:4px 8px;min-width:7em">'
        f'<div style="color:#666;font-size:11px">{_e(label)}</div><div style="font-weight:bold">{_e(value)}</div>'
        "</div>"
        for label, value in h.items() if label != "source")
    parts = [
        '<div class="tracekit-summary" style="font-family:sans-serif;font-size:13px">',
        f'<div style="font-weight:bold;margin-bottom:6px">tracekit Summary of {_e(h["source"])}</div>',
        f'<div style="display:flex;flex-wrap:wrap;gap:6px;margin-bottom:8px">{cards}</div>',
        _findings_html(summary.findings),
        f'<div style="color:#666;font-size:11px;margin-top:6px">{_e(HINT)}</div>',
        "</div>",
    ]
    return "".join(parts)


def findings_table(findings) -> pd.DataFrame:
    """One row per finding, in their order (``FINDING_COLUMNS``): ranks as text (``"0, 1"``), the replay's
    ``predicted_saving_us`` (us per step; NaN without one) and ``scenario`` (None without one) from the evidence."""
    columns = {
        "kind": [f.kind for f in findings],
        "severity": [f.severity for f in findings],
        "ranks": [", ".join(str(int(r)) for r in f.ranks) for f in findings],
        "message": [f.message for f in findings],
        "recommendation": [f.recommendation for f in findings],
        "predicted_saving_us": [_saving(f.evidence.get("predicted_saving_us")) for f in findings],
        "scenario": [f.evidence.get("scenario") for f in findings],
    }
    dtypes = {"predicted_saving_us": float, "scenario": object}
    return pd.DataFrame({name: pd.Series(values, dtype=dtypes.get(name, "str")) for name, values in columns.items()})


def _findings_html(findings) -> str:
    if not findings:
        return "<div>No findings: no check fired.</div>"
    colors = {"high": "#c0392b", "medium": "#b9770e", "low": "#7f8c8d"}
    rows = "".join(
        f'<tr><td style="padding:2px 8px 2px 0;vertical-align:top;font-weight:bold;color:{colors.get(f.severity, "#333")}">'
        f"{_e(f.severity)}</td><td style=\"padding:2px 0\">{_e(f.message)}</td></tr>"
        for f in findings[:TOP_FINDINGS])
    more = len(findings) - TOP_FINDINGS
    tail = f'<div style="color:#666">and {more} more</div>' if more > 0 else ""
    title = f"Top findings ({min(len(findings), TOP_FINDINGS)} of {len(findings)}, largest gain first)"
    return (f'<div style="font-weight:bold">{_e(title)}</div>'
            f'<table class="tracekit-findings" style="border-collapse:collapse;text-align:left">{rows}</table>{tail}')


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _v(value) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return UNKNOWN if is_unknown(value) else str(value)


def _devices(ranks: pd.DataFrame) -> str:
    names = sorted(set(ranks["device"].dropna().astype(str))) if "device" in ranks else []
    return ", ".join(names) or UNKNOWN


def _steps(ranks: pd.DataFrame) -> str:
    counts = sorted({int(n) for n in ranks["steps"].dropna()}) if "steps" in ranks else []
    if not counts:
        return UNKNOWN
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"


def _mean(ranks: pd.DataFrame, column: str) -> float:
    """Mean over the ranks that know it; NaN when none does (or the table lacks the column)."""
    if column not in ranks:
        return math.nan
    values = pd.to_numeric(ranks[column], errors="coerce").dropna()
    return float(values.mean()) if len(values) else math.nan


def _share(ranks: pd.DataFrame, column: str) -> str:
    if column not in ranks or "span_us" not in ranks:
        return UNKNOWN
    span = pd.to_numeric(ranks["span_us"], errors="coerce")
    part = pd.to_numeric(ranks[column], errors="coerce")
    shares = (part / span).where(span > 0).dropna()
    return pct(float(shares.mean()) * 100, unit=True) if len(shares) else UNKNOWN


def _severities(findings) -> str:
    counts = {s: 0 for s in SEVERITY_ORDER}
    for f in findings:
        counts[f.severity] = counts.get(f.severity, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def _saving(value) -> float:
    try:
        return math.nan if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan

