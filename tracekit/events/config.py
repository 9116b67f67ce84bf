"""Explicit, validated options for an analysis."""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.events.metrics import WINDOWS


@dataclass(frozen=True, kw_only=True)
class Config:
    """How ``summarize`` reads and measures a run.

    window: the time each rank's metrics cover.
      ``"drop_last"`` (default): the complete ProfilerSteps but the last, as HolisticTraceAnalysis does
      (a trace with one step keeps it; a trace with none is taken whole);
      ``"all_steps"``: every ProfilerStep; ``"trace"``: every device event in the trace.
    """

    window: str = "drop_last"

    def __post_init__(self) -> None:
        if self.window not in WINDOWS:
            raise ValueError(f"window must be one of {', '.join(WINDOWS)}; got {self.window!r}")
