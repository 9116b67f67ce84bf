"""Explicit, validated options for an analysis."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tracekit.events.metrics import WINDOWS


@dataclass(frozen=True, kw_only=True)
class Config:
    """How ``summarize`` reads and measures a run.

    window: the time each rank's metrics cover.
      ``"drop_last"`` (default): the complete ProfilerSteps but the last, as HolisticTraceAnalysis does
      (a trace with one step keeps it; a trace with none is taken whole);
      ``"all_steps"``: every ProfilerStep; ``"trace"``: every device event in the trace.
    step_pattern: a regex; each host annotation whose name it matches (``re.search``) is a step, in place of
      ProfilerStep (``tracekit.events.steps.find_steps``). None (default): ProfilerStep, else an engine's own
      step annotations when the trace has none (``steps.ENGINE_STEPS``).
    """

    window: str = "drop_last"
    step_pattern: str | None = None

    def __post_init__(self) -> None:
        if self.window not in WINDOWS:
            raise ValueError(f"window must be one of {', '.join(WINDOWS)}; got {self.window!r}")
        if self.step_pattern is not None:
            try:
                re.compile(self.step_pattern)
            except (re.error, TypeError) as error:
                raise ValueError(f"step_pattern must be a regular expression; got {self.step_pattern!r}: "
                                 f"{error}") from None
