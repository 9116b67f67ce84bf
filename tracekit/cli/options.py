"""The options several ``tracekit`` subcommands share (JSON output, window, scale), and the CLI's small helpers."""

from __future__ import annotations

import argparse
import re
import sys

import msgspec

from tracekit.events.metrics import WINDOWS


def add_json_options(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--json", action="store_true", help=text)
    parser.add_argument("--indent", type=non_negative_int, default=None, metavar="N",
                        help="with --json: indent nested values by N spaces, one value a line (default: one line)")


def add_window_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--window", choices=WINDOWS, default="drop_last",
                        help="time the metrics cover (default: all ProfilerSteps but the last, as HTA)")
    parser.add_argument("--step-pattern", type=regex, default=None, metavar="REGEX",
                        help="each host annotation whose name matches REGEX (re.search; ^...$ for a whole name) is "
                             "a step, in place of ProfilerStep (default: ProfilerStep, else an engine's own step "
                             "annotations such as step[DECODE bs=16])")


def add_scale_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--strict", action="store_true",
                        help="fail with the error of the first file in the folder that is not a readable trace "
                             "(default: skip it, and list it with its reason in the report's header)")
    scale = parser.add_argument_group("scale")
    scale.add_argument("--workers", type=positive_int, default=None, metavar="N",
                       help="processes that read ranks in parallel (default: one per core; 1: none)")
    scale.add_argument("--scheduler", metavar="ADDRESS", default=None,
                       help="run the per-rank work on this Dask cluster, e.g. tcp://host:8786 (needs tracekit[dask])")
    scale.add_argument("--no-cache", action="store_true", help="neither read nor write the per-rank result cache")
    scale.add_argument("--cache-dir", metavar="DIR", default=None,
                       help="folder of the per-rank result cache (default: $TRACEKIT_CACHE_DIR, else "
                            "$XDG_CACHE_HOME/tracekit, else ~/.cache/tracekit)")


def scale_options(args) -> dict:
    """summarize() keywords from the scale flags (and --step-pattern and --strict, which every command with them
    takes); a progress bar on a terminal when many ranks are read."""
    return {"step_pattern": getattr(args, "step_pattern", None), "workers": args.workers,
            "engine": "dask" if args.scheduler else "local", "client": args.scheduler,
            "cache": not args.no_cache, "cache_dir": args.cache_dir, "progress": ProgressBar(sys.stderr),
            "strict": getattr(args, "strict", False)}


def as_json(text: str, indent: int | None) -> str:
    return (text if indent is None else msgspec.json.format(text, indent=indent)) + "\n"


def fail(message: str) -> int:
    print(f"tracekit: error: {message}", file=sys.stderr)
    return 2


def regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as error:
        raise argparse.ArgumentTypeError(f"not a regular expression: {error}") from None
    return text


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


class ProgressBar:
    """A tqdm bar on ``stream`` for runs of many ranks, then a line naming each later stage (the cross-rank join,
    the replay), shown only on a terminal; for a run of few but large files (``LARGE_BYTES`` in all), the stage
    lines from the reading on."""

    MIN_RANKS = 8
    LARGE_BYTES = 1 << 30

    def __init__(self, stream) -> None:
        self.stream, self.bar, self.shown = stream, None, False

    def reading(self, files: int, total_bytes: int | None) -> None:
        """Name the reading when it will take a while (``LARGE_BYTES`` or more of trace files)."""
        if total_bytes is None or total_bytes < self.LARGE_BYTES or not self.stream.isatty():
            return
        self.shown = True
        self.stage(f"reading {files} trace file{'' if files == 1 else 's'} ({total_bytes / 1e9:.1f} GB)")

    def stage(self, name: str) -> None:
        """Show the stage on one line that each next stage overwrites; "done" clears it."""
        if self.shown:
            self.stream.write("\r\x1b[K" + ("" if name == "done" else f"tracekit: {name} ..."))
            self.stream.flush()

    def __call__(self, done: int, total: int) -> None:
        if total < self.MIN_RANKS or not self.stream.isatty():
            return
        self.shown = True
        if self.bar is None:
            from tqdm import tqdm

            class _Bar(tqdm):
                monitor_interval = 0  # no monitor thread: worker processes are forked only from a single thread

            self.bar = _Bar(total=total, desc="ranks", unit="rank", file=self.stream, leave=False)
        self.bar.update(done - self.bar.n)
        if done == total:
            self.bar.close()
