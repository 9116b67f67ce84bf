"""The cache's table format against Parquet: time to write and read back every rank's entry, and its size.

    python benchmarks/cache_format.py sample_traces/gpt-gloo-2rank /tmp/tracekit-bench/ranks8-54mb

Each rank of each run is analysed once; then its ``RankResult`` tables are written and read back ``--repeat``
times in each format, alternating, in one process: the cache's own (``tracekit.rank.cachefile``: Arrow IPC, zstd)
and Parquet with zstd (the common alternative). Both read back through ``cachefile``'s restore step, so each time
is what a cache hit pays for the tables. Prints medians and the ratios Parquet / Arrow (above 1: Arrow is faster).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd

from tracekit.events.config import Config
from tracekit.pystrings import python_strings
from tracekit.rank import cachefile
from tracekit.rank.analyze import analyze_rank


def _parquet_write(folder: Path, tables: dict, specs: dict) -> None:
    for name, frame in tables.items():
        frame.drop(columns=list(specs[name]["loose"])).to_parquet(folder / f"{name}.parquet", engine="pyarrow",
                                                                  compression="zstd")


def _parquet_read(folder: Path, specs: dict) -> dict:
    return {name: cachefile._restored(pd.read_parquet(folder / f"{name}.parquet", engine="pyarrow"), spec)
            for name, spec in specs.items()}


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(files: list[Path], repeat: int) -> dict:
    results = [analyze_rank(f, Config(), 0) for f in files]
    work = Path(tempfile.mkdtemp(prefix="tracekit-cache-format-"))
    times = {k: [] for k in ("arrow_write", "arrow_read", "parquet_write", "parquet_read")}
    sizes = {"arrow": 0, "parquet": 0}
    try:
        for i in range(repeat):
            arrow_w = arrow_r = parquet_w = parquet_r = 0.0
            for n, result in enumerate(results):
                tables, rest = cachefile.split(result)
                entry = work / f"arrow-{i}-{n}"
                arrow_w += _timed(lambda: cachefile.write_entry(entry, tables, rest))
                arrow_r += _timed(lambda: cachefile.read_entry(entry))
                folder = work / f"parquet-{i}-{n}"
                folder.mkdir()
                specs = {name: cachefile.table_spec(frame) for name, frame in tables.items()}
                parquet_w += _timed(lambda: _parquet_write(folder, tables, specs))
                parquet_r += _timed(lambda: _parquet_read(folder, specs))
                if i == 0:
                    sizes["arrow"] += sum(p.stat().st_size for p in entry.glob(f"*{cachefile.TABLE_SUFFIX}"))
                    sizes["parquet"] += sum(p.stat().st_size for p in folder.glob("*.parquet"))
            for k, v in zip(times, (arrow_w, arrow_r, parquet_w, parquet_r)):
                times[k].append(v)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {**{k: statistics.median(v) for k, v in times.items()}, **sizes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (rank-* trace files)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'run':40s} {'ranks':>5s} {'write Arrow':>11s} {'Parquet':>8s} {'ratio':>6s}   "
          f"{'read Arrow':>10s} {'Parquet':>8s} {'ratio':>6s}   {'MB Arrow':>8s} {'Parquet':>8s}")
    with python_strings():  # as in an analysis: text columns Python-held
        for run in args.runs:
            files = sorted(p for p in run.glob("rank-*") if p.is_file())
            m = measure(files, args.repeat)
            print(f"{str(run)[-40:]:40s} {len(files):5d} {m['arrow_write'] * 1e3:9.0f}ms "
                  f"{m['parquet_write'] * 1e3:6.0f}ms {m['parquet_write'] / m['arrow_write']:5.2f}x   "
                  f"{m['arrow_read'] * 1e3:8.0f}ms "
                  f"{m['parquet_read'] * 1e3:6.0f}ms {m['parquet_read'] / m['arrow_read']:5.2f}x   "
                  f"{m['arrow'] / 1e6:8.2f} {m['parquet'] / 1e6:8.2f}", flush=True)


if __name__ == "__main__":
    main()
