"""``tracekit`` command line: a thin layer over the library. Errors print one line and exit non-zero.

Each subcommand is a pair: ``_add_<name>(commands)`` builds its parser and sets ``run`` to the function that
carries it out with the parsed arguments and returns the exit status. A new subcommand adds one pair and one
line in ``build_parser``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import msgspec

from tracekit import __version__, stageclock
from tracekit.rank import cache as tracekit_cache
from tracekit.api import summarize
from tracekit.render.compare import compare
from tracekit.errors import TracekitError
from tracekit.read.files import TRACE_SUFFIXES, is_url
from tracekit.summary.model import EVENT_TABLES, wanted_tables
from tracekit.cli.view import add_view
from tracekit.cli.whatif import add_whatif
from tracekit.cli.options import (add_json_options, add_scale_options, add_window_option, as_json, fail,
                                  scale_options)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tracekit", description="Where the step time of a PyTorch DDP job goes.")
    parser.add_argument("--version", action="version", version=f"tracekit {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_summarize, _add_compare, _add_report, _add_cache, add_whatif, _add_export, add_view):
        add(commands)
    return parser


def entry() -> int:
    """The ``tracekit`` command and ``python -m tracekit``: ``main`` in a process of its own. Everything the imports
    made lives as long as the process, so it is moved out of the cyclic collector's reach (``gc.freeze``): a full
    collection then walks only what the analysis makes, not the modules' several hundred thousand objects (about 10%
    of an 8-rank run's wall time). A program that calls ``main`` keeps its collector as it is."""
    gc.freeze()
    return main()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except TracekitError as err:
        print(f"tracekit: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # a bug, not bad input: one line, the traceback only on request
        if os.environ.get("TRACEKIT_DEBUG"):
            raise
        print(f"tracekit: internal error ({type(err).__name__}: {err}); this is a bug in tracekit: please report it "
              "with the command; TRACEKIT_DEBUG=1 shows the traceback", file=sys.stderr)
        return 3


# --- summarize ------------------------------------------------------------------------------------------------------

def _add_summarize(commands) -> None:
    cmd = commands.add_parser("summarize", help="summarize a folder of per-rank traces (or one trace file)",
                              description="Print the per-rank summary of a run, or its JSON.")
    cmd.add_argument("trace_dir", help="folder with one torch.profiler trace per rank, or one trace file")
    add_json_options(cmd, "print the Summary as JSON instead of the text report (NaN as null)")
    tables = cmd.add_mutually_exclusive_group()
    tables.add_argument("--tables", metavar="NAME,...", type=lambda v: [t for t in v.split(",") if t],
                        help="with --json: also the tables that grow with the trace's events "
                             f"({', '.join(EVENT_TABLES)}), which are left out by default")
    tables.add_argument("--all-tables", action="store_true", help="with --json: every table")
    add_window_option(cmd)
    add_scale_options(cmd)
    cmd.add_argument("--profile-stages", action="store_true",
                     help="also print, on stderr, each stage's wall and CPU time and the peak memory it reached: "
                          "each rank's stages summed over ranks, then the run's (tracekit.stageclock)")
    cmd.set_defaults(run=_summarize)


def _summarize(args) -> int:
    tables = "all" if args.all_tables else args.tables
    try:
        wanted_tables(tables)  # a misspelt name fails before any work
    except ValueError as err:
        raise TracekitError(str(err)) from None
    if args.profile_stages:
        stageclock.enable()
        start_up = stageclock.since_start()
    try:
        began = time.perf_counter()
        result = summarize(args.trace_dir, window=args.window, **scale_options(args))
        took = time.perf_counter() - began
        with stageclock.stage("render"):
            text = as_json(result.to_json(tables), args.indent) if args.json else str(result)
    finally:
        if args.profile_stages:
            stageclock.enable(False)
    if args.profile_stages:
        sys.stderr.write(stageclock.table(stageclock.take()) + f"summarize: {took:.2f} s wall in all (render not "
                         "counted); before it, interpreter start-up and imports: "
                         + ("unknown\n" if start_up is None else f"{start_up:.2f} s\n"))
    sys.stdout.write(text)
    return 0


# --- compare --------------------------------------------------------------------------------------------------------

def _add_compare(commands) -> None:
    cmd = commands.add_parser("compare", help="compare two runs side by side",
                              description="Step time and its parts, throughput, idle by cause and collectives per "
                                          "step of two runs, with ratios b / a; then the ops and device kernels "
                                          "whose time per step changed most (calls and ms per step, b - a).")
    cmd.add_argument("dir_a", help="first run (the baseline)")
    cmd.add_argument("dir_b", help="second run; ratios are b / a")
    add_json_options(cmd, "print JSON instead of the table")
    add_window_option(cmd)
    add_scale_options(cmd)
    cmd.set_defaults(run=_compare)


def _compare(args) -> int:
    a, b = (summarize(d, window=args.window, **scale_options(args)) for d in (args.dir_a, args.dir_b))
    result = compare(a, b)
    sys.stdout.write(as_json(msgspec.json.encode(result.to_dict()).decode(), args.indent) if args.json else str(result))
    return 0


# --- report ---------------------------------------------------------------------------------------------------------

def _add_report(commands) -> None:
    cmd = commands.add_parser("report", help="write a self-contained HTML report of a run",
                              description="One HTML file with the overview, ranks, communication and idle charts "
                                          "(plotly inlined: it opens offline). An existing file is never replaced "
                                          "without --force.")
    cmd.add_argument("trace_dir", help="folder with one torch.profiler trace per rank, or one trace file")
    cmd.add_argument("-o", "--output", default="report.html", help="HTML file to write (default: report.html)")
    cmd.add_argument("--force", action="store_true", help="replace the output file when it exists")
    add_window_option(cmd)
    add_scale_options(cmd)
    cmd.set_defaults(run=_report)


def _report(args) -> int:
    """Refuse to replace a file before any work, then summarize and write."""
    try:
        from tracekit.render.report import write_report
    except ImportError as err:
        return fail(f"'tracekit report' needs plotly ({err.name} missing): pip install 'tracekit[app]'")
    out = Path(args.output)
    refused = _refused_output(out, args.force)
    if refused:
        return fail(refused)
    result = summarize(args.trace_dir, window=args.window, **scale_options(args))
    return _written(out, lambda: write_report(result, out, force=args.force), f"wrote {out}")


# --- cache ----------------------------------------------------------------------------------------------------------

def _add_cache(commands) -> None:
    cmd = commands.add_parser("cache", help="show or empty the per-rank result cache",
                              description="The cache keeps each rank's result between runs, and each run's event "
                                          "tables (tables/), in its own folder "
                                          "(never beside the traces), at most "
                                          f"{tracekit_cache.DEFAULT_MAX_BYTES / 2**30:g} GiB: after each run the "
                                          "least recently used entries are removed.")
    actions = cmd.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, text in (("info", "print the cache folder, its entries, its runs' event tables and their size"),
                       ("clear", "delete every entry and run's event tables of the cache folder")):
        action = actions.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        action.add_argument("--cache-dir", metavar="DIR", default=None,
                            help="the cache folder (default: $TRACEKIT_CACHE_DIR, else $XDG_CACHE_HOME/tracekit, else ~/.cache/tracekit)")
        action.set_defaults(run=_cache_info if name == "info" else _cache_clear)


def _cache_info(args) -> int:
    found = tracekit_cache.info(args.cache_dir)
    print(f"cache folder: {found.folder}\nentries: {found.entries}\nsize: {found.bytes / 1e6:,.1f} MB of at most "
          f"{tracekit_cache.DEFAULT_MAX_BYTES / 2**30:g} GiB ({tracekit_cache.DEFAULT_MAX_BYTES / 1e6:,.0f} MB; least "
          f"recently used entries go first)\nrun-table folders: {found.run_tables} (runs' event tables; counted in the "
          "size)")
    return 0


def _cache_clear(args) -> int:
    removed = tracekit_cache.clear(args.cache_dir)
    print(f"removed {removed.entries} entries and {removed.run_tables} run-table folders "
          f"({removed.bytes / 1e6:,.1f} MB) from {removed.folder}")
    return 0


def _refused_output(out: Path, force: bool) -> str | None:
    """Why ``out`` may not be written, or None: a folder never is, an existing file only with --force."""
    if out.is_dir():
        return f"{out} is a folder; name the file to write with -o"
    if out.exists() and not force:
        return f"{out} exists; pass --force to replace it"
    return None


def _written(out: Path, write, done: str) -> int:
    """Run ``write()``; a file that appeared meanwhile or an OS error is one line and status 2, success prints ``done``."""
    try:
        write()
    except FileExistsError:
        return fail(f"{out} exists; pass --force to replace it")
    except OSError as err:
        return fail(f"{out}: {err.strerror or err}")
    print(done)
    return 0


# --- export ---------------------------------------------------------------------------------------------------------

def _add_export(commands) -> None:
    cmd = commands.add_parser("export", help="write the run as one Perfetto (Trace Event Format) JSON file",
                              description="One trace for ui.perfetto.dev: every rank its own process on the corrected "
                                          "clock, collectives and the critical path linked by flow arrows, idle and "
                                          "exposed comm as counters (tracekit.render.export). Written beside the run "
                                          "unless -o says where; an existing file is never replaced without --force.")
    cmd.add_argument("trace_dir", help="folder with one torch.profiler trace per rank, or one trace file")
    cmd.add_argument("-o", "--output", default=None,
                     help="JSON file to write, outside the run folder (default: beside the run: RUN.perfetto.json "
                          "next to the run folder, or STEM.perfetto.json next to a single trace file)")
    cmd.add_argument("--force", action="store_true", help="replace the output file when it exists")
    add_window_option(cmd)
    add_scale_options(cmd)
    cmd.set_defaults(run=_export)


def _export(args) -> int:
    """Refuse to replace a file before any work, then summarize, read the ranks' events again and write."""
    from tracekit.render.export import export_trace, rank_events, write

    out, refused = (Path(args.output), None) if args.output is not None else _beside_the_run(args.trace_dir)
    refused = refused or _refused_output(out, args.force)
    if not refused and Path(args.trace_dir).is_dir() and out.resolve().parent == Path(args.trace_dir).resolve():
        refused = (f"{out} is inside the run folder {args.trace_dir}, where it would be read as one more rank of the "
                   "run; write it elsewhere (-o)")
    if refused:
        return fail(refused)
    result = summarize(args.trace_dir, window=args.window, **scale_options(args))
    trace = export_trace(result, rank_events(result))
    return _written(out, lambda: write(trace, out, force=args.force),
                    f"wrote {out} ({len(trace['traceEvents']):,} events, {len(result.ranks)} ranks)")


def _beside_the_run(trace_dir: str) -> tuple[Path | None, str | None]:
    """The default export file and None, or None and why there is none: ``<run folder>.perfetto.json`` next to the
    run folder, ``<stem>.perfetto.json`` next to a single trace file (stem: its name less .gz, .json, .pt.trace),
    unless that file's folder holds other traces (a run folder, which the export would join as one more rank)."""
    if is_url(trace_dir):
        return None, f"{trace_dir} is not a local path: name the file to write with -o"
    run = Path(trace_dir)
    if run.name in ("", ".."):  # "." or "..": name the folder itself
        run = run.resolve()
    if not run.is_file():  # a folder (or a missing path, which summarize reports)
        return run.parent / f"{run.name}.perfetto.json", None
    stem = run.name
    for suffix in (".gz", ".json", ".trace", ".pt"):
        stem = stem.removesuffix(suffix) or stem
    out = run.parent / f"{stem}.perfetto.json"
    if any(p.is_file() and p.name.endswith(TRACE_SUFFIXES) for p in run.parent.iterdir() if p not in (run, out)):
        return None, (f"{run.parent} holds other traces, where {out.name} would be read as one more rank of that "
                      "run; name the file to write with -o")
    return out, None


if __name__ == "__main__":
    raise SystemExit(main())
