"""What the predictions cost ``summarize``, and what ``tracekit.whatif`` costs, measured side by side in one run.

On 8 ranks of a real trace repeated to ``--mb`` MB each (``benchmarks/tracesets.py``), cache off, alternating runs:
  without    ``summarize`` with ``predict.predicted.with_predictions`` stubbed out (no run graph, critical path or
             the replays the findings quote; the per-rank graphs are still built in the workers)
  with       ``summarize`` as shipped
  whatif     ``tracekit.whatif`` of the Summary, all six scenarios
  replay     one replay of the run graph: the linear pass (``replay.simulate``) against the fixed-point iteration it
             replaced (``tests/replay_reference.py``), on the same model
Targets (issue 21): with / without <= 1.2, whatif / with < 0.5.

    python benchmarks/whatif_cost.py [--source DIR] [--work /tmp/tk-bench] [--repeat 3] [--mb 54] [--workers N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
from tracesets import write_rank_set  # noqa: E402

import tracekit  # noqa: E402
from tests.replay_reference import fixed_point  # noqa: E402
from tracekit.predict import replay  # noqa: E402
from tracekit.predict import predicted as tracekit_predict  # noqa: E402

SOURCE = ROOT.parent / "shared" / "traces" / "hta" / "nccl_a100_2rank"


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=SOURCE, help="folder or file of the real trace to repeat")
    parser.add_argument("--work", default="/tmp/tk-bench", help="folder for the generated traces (reused)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mb", type=float, default=54.0)
    parser.add_argument("--workers", type=int, default=None, help="summarize's workers (default: one per core)")
    args = parser.parse_args()
    folder = Path(args.work) / f"ranks8-{args.source.name}-{args.mb:g}mb"
    write_rank_set(args.source, folder, 8, args.mb)
    real = tracekit_predict.with_predictions
    without, with_, whatif = [], [], []
    for i in range(args.repeat):
        tracekit_predict.with_predictions = lambda summary, *args, **kwargs: summary
        try:
            t, _ = _timed(lambda: tracekit.summarize(folder, cache=False, workers=args.workers))
        finally:
            tracekit_predict.with_predictions = real
        without.append(t)
        t, summary = _timed(lambda: tracekit.summarize(folder, cache=False, workers=args.workers))
        with_.append(t)
        t, table = _timed(lambda: tracekit.whatif(summary))
        whatif.append(t)
        print(f"run {i + 1}: without {without[-1]:.2f} s | with {with_[-1]:.2f} s | whatif {whatif[-1]:.2f} s",
              flush=True)
    model = replay.measure(summary.graph)
    linear = min(_timed(lambda: replay.simulate(model))[0] for _ in range(args.repeat))
    iterated, reference = _timed(lambda: fixed_point(model))
    new = replay.simulate(model)
    assert reference is not None, "the fixed-point iteration did not settle"
    gap = max(float(np.max(np.abs(np.nan_to_num(a - b, posinf=0, neginf=0)))) for a, b in zip(new, reference))
    a, s, w = (statistics.median(x) for x in (without, with_, whatif))
    print(f"\n8 ranks x {args.mb:g} MB of {args.source.name}: {len(summary.graph):,} graph nodes, "
          f"{summary.collectives.shape[0]:,} collective rows; medians of {args.repeat}")
    print(f"  summarize without predictions  {a:6.2f} s")
    print(f"  summarize with predictions     {s:6.2f} s   with / without = {s / a:.2f}   (target <= 1.2)")
    print(f"  tracekit.whatif, 6 scenarios   {w:6.2f} s   whatif / with  = {w / s:.2f}   (target < 0.5)")
    print(f"  one replay: linear pass {linear * 1e3:.1f} ms, fixed-point iteration {iterated * 1e3:.1f} ms "
          f"(x{iterated / linear:.1f}); largest difference {gap:g} ns")
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
