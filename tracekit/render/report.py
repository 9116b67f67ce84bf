"""A shareable HTML report: one self-contained file (plotly's JavaScript inlined, nothing fetched) with the
overview, ranks, communication and idle charts of a run, and rank 0's kernels, ops, roofline and memory. ``tracekit report DIR -o report.html`` writes it.

>>> import tracekit
>>> s = tracekit.summarize("sample_traces/resnet-gloo-2rank")
>>> html_report(s)[:15]
'<!DOCTYPE html>'
>>> write_report(s, "report.html")  # doctest: +SKIP
"""

from __future__ import annotations

import html
import os
import tempfile
from pathlib import Path

import pandas as pd

from tracekit import quality
from tracekit.render import charts, charts_ops, charts_pipeline, charts_roofline
from tracekit.summary.facts import RunFacts, one_or_all
from tracekit.fmt import by_column, display_units, mfu, ms, pct, peaks_of, rate
from tracekit.summary.text import checked


def html_report(summary, title: str | None = None) -> str:
    """The report as one HTML string; throughput comes from the workload's run.json when the Summary has it."""
    from plotly.offline import get_plotlyjs

    run = summary.run
    title = title or f"tracekit report: {run.source or 'run'}"
    head = charts.headline(summary)
    figures = [
        ("Ranks", [charts.rank_breakdown(summary), charts.step_heatmap(summary)]),
        ("Communication", [charts.busbw_vs_size(summary), charts.wait_vs_transfer(summary)]),
        ("Idle", [charts.gap_histogram(summary), charts.idle_by_cause(summary)]),
    ]
    rates = {} if run.workload is None else run.workload.throughputs()
    body = [f"<h1>{_e(title)}</h1>", _facts(run), _quality(summary.data_quality, summary.mismatches), "<h2>Overview</h2>",
            _headline(head, rates, quality.step_kind(summary.data_quality)), _findings(summary.findings),
            _table(_mfu_written(display_units(summary.ranks), summary.data_quality), "Per rank (times in ms, sizes in MB; *_pct in percent)")]
    for section, figs in figures:
        body.append(f"<h2>{_e(section)}</h2>")
        body += [f.to_html(full_html=False, include_plotlyjs=False, default_width="100%") for f in figs]
        if section == "Communication":
            body.append(_table(display_units(charts.op_table(summary)), "Collectives in the window, per op (ms, MB)"))
        if section == "Idle":
            body.append(_table(display_units(charts.largest_gaps(summary, 10)),
                               "Longest idle gaps (ms; start from the run's start; each split by cause, cause the largest part)"))
    body += _pipeline(summary)
    body += _what_runs(summary)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_e(title)}</title><style>{_CSS}</style>"
        f"<script type=\"text/javascript\">{get_plotlyjs()}</script></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def write_report(summary, path: str | Path, *, force: bool = False) -> Path:
    """Write ``html_report`` to ``path``. An existing file is kept (``FileExistsError``) unless ``force``;
    with ``force`` it is replaced whole, never left half-written."""
    path = Path(path)
    text = html_report(summary)
    if not force:
        with open(path, "x", encoding="utf-8") as out:
            out.write(text)
        return path
    fd, tmp = tempfile.mkstemp(prefix=".tracekit-report-", suffix=".html", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _what_runs(summary, top: int = 15) -> list[str]:
    """The first rank's top kernels and ops, its roofline, and its memory over time when it has [memory] events."""
    rank = int(summary.ranks["rank"].iloc[0]) if len(summary.ranks) else 0
    kernels = charts_ops.kernel_table(summary, rank).drop(columns="full_name", errors="ignore")
    ops = charts_ops.op_table(summary, rank)
    time = "device" if charts_ops.is_device_rank(summary, rank) else "host"
    out = [f"<h2>Operators &amp; kernels (rank {rank})</h2>",
           _noted_table(kernels, top, "Top kernels by window time (ms)"),
           _noted_table(ops, top, f"Top ops by {time} self time (ms, GFLOP, MB, TFLOPS/s, GB/s)"),
           _figure(charts_roofline.roofline(summary, rank))]
    note = charts_ops.memory_note(summary, rank)
    out.append(f"<h2>Memory (rank {rank})</h2>")
    if note:
        return out + [f"<p>{_e(note)}</p>"]
    return out + [_figure(charts_ops.memory_over_time(summary, rank)),
                  _table(charts_ops.memory_peaks(summary, rank), "Peaks per step (MB)")]


def _pipeline(summary) -> list[str]:
    """The Pipeline section (runs with pipeline stages only): the schedule grid of the first window step, compute
    and bubble per stage, and the per-stage table."""
    if summary.pipeline.empty:
        return []
    first = summary.pipeline.iloc[0]
    said = (f"{first['schedule']} schedule, {int(first['stages'])} stages ({int(first['stages_per_rank'])} per "
            f"rank); bubble: time a stage runs nothing but stage-to-stage transfers")
    parts = charts_pipeline.stage_parts(summary)
    return ["<h2>Pipeline</h2>", f"<p>{_e(said)}</p>",
            _figure(charts_pipeline.schedule_grid(summary, p2p=getattr(summary, "p2p", None))),
            _figure(charts_pipeline.stage_bars(summary)),
            _table(display_units(parts), "Per stage, mean per window step (ms; *_pct in percent)")]


def _mfu_written(ranks: pd.DataFrame, data_quality: pd.DataFrame) -> pd.DataFrame:
    """The ranks table with MFU written as the text report and the viewer write it (``tracekit.fmt.mfu``): ``n/a``
    on a device with no known peak (a CPU among them), ``unknown`` where the peak is known and the FLOPs are not."""
    if "mfu_pct" not in ranks:
        return ranks
    return ranks.assign(mfu_pct=[mfu(v, p) for v, p in zip(ranks["mfu_pct"], peaks_of(ranks, data_quality))])


def _noted_table(frame: pd.DataFrame, top: int, caption: str) -> str:
    """The first ``top`` rows of a ``charts_ops`` table, or the note that says why it is empty."""
    if frame.empty:
        return f"<h3>{_e(caption)}</h3><p>{_e(frame.attrs.get('note', 'none'))}</p>"
    return _table(frame.head(top), caption)


def _figure(fig) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, default_width="100%")


def _e(value) -> str:
    return html.escape(str(value))


def _facts(run: RunFacts) -> str:
    facts = {
        "source": run.source, "world size": one_or_all(run.world_sizes), "backend": one_or_all(run.backends),
        "devices": ", ".join(run.device_names) or "cpu", "window": run.window,
        "files read": len(run.files), "files skipped": len(run.skipped),
    }
    workload = run.workload
    if workload is not None:
        facts.update({"workload": workload.workload, "mode": workload.mode, "created": workload.created})
    items = "".join(f"<li><b>{_e(k)}</b>: {_e(v)}</li>" for k, v in facts.items() if v is not None)
    return f"<ul class=\"facts\">{items}</ul>"


def _quality(data_quality: pd.DataFrame, mismatches: pd.DataFrame) -> str:
    """The data-quality notes that apply (``tracekit.quality.notes``), as the text report shows them; none: nothing."""
    notes = quality.notes(data_quality) + quality.mismatch_notes(mismatches)
    if not notes:
        return ""
    items = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return f"<div class=\"quality\"><h3>Data quality</h3><ul>{items}</ul></div>"


def _headline(head: dict, rates: dict[str, float], step_kind: str) -> str:
    """The headline cards; ``step_kind``: what the steps are (``quality.step_kind``; '': none found)."""
    step = f"from the start of one {step_kind} to the next" if step_kind else "none found (see Data quality)"
    cards = [(f"step time (mean over ranks; a rank's step: {step})", ms(head["step_time_us"], unit=True))]
    cards += [(f"throughput ({k})", f"{rate(v)} samples/s") for k, v in rates.items()]
    cards += [("exposed comm", pct(head["exposed_comm_pct"], unit=True)),
              ("comm overlapped", pct(head["overlap_pct"], unit=True)), ("idle", pct(head["idle_pct"], unit=True))]
    if head["slowest_rank"] is not None:
        cards.append(("slowest rank (mean step time)",
                      f"rank {head['slowest_rank']} ({ms(head['slowest_step_time_us'], unit=True)})"))
    if head["worst_is_straggler"] or head["worst_is_last"]:  # who the others wait for, which need not be the slowest
        what = "straggler (others wait for it)" if head["worst_is_straggler"] else "most often last to collectives"
        cards.append((what, f"rank {head['worst_rank']} (step time {ms(head['worst_step_time_us'], unit=True)})"))
    return "<div class=\"cards\">" + "".join(
        f"<div class=\"card\"><div class=\"label\">{_e(k)}</div><div class=\"value\">{_e(v)}</div></div>" for k, v in cards
    ) + "</div>"


def _findings(findings) -> str:
    if not findings:
        items = "".join(f"<li>{_e(c)}</li>" for c in checked())
        return f"<h3>Findings</h3><p>None: no check fired. Checked:</p><ul>{items}</ul>"
    items = "".join(
        f"<li><b>[{_e(f.severity)}] {_e(f.message)}</b><br>{_e(f.recommendation)}</li>" for f in findings)
    return f"<h3>Findings (largest gain first)</h3><ol class=\"findings\">{items}</ol>"


def _table(frame: pd.DataFrame, caption: str) -> str:
    shown = frame.copy()
    for col in shown.columns:
        if pd.api.types.is_float_dtype(shown[col]):
            write = by_column(col)  # as the text report and the viewer write this column's unit
            shown[col] = shown[col].map(lambda v, write=write: "unknown" if pd.isna(v) else write(v))
    table = shown.to_html(index=False, escape=True, classes="table", na_rep="unknown")
    return f"<h3>{_e(caption)}</h3><div class=\"scroll\">{table}</div>"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1200px;color:#222;padding:0 1rem}
h1{font-size:1.5rem} h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
.facts{columns:2;list-style:none;padding:0} .cards{display:flex;flex-wrap:wrap;gap:.8rem}
.card{border:1px solid #ddd;border-radius:6px;padding:.6rem 1rem;min-width:10rem}
.card .label{font-size:.8rem;color:#666} .card .value{font-size:1.3rem}
.scroll{overflow-x:auto} table.table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0} .table td,.table th{border:1px solid #ddd;padding:.2rem .5rem;text-align:right}
"""
