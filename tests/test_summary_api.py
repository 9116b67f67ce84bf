"""The Summary as an object people hold: its short repr, the findings as a table, the notebook view, and tables
that no in-place change made through them (or through the frames it was built from) can alter."""

import dataclasses
import html
import math
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.findings.finding import Finding
from tracekit.summary.facts import RunFacts
from tracekit.summary.model import TABLES, Summary
from tracekit.summary.overview import FINDING_COLUMNS, TOP_FINDINGS, headline
from tracekit.summary.text import text_report
from frame_equal import assert_frame_equal

ROOT = Path(__file__).resolve().parents[1]
HINT = "  print(summary) for the full report, summary.findings_table() for the findings"


@pytest.fixture(scope="module")
def sample() -> Summary:
    return tracekit.summarize(ROOT / "sample_traces" / "resnet-gloo-2rank", cache=False, workers=1)


def findings(n_low: int = 0) -> tuple[Finding, ...]:
    found = (
        Finding("exposed_comm", "high", (0, 1), "comm is <exposed> & costly", "overlap it",
                {"share": 0.4, "predicted_saving_us": 1234.5, "scenario": "perfect_overlap"}),
        Finding("data_idle", "medium", (1,), "the GPU waits on data", "more workers", {"share": 0.12}),
    )
    return found + tuple(Finding("sync", "low", (r,), f"sync {r}", "drop .item()", {}) for r in range(n_low))


def hand_built(found=None, **run) -> Summary:
    """Two ranks over a 1000 us span: compute 600 and 400, exposed comm 100 and 400, idle 250 and 200; mean steps
    500 and 520 us; MFU 10 % and 20 %."""
    ranks = pd.DataFrame({
        "rank": [0, 1], "device": ["gpu", "gpu"], "steps": [2, 2], "step_time_us": [500.0, 520.0],
        "span_us": [1000.0, 1000.0], "busy_us": [750.0, 800.0], "compute_us": [600.0, 400.0],
        "comm_us": [300.0, 500.0], "overlap_us": [200.0, 100.0], "exposed_comm_us": [100.0, 400.0],
        "memory_us": [50.0, 0.0], "idle_us": [250.0, 200.0], "overlap_pct": [200 / 3, 20.0],
        "idle_pct": [25.0, 20.0], "allreduce_count": [2, 2], "allreduce_us": [300.0, 500.0],
        "allreduce_bytes": [8e6, 8e6], "matmul_flops_per_step": [1e12, 2e12], "mfu_pct": [10.0, 20.0],
    })
    steps = pd.DataFrame({"rank": [0, 0, 1, 1], "step": [1, 2, 1, 2], "start_us": [0, 500, 0, 520],
                          "step_us": [500.0, 500.0, 520.0, 520.0], "in_window": [True] * 4})
    collectives = pd.DataFrame({"rank": [0, 1], "step": [1, 1], "op": ["all_reduce"] * 2, "start_us": [10.0, 10.0],
                                "dur_us": [300.0, 500.0], "bytes": [8e6, 8e6], "busbw_gbps": [26.7, 16.0],
                                "in_window": [True, True]})
    gaps = pd.DataFrame({"rank": [0, 1], "start_us": [10.0, 50.0], "dur_us": [250.0, 200.0], "cause": ["host", "data"]})
    facts = RunFacts(**({"source": "tiny <run>", "ranks_read": 2, "world_sizes": (2,), "backends": ("nccl",),
                         "device_names": ("NVIDIA H100",)} | run))
    return Summary(ranks=ranks, steps=steps, collectives=collectives, gaps=gaps, run=facts,
                   findings=findings() if found is None else found)


def frame_fields(s: Summary) -> list[str]:
    return [f.name for f in dataclasses.fields(Summary) if isinstance(getattr(s, f.name), pd.DataFrame)]


# --- repr: the overview ---------------------------------------------------------------------------------------------

def test_repr_of_a_hand_built_summary_is_the_overview_of_its_known_numbers():
    assert repr(hand_built()).splitlines() == [
        "tracekit Summary of tiny <run>",
        "  ranks read 2 of world size 2, backend nccl, devices: NVIDIA H100",
        "  window drop_last, steps per rank 2, mean step time 0.510 ms",
        "  share of the span, mean over ranks: compute 50.0 %, exposed comm 25.0 %, idle 22.5 %",
        "  MFU 15.0 % (mean over ranks)",
        "  findings: 1 high, 1 medium, 0 low",
        HINT,
    ]


def test_repr_of_the_sample_run_follows_its_tables(sample):
    ranks, run = sample.ranks, sample.run
    shares = {c: f"{(ranks[c] / ranks['span_us']).mean() * 100:.1f} %" for c in ("compute_us", "exposed_comm_us", "idle_us")}
    counts = {s: sum(f.severity == s for f in sample.findings) for s in ("high", "medium", "low")}
    assert ranks["mfu_pct"].isna().all()  # CPU ranks: no device peak, so no MFU line
    assert repr(sample).splitlines() == [
        f"tracekit Summary of {run.source}",
        f"  ranks read {run.ranks_read} of world size {run.world_sizes[0]}, backend {run.backends[0]}, "
        f"devices: {', '.join(sorted(set(ranks['device'])))}",
        f"  window {run.window}, steps per rank {int(ranks['steps'].iloc[0])}, "
        f"mean step time {ranks['step_time_us'].mean() / 1e3:.2f} ms",
        f"  share of the span, mean over ranks: compute {shares['compute_us']}, "
        f"exposed comm {shares['exposed_comm_us']}, idle {shares['idle_us']}",
        f"  findings: {counts['high']} high, {counts['medium']} medium, {counts['low']} low",
        HINT,
    ]
    assert run.source.endswith("sample_traces/resnet-gloo-2rank")


def test_repr_is_short_and_str_stays_the_full_report(sample):
    for s in (sample, hand_built(findings(n_low=20))):
        assert len(repr(s).splitlines()) <= 12
        assert str(s) == text_report(s) and "Per rank" in str(s)


def test_repr_copes_with_what_a_run_does_not_say():
    s = Summary(ranks=pd.DataFrame(), steps=pd.DataFrame(), collectives=pd.DataFrame(), gaps=pd.DataFrame())
    assert repr(s).splitlines()[1:4] == [
        "  ranks read 0 of world size unknown, backend unknown, devices: unknown",
        "  window drop_last, steps per rank unknown, mean step time unknown",
        "  share of the span, mean over ranks: compute unknown, exposed comm unknown, idle unknown",
    ]
    uneven = hand_built(world_sizes=(2, 4), backends=("gloo", "nccl"))
    ranks = uneven.ranks.assign(steps=[2, 3], span_us=[1000.0, 0.0])
    lines = repr(dataclasses.replace(uneven, ranks=ranks, findings=())).splitlines()
    assert lines[1] == "  ranks read 2 of world size 2, 4, backend gloo, nccl, devices: NVIDIA H100"
    assert lines[2] == "  window drop_last, steps per rank 2 to 3, mean step time 0.510 ms"
    # A rank without a span has no shares: the mean is over the ranks that have one.
    assert lines[3] == "  share of the span, mean over ranks: compute 60.0 %, exposed comm 10.0 %, idle 25.0 %"
    assert lines[5] == "  findings: 0 high, 0 medium, 0 low"


# --- findings_table -------------------------------------------------------------------------------------------------

def check_findings_table(s: Summary):
    table = s.findings_table()
    assert tuple(table.columns) == FINDING_COLUMNS and len(table) == len(s.findings)
    assert isinstance(s.findings, tuple) and all(isinstance(f, Finding) for f in s.findings)
    for row, f in zip(table.itertuples(index=False), s.findings):
        assert (row.kind, row.severity, row.message, row.recommendation) == (
            f.kind, f.severity, f.message, f.recommendation)
        assert row.ranks == ", ".join(str(r) for r in f.ranks)
        saving = f.evidence.get("predicted_saving_us")
        assert math.isnan(row.predicted_saving_us) if saving is None else row.predicted_saving_us == saving
        assert row.scenario == f.evidence.get("scenario")
    return table


def test_findings_table_of_a_hand_built_summary():
    table = check_findings_table(hand_built())
    assert table["ranks"].tolist() == ["0, 1", "1"]
    assert table["predicted_saving_us"].iloc[0] == 1234.5 and math.isnan(table["predicted_saving_us"].iloc[1])
    assert table["scenario"].tolist() == ["perfect_overlap", None]
    assert table["predicted_saving_us"].dtype == float


def test_findings_table_of_the_sample_run(sample):
    table = check_findings_table(sample)
    assert len(table) >= 1 and table["kind"].iloc[0] == sample.findings[0].kind


def test_findings_table_without_findings_has_its_columns():
    table = hand_built(found=()).findings_table()
    assert tuple(table.columns) == FINDING_COLUMNS and len(table) == 0


# --- the tables cannot change behind the Summary's back ---------------------------------------------------------------

def change_in_place(frame: pd.DataFrame):
    """Every kind of in-place change people make to a table they were handed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandas 3.1 deprecates inplace=; chained assignment warns and does nothing
        numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])
                   and not pd.api.types.is_bool_dtype(frame[c])]
        if len(frame) and numeric:
            frame.loc[frame.index[0], numeric[0]] = -12345
            frame[numeric[0]].iloc[-1] = -54321
        frame["added"] = 0
        frame.index.name = "renamed"
        frame.attrs["touched"] = True
        frame.rename(columns={c: f"{c}!" for c in frame.columns}, inplace=True)
        frame.drop(index=frame.index[:1], inplace=True)
        frame.sort_index(ascending=False, inplace=True)


@pytest.mark.parametrize("which", ["sample", "hand_built"])
def test_in_place_changes_through_any_table_leave_the_summary_as_it_was(which, request):
    s = request.getfixturevalue("sample") if which == "sample" else hand_built()
    names = frame_fields(s)
    assert names == [f.name for f in dataclasses.fields(Summary) if f.type == "pd.DataFrame"]
    assert len(names) >= 20 and {"ranks", "steps", "graph", "optimization"} <= set(names)
    before = {name: getattr(s, name).copy(deep=True) for name in names}
    text, data = str(s), s.to_json("all")
    for name in names:
        change_in_place(getattr(s, name))
    for name in names:
        assert_frame_equal(getattr(s, name), before[name], check_exact=True)
        assert getattr(s, name).attrs == {} and getattr(s, name).index.name is None
    assert str(s) == text and s.to_json("all") == data


@pytest.mark.filterwarnings("ignore::pandas.errors.ChainedAssignmentError")
def test_print_after_a_change_reports_the_original_numbers(sample):
    # pandas warns that these set values on a copy (the table read is a temporary): that is the point
    text = str(sample)
    span = sample.ranks.loc[0, "span_us"]
    sample.ranks.loc[0, "span_us"] = 1
    sample.ranks["x"] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pandas 3.1 deprecates inplace=
        sample.steps.drop(index=sample.steps.index, inplace=True)
        sample.collectives.drop(columns="op", inplace=True)
    assert sample.ranks.loc[0, "span_us"] == span and "x" not in sample.ranks
    assert len(sample.steps) and "op" in sample.collectives
    assert str(sample) == text and f"{span / 1e3:.2f}" in text


def test_the_frames_a_summary_was_built_from_stay_apart_from_it():
    s = hand_built()
    ranks = pd.DataFrame({"rank": [0, 1], "span_us": [1000.0, 1000.0]})
    t = dataclasses.replace(s, ranks=ranks)
    ranks.loc[0, "span_us"] = 1.0
    ranks["x"] = 0
    assert t.ranks["span_us"].tolist() == [1000.0, 1000.0] and "x" not in t.ranks


def test_replace_holds_the_summarys_own_tables_and_a_given_one_apart():
    from tracekit.summary import model

    s = hand_built()
    ranks = pd.DataFrame({"rank": [0, 1], "span_us": [2000.0, 1000.0]})
    t = model.replace(s, ranks=ranks, findings=())
    assert t.to_json("all") == dataclasses.replace(s, ranks=ranks, findings=()).to_json("all")
    assert t.findings == () and s.findings == findings() and t.ranks["span_us"].tolist() == [2000.0, 1000.0]
    # The tables not given are the very frames ``s`` holds (no copy made); each read is still a copy.
    raw = object.__getattribute__
    assert all(raw(t, name) is raw(s, name) for name in frame_fields(s) if name != "ranks")
    steps = s.steps
    change_in_place(t.steps)
    assert_frame_equal(t.steps, steps)
    assert_frame_equal(s.steps, steps)
    # The table given is held apart from the caller's frame, as the constructor holds one.
    ranks.loc[0, "span_us"] = 1.0
    assert t.ranks["span_us"].tolist() == [2000.0, 1000.0] and raw(t, "ranks") is not ranks
    with pytest.raises(TypeError, match="no field rankz"):
        model.replace(s, rankz=ranks)


def test_numpy_views_of_a_table_are_read_only():
    s = hand_built()
    with pytest.raises(ValueError):
        s.ranks["span_us"].to_numpy()[0] = 1.0
    assert s.ranks["span_us"].tolist() == [1000.0, 1000.0]


def test_the_dataclass_is_as_before(sample):
    names = [f.name for f in dataclasses.fields(Summary)]
    assert names[:5] == ["ranks", "steps", "collectives", "gaps", "run"] and set(names) == set(TABLES) | {"run"}
    s = hand_built()
    t = dataclasses.replace(s, findings=())
    assert t.findings == () and s.findings == findings()
    assert_frame_equal(t.ranks, s.ranks)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.ranks = pd.DataFrame()
    assert sample.to_dict()["ranks"][0]["span_us"] == sample.ranks.loc[0, "span_us"]
    # Each read is its own copy of one table; no data is copied for it.
    assert sample.ranks is not sample.ranks
    assert np.shares_memory(sample.ranks["span_us"].to_numpy(), sample.ranks["span_us"].to_numpy())


def test_reading_a_big_table_stays_cheap():
    n = 400_000
    big = pd.DataFrame({"rank": np.zeros(n, dtype=np.int32), "start_us": np.arange(n, dtype=float),
                        "dur_us": np.ones(n), "name": pd.Categorical(["gemm", "nccl"] * (n // 2)),
                        "cause": ["host"] * n})
    s = dataclasses.replace(hand_built(), graph=big)
    start = time.perf_counter()
    for _ in range(1000):
        s.graph
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"1000 reads of a {n:,}-row table took {elapsed:.3f} s"  # ~0.03 s: nothing is copied


# --- the notebook view ----------------------------------------------------------------------------------------------

def test_repr_html_shows_the_overview_cards_and_the_top_findings():
    s = hand_built(findings(n_low=5))
    page = s._repr_html_()
    numbers = headline(s)
    assert page.count('class="tracekit-card"') == len(numbers) - 1  # the source is the title, not a card
    for label, value in numbers.items():
        if label != "source":
            assert f">{html.escape(label)}</div><div" in page and f">{html.escape(value)}<" in page, label
    assert ">15.0 %<" in page and ">0.510 ms<" in page and ">1 high, 1 medium, 5 low<" in page
    assert "tracekit Summary of tiny &lt;run&gt;" in page
    # The first five findings, largest gain first; the others counted.
    shown = [f for f in s.findings if f">{html.escape(f.message)}<" in page]
    assert shown == list(s.findings[:TOP_FINDINGS]) and "and 2 more" in page
    # Text is escaped; nothing runs, nothing is fetched.
    assert "comm is &lt;exposed&gt; &amp; costly" in page and "<exposed>" not in page
    assert not any(tag in page.lower() for tag in ("<script", "<link", "<style", "<iframe", "src=", "href="))
    assert "No findings" in hand_built(found=())._repr_html_()


def test_repr_html_of_the_sample_run(sample):
    page = sample._repr_html_()
    for value in headline(sample).values():
        assert html.escape(value) in page
    assert html.escape(sample.findings[0].message) in page
