"""What the dependency graph, the critical path and the what-if replays add to ``summarize``, measured side by side.

On the 8 x 54 MB set of ``benchmarks/scale.py`` (a real GPU trace repeated, copied to 8 ranks), in one process and
with the cache off, alternating runs:
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
from tracekit import rank as tracekit_rank  # noqa: E402
from tracekit import predict as tracekit_predict  # noqa: E402

SOURCE = ROOT.parent / "shared" / "traces" / "hta" / "ns_resolution_1rank"


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


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
    for i in range(args.repeat):
        tracekit_rank.rank_graph = lambda events, collectives: pd.DataFrame()
        tracekit_predict.with_predictions = lambda summary, graphs, shift: summary
        try:
            t_alone, _ = _timed(lambda: tracekit.summarize(folder, cache=False))
        finally:
            tracekit_rank.rank_graph, tracekit_predict.with_predictions = real_graph, real_predictions
        t_shipped, summary = _timed(lambda: tracekit.summarize(folder, cache=False))
        t_whatif, table = _timed(lambda: tracekit.whatif(summary))
        alone.append(t_alone)
        shipped.append(t_shipped)
        full.append(t_shipped + t_whatif)
        print(f"run {i + 1}: alone {t_alone:.2f} s | with graph {t_shipped:.2f} s | + whatif (6 scenarios) "
              f"{t_whatif:.2f} s", flush=True)
    a, s, f = (statistics.median(x) for x in (alone, shipped, full))
    print(f"\n8 ranks x {args.mb:g} MB, {len(summary.graph)} graph nodes, medians of {args.repeat}:")
    print(f"  summarize alone            {a:6.2f} s")
    print(f"  summarize with graph       {s:6.2f} s   extra {100 * (s - a) / a:+5.1f}%")
    print(f"  + whatif, all scenarios    {f:6.2f} s   extra {100 * (f - a) / a:+5.1f}%")
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
