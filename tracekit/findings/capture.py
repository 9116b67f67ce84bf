"""Findings held back where the window overlaps a CUDA/HIP graph capture.

While graphs are captured, launches are recorded and nothing runs, and the steps around the capture run warm-ups:
their gaps, synchronizations and kernel times are not the job's steady work. A rank whose window's steps overlap a
capture (``data_quality.captured_steps``, from ``tracekit.events.graphs.capture_facts``) gets no step-speed finding:
every finding that concerns it is held back but those that do not judge speed (``KEPT``), and
``data_quality.held_back_findings`` names what was held back, so the report says so.
"""

from __future__ import annotations

import pandas as pd

from tracekit.findings.finding import Finding

# Findings that judge what runs, not how fast the steps go: capture does not bias them.
KEPT = frozenset({"data_parallel", "no_reduced_precision", "memory_near_capacity", "memory_growth"})


def hold_back(found: tuple[Finding, ...], data_quality: pd.DataFrame) -> tuple[tuple[Finding, ...], pd.DataFrame]:
    """(the findings given, ``data_quality`` with ``held_back_findings`` filled in for every rank).

    A finding is held back when its kind is not in ``KEPT`` and one of its ranks (any rank, for a finding that names
    none) has captured steps in its window.
    """
    dq = data_quality.copy()
    captured = set()
    if "captured_steps" in dq:
        captured = {int(r) for r, s in zip(dq["rank"], dq["captured_steps"]) if isinstance(s, str) and s}
    held = [f.kind not in KEPT and bool(captured & (set(f.ranks) if f.ranks else captured)) for f in found]
    per_rank = {r: [f.kind for f, h in zip(found, held) if h and (r in f.ranks or not f.ranks)] for r in captured}
    dq["held_back_findings"] = [", ".join(dict.fromkeys(per_rank.get(int(r), []))) for r in dq["rank"]]
    return tuple(f for f, h in zip(found, held) if not h), dq
