"""One of a Summary's event tables in an Arrow IPC file (``tracekit.summary.offheap`` writes them): mapped into
memory when made, read into the same DataFrame (``arrowframe``) the first time it is used, and held from then on."""

from __future__ import annotations

import threading
from pathlib import Path

import pandas as pd
import pyarrow as pa

from tracekit.summary import arrowframe

__all__ = ["MappedTable"]


class MappedTable:
    """One event table in an Arrow IPC file: mapped when made (no file kept open), read into a DataFrame on first
    use and held from then on (the mapping is then let go)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with pa.memory_map(str(path), "r") as source:  # closing the file keeps the mapping the table refers to
            self._arrow = pa.ipc.open_file(source).read_all()
        self._frame: pd.DataFrame | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the table has been read from its file."""
        return self._frame is not None

    def frame(self) -> pd.DataFrame:
        """The table (the same object on every call; the Summary hands out copies of it)."""
        with self._lock:
            if self._frame is None:
                self._frame = arrowframe.from_arrow(self._arrow)
                self._arrow = None
            return self._frame
