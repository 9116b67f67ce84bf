"""Side-by-side: tracekit load+summarize against HolisticTraceAnalysis' load of the same trace folder.

Each side runs in its own fresh process, alternating, so both pay their imports the same way and neither warms the
other's page cache unfairly. Prints the median wall time of each (import excluded) and their ratio.

    python benchmarks/load_vs_hta.py ../shared/traces/hta/ns_resolution_1rank --repeat 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

TRACEKIT = """
import json, sys, time, resource
import tracekit
t = time.perf_counter(); tracekit.summarize(sys.argv[1], cache=False, workers=1); wall = time.perf_counter() - t
print(json.dumps({"wall_s": wall, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

HTA_LOAD = """
import json, logging, sys, time, resource
from hta.trace_analysis import TraceAnalysis
logging.getLogger("hta").setLevel(logging.ERROR)
t = time.perf_counter(); TraceAnalysis(trace_dir=sys.argv[1]); wall = time.perf_counter() - t
print(json.dumps({"wall_s": wall, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _run(code: str, trace_dir: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code, trace_dir], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace_dir")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    ours, theirs = [], []
    for _ in range(args.repeat):
        ours.append(_run(TRACEKIT, args.trace_dir))
        theirs.append(_run(HTA_LOAD, args.trace_dir))
    t_ours = statistics.median(r["wall_s"] for r in ours)
    t_theirs = statistics.median(r["wall_s"] for r in theirs)
    m_ours = statistics.median(r["rss_mb"] for r in ours)
    m_theirs = statistics.median(r["rss_mb"] for r in theirs)
    print(f"trace folder: {args.trace_dir}  ({args.repeat} alternating runs each, median)")
    print(f"  tracekit load+summarize : {t_ours:7.3f} s   peak RSS {m_ours:7.0f} MB")
    print(f"  HTA TraceAnalysis load  : {t_theirs:7.3f} s   peak RSS {m_theirs:7.0f} MB")
    print(f"  ratio HTA / tracekit    : {t_theirs / t_ours:7.1f}x time, {m_theirs / m_ours:5.1f}x memory")


if __name__ == "__main__":
    main()
