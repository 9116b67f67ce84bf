"""Strings kept as Python objects while tracekit computes (pandas' ``mode.string_storage = "python"``).

pandas 3 keeps a ``str`` column in an Arrow array by default. tracekit builds many small frames and reads many
single values, and each construction, ``take`` and scalar read of an Arrow string array crosses into Arrow: about a
third of a small run's summary, less of a large one's, which also peaks lower (``docs/benchmarks.md``). The dtype
stays ``str`` (``dtype == "str"``), and every value, order and missing value is the same (but see below); only the
storage differs, and ``summary.arrowframe`` keeps it through the off-heap tables.

``python_strings()`` sets the option for the length of an analysis and gives the caller's setting back after.
Calls may nest and threads may overlap (the viewer summarizes in its sessions' threads): the first to enter sets
it, the last to leave restores the setting the first found, so no thread's exit takes the setting from under
another that still computes, and these blocks alone never leave it set. pandas' options are the process's: while
an analysis runs, another thread's pandas work sees the setting too, a setting that thread makes meanwhile is
replaced by the one the first analysis found, and a plain ``pd.option_context`` block that overlaps an analysis
out of order can leave either setting behind.

One text rule differs between the storages: ``str.lower`` of a Python string lowers "İ" to "i̇" (two code
points), Arrow's to "i". tracekit lowers names to compare them with ASCII words (a collective's "wait"), so a name
holding "İ" would compare differently; no trace seen has one.
"""

from __future__ import annotations

import contextlib
import threading

import pandas as pd

OPTION = "mode.string_storage"
_lock = threading.Lock()
_state = {"depth": 0, "saved": None}  # the number of analyses inside, and the setting the first one found


@contextlib.contextmanager
def python_strings():
    """New ``str`` columns are held as Python objects inside the block (see the module's docstring).

    Example:
      >>> with python_strings():
      ...     pd.Series(["a"]).dtype.storage
      'python'
    """
    with _lock:
        if _state["depth"] == 0:
            _state["saved"] = pd.get_option(OPTION)
            pd.set_option(OPTION, "python")
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0:
                pd.set_option(OPTION, _state["saved"])
