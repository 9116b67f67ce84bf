"""``fsdp_small_units`` judges the all-gathers' own cost, not the time a rank spends waiting for a late peer inside
them: on each FSDP request matched across ranks, the fastest rank's gather time (the last rank to arrive waits for no
one). Tiny 2-rank gloo traces whose numbers are worked out here; times in us."""

from __future__ import annotations

import math

import pandas as pd
import pytest

import tracekit
from tests.tracedata import cpu, write_trace
from tracekit.findings import fsdp_findings

GLOO = 9  # gloo's worker thread; the training thread is 1
COMPUTE = 20  # each unit's forward linear


def ann(name, ts, dur):
    return cpu(name, ts, dur, cat="user_annotation")


def two_blocks(late: int, transfer: int, rank: int) -> list[dict]:
    """One step [0, 1000) of two FSDP2 blocks on a gloo rank, each gathering on demand a 50-float shard (output
    2 x 50 x 4 = 400 bytes, far under SMALL_UNIT_BYTES), then computing 20 us. Rank 1 reaches each gather ``late`` us
    after rank 0; both leave it together, ``transfer`` us after rank 1 arrived. So rank 0's gather lasts late +
    transfer, rank 1's transfer. Block k's gather ends at E_k on both ranks: E_0 = 103 + late + transfer, and block 1
    starts 30 us after E_0 on rank 0 (rank 1: late us later)."""
    events = [cpu("ProfilerStep#1", 0, 1000, cat="user_annotation")]
    start = 100
    for k in range(2):
        arrive = start + (late if rank == 1 else 0)
        end = start + 3 + late + transfer  # the same on both ranks
        unit = f"blocks.{k}"
        events += [ann(f"FSDP::pre_forward ({unit})", arrive, end + 2 - arrive),
                   ann(f"FSDP::all_gather ({unit})", arrive + 1, 2),
                   cpu("c10d::_allgather_base_", arrive + 2, 1, **{"Input Dims": [[100], [50]],
                                                                    "Input type": ["float", "float"]}),
                   cpu("gloo:all_gather", arrive + 3, end - arrive - 3, cat="user_annotation", tid=GLOO,
                       **{"Input Dims": [[50]], "Input type": ["float"]}),
                   cpu("aten::linear", end + 5, COMPUTE), ann(f"FSDP::post_forward ({unit})", end + 5 + COMPUTE, 2)]
        start = end + 30
    return events


def run(tmp_path, late, transfer):
    for rank in (0, 1):
        write_trace(tmp_path / f"rank{rank}.json.gz", two_blocks(late, transfer, rank), rank=rank, backend="gloo",
                    host_name="node0", distributedInfo={"backend": "gloo", "rank": rank, "world_size": 2,
                                                        "pg_config": [{"pg_name": "0", "pg_size": 2,
                                                                       "ranks": [0, 1]}]})
    return tracekit.summarize(tmp_path, window="all_steps", cache=False, workers=1)


def small_units(s):
    found = [f for f in s.findings if f.kind == "fsdp_small_units"]
    return found[0] if found else None


def test_a_late_peer_does_not_make_units_small(tmp_path):
    # Rank 1 arrives 100 us late at each gather of 5 us. Rank 0's gathers last 105 us, rank 1's 5 us; compute 20 us
    # per unit and rank. Summed over ranks, as before, each block "gathers" 105 + 5 = 110 us against 2 x 20 = 40 us
    # of compute and would be called small. The fastest rank's gather, 5 us, is under the 20 us of compute: the
    # gathers are not latency-bound, rank 0 only waits for rank 1.
    s = run(tmp_path, late=100, transfer=5)
    f = s.fsdp.sort_values(["unit", "rank"])
    assert f["allgather_us"].tolist() == pytest.approx([105, 5, 105, 5])
    assert f["compute_us"].tolist() == pytest.approx([COMPUTE] * 4)
    assert f["allgather_bytes"].tolist() == pytest.approx([400] * 4)
    calls = s.collectives.sort_values(["start_us", "rank"])
    assert calls["matched"].all() and calls.loc[calls["rank"] == 0, "wait_us"].tolist() == pytest.approx([100, 100])
    own = fsdp_findings.own_gathers(s.fsdp).sort_values("unit")
    assert own["gather_us"].tolist() == pytest.approx([5, 5]) and own["compute_us"].tolist() == pytest.approx([20, 20])
    assert small_units(s) is None


@pytest.mark.parametrize("late", [0, 100])
def test_gathers_that_cost_more_than_the_unit_computes_are_small_units(tmp_path, late):
    # Gathers of 30 us on the rank that arrives last, whatever the other waits: 30 > 20 us of compute, 400 bytes
    # each, in both blocks: 2 of 2 units, own gather 30 us each; all own gather time is in small units (share 1).
    s = run(tmp_path, late=late, transfer=30)
    f = small_units(s)
    assert f is not None, [x.kind for x in s.findings]
    assert f.severity == "low" and f.ranks == (0, 1)
    assert f.evidence["units"] == ["blocks.0", "blocks.1"]
    assert f.evidence["own_gather_us"] == pytest.approx({"blocks.0": 30, "blocks.1": 30})
    assert f.evidence["compute_us"] == pytest.approx({"blocks.0": 20, "blocks.1": 20})
    assert f.evidence["median_bytes"] == 400 and f.evidence["gather_share"] == pytest.approx(1.0)
    # 400 bytes read 0.0004 MB, never 0.00
    assert "2 of 2 FSDP units gather under 4 MB (median 0.0004 MB)" in f.message and "fastest rank" in f.message


def rows(durations, compute=COMPUTE, ranks=(0, 1)):
    """FSDP rows: per rank, two forward requests (blocks.0, blocks.1) of step 1, one 400-byte gather each."""
    return pd.DataFrame([{"rank": r, "step": 1, "phase": "forward", "order": k, "unit": f"blocks.{k}", "gathers": 1,
                          "allgather_us": durations[r][k], "allgather_bytes": 400.0, "compute_us": compute,
                          "allgather_exposed_us": 0.0, "wait_us": 0.0, "prefetch": "prefetched",
                          "allgather_dtype": "bfloat16", "reduces": 0, "reduce_us": 0.0, "reduce_exposed_us": 0.0,
                          "in_window": True}
                         for r in ranks for k in range(2)])


def test_waiting_that_cannot_be_told_apart_is_not_judged():
    # Both ranks: the fastest gathers are 30 and 40 us, over the 20 us of compute.
    both = fsdp_findings.own_gathers(rows({0: [30, 90], 1: [80, 40]}))
    assert both["gather_us"].tolist() == [30, 40] and both["ranks"].tolist() == [2, 2]
    # One rank's trace only: when its peers arrived is unknown, so is its waiting (NaN, not its 30 us).
    one = fsdp_findings.own_gathers(rows({0: [30, 90]}, ranks=(0,)))
    assert one["gather_us"].isna().all()
    # A rank with an unknown gather time (NaN) could be the one that waited for no one: unknown too.
    nan = fsdp_findings.own_gathers(rows({0: [30, 90], 1: [math.nan, 40]}))
    assert math.isnan(nan["gather_us"].iloc[0]) and nan["gather_us"].iloc[1] == 40
    # Unknown compute (no post-hook): the unit's compute is unknown, not 0 -- nothing to compare with.
    unknown = fsdp_findings.own_gathers(rows({0: [30, 90], 1: [80, 40]}, compute=math.nan))
    assert unknown["compute_us"].isna().all()
    steps = pd.DataFrame({"rank": [0, 1], "step": [1, 1], "step_us": [1000.0, 1000.0], "in_window": [True, True]})
    assert [f.kind for f in fsdp_findings.find(rows({0: [30, 90], 1: [80, 40]}), steps)] == ["fsdp_small_units"]
    for table in (rows({0: [30, 90]}, ranks=(0,)), rows({0: [30, 90], 1: [80, 40]}, compute=math.nan)):
        assert "fsdp_small_units" not in {f.kind for f in fsdp_findings.find(table, steps)}
