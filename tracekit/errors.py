"""Every error tracekit raises on purpose. Each names the file and, when known, the rank."""

from __future__ import annotations

__all__ = [
    "TracekitError",
    "TraceReadError",
    "TruncatedTraceError",
    "NotJSONError",
    "NotATraceError",
    "EmptyTraceError",
    "NoTracesError",
    "DuplicateRankError",
    "RankUnknownError",
]


class TracekitError(Exception):
    """Base class: the CLI prints these as one line and exits non-zero."""


class TraceReadError(TracekitError):
    """A trace file could not be read."""

    def __init__(self, path: object, problem: str, rank: int | None = None) -> None:
        self.path = str(path)
        self.problem = problem
        self.rank = rank
        where = self.path if rank is None else f"{self.path} (rank {rank})"
        super().__init__(f"{where}: {problem}")

    def __reduce__(self):  # pickled as its arguments, so it crosses to and from worker processes whole
        return type(self), (self.path, self.problem, self.rank), self.__dict__


class TruncatedTraceError(TraceReadError):
    """The gzip stream ends early or is corrupt."""


class NotJSONError(TraceReadError):
    """The file is not valid JSON."""


class NotATraceError(TraceReadError):
    """Valid JSON, but not a PyTorch profiler (Kineto / Chrome) trace."""


class EmptyTraceError(NotATraceError):
    """A trace file that holds no events (``{"traceEvents": []}``, ``[]``): there is nothing to analyse.

    In a folder of ranks it is skipped and listed like any other file that is not a trace; alone, it is raised."""


class NoTracesError(TracekitError):
    """A folder holds no trace files."""


class DuplicateRankError(TracekitError):
    """Two files claim the same rank; tracekit never lets one overwrite the other."""

    def __init__(self, rank: int, first: object, second: object) -> None:
        self.rank, self.first, self.second = rank, str(first), str(second)
        super().__init__(f"rank {rank} appears in two files: {first} and {second}")

    def __reduce__(self):
        return type(self), (self.rank, self.first, self.second), self.__dict__


class RankUnknownError(TraceReadError):
    """Neither distributedInfo nor the file name says which rank a trace belongs to."""
