"""Data-quality notes: ``Summary.data_quality`` (one row per rank) as the sentences the reports show.

The table holds the facts (see ``tracekit.schema.DATA_QUALITY_COLUMNS``); this turns the ones that apply into short
notes, ranks with the same note together, so the text report, the HTML report and the viewer say the same thing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def notes(data_quality: pd.DataFrame) -> list[str]:
    """The notes that apply, one line per distinct note, naming its ranks; empty when every rank is clean.

    Example:
      >>> table = pd.DataFrame({"rank": [0, 1], "rank_source": ["file name", "file name"]})
      >>> notes(table)
      ['ranks 0, 1: rank taken from the file name (the trace has no distributedInfo.rank)']
    """
    return _grouped(data_quality, _row_notes)


def capture_notes(data_quality: pd.DataFrame) -> list[str]:
    """The notes on a window that overlaps a CUDA/HIP graph capture (the text report puts them at its top).

    Example:
      >>> table = pd.DataFrame({"rank": [0], "captured_steps": ["1"], "held_back_findings": ["host_bound"]})
      >>> capture_notes(table)[0][:51]
      'rank 0: CUDA/HIP graphs were captured during step 1'
    """
    return _grouped(data_quality, _capture_notes)


def whatif_notes(data_quality: pd.DataFrame, scenario: str | None = None) -> list[str]:
    """Why ``tracekit.whatif`` predicts ``unknown``, from the facts the table holds (no rank with steps, device
    ranks whose kernels were not collected), one line per distinct reason naming its ranks; empty: no such fact.
    ``scenario``: only the reasons that unknow that scenario (missing kernels leave the ``baseline`` known); None:
    every reason.

    Example:
      >>> whatif_notes(pd.DataFrame({"rank": [0], "step_source": ["none"]}))
      ['rank 0: no steps found in the trace (step_source: none); a what-if replay needs steps; see --step-pattern']
    """
    sources = data_quality["step_source"].astype(str) if "step_source" in data_quality else pd.Series(dtype=str)
    # Steps missing on some ranks unknow nothing while others have them: the replay runs over those.
    stepless = len(sources) > 0 and bool((sources.eq("none") | sources.str.startswith("none: ")).all())
    return _grouped(data_quality, lambda row: _whatif_notes(row, stepless, scenario != "baseline"))


def _whatif_notes(row: dict, stepless: bool, changed: bool = True) -> list[str]:
    source = str(row.get("step_source") or "")
    out = []
    if stepless:
        out.append(f"no steps found in the trace (step_source: {source}); a what-if replay needs steps; "
                   "see --step-pattern")
    if changed and row.get("device_events_absent") is True:
        out.append("a device trace without device events (kernels not collected): what a change does to the "
                   "device work is unknown, so every scenario but the baseline is")
    return out


def step_kind(data_quality: pd.DataFrame, rank: int | None = None) -> str:
    """What the steps are, in words, from ``data_quality.step_source`` (of ``rank``; None: of every rank, distinct
    ones joined by ' or '): 'ProfilerStep', 'annotation matching <regex>' (found, or named by step_pattern), or ''
    when there are none.

    Example:
      >>> step_kind(pd.DataFrame({"rank": [0, 1], "step_source": ["ProfilerStep", "detected: execute_model"]}))
      'ProfilerStep or annotation matching execute_model'
    """
    rows = data_quality if rank is None else data_quality[data_quality["rank"] == rank]
    kinds = []
    for source in (rows["step_source"].dropna().astype(str) if "step_source" in rows else ()):
        if source.startswith("detected: "):
            kind = "annotation matching " + source.removeprefix("detected: ")
        elif source.startswith("step_pattern: "):
            kind = f"annotation matching {source.removeprefix('step_pattern: ')} (step_pattern)"
        else:
            kind = "" if source.startswith("none") else source  # "ProfilerStep"
        if kind and kind not in kinds:
            kinds.append(kind)
    return " or ".join(kinds)


def _grouped(data_quality: pd.DataFrame, row_notes) -> list[str]:
    by_note: dict[str, list[int]] = {}
    for row in data_quality.to_dict("records"):
        for note in row_notes(row):
            by_note.setdefault(note, []).append(int(row["rank"]))
    return [f"{_ranks(ranks)}: {note}" for note, ranks in by_note.items()]


def _capture_notes(row: dict) -> list[str]:
    steps = row.get("captured_steps")
    if isinstance(steps, str) and steps:
        where = "the window (it has no steps)" if steps == "the window" else \
            f"step{'s' if ',' in steps else ''} {steps}"
        held = row.get("held_back_findings") or ""
        return [f"CUDA/HIP graphs were captured during {where} (stream capture, graph instantiation): their kernels "
                "are capture and warm-up, not the job's steady work; "
                + (f"step-speed findings held back: {held}" if held else "no step-speed finding is given for them")
                + "; profile steps after the capture (a later profiler schedule) to judge their speed"]
    return []


_ORDINAL = (", numbered 0, 1, ... in this rank's time order: ranks are paired by that number, which holds only "
            "where every rank's trace begins at the same step")


def _row_notes(row: dict) -> list[str]:
    out = []
    source = str(row.get("step_source") or "")
    if source == "none":
        out.append("no steps (no ProfilerStep, no known step annotation; --step-pattern names one): metrics cover the "
                   "whole trace, and per-step numbers, the critical path and what-if are unknown")
    elif source.startswith("none: "):
        out.append(f"no steps: {source.removeprefix('none: ')} (host annotations only): metrics cover the whole "
                   "trace, and per-step numbers, the critical path and what-if are unknown")
    elif source.startswith("detected: "):
        out.append(f"no ProfilerStep: steps are the annotations matching {source.removeprefix('detected: ')} "
                   f"(--step-pattern chooses others){_ORDINAL}")
    elif source.startswith("step_pattern: "):
        out.append(f"steps are the annotations matching {source.removeprefix('step_pattern: ')} (step_pattern)"
                   f"{_ORDINAL}")
    if row.get("missing_steps"):
        lacks = str(row["missing_steps"])
        first = lacks.split(",")[0].split("-")[0]
        out.append(f"lacks step{'s' if ',' in lacks or '-' in lacks else ''} {lacks} (no ProfilerStep#{first} in its "
                   "trace, though another rank or its own numbering has it): its step times leave it out, and the "
                   "collectives it ran there match no step on the other ranks (summary.mismatches)")
    captured = _capture_notes(row)
    out += captured
    if not captured and (row.get("graph_capture_calls") or 0) > 0:  # captures outside the window's steps
        out.append(f"{int(row['graph_capture_calls']):,} graph-capture calls outside the window's steps: their work "
                   "is left out of the numbers")
    if row.get("device_events_absent") is True:
        out.append(f"a device trace ({row.get('device_evidence')}) without device events: its kernels were not "
                   "collected, so its device times are unknown (NaN)")
    if (row.get("pre_trace_events") or 0) > 0:
        out.append(f"{row['pre_trace_events']:,} device events ({row['pre_trace_device_us'] / 1e3:,.2f} ms of device "
                   "time) were launched before the trace began: left out of the window, steps and collectives")
    if (row.get("unsized_ep_comm") or 0) > 0:
        out.append(f"{row['unsized_ep_comm']:,} expert-parallel all-to-all kernels (DeepEP, pplx-kernels, NVSHMEM) "
                   "are communication known by name only: their sizes, bandwidths and group are unknown (NaN)")
    if (row.get("dropped_events") or 0) > 0:
        out.append(f"{row['dropped_events']:,} events dropped for no, negative or impossible durations")
    if row.get("unknown_categories"):
        out.append(f"categories not recognised, read as host events: {row['unknown_categories']}")
    if row.get("rank_source") == "file name":
        out.append("rank taken from the file name (the trace has no distributedInfo.rank)")
    elif row.get("rank_source") == "only file":
        out.append("no rank in the trace or its file name: taken as 0 (the only file)")
    if row.get("rank_out_of_range"):
        source = row.get("rank_source") or "the trace"
        out.append(f"{source if source == 'distributedInfo' else 'the ' + source} gives a rank that is "
                   f"{row['rank_out_of_range']}: suspicious, as ranks run 0..world_size-1 (a trace written outside "
                   "the process group, or a mislabelled file); the number is used as stated")
    if row.get("shapes_recorded") is False:
        out.append("record_shapes was off: sizes that only Input Dims give are unknown, and so are FLOPs and MFU")
    elif "shapes_recorded" in row and pd.isna(row["shapes_recorded"]):  # missing: the trace has no CPU op
        out.append("no CPU ops recorded (no cpu_op events; annotations such as ProfilerStep are not ops): the "
                   "operators' FLOPs cannot be counted, so FLOPs and MFU are unknown")
    if row.get("operators_unusable") is True:
        out.append("CPU ops were recorded, but none had a usable duration (all dropped for no, negative or "
                   "impossible durations): the operators' FLOPs cannot be counted, so FLOPs and MFU are unknown")
    if (row.get("ops_beyond_bound") or 0) > 0:
        n = int(row["ops_beyond_bound"])
        out.append(f"{n} op {'rows' if n > 1 else 'row'} (summary.ops_by_shape) ran faster than the bound judged "
                   "against (data served from cache, or a math mode the trace does not show): rate and roofline unknown")
    if isinstance(row.get("unknown_flops"), str) and row["unknown_flops"] and row.get("shapes_recorded") is not False:
        listed = str(row["unknown_flops"])
        out.append("matmul-class ops whose recorded Input Dims give no FLOP count (missing, or not matching each "
                   f"other) leave the matmul FLOPs of step{'s' if ';' in listed else ''} {listed} unknown, and so the "
                   "TFLOPS/s and MFU over them")
    if row.get("memory_events") == 0:
        out.append("no [memory] events (profile_memory was off): the memory tables are empty")
    if str(row.get("device_peaks") or "").startswith("unknown"):
        out.append(f"device not in tracekit's datasheet table ({row['device_peaks'].removeprefix('unknown: ')}): "
                   "roofline, pct_of_roofline and MFU are n/a (no peak to measure against)")
    elif row.get("device_peaks") == "":
        out.append("a CPU-only rank: no device peaks, so roofline and MFU are n/a; rates use host time")
    return out


LONGEST_LISTED = 20  # a longer run of lacking step numbers is listed as first-last


def missing_steps(steps: pd.DataFrame) -> dict[int, list[int]]:
    """Per rank with steps, the step numbers it lacks: those another rank has, and holes in its own numbering
    (``ProfilerStep#4`` absent between #3 and #5). A rank with no step at all is not listed (its note says so).
    A run of more than ``LONGEST_LISTED`` lacking numbers is one item, ``"first-last"``: numbers far apart (#1 on one
    rank, #300000001 on another) are one line, not a list of every number between.

    Example:
      >>> missing_steps(pd.DataFrame({"rank": [0, 0, 0, 1, 1], "step": [3, 4, 5, 3, 5]}))
      {1: [4]}
    """
    if steps.empty:
        return {}
    numbers = steps["step"].astype(np.int64)
    lo, hi = int(numbers.min()), int(numbers.max())  # every number between is wanted: seen, or a hole
    out = {}
    for rank, own in numbers.groupby(steps["rank"]):
        bounds = [lo - 1, *np.unique(own.to_numpy()).tolist(), hi + 1]  # Python ints: no int64 end to pass
        lacking = []
        for a, b in zip(bounds[:-1], bounds[1:]):  # the run a+1 .. b-1 between two it has
            lacking += list(range(a + 1, b)) if b - a - 1 <= LONGEST_LISTED else [f"{a + 1}-{b - 1}"]
        if lacking:
            out[int(rank)] = lacking
    return out


def mismatch_notes(mismatches: pd.DataFrame) -> list[str]:
    """One line on the collectives that do not line up across ranks (``Summary.mismatches``), by kind; none: empty.

    Example:
      >>> mismatch_notes(pd.DataFrame({"kind": ["missing", "missing", "size"]}))
      ['3 collectives do not line up across ranks (2 missing, 1 size; see summary.mismatches)']
    """
    if mismatches.empty:
        return []
    p2p = mismatches["kind"].astype(str) == "p2p_unmatched"
    lone = [f"{int(p2p.sum())} send/recv without {'their' if p2p.sum() > 1 else 'its'} other half (see "
            "summary.mismatches, kind p2p_unmatched)"] if p2p.any() else []
    mismatches = mismatches[~p2p.to_numpy()]
    if mismatches.empty:
        return lone
    kinds = mismatches["kind"].astype(str).value_counts(sort=False)
    said = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
    return [f"{len(mismatches)} collective{'s do' if len(mismatches) > 1 else ' does'} not line up across ranks "
            f"({said}; see summary.mismatches)"] + lone


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)
