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
            result = summarize(args.trace_dir, window=args.window)
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
