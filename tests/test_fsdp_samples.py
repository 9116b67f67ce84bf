"""The bundled FSDP samples read right: the seeded fault (FSDP2 without prefetch) is the run flagged for its
all-gathers, the run with prefetch is not; the rule behind it on hand-made rows; per-rank FSDP totals per step."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from tracekit.events.fsdp import rank_totals
from tracekit.findings import fsdp_findings

REPO = Path(__file__).resolve().parents[1]
PREFETCH0 = REPO / "sample_traces" / "fsdp-gloo-2rank-prefetch0"
PREFETCH1 = REPO / "sample_traces" / "fsdp-gloo-2rank"


@pytest.fixture(scope="module")
def samples(summaries):
    return {name: summaries(path, cache=False, workers=1)
            for name, path in (("prefetch0", PREFETCH0), ("prefetch1", PREFETCH1))}


def gathers_finding(s):
    found = [f for f in s.findings if f.kind == "fsdp_exposed_allgather"]
    return found[0] if found else None


def test_the_run_without_prefetch_is_the_one_flagged(samples):
    f = gathers_finding(samples["prefetch0"])
    assert f is not None, [x.message for x in samples["prefetch0"].findings]
    # forward of blocks.0 and blocks.1 gathers inside their own pre_forward hook: 2 late on-demand gathers per step
    # and rank (the root, first in forward, has nothing to hide under); the units stood waiting for them
    rows = samples["prefetch0"].fsdp
    rows = rows[rows["in_window"]]
    late = fsdp_findings.late_on_demand(rows)
    assert late.sum() == 2 * 2 * 2  # 2 blocks x 2 window steps x 2 ranks
    assert set(rows.loc[late, "unit"]) == {"blocks.0", "blocks.1"}
    assert (rows.loc[late, "phase"] == "forward").all() and (rows.loc[late, "wait_us"] > 0).all()
    assert f.evidence["late_on_demand_per_step"] == pytest.approx(2.0)
    assert f.evidence["late_on_demand_wait_us"] == pytest.approx(rows.loc[late, "wait_us"].sum())
    assert f.evidence["prefetch_remedy"] and "set_modules_to_forward_prefetch" in f.recommendation
    assert "2.0 gathers per step and rank were issued on demand" in f.message
    # the waits are small next to these CPU steps: flagged low, under the 5% share
    assert f.severity == "low" and f.evidence["share"] < fsdp_findings.EXPOSED_ALLGATHER_SHARE[0]


def test_the_run_with_prefetch_is_not_flagged(samples):
    s = samples["prefetch1"]
    assert gathers_finding(s) is None, gathers_finding(s).message
    assert "fsdp_fp32_allgather" not in {f.kind for f in s.findings}
    rows = s.fsdp[s.fsdp["in_window"]]
    assert not fsdp_findings.late_on_demand(rows).any()  # every gather after a pass's first unit was prefetched
    # What had fired before: rank 1's backward gather of blocks.0, prefetched in blocks.1's pre_backward, runs for
    # hundreds of ms uncovered, but its unit never waits for it: rank 1 sits in blocks.1's reduction, which (like
    # the gather) waits for rank 0, the straggler. Exposed gather time is not a wait of the unit.
    late_peer = rows[(rows["rank"] == 1) & (rows["unit"] == "blocks.0") & (rows["phase"] == "backward")]
    assert (late_peer["allgather_exposed_us"] > 100e3).all() and (late_peer["wait_us"] == 0).all()
    assert "straggler" in {f.kind for f in s.findings}
    # Nor are its units small: judged on the fastest rank's gather of each matched request (rank 0, last to arrive
    # at the blocks' backward gathers), blocks.0 gathers 695.6 + 564.7 + 622.5 + 12173.2 = 14,056 us in the two
    # window steps against 76,102 us of compute (mean over ranks), blocks.1 3,356 us against 103,442; the root
    # gathers 8.4 MB, over 4 MB. Summed over ranks, rank 1's waits for rank 0 (203.9 and 388.6 ms in blocks.0's
    # backward gathers) had made blocks.0 "gather" 618 ms against 152 ms of compute.
    assert "fsdp_small_units" not in {f.kind for f in s.findings}
    own = fsdp_findings.own_gathers(rows).groupby("unit")[["gather_us", "compute_us"]].sum()
    assert own.loc["blocks.0", "gather_us"] == pytest.approx(14055.934, abs=0.01)
    assert own.loc["blocks.1", "gather_us"] == pytest.approx(3356.118, abs=0.01)
    assert (own["gather_us"] < own["compute_us"] / 5).all()


def test_no_finding_fires_with_zero_of_what_it_is_about(samples):
    for s in samples.values():
        for f in s.findings:
            if f.kind.startswith("fsdp_"):
                assert not re.search(r"(?<![\d.])0\.0+ (ms|gathers|MB)", f.message), f.message


def rows_for(waits, verdicts, exposed=None, rank=0, steps=(1, 2)):
    """FSDP rows of one rank: per step the forward units (root, blocks.0, blocks.1), all with one gather."""
    out = []
    for step in steps:
        for order, (unit, wait, verdict) in enumerate(zip(("(root)", "blocks.0", "blocks.1"), waits, verdicts)):
            out.append({"rank": rank, "step": step, "phase": "forward", "unit": unit, "order": order, "gathers": 1,
                        "prefetch": verdict, "wait_us": float(wait),
                        "allgather_exposed_us": float(wait if exposed is None else exposed[order]),
                        "allgather_us": 1000.0, "allgather_bytes": 8e6, "allgather_dtype": "bfloat16",
                        "compute_us": 10e3, "reduces": 0, "reduce_us": 0.0, "reduce_exposed_us": 0.0,
                        "in_window": True})
    return pd.DataFrame(out)


def step_rows(ranks=(0,), steps=(1, 2), step_us=100e3):
    return pd.DataFrame([{"rank": r, "step": n, "step_us": step_us, "in_window": True} for r in ranks for n in steps])


def test_late_on_demand_gathers_that_stall_their_units_are_flagged_low():
    # rank 0, 2 steps of 100 ms: per step the root waits 500 us (first unit: nothing before it to prefetch under),
    # blocks.0 comes on demand and waits 200 us (late), blocks.1 is prefetched and waits 0.
    # wait share: 2 x 700 / 200,000 = 0.7% (under 5%); late waits 2 x 200 / 200,000 = 0.2% (over 0.1%): low.
    # rank 1: blocks.0 and blocks.1 prefetched, the root waits 300 us: nothing late, 0.3%: not named.
    rows = pd.concat([rows_for([500, 200, 0], ["on_demand", "on_demand", "prefetched"]),
                      rows_for([300, 0, 0], ["on_demand", "prefetched", "prefetched"], rank=1)], ignore_index=True)
    found = {f.kind: f for f in fsdp_findings.find(rows, step_rows((0, 1)))}
    f = found["fsdp_exposed_allgather"]
    assert f.severity == "low" and f.ranks == (0,)
    assert f.evidence["share"] == pytest.approx(1400 / 200e3)
    assert f.evidence["late_on_demand_per_step"] == pytest.approx(1.0)  # 2 late rows / 2 steps of rank 0
    assert f.evidence["late_on_demand_wait_us"] == pytest.approx(400)
    assert "1.0 gathers per step and rank were issued on demand" in f.message
    assert "waited 0.200 ms per step" in f.message  # 400 us over 2 steps
    assert "up to 0.7% of the step time" in f.message and "(root) 0.500 ms, blocks.0 0.200 ms" in f.message
    assert f.evidence["prefetch_remedy"]


def test_under_the_floor_or_without_a_wait_nothing_fires():
    # late waits of 50 us per 100 ms step: 0.05%, under the 0.1% floor; no share over 5% either
    quiet = rows_for([500, 50, 0], ["on_demand", "on_demand", "prefetched"])
    assert "fsdp_exposed_allgather" not in {f.kind for f in fsdp_findings.find(quiet, step_rows())}
    # gathers uncovered for 30 ms a step (30%) while no unit waits for them (the rank is blocked elsewhere, e.g. on a
    # late peer): no all-gather finding, and not the float32 one (the dtype here is float)
    blocked = rows_for([0, 0, 0], ["on_demand", "prefetched", "prefetched"], exposed=[0, 0, 30e3])
    blocked["allgather_dtype"] = "float"
    kinds = {f.kind for f in fsdp_findings.find(blocked, step_rows())}
    assert "fsdp_exposed_allgather" not in kinds and "fsdp_fp32_allgather" not in kinds


def test_a_large_wait_is_medium_or_high_without_late_gathers():
    # every unit after the root prefetched; the root waits 10 ms per 100 ms step: 10%, medium; nothing late, so the
    # message says nothing about on-demand gathers and the prefetch remedy is not given
    rows = rows_for([10e3, 0, 0], ["on_demand", "prefetched", "prefetched"])
    f = {f.kind: f for f in fsdp_findings.find(rows, step_rows())}["fsdp_exposed_allgather"]
    assert f.severity == "medium" and f.evidence["share"] == pytest.approx(0.1)
    assert "on demand" not in f.message and not f.evidence["prefetch_remedy"]
    rows = rows_for([25e3, 0, 0], ["on_demand", "prefetched", "prefetched"])
    assert fsdp_findings.find(rows, step_rows())[0].severity == "high"  # 25% over 20%


def test_per_rank_totals_are_per_step():
    # 2 steps of 100 ms; exposed gather per step 500 + 200 = 700 us (the helper sets exposed = wait), 1,400 in all
    rows = rows_for([500, 200, 0], ["on_demand", "on_demand", "prefetched"])
    row = rank_totals(rows, step_rows()).iloc[0]
    assert row["steps"] == 2
    assert row["step_us"] == pytest.approx(100e3)  # per step, not the 200 ms of both
    assert row["allgather_exposed_us"] == pytest.approx(700) and row["wait_us"] == pytest.approx(700)
    assert row["allgather_exposed_pct"] == pytest.approx(0.7)


def test_the_samples_totals_are_per_step(samples):
    s = samples["prefetch0"]
    totals = s.fsdp_totals().set_index("rank")
    kept = s.steps[s.steps["in_window"]]
    assert totals["step_us"].to_dict() == pytest.approx(kept.groupby("rank")["step_us"].mean().to_dict())
    f = s.fsdp[s.fsdp["in_window"]]
    per_step = f.groupby("rank")["allgather_exposed_us"].sum() / kept.groupby("rank")["step"].nunique()
    assert totals["allgather_exposed_us"].to_dict() == pytest.approx(per_step.to_dict())
