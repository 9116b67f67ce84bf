"""tracekit: where the step time of a PyTorch DDP job goes, from one torch.profiler trace per rank."""

import gc as _gc

# The imports below make several hundred thousand objects (pandas, pyarrow, numba), none of them garbage, and the
# cyclic collector would walk all of them again and again as they are made (about 0.1 s of a 0.7 s import): it is
# paused until they are done, and left as the importer had it.
_collecting = _gc.isenabled()
_gc.disable()
try:
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
finally:
    if _collecting:
        _gc.enable()

__all__ = [
    "summarize", "whatif", "compare", "Summary", "Comparison", "Finding", "Config", "TracekitError", "TraceReadError", "TruncatedTraceError", "NotJSONError",
    "NotATraceError", "EmptyTraceError", "NoTracesError", "DuplicateRankError", "RankUnknownError",
]
__version__ = "0.1.0"
