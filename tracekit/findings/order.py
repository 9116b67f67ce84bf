"""The findings' final order: by what their fix gains, and a fix that gains nothing says what binds the step.

The findings whose fix a scenario predicts (``evidence["predicted_saving_us"]``, from ``predict.scenarios``) come
first, largest saving (as a share of the step) first: the replay's prediction is the best measure of what a fix is
worth. Those without a prediction follow, most severe first (their ``share`` measures different things: a share
of the span, of compute time, of memory). A finding whose predicted saving is under ``NO_GAIN_PCT`` of the step
comes after all the others, its severity becomes ``low`` (severity means what the fix is worth wherever it is said: high, medium, low;
the severity its measured share alone gives is kept as ``evidence["measured_severity"]``), and its message says what the steps' critical paths spend their time on instead (``summary.critical_path``).
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from tracekit.findings.finding import Finding, by_severity

NO_GAIN_PCT = 1.0  # as predict.scenarios words it


def by_gain(findings: tuple[Finding, ...], critical_path: pd.DataFrame) -> tuple[Finding, ...]:
    """The findings ordered by gain, no-gain ones last and low, each of those naming what binds the step."""
    binds = _what_binds(critical_path)
    predicted, other, none = [], [], []
    for f in findings:
        step, saving = f.evidence.get("predicted_step_us"), f.evidence.get("predicted_saving_us")
        if saving is None or step is None:
            other.append(f)
            continue
        base = step + saving
        share = saving / base if base > 0 else 0.0
        if share * 100 < NO_GAIN_PCT:
            message = f.message + (f" The step is bound by {binds} instead." if binds else "")
            none.append(dataclasses.replace(f, severity="low", message=message,
                                            evidence={**f.evidence, "measured_severity": f.severity}))
        else:
            predicted.append((share, f))
    ordered = [f for _, f in sorted(predicted, key=lambda pair: -pair[0])]
    return tuple(ordered + list(by_severity(other)) + none)


def _what_binds(critical_path: pd.DataFrame) -> str:
    """The critical paths' largest categories, e.g. 'host time (81% of the critical path), compute (12%)'."""
    if critical_path is None or critical_path.empty:
        return ""
    by = critical_path.groupby("category", observed=True)["us"].sum()
    by = by[by > 0].sort_values(ascending=False)
    if by.empty:
        return ""
    total = by.sum()
    words = {"host": "host time", "comm_transfer": "communication", "launch": "kernel launches", "data": "data loading",
             "sync": "synchronization", "compute": "compute", "other": "other work", "unknown": "unrecorded time"}
    shown = [(c, v) for i, (c, v) in enumerate(by.head(2).items()) if i == 0 or v / total >= 0.05]
    parts = [f"{words.get(str(c), str(c))} ({v / total:.0%} of the critical path)" for c, v in shown]
    return ", then ".join(parts)
