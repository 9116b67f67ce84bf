"""Data-quality notes: ``Summary.data_quality`` (one row per rank) as the sentences the reports show.

The table holds the facts (see ``tracekit.schema.DATA_QUALITY_COLUMNS``); this turns the ones that apply into short
notes, ranks with the same note together, so the text report, the HTML report and the viewer say the same thing.
"""

from __future__ import annotations

import pandas as pd


def notes(data_quality: pd.DataFrame) -> list[str]:
    """The notes that apply, one line per distinct note, naming its ranks; empty when every rank is clean.

    Example:
      >>> table = pd.DataFrame({"rank": [0, 1], "rank_source": ["file name", "file name"]})
      >>> notes(table)
      ['ranks 0, 1: rank taken from the file name (the trace has no distributedInfo.rank)']
    """
    by_note: dict[str, list[int]] = {}
    for row in data_quality.to_dict("records"):
        for note in _row_notes(row):
            by_note.setdefault(note, []).append(int(row["rank"]))
    return [f"{_ranks(ranks)}: {note}" for note, ranks in by_note.items()]


def _row_notes(row: dict) -> list[str]:
    out = []
    if row.get("device_events_absent") is True:
        out.append(f"a device trace ({row.get('device_evidence')}) without device events: its kernels were not "
                   "collected, so its device times are unknown (NaN)")
    if (row.get("pre_trace_events") or 0) > 0:
        out.append(f"{row['pre_trace_events']:,} device events ({row['pre_trace_device_us'] / 1e3:,.2f} ms of device "
                   "time) were launched before the trace began: left out of the window, steps and collectives")
    if (row.get("dropped_events") or 0) > 0:
        out.append(f"{row['dropped_events']:,} events dropped for no, negative or impossible durations")
    if row.get("unknown_categories"):
        out.append(f"categories not recognised, read as host events: {row['unknown_categories']}")
    if row.get("rank_source") == "file name":
        out.append("rank taken from the file name (the trace has no distributedInfo.rank)")
    elif row.get("rank_source") == "only file":
        out.append("no rank in the trace or its file name: taken as 0 (the only file)")
    if row.get("shapes_recorded") is False:
        out.append("record_shapes was off: sizes that only Input Dims give are unknown, and so are FLOPs and MFU")
    if row.get("memory_events") == 0:
        out.append("no [memory] events (profile_memory was off): the memory tables are empty")
    if str(row.get("device_peaks") or "").startswith("unknown"):
        out.append(f"device not in tracekit's datasheet table ({row['device_peaks'].removeprefix('unknown: ')}): "
                   "roofline, pct_of_roofline and MFU are unknown")
    elif row.get("device_peaks") == "":
        out.append("a CPU-only rank: no device peaks, so roofline and MFU are unknown; rates use host time")
    return out


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)
