"""The event categories of a trace: today's names for old ones, which run on a device, which launch device work,
which tracekit knows, and what makes a rank's trace a device trace.
"""

from __future__ import annotations

import functools
import re

import pandas as pd

# Older Kineto wrote other category names; map them to today's.
_CATEGORY_ALIASES = {
    "runtime": "cuda_runtime",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "operator": "cpu_op",
    "async_gpu": "gpu_user_annotation",
}
# Work that runs on a device: GPU kernels and copies, and MTIA's device events (``mtia_ccp_events``).
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events")
# Host calls that launch device work; a device event's ``correlation`` names one of them. Runtime calls come first:
# where a runtime call and a driver call share a correlation id, the runtime call is the launch.
RUNTIME_CATEGORIES = ("cuda_runtime", "mtia_runtime", "xpu_runtime", "privateuse1_runtime",
                      "cuda_driver", "xpu_driver", "privateuse1_driver")
# Categories only a trace of a device (GPU, MTIA, XPU, HPU, ...) has: its events, its API calls, its annotations.
DEVICE_API = re.compile(r"^(kernel|gpu_|cuda_|hip_|mtia_|xpu_|hpu_|mlu_|gcu_|privateuse1_)")
# Every category tracekit knows (today's names); events of other categories are kept as host events and reported.
KNOWN_CATEGORIES = frozenset((*DEVICE_CATEGORIES, *RUNTIME_CATEGORIES, "cpu_op", "user_annotation",
                              "gpu_user_annotation", "python_function", "cpu_instant_event", "overhead", "trace",
                              "cuda_sync", "cuda_event", "cuda_profiler_range", "mtia_insight", "mtia_counters",
                              "external_correlation", "collective_comm", "xpu_sync"))


@functools.lru_cache(maxsize=4096)
def canonical_category(cat: str) -> str:
    """A Kineto category as today's traces name it (cached: the reader asks once per event of a chunk)."""
    return _CATEGORY_ALIASES.get(cat.lower(), cat.lower())


def device_evidence(events: pd.DataFrame, device_arg_categories=(), devices: int = 0,
                    backend: str | None = None) -> str | None:
    """Why one rank's trace is a device (GPU, MTIA, ...) trace, or None for a CPU-only one.

    The trace says so by, first match wins: device events (kernels, copies, MTIA events); other events only a device
    trace has (runtime calls, ``gpu_*``, ``mtia_*``, ``cuda_profiler_range``...); events of an unknown category that
    carry a ``device`` arg; or ``deviceProperties`` listing a device, unless the rank communicates through gloo (the
    CPU backend: a CPU job profiled on a machine that has GPUs still lists them).
    """
    cats = [str(c) for c, n in events["cat"].value_counts(sort=False).items() if n > 0]
    found = sorted(c for c in cats if c in DEVICE_CATEGORIES)
    if found:
        return "device events (" + ", ".join(found) + ")"
    found = sorted(c for c in cats if DEVICE_API.match(c))
    if found:
        return "device API events (" + ", ".join(found) + ")"
    if device_arg_categories:
        return "a device arg on " + ", ".join(sorted(device_arg_categories)) + " events"
    names = events["name"].cat.categories if isinstance(events["name"].dtype, pd.CategoricalDtype) else \
        pd.Index(events["name"].astype(str).unique())
    gloo = backend == "gloo" or bool(names.astype(str).str.startswith("gloo:").any())
    return "deviceProperties" if devices and not gloo else None

