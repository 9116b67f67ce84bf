"""``tracekit`` command line: a thin layer over the library. Errors print one line and exit non-zero."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from tracekit.api import summarize
from tracekit.compare import compare
from tracekit.errors import TracekitError
from tracekit.metrics import WINDOWS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tracekit", description="Where the step time of a PyTorch DDP job goes.")
    commands = parser.add_subparsers(dest="command", required=True)
    summary = commands.add_parser("summarize", help="summarize a folder of per-rank traces (or one trace file)",
                                  description="Print the per-rank summary of a run, or its JSON.")
    summary.add_argument("trace_dir", help="folder with one torch.profiler trace per rank, or one trace file")
    summary.add_argument("--json", action="store_true", help="print JSON instead of the text report")
    summary.add_argument("--window", choices=WINDOWS, default="drop_last",
                         help="time the metrics cover (default: all ProfilerSteps but the last, as HTA)")
    _add_scale_options(summary)
    cmp = commands.add_parser("compare", help="compare two runs side by side",
                              description="Step time, throughput, compute, comm, idle by cause and bandwidth of two runs.")
    cmp.add_argument("dir_a", help="first run (the baseline)")
    cmp.add_argument("dir_b", help="second run; ratios are b / a")
    cmp.add_argument("--json", action="store_true", help="print JSON instead of the table")
    rep = commands.add_parser("report", help="write a self-contained HTML report of a run",
                              description="One HTML file with the overview, ranks, communication and idle charts "
                                          "(plotly inlined: it opens offline). An existing file is never replaced "
                                          "without --force.")
    rep.add_argument("trace_dir", help="folder with one torch.profiler trace per rank, or one trace file")
    rep.add_argument("-o", "--output", default="report.html", help="HTML file to write (default: report.html)")
    rep.add_argument("--force", action="store_true", help="replace the output file when it exists")
    rep.add_argument("--window", choices=WINDOWS, default="drop_last", help="time the metrics cover (as summarize)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "summarize":
            result = summarize(args.trace_dir, window=args.window, **_scale_options(args))
            sys.stdout.write(result.to_json() + "\n" if args.json else str(result))
        elif args.command == "compare":
            result = compare(args.dir_a, args.dir_b)
            sys.stdout.write(msgspec.json.encode(result.to_dict()).decode() + "\n" if args.json else str(result))
        elif args.command == "report":
            return _report(args)
    except TracekitError as err:
        print(f"tracekit: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def _add_scale_options(parser: argparse.ArgumentParser) -> None:
    scale = parser.add_argument_group("scale")
    scale.add_argument("--workers", type=_positive_int, default=None, metavar="N",
                       help="processes that read ranks in parallel (default: one per core; 1: none)")
    scale.add_argument("--scheduler", metavar="ADDRESS", default=None,
                       help="run the per-rank work on this Dask cluster, e.g. tcp://host:8786 (needs tracekit[dask])")
    scale.add_argument("--no-cache", action="store_true", help="neither read nor write the per-rank result cache")
    scale.add_argument("--cache-dir", metavar="DIR", default=None,
                       help="folder of the per-rank result cache (default: ~/.cache/tracekit)")


def _scale_options(args) -> dict:
    """summarize() keywords from the scale flags; a progress bar on a terminal when many ranks are read."""
    return {"workers": args.workers, "engine": "dask" if args.scheduler else "local", "client": args.scheduler,
            "cache": not args.no_cache, "cache_dir": args.cache_dir, "progress": _ProgressBar(sys.stderr)}


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


class _ProgressBar:
    """A tqdm bar on ``stream`` for runs of many ranks, shown only on a terminal."""

    MIN_RANKS = 8

    def __init__(self, stream) -> None:
        self.stream, self.bar = stream, None

    def __call__(self, done: int, total: int) -> None:
        if total < self.MIN_RANKS or not self.stream.isatty():
            return
        if self.bar is None:
            from tqdm import tqdm

            class _Bar(tqdm):
                monitor_interval = 0  # no monitor thread: worker processes are forked only from a single thread

            self.bar = _Bar(total=total, desc="ranks", unit="rank", file=self.stream, leave=False)
        self.bar.update(done - self.bar.n)
        if done == total:
            self.bar.close()


def _report(args) -> int:
    """``tracekit report``: refuse to replace a file before any work, then summarize and write."""
    try:
        from tracekit.report import write_report
    except ImportError as err:
        print(f"tracekit: error: 'tracekit report' needs plotly ({err.name} missing): pip install 'tracekit[app]'",
              file=sys.stderr)
        return 2
    out = Path(args.output)
    if out.is_dir() or (out.exists() and not args.force):
        print(f"tracekit: error: {out} exists; pass --force to replace it", file=sys.stderr)
        return 2
    result = summarize(args.trace_dir, window=args.window)
    try:
        write_report(result, out, force=args.force)
    except FileExistsError:
        print(f"tracekit: error: {out} exists; pass --force to replace it", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"tracekit: error: {out}: {err.strerror or err}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
