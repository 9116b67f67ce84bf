"""``tracekit whatif RUN``: the predicted step time of the run under each scenario (``tracekit.predict.scenarios``).

The text table is in the CLI's units (``tracekit.fmt``): step time and saving in ms, the saving also in % of the
baseline step, the speed-up to 2 decimals (``1.04x``), ``unknown`` where the trace cannot tell, and why under the table.
``--json`` prints the table as it is (``step_time_us``, ``saving_us``: microseconds; NaN as null; ``reason``: why a
record's prediction is unknown, '' where known), and the reasons on stderr too.
"""

from __future__ import annotations

import sys

import msgspec
import pandas as pd

from tracekit import fmt, quality
from tracekit.api import summarize
from tracekit.cli.options import add_json_options, add_scale_options, add_window_option, as_json, fail, scale_options

COLUMNS = ("scenario", "step ms", "speed-up", "saving ms", "saving %")


def add_whatif(commands) -> None:
    from tracekit.predict.scenarios import PIPELINE_SCENARIOS, SCENARIOS

    cmd = commands.add_parser("whatif", help="predict the step time under changes, by replaying the run",
                              description="Replay the run's dependency graph with measured times changed per "
                                          "scenario and print the predicted mean step time of each: "
                                          + ", ".join(SCENARIOS) + ", comm_x<k> (transfers k times faster), and on "
                                          "pipeline runs " + ", ".join(PIPELINE_SCENARIOS) + ". "
                                          "Times in ms, saving against the baseline step, speed-up = baseline / "
                                          "scenario; --json: the raw table (microseconds).")
    cmd.add_argument("trace_dir", help="folder with one torch.profiler trace per rank, or one trace file")
    cmd.add_argument("--scenario", action="append", default=None, metavar="NAME",
                     help="a scenario to replay (repeatable; default: all of " + ", ".join(SCENARIOS)
                          + ", and " + ", ".join(PIPELINE_SCENARIOS) + " on a pipeline run)")
    add_json_options(cmd, "print the table as JSON records (times in microseconds; reason: why a record "
                          "is unknown, '' where known)")
    add_window_option(cmd)
    add_scale_options(cmd)
    cmd.set_defaults(run=whatif)


def whatif(args) -> int:
    from tracekit.predict.scenarios import whatif as predict

    try:
        summary = summarize(args.trace_dir, window=args.window, **scale_options(args))
        table = predict(summary, scenarios=args.scenario)
    except ValueError as err:
        return fail(str(err))
    # Why a prediction is unknown, from the Summary's data quality (nothing said where it knows no reason): every
    # note once, under the table. The table's reason column says it per row (these notes joined by '; ', which a note
    # may hold itself: so they are not split back out of it). A reason no note gives (a pipeline scenario's) is said
    # with its scenario's name.
    unknown = table.loc[table["step_time_us"].isna(), ["scenario", "reason"]].astype(str)
    why = list(dict.fromkeys(line for name, reason in unknown.itertuples(index=False)
                             for line in quality.whatif_notes(summary.data_quality, name) or [f"{name}: {reason}"]))
    if args.json:  # each record carries its reason (the table's column); the notes go to stderr as well
        sys.stdout.write(as_json(msgspec.json.encode(table.astype(object).where(table.notna(), None)
                                                   .to_dict("records")).decode(), args.indent))
        for line in why:
            print(f"tracekit: note: unknown: {line}", file=sys.stderr)
    else:
        sys.stdout.write(text_table(table) + "\n" + "".join(f"unknown: {line}\n" for line in why))
    return 0


def text_table(table: pd.DataFrame) -> str:
    """The whatif table (``tracekit.whatif``'s columns) as text in the CLI's units.

    >>> print(text_table(pd.DataFrame({"scenario": ["baseline", "comm_x2"], "step_time_us": [258842.8, float("nan")],
    ...                                "speedup": [1.0, float("nan")], "saving_us": [0.0, float("nan")],
    ...                                "saving_pct": [0.0, float("nan")]})))
    scenario step ms speed-up saving ms saving %
    baseline  258.84    1.00x      0.00      0.0
     comm_x2 unknown  unknown   unknown  unknown
    """
    shown = pd.DataFrame({
        "scenario": table["scenario"].astype(str),
        "step ms": [fmt.ms(v) for v in table["step_time_us"]],
        "speed-up": [fmt.UNKNOWN if fmt.is_unknown(v) else fmt.ratio(v) for v in table["speedup"]],
        "saving ms": [fmt.ms(v) for v in table["saving_us"]],
        "saving %": [fmt.UNKNOWN if fmt.is_unknown(v) else fmt.pct(v) for v in table["saving_pct"]],
    }, columns=list(COLUMNS))
    return shown.to_string(index=False)
