"""tracekit: where the step time of a PyTorch DDP job goes, from one torch.profiler trace per rank."""

from tracekit.api import compare, summarize, whatif
from tracekit.render.compare import Comparison
from tracekit.events.config import Config
from tracekit.errors import (
    DuplicateRankError,
    EmptyTraceError,
    NoTracesError,
    NotATraceError,
    NotJSONError,
    RankUnknownError,
    TraceReadError,
    TracekitError,
    TruncatedTraceError,
)
from tracekit.findings.checks import Finding
from tracekit.summary.model import Summary

__all__ = [
    "summarize", "whatif", "compare", "Summary", "Comparison", "Finding", "Config", "TracekitError", "TraceReadError", "TruncatedTraceError", "NotJSONError",
    "NotATraceError", "EmptyTraceError", "NoTracesError", "DuplicateRankError", "RankUnknownError",
]
__version__ = "0.1.0"
