"""Resident memory of a held Summary with its event tables off the heap (the default) and in memory.

Each way runs in a fresh process: ``tracekit.summarize(run, cache=False)``, then, from /proc/self/status, the
process's peak resident memory (VmHWM, over the whole summarize) and its resident memory with the Summary held and
no table read yet (VmRSS, after a garbage collection), then VmRSS once every event table has been read. Only this
process is measured: helper processes that decode a large trace's chunks are not in its figures. glibc keeps the
pages of freed memory for reuse, so the held figure is given again after ``malloc_trim(0)`` (Linux, glibc), which
returns them: that one shows the memory the Summary holds.

    python benchmarks/offheap_rss.py RUN_DIR [--workers N] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = """
import ctypes, gc, json, sys, time
import tracekit
from tracekit.summary import offheap
from tracekit.summary.model import EVENT_TABLES

def status():
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return {k: int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}  # MiB

run, workers, in_memory = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "memory"
t = time.perf_counter()
s = tracekit.summarize(run, cache=False, workers=workers, _tables_in_memory=in_memory)
wall = time.perf_counter() - t
gc.collect()
held = status()
try:  # glibc keeps freed heap pages; malloc_trim hands them back, so the RSS shows the live data
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    trimmed = status()["VmRSS"]
except (OSError, AttributeError):
    trimmed = float("nan")
folder = offheap.folder_of(s)
disk = sum(p.stat().st_size for p in folder.iterdir()) / 2**20 if folder else 0.0
rows = {name: len(getattr(s, name)) for name in EVENT_TABLES}  # reads every table
frames = sum(getattr(s, name).memory_usage(deep=True).sum() for name in EVENT_TABLES) / 2**20
gc.collect()
print(json.dumps({"wall_s": round(wall, 1), "peak_mib": held["VmHWM"], "held_mib": held["VmRSS"],
                  "held_after_malloc_trim_mib": trimmed, "after_reading_mib": status()["VmRSS"],
                  "arrow_files_mib": round(disk, 1), "tables_mib": round(frames, 1), "rows": rows}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each way, alternating")
    args = parser.parse_args()
    for _ in range(args.repeat):
        for way in ("off-heap", "memory"):
            out = subprocess.run([sys.executable, "-c", CHILD, str(args.run), str(args.workers), way],
                                 capture_output=True, text=True, check=True)
            print(way, out.stdout.strip().splitlines()[-1], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
