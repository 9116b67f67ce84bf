"""What the dependency graph, the critical path and the what-if replays add to ``summarize``, measured side by side.

On the 8 x 54 MB set of ``benchmarks/scale.py`` (a real GPU trace repeated, copied to 8 ranks), in one process and
with the cache off, alternating runs, first in wall time with the worker pool, then in CPU time in one process
(workers=1: what other load on a shared machine disturbs least):
  alone      ``summarize`` with the graph switched off (the per-rank ``rank_graph`` and the run-level step patched
             to do nothing; worker processes are forked, so they see the patch)
  with graph ``summarize`` as shipped: per-rank graphs, the run graph, critical paths, the replays the findings quote
  + whatif   that, then ``tracekit.whatif`` with every scenario

    python benchmarks/whatif_cost.py [--work /tmp/tk-bench] [--repeat 3] [--mb 54]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from tracesets import write_rank_set  # noqa: E402

import tracekit  # noqa: E402
from tracekit.rank import analyze as tracekit_rank  # noqa: E402
from tracekit.predict import scenarios as tracekit_predict  # noqa: E402

SOURCE = ROOT.parent / "shared" / "traces" / "hta" / "ns_resolution_1rank"


def _timed(fn, clock=time.perf_counter) -> tuple[float, object]:
    t0 = clock()
    out = fn()
    return clock() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="/tmp/tk-bench", help="folder for the generated traces (reused)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mb", type=float, default=54.0)
    args = parser.parse_args()
    folder = Path(args.work) / f"ranks8-{args.mb:g}mb"
    write_rank_set(SOURCE, folder, 8, args.mb)
    real_graph, real_predictions = tracekit_rank.rank_graph, tracekit_predict.with_predictions
    alone, shipped, full = [], [], []
    # Wall time with the default worker pool; then CPU time in this one process (workers=1), which other load on a
    # shared machine disturbs far less.
    modes = [("wall, worker pool", time.perf_counter, None)] * args.repeat + [
        ("CPU, one process", time.process_time, 1)] * args.repeat
    for i, (mode, clock, workers) in enumerate(modes):
        if i == args.repeat:
            _report(alone, shipped, full, "wall time, worker pool", args, summary)
            alone, shipped, full = [], [], []
        tracekit_rank.rank_graph = lambda events, collectives: pd.DataFrame()
        tracekit_predict.with_predictions = lambda summary, graphs, shift: summary
        try:
            t_alone, _ = _timed(lambda: tracekit.summarize(folder, cache=False, workers=workers), clock)
        finally:
            tracekit_rank.rank_graph, tracekit_predict.with_predictions = real_graph, real_predictions
        t_shipped, summary = _timed(lambda: tracekit.summarize(folder, cache=False, workers=workers), clock)
        t_whatif, table = _timed(lambda: tracekit.whatif(summary), clock)
        alone.append(t_alone)
        shipped.append(t_shipped)
        full.append(t_shipped + t_whatif)
        print(f"{mode} run {i % args.repeat + 1}: alone {t_alone:.2f} s | with graph {t_shipped:.2f} s | "
              f"+ whatif (6 scenarios) {t_whatif:.2f} s", flush=True)
    _report(alone, shipped, full, "CPU time, one process", args, summary)
    print(table.to_string(index=False))


def _report(alone, shipped, full, what, args, summary) -> None:
    a, s, f = (statistics.median(x) for x in (alone, shipped, full))
    print(f"\n8 ranks x {args.mb:g} MB, {len(summary.graph)} graph nodes, {what}, medians of {args.repeat}:")
    print(f"  summarize alone            {a:6.2f} s")
    print(f"  summarize with graph       {s:6.2f} s   extra {100 * (s - a) / a:+5.1f}%   (graph, critical paths, "
          "the replays the findings quote)")
    print(f"  + whatif, all scenarios    {f:6.2f} s   extra {100 * (f - a) / a:+5.1f}%\n")


if __name__ == "__main__":
    main()
