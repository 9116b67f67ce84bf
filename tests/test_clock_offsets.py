"""Clock offsets between hosts: causal bounds and estimates on tiny hand-built tables, the correction rule, and a real
4-rank gloo run rewritten to look like 2 hosts whose second clock runs 20 ms ahead."""

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit import schema
from tracekit.run import clocks
from tracedata import kernel, step, write_trace

ROOT = Path(__file__).resolve().parents[1]


def table(calls, op="all_reduce", size=4000.0):
    """Collectives rows from (call, rank, start_us, end_us[, bytes]) on each rank's own clock, and the call ids."""
    rows = [c if len(c) == 5 else (*c, size) for c in calls]
    frame = pd.DataFrame(rows, columns=["g", "rank", "start", "end", "bytes"])
    coll = pd.DataFrame({"rank": frame["rank"], "op": op, "bytes": frame["bytes"].astype(float),
                         "start_ns": np.rint(frame["start"] * 1e3).astype(np.int64), "dur_us": frame["end"] - frame["start"]})
    return coll, frame["g"].to_numpy()


# Hosts a (ranks 0, 1: the reference), b (ranks 2, 3: clock 1000 us ahead) and c (rank 4: clock 500 us behind).
# True times (start, end) per call; b and c write them shifted.
TRUE = {
    0: {0: (100, 200), 1: (110, 205), 2: (150, 210), 3: (120, 202), 4: (90, 201)},
    1: {0: (300, 350), 1: (340, 348), 2: (310, 345), 3: (305, 352), 4: (290, 351)},
    2: {0: (500, 560), 1: (505, 570), 2: (520, 575), 3: (530, 565), 4: (480, 566)},
}
SHIFT = {0: 0, 1: 0, 2: 1000, 3: 1000, 4: -500}
HOSTS = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c"}


def three_hosts(extra=()):
    calls = [(g, r, s + SHIFT[r], e + SHIFT[r]) for g, by_rank in TRUE.items() for r, (s, e) in by_rank.items()]
    return table(calls + list(extra))


def test_causal_bounds_and_estimate_by_hand():
    # A call whose ranks disagree on the size is a wrong match; its times would empty the bounds. It is left out.
    wrong = [(9, 0, 5000, 5010, 4000.0), (9, 2, 0, 10, 8000.0)]
    o = clocks.clock_offsets(*three_hosts(wrong), HOSTS).set_index("rank")
    # Host b against a. Lower bound per call: latest start on b - earliest end on a; upper: earliest end on b -
    # latest start on a (b's own clock).
    lower = max(1150 - 200, 1310 - 348, 1530 - 560)   # 950, 962, 970
    upper = min(1202 - 110, 1345 - 340, 1565 - 505)   # 1092, 1005, 1060
    assert (lower, upper) == (970, 1005)
    # Ends: first end on b - first end on a per call: 1202 - 200, 1345 - 348, 1565 - 560 = 1002, 997, 1005
    # -> median 1002 (inside the bounds: the estimate), MAD 3.
    median, noise = 1002, 1.4826 * 3
    for rank in (2, 3):  # one offset for the host, from both its ranks
        row = o.loc[rank]
        assert row["host"] == "b" and row["bounds"] == "ok" and row["samples"] == 3 and row["conflicts"] == 0
        assert (row["lower_us"], row["upper_us"]) == (lower, upper)
        assert row["noise_us"] == pytest.approx(noise)
        assert row["offset_us"] == median
    # Host c (rank 4) against a: bounds [-558, -489]; first ends -299 - 200, -149 - 348, 66 - 560 = -499, -497, -494
    # -> median -497, well inside them.
    c = o.loc[4]
    assert (c["lower_us"], c["upper_us"]) == (max(-410 - 200, -210 - 348, -20 - 560), min(-299 - 110, -149 - 340, 66 - 505))
    assert c["offset_us"] == -497
    assert (o.loc[[0, 1], "bounds"] == "reference").all() and (o.loc[[0, 1], "offset_us"] == 0).all()
    assert clocks.offsets_to_correct(o.reset_index()) == {2: 1002000, 3: 1002000, 4: -497000}


def test_ends_median_outside_the_bounds_moves_to_the_nearer_bound():
    # Per call (a's rank 0, b's rank 1): lower = b's start - a's end, upper = b's end - a's start, first ends' diff.
    # Call 0: 30 - 20 = 10, 80 - 0 = 80, 80 - 20 = 60. Call 1: 10, 80, 60. Call 2: 205 - 210 = -5, 250 - 200 = 50, 40.
    # Bounds [10, 50]; the ends' median 60 is above them: the estimate is 50.
    coll, group = table([(0, 0, 0, 20), (0, 1, 30, 80), (1, 0, 100, 120), (1, 1, 130, 180),
                         (2, 0, 200, 210), (2, 1, 205, 250)])
    o = clocks.clock_offsets(coll, group, {0: "a", 1: "b"}).set_index("rank").loc[1]
    assert (o["lower_us"], o["upper_us"], o["offset_us"]) == (10, 50, 50)


def test_empty_causal_bounds_are_flagged_not_hidden():
    # Host b's clock drifts: call 0 proves d >= 100, call 1 proves d <= 50.
    coll, group = table([(0, 0, 0, 10), (0, 1, 110, 120), (1, 0, 100, 110), (1, 1, 140, 150),
                         (2, 0, 200, 210), (2, 1, 270, 280)])
    o = clocks.clock_offsets(coll, group, {0: "a", 1: "b"}).set_index("rank").loc[1]
    assert o["bounds"] == "inconsistent" and math.isnan(o["lower_us"]) and math.isnan(o["upper_us"])
    # The estimate is the ends' median (110, 40, 70 -> 70), which calls 0 ([100, 120]) and 1 ([30, 50]) exclude.
    assert o["offset_us"] == 70 and o["conflicts"] == 2
    assert o["noise_us"] == pytest.approx(1.4826 * 30)
    assert clocks.offsets_to_correct(pd.DataFrame([o.to_dict() | {"rank": 1}])) == {}  # 70 < 3 x 44.5 us: not clear


def test_all_to_all_with_split_sizes_gives_bounds():
    # One all_to_all where rank 1 sends twice what rank 0 sends: a real call, not a wrong match. Bounds [50 - 10, 60 - 0].
    coll, group = table([(0, 0, 0, 10, 4000.0), (0, 1, 50, 60, 8000.0)], op="all_to_all")
    o = clocks.clock_offsets(coll, group, {0: "a", 1: "b"}).set_index("rank").loc[1]
    assert (o["samples"], o["lower_us"], o["upper_us"]) == (1, 40, 60)


def test_correction_rule():
    nan = math.nan
    rows = [  # rank, offset, lower, upper, noise, samples, bounds
        (0, 0.0, 0.0, 0.0, 0.0, 9, "reference"),
        (1, 20.0, -5.0, 45.0, 10.0, 9, "ok"),         # 20 < 3 x 10 and 0 within the bounds: not clear
        (2, 20.0, 8.0, 45.0, 10.0, 9, "ok"),          # the bounds exclude 0: proven
        (3, 4.0, 3.0, 5.0, 0.1, 9, "ok"),             # under 5 us: not worth it
        (4, 50.0, -100.0, 100.0, 1.0, 2, "ok"),       # two calls only
        (5, 50.0, nan, nan, 10.0, 5, "inconsistent"),  # 50 > 3 x 10
        (6, nan, nan, nan, nan, 0, "none"),
    ]
    offsets = pd.DataFrame(rows, columns=["rank", "offset_us", "lower_us", "upper_us", "noise_us", "samples", "bounds"])
    assert clocks.offsets_to_correct(offsets) == {2: 20_000, 5: 50_000}


def test_hosts_unknown_or_shared():
    coll, group = table([(0, 0, 0, 100), (0, 1, 5050, 5110), (1, 0, 200, 300), (1, 1, 5240, 5305),
                         (2, 0, 400, 500), (2, 1, 5420, 5502)])
    # No host names: each rank is its own clock. Bounds [5050 - 100, 5110 - 0] ∩ [4940, 5105] ∩ [4920, 5102].
    o = clocks.clock_offsets(coll, group, {0: None, 1: None}).set_index("rank")
    assert o.loc[1, "bounds"] == "ok" and (o.loc[1, "lower_us"], o.loc[1, "upper_us"]) == (4950, 5102)
    assert 4950 <= o.loc[1, "offset_us"] <= 5102 and o.loc[0, "bounds"] == "reference"
    same = clocks.clock_offsets(coll, group, {0: "a", 1: "a"})
    assert (same["bounds"] == "reference").all() and clocks.offsets_to_correct(same) == {}
    # A host that shares no call with the reference: unknown, not 0.
    alone = clocks.clock_offsets(coll, group, {0: "a", 1: "a", 2: "b"}).set_index("rank").loc[2]
    assert alone["bounds"] == "none" and math.isnan(alone["offset_us"]) and alone["samples"] == 0


def test_two_hosts_of_two_ranks_through_summarize(tmp_path):
    # 6 steps, one all-reduce each; host b (ranks 2, 3) writes every time 5000 us late. Arrivals rotate, so each host
    # is last in some calls; all leave at 300 (+-1 on rank 3).
    ar = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "Float",
          "Group size": 4, "Process Group Name": "0"}
    for rank in range(4):
        events = [step(i + 1, i * 1000, 1000) for i in range(7)]
        for i in range(6):
            start = i * 1000 + 100 + (60 if (i + rank) % 4 == 0 else 10 * rank)
            end = i * 1000 + 300 + (i % 2 if rank == 3 else 0)
            events.append(kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", start, end - start, stream=20, **ar))
        shift = 5000 if rank >= 2 else 0
        write_trace(tmp_path / f"rank{rank}.json", [{**e, "ts": e["ts"] + shift} for e in events], rank=rank,
                    world_size=4, host_name="b" if rank >= 2 else "a")
    s = tracekit.summarize(tmp_path, cache=False)
    assert list(s.run.clock_offsets.columns) == list(schema.CLOCK_OFFSET_FIELDS) and len(s.run.clock_offsets) == 4
    o = s.run.clock_offsets.set_index("rank")
    assert o.loc[2, "offset_us"] == o.loc[3, "offset_us"] == pytest.approx(5000, abs=1)
    assert o.loc[2, "lower_us"] <= 5000 <= o.loc[2, "upper_us"] and o.loc[2, "corrected"] and not o.loc[0, "corrected"]
    c = s.collectives
    first = c[c["start_us"] < c["start_us"].min() + 500]  # the first call, on the corrected clock
    # Starts 160, 110, 120, 130 (rank 0 last): waits 0, 50, 40, 30, up to the estimate's 0.25 us.
    assert first.set_index("rank").sort_index()["wait_us"].tolist() == pytest.approx([0, 50, 40, 30], abs=1)


def straggler_run(straggler, calls=24, seed=0):
    """4 ranks, hosts a (0, 1) and b (2, 3, clock 20 ms ahead), one all-reduce per step, shaped like a real gloo run
    on a busy CPU: the others arrive within 1 ms, ``straggler`` (or nobody) 250 ms late; the call completes 1.5-18 ms
    after the last arrival, and each rank leaves after its own delay (exponential, mean 1.5 ms; the straggler's 4 ms,
    its own compute competing for the CPU as it catches up)."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(calls):
        t0 = g * 400_000.0
        start = {r: t0 + rng.uniform(0, 1000) + (250_000 if r == straggler else 0) for r in range(4)}
        done = max(start.values()) + rng.uniform(1500, 18000)
        for r in range(4):
            end = done + rng.exponential(4000 if r == straggler else 1500)
            shift = 20_000 if r >= 2 else 0
            rows.append((g, r, start[r] + shift, end + shift))
    return table(rows)


@pytest.mark.parametrize("straggler", [3, 1, None], ids=["on-the-shifted-host", "on-the-reference-host", "none"])
def test_offset_within_1ms_with_a_straggler(straggler):
    # The truth is 20 ms. With rank 3 late at every call, only the lower bound is informative: its best call is
    # within 3 ms of the truth (the least time a call takes after the last arrival, 1.5 ms, plus a delay), while the
    # upper bound is 250 ms loose (rank 3's lateness); with rank 1 late, the other way round. The middle of the
    # bounds, or of the bounds cut by the ends' median +- 3 noise, is pulled into the loose side (2.6 ms off here);
    # the mean end on host b carries the straggler's own delays (+1.25 ms on average). The first ends' median is
    # within 1 ms (0.24 ms here; at most 0.79 ms over seeds 0-29, against 4.2 ms for the old rule).
    coll, group = straggler_run(straggler)
    o = clocks.clock_offsets(coll, group, {0: "a", 1: "a", 2: "b", 3: "b"}).set_index("rank").loc[2]
    assert o["bounds"] == "ok" and o["samples"] == 24 and o["lower_us"] <= 20_000 <= o["upper_us"]
    if straggler == 3:
        assert o["upper_us"] - 20_000 > 200_000 and 20_000 - o["lower_us"] < 3000
    if straggler == 1:
        assert 20_000 - o["lower_us"] > 200_000 and o["upper_us"] - 20_000 < 3000
    assert abs(o["offset_us"] - 20_000) < 1000, o.to_dict()


# --- a real gloo run, rewritten as two hosts --------------------------------------------------------------------

SHIFT_MS = 20


def _as_second_host(src: Path, dst: Path, ranks, shift_us: float, host: str) -> None:
    """Copy a run, moving ``ranks``' timestamps by ``shift_us`` and naming their host ``host``."""
    dst.mkdir()
    for path in sorted(src.glob("rank-*.pt.trace.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        if doc["distributedInfo"]["rank"] in ranks:
            doc["traceEvents"] = [{**e, "ts": e["ts"] + shift_us} if "ts" in e else e for e in doc["traceEvents"]]
            doc["host_name"] = host
        (dst / path.name).write_bytes(gzip.compress(json.dumps(doc).encode()))


@pytest.fixture(scope="module")
def gloo_4rank(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("gloo4")
    tiny = ["--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--vocab-size", "2048", "--seq-len", "16",
            "--batch-size", "4", "--steps", "14", "--wait", "1", "--warmup", "1", "--active", "12", "--bucket-cap-mb", "0.01"]
    subprocess.run([sys.executable, "-m", "workloads.gpt", "--profile", "--nproc", "4", *tiny, "--out", str(out / "run")],
                   check=True, cwd=ROOT, timeout=400, capture_output=True)
    return out


@pytest.mark.slow
@pytest.mark.serial  # the live run (the fixture) must keep its calls' ends within 1 ms: no neighbour on the cores
def test_shifted_host_offset_within_1ms_on_a_real_gloo_run(gloo_4rank):
    # The ends of one gloo call are spread by milliseconds on a busy CPU: on one such run the ends' median alone
    # was 1.38 ms off; the causal bounds bring the estimate back. Each bound is as tight as the best call where the
    # other host arrived last, so the more calls (48 here, 4 buckets x 12 steps), the tighter.
    truth = tracekit.summarize(gloo_4rank / "run", cache=False)  # one host, one clock: the true waits
    for shift_ms in (SHIFT_MS, 0):
        run = gloo_4rank / f"shift{shift_ms}"
        _as_second_host(gloo_4rank / "run", run, {2, 3}, shift_ms * 1e3, "second-host")
        s = tracekit.summarize(run, cache=False)
        o = s.run.clock_offsets.set_index("rank")
        assert list(o["host"]) == [o.loc[0, "host"], o.loc[0, "host"], "second-host", "second-host"]
        for rank in (2, 3):
            row = o.loc[rank]
            assert row["samples"] >= 40 and row["bounds"] == "ok", row.to_dict()
            assert abs(row["offset_us"] - shift_ms * 1e3) < 1000, row.to_dict()
            assert row["lower_us"] <= shift_ms * 1e3 <= row["upper_us"], row.to_dict()  # causality holds on real calls
        if shift_ms:
            assert o.loc[[2, 3], "corrected"].all()
            # Corrected, the waits are the one-clock run's, up to the estimate's error.
            key = ["rank", "match_id"]
            waits = s.collectives.set_index(key)["wait_us"].sort_index()
            true = truth.collectives.set_index(key)["wait_us"].sort_index()
            assert waits.index.equals(true.index) and waits.notna().equals(true.notna())
            assert (waits - true).abs().max() < 1000, (waits - true).abs().describe()


@pytest.fixture(scope="module")
def gloo_4rank_straggler(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("gloo4straggler")
    tiny = ["--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--vocab-size", "2048", "--seq-len", "16",
            "--batch-size", "4", "--steps", "14", "--wait", "1", "--warmup", "1", "--active", "12",
            "--bucket-cap-mb", "0.01",
            "--straggler-rank", "3", "--straggler-ms", "250"]
    subprocess.run([sys.executable, "-m", "workloads.gpt", "--profile", "--nproc", "4", *tiny, "--out", str(out / "run")],
                   check=True, cwd=ROOT, timeout=400, capture_output=True)
    return out


@pytest.mark.slow
@pytest.mark.serial
def test_shifted_host_offset_within_1ms_with_a_straggler_on_it(gloo_4rank_straggler):
    # Rank 3 sleeps 250 ms before each forward pass and its host, moved to a clock 20 ms ahead, ends the calls it
    # was late to later than the others (its own backward competes for the CPU). On four real straggler runs, each
    # rewritten as 2 hosts in 3 ways, the mean ends were up to 3.1 ms off and the first ends 0.65 ms.
    run = gloo_4rank_straggler / "shifted"
    _as_second_host(gloo_4rank_straggler / "run", run, {2, 3}, SHIFT_MS * 1e3, "second-host")
    s = tracekit.summarize(run, cache=False)
    assert s.stragglers["rank"].tolist() == [3]
    row = s.run.clock_offsets.set_index("rank").loc[3]
    assert row["bounds"] == "ok" and row["lower_us"] <= SHIFT_MS * 1e3 <= row["upper_us"], row.to_dict()
    assert abs(row["offset_us"] - SHIFT_MS * 1e3) < 1000 and row["corrected"], row.to_dict()


def test_one_clock_domain_gives_the_typed_empty_bounds_the_full_pass_gives():
    """With every rank on the reference's clock, ``call_bounds`` skips its passes: the same empty table they give
    (here with a second domain that took part in no call, so the passes run and find nothing)."""
    from frame_equal import assert_frame_equal
    from tracekit.run import clocks

    coll = pd.DataFrame({"rank": [0, 1, 0, 1], "start_ns": [0, 5, 100, 104], "dur_us": [1.0, 0.5, 2.0, 1.5],
                         "op": ["all_reduce"] * 4, "bytes": [8.0] * 4})
    group = np.array([0, 0, 1, 1])
    fast = clocks.call_bounds(coll, group, {0: "a", 1: "a"}, "a")
    assert_frame_equal(fast, clocks.call_bounds(coll, group, {0: "a", 1: "a", 7: "b"}, "a"))
    assert fast.empty and list(fast.columns) == ["g", "dom", "lower", "upper", "diff"]
    # Two domains: one row per call (hand-worked, ns). Rank 0 (the reference) runs 0-1000 and 100-2100, rank 1 5-505
    # and 104-1604: diff = its end - the reference's, lower = its start - the reference's end, upper = its end -
    # the reference's start.
    two = clocks.call_bounds(coll, group, {0: "a", 1: "b"}, "a")
    assert two["diff"].tolist() == [-495.0, -496.0] and two["lower"].tolist() == [-995.0, -1996.0]
    assert two["upper"].tolist() == [505.0, 1504.0] and two["dom"].tolist() == ["b", "b"]
