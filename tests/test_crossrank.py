"""Across ranks, on tiny hand-built multi-rank traces with known answers: matching, mismatches, clock offsets,
idle causes and findings."""

import math

import numpy as np
import pytest

import tracekit
from tracekit import schema
from tracekit.run import crossrank
from tracedata import cpu, kernel, launch, step, write_trace

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
AR = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "Float",
      "Group size": 2, "Process Group Name": "0"}


def ar(ts, dur, seq=None, nelems=1000, stream=20, **extra):
    args = {**AR, "In msg nelems": nelems, "Out msg nelems": nelems, **extra}
    if seq is not None:
        args["Seq"] = seq
    return kernel(NCCL, ts, dur, stream=stream, **args)


def steps(n=3, length=1000):
    return [step(i + 1, i * length, length) for i in range(n)]


def test_match_by_seq_gives_wait_transfer_and_last_arrival(tmp_path):
    # Seq 1: rank 0 starts at 100, rank 1 at 130, both end at 150.
    # Seq 2 is issued first on rank 1 (another order), and matched by Seq all the same.
    write_trace(tmp_path / "rank0.json", steps() + [ar(100, 50, seq=1), ar(400, 100, seq=2)], rank=0)
    write_trace(tmp_path / "rank1.json", steps() + [ar(130, 20, seq=1), ar(90, 5, seq=3), ar(450, 50, seq=2)], rank=1)
    s = tracekit.summarize(tmp_path)
    c = s.collectives.set_index(["rank", "seq"])
    assert c.loc[(0, 1), ["wait_us", "transfer_us"]].tolist() == [30, 20]
    assert c.loc[(1, 1), ["wait_us", "transfer_us"]].tolist() == [0, 20]
    assert c.loc[(0, 2), ["wait_us", "transfer_us"]].tolist() == [50, 50]
    assert bool(c.loc[(1, 1), "last_arrival"]) and not bool(c.loc[(0, 1), "last_arrival"])
    assert math.isnan(c.loc[(1, 3), "wait_us"])  # seen on one rank only: unknown
    r = s.ranks.set_index("rank")
    assert r.loc[0, "comm_wait_us"] == 80 and r.loc[0, "comm_transfer_us"] == 70 and r.loc[1, "last_arrivals"] == 2
    assert list(s.mismatches["kind"]) == ["missing"] and s.mismatches["ranks"].iloc[0] == [0]


def test_match_by_order_within_steps(tmp_path):
    # No Seq: the k-th all_reduce of a step on one rank is the k-th on the other.
    write_trace(tmp_path / "rank0.json", steps() + [ar(100, 50), ar(300, 50), ar(1100, 50)], rank=0)
    write_trace(tmp_path / "rank1.json", steps() + [ar(120, 30), ar(340, 10), ar(1150, 10)], rank=1)
    c = tracekit.summarize(tmp_path).collectives
    assert c.loc[c["rank"] == 0, "wait_us"].tolist() == [20, 40, 50]
    assert c.loc[c["rank"] == 1, "wait_us"].tolist() == [0, 0, 0]
    assert c.loc[c["rank"] == 0, "transfer_us"].tolist() == [30, 10, 0]  # never negative


def test_mismatch_is_reported_and_the_rest_still_analysed(tmp_path):
    write_trace(tmp_path / "rank0.json", steps() + [ar(100, 50), ar(300, 50, nelems=2000), ar(500, 10)], rank=0)
    write_trace(tmp_path / "rank1.json", steps() + [ar(110, 40), ar(310, 40, nelems=1000)], rank=1)
    s = tracekit.summarize(tmp_path)
    m = s.mismatches
    # Rank 1 lacks the 8000 B call; its second call (4000 B) then pairs with rank 0's third, which it would have
    # waited for longer than it lasted: that pairing is refused, not counted as a wait.
    assert set(m["kind"]) == {"missing", "size", "timing"}
    missing = m[m["kind"] == "missing"].iloc[0]
    assert missing["ranks"] == [1] and missing["position"] == "step 1"
    assert m[m["kind"] == "size"].iloc[0]["detail"] == "rank 0: 4000, 8000, 4000 B; rank 1: 4000, 4000 B"
    waits = s.collectives.loc[s.collectives["rank"] == 0, "wait_us"].tolist()
    assert waits[0] == 10 and all(math.isnan(w) for w in waits[1:])
    assert len(s.ranks) == 2 and not s.ranks["overlap_pct"].isna().all()


def _skewed_run(tmp_path, offset_us, hosts):
    rng = np.random.default_rng(0)
    events = {0: steps(8), 1: steps(8)}
    for i in range(8):
        t0, t1 = i * 1000 + 100, i * 1000 + 100 + 30 * (i % 3)  # rank 1 arrives 0-60 us later
        end = i * 1000 + 300
        events[0].append(ar(t0, end - t0))
        events[1].append(ar(t1, end - t1 + int(rng.integers(-1, 2))))
    # Rank 1's host clock runs offset_us ahead: every timestamp it writes is shifted.
    shifted = [{**e, "ts": e["ts"] + offset_us} for e in events[1]]
    write_trace(tmp_path / "rank0.json", events[0], rank=0, host_name=hosts[0])
    write_trace(tmp_path / "rank1.json", shifted, rank=1, host_name=hosts[1])
    return tracekit.summarize(tmp_path)


def test_clock_offset_recovered_and_corrected_across_hosts(tmp_path):
    s = _skewed_run(tmp_path, 5000, ("node-a", "node-b"))
    offsets = s.run.clock_offsets.set_index("rank")
    assert offsets.loc[1, "offset_us"] == pytest.approx(5000, abs=2) and offsets.loc[1, "corrected"]
    waits = s.collectives[s.collectives["rank"] == 0].sort_values("start_us")["wait_us"].tolist()
    assert waits == pytest.approx([30 * (i % 3) for i in range(8)], abs=2)


def test_same_host_clock_is_not_corrected(tmp_path):
    s = _skewed_run(tmp_path, 0, ("node-a", "node-a"))
    assert not s.run.clock_offsets["corrected"].any()


# --- idle causes: tests/test_gap_causes.py --------------------------------------------------------------------

# --- findings ----------------------------------------------------------------------------------------------------

A100 = [{"name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8}]


def _kinds(s):
    return {f.kind for f in s.findings}


def test_clean_trace_has_no_findings(tmp_path):
    # bf16 compute back to back; the all-reduce hides under it; fast enough for the link.
    big = {**AR, "In msg nelems": 50_000_000, "Out msg nelems": 50_000_000, "dtype": "BFloat16"}
    for rank in (0, 1):
        ev = steps(3, 1000) + [kernel("sm90_xmma_gemm_bf16bf16_bf16f32", t, 1000, correlation=None) for t in (0, 1000, 2000)]
        ev += [kernel(NCCL, 200 + 1000 * k, 600, stream=20, **big) for k in range(3)]
        write_trace(tmp_path / f"rank{rank}.json", ev, rank=rank, deviceProperties=A100)
    s = tracekit.summarize(tmp_path)
    assert s.findings == (), [f.message for f in s.findings]
    assert "\nFindings\n  None: no check fired." in str(s)  # the section is always there


def _finding_run(tmp_path, rank_events, **top):
    for rank, ev in rank_events.items():
        write_trace(tmp_path / f"rank{rank}.json", ev, rank=rank, **top)
    return tracekit.summarize(tmp_path)


def test_exposed_comm_finding(tmp_path):
    ev = steps(3) + [kernel("gemm_bf16", 0, 400), kernel(NCCL, 400, 400, stream=20, **AR),
                     kernel("gemm_bf16", 1000, 400), kernel(NCCL, 1400, 400, stream=20, **AR),
                     cpu("DistributedDataParallel.forward", 1, 300, cat="user_annotation")]  # DDP's advice needs DDP
    s = _finding_run(tmp_path, {0: ev})
    f = next(f for f in s.findings if f.kind == "exposed_comm")
    # 44% of the span exposed is high by its share; the host's ProfilerStep markers pace the steps, so the replay
    # finds no gain in hiding it and the finding is low (findings/order.py).
    assert f.evidence["measured_severity"] == "high" and f.severity == "low"
    assert f.ranks == (0,) and f.evidence["share"] == pytest.approx(800 / 1800)
    assert "no_sync" in f.recommendation


def test_straggler_finding(tmp_path):
    # Rank 2 of 3 arrives 300 us late to each of 10 all-reduces, one per 1000 us step.
    ranks = {r: steps(11) for r in range(3)}
    for i in range(10):
        for r in range(3):
            start = i * 1000 + (400 if r == 2 else 100)
            ranks[r].append(ar(start, i * 1000 + 500 - start, **{"Group size": 3}))
    s = _finding_run(tmp_path, ranks)
    assert s.stragglers["rank"].tolist() == [2]
    assert s.stragglers["caused_wait_us_per_step"].iloc[0] == pytest.approx(300)  # each other rank waits 300 us a step
    assert s.stragglers["p_value"].iloc[0] == pytest.approx((1 / 3) ** 10)  # last at 10 of 10, chance 1 in 3 each
    f = next(f for f in s.findings if f.kind == "straggler")
    # The host's ProfilerStep markers pace these 1000 us steps, so the replay finds no gain in removing rank 2's
    # delay: the finding is kept, low, and says what binds the step (findings/order.py).
    assert f.ranks == (2,) and f.severity == "low" and f.evidence["measured_severity"] == "high"
    assert "no measurable gain" in f.message
    assert "The step is bound by" in f.message
    assert s.imbalance.shape[0] == 10
    assert s.run.straggler_suspicions.empty


def _late_run(tmp_path, late_us):
    """2 ranks, one all-reduce per 1000 us step, both ending at 500: rank 1 starts late_us[i] after rank 0 (0: a tie)."""
    ranks = {r: steps(len(late_us) + 1) for r in (0, 1)}
    for i, late in enumerate(late_us):
        ranks[0].append(ar(i * 1000 + 100, 400))
        ranks[1].append(ar(i * 1000 + 100 + late, 400 - late))
    return _finding_run(tmp_path, ranks)


def test_last_at_2_of_2_is_a_suspicion_not_a_straggler(tmp_path):
    s = _late_run(tmp_path, [300, 300])
    assert s.stragglers.empty
    [row] = s.run.straggler_suspicions.to_dict("records")
    assert list(row) == list(s.stragglers.columns) == list(schema.STRAGGLER_COLUMNS)
    # Last at both of 2 calls among 2 ranks: chance 1/2 each, so p = (1/2)^2 = 0.25.
    assert (row["rank"], row["matched"], row["last_arrivals"]) == (1, 2, 2)
    assert row["p_value"] == pytest.approx(0.25) and row["caused_wait_us_per_step"] == pytest.approx(300)
    [f] = [f for f in s.findings if f.kind.startswith("straggler")]
    assert (f.kind, f.severity, f.ranks) == ("straggler_suspected", "low", (1,))
    assert "p = 0.25" in f.message and "0.300 ms per step" in f.message and f.evidence["p_value"] == pytest.approx(0.25)


@pytest.mark.parametrize("late, verdict, p", [
    # Last at 11 of 12 (one tie): P[X >= 11], X ~ B(12, 1/2) = (12 + 1) / 4096 < 0.01. Under twice chance (100% with
    # two ranks), but over three in four: a straggler.
    ([300] * 11 + [0], "straggler", 13 / 4096),
    # Last at 7 of 8: (8 + 1) / 256 = 0.035, not under 0.01: a suspicion.
    ([300] * 7 + [0], "suspected", 9 / 256),
])
def test_straggler_is_the_binomial_test(tmp_path, late, verdict, p):
    s = _late_run(tmp_path, late)
    table = s.stragglers if verdict == "straggler" else s.run.straggler_suspicions
    other = s.run.straggler_suspicions if verdict == "straggler" else s.stragglers
    assert table["rank"].tolist() == [1] and other.empty
    assert table["p_value"].iloc[0] == pytest.approx(p)
    assert table["caused_wait_us_per_step"].iloc[0] == pytest.approx(300 * (len(late) - 1) / len(late))


def test_binomial_tail_by_hand():
    tail = crossrank._binomial_tail
    assert tail(5, 3, 1 / 3) == pytest.approx((10 * 4 + 5 * 2 + 1) / 3**5)  # C(5,3) 2^2 + C(5,4) 2 + 1, over 243
    assert tail(10, 10, 0.5) == pytest.approx(1 / 1024) and tail(4, 0, 0.3) == 1.0
    assert tail(20, 1, 0.25) == pytest.approx(1 - 0.75**20)


def test_data_loading_host_and_sync_findings(tmp_path):
    ev = steps(3)
    for i in range(2):
        base = i * 1000
        ev += [launch(base + 1, 10 * i + 1), kernel("gemm_bf16", base + 10, 100, correlation=10 * i + 1),
               cpu("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", base + 110, 300, cat="user_annotation"),
               launch(base + 420, 10 * i + 2), kernel("gemm_bf16", base + 430, 100, correlation=10 * i + 2),
               cpu("aten::nonzero", base + 540, 150),  # host work before a late launch: host_bound
               launch(base + 700, 10 * i + 3), kernel("gemm_bf16", base + 750, 100, correlation=10 * i + 3),
               cpu("cudaStreamSynchronize", base + 840, 100, cat="cuda_runtime"),
               launch(base + 950, 10 * i + 4), kernel("gemm_bf16", base + 960, 30, correlation=10 * i + 4)]
    s = _finding_run(tmp_path, {0: ev}, deviceProperties=A100)
    assert {"data_loading", "host_bound", "sync_in_step"} <= _kinds(s)


def test_data_parallel_and_fp32_findings(tmp_path):
    ev = steps(3) + [cpu("DataParallel.forward", 5, 500, cat="user_annotation"),
                     kernel("ampere_sgemm_128x64_tn", 10, 900), kernel("ampere_sgemm_128x64_tn", 1010, 900)]
    s = _finding_run(tmp_path, {0: ev}, deviceProperties=A100)
    assert {"data_parallel", "no_reduced_precision"} <= _kinds(s)
    assert s.findings[0].kind == "data_parallel"  # most severe first


def test_low_bus_bandwidth_finding(tmp_path):
    # 64 MB all-reduce taking 10 ms on 2 A100s: busbw 6.4 GB/s against a 300 GB/s link.
    slow = {**AR, "In msg nelems": 16_000_000, "Out msg nelems": 16_000_000}
    ranks = {r: steps(3, 20_000) + [kernel("gemm_bf16", 0, 20_000),
                                     kernel(NCCL, 5000, 10_000, stream=20, **slow)] for r in (0, 1)}
    for r in ranks:
        write_trace(tmp_path / f"rank{r}.json", ranks[r], rank=r, deviceProperties=A100)
    s = tracekit.summarize(tmp_path)
    f = next(f for f in s.findings if f.kind == "low_busbw")
    assert f.evidence["busbw_gbps"] == pytest.approx(6.4) and f.evidence["link_gbps"] == 300


# --- regressions found in review ----------------------------------------------------------------------------------

def test_rank_without_device_events_raises_no_false_findings(tmp_path):
    s = _finding_run(tmp_path, {0: steps(3) + [kernel("gemm_bf16", 0, 100), ar(200, 100)], 1: steps(3)})
    assert "data_parallel" not in _kinds(s)
    r1 = s.ranks.set_index("rank").loc[1]
    assert math.isnan(r1["span_us"]) and math.isnan(r1["compute_us"])  # unknown, not 0


def test_ties_have_no_last_arrival_and_no_straggler(tmp_path):
    s = _finding_run(tmp_path, {r: steps(11) + [ar(i * 1000 + 100, 200) for i in range(10)] for r in (0, 1)})
    assert not s.collectives["last_arrival"].any() and s.stragglers.empty


def test_rank_with_no_collectives_is_missing(tmp_path):
    s = _finding_run(tmp_path, {0: steps(3) + [kernel("gemm", 0, 100), ar(200, 100), ar(1200, 100)],
                                1: steps(3) + [kernel("gemm", 0, 100)]})
    assert (s.mismatches["kind"] == "missing").sum() == 2 and s.mismatches["ranks"].iloc[0] == [1]


def test_sync_finding_without_steps(tmp_path):
    ev = [launch(0, 1), kernel("gemm_bf16", 10, 100, correlation=1), cpu("cudaDeviceSynchronize", 100, 700, cat="cuda_runtime"),
          launch(790, 2), kernel("gemm_bf16", 800, 100, correlation=2)]
    s = _finding_run(tmp_path, {0: ev}, deviceProperties=A100)
    assert s.ranks.iloc[0]["sync_calls"] == 1 and "sync_in_step" in _kinds(s)


def test_compare_does_not_depend_on_the_number_of_steps(tmp_path):
    def run(n, folder):
        ev = steps(n, 1000) + [kernel("gemm", i * 1000 + 100, 500) for i in range(n)]
        write_trace(tmp_path / folder / "rank0.json", ev, rank=0)
        return tracekit.summarize(tmp_path / folder)
    table = tracekit.compare(run(4, "a"), run(7, "b")).table.set_index("metric")
    for metric in ("step_time_ms", "compute_only_ms", "idle_ms", "idle_other_ms"):
        assert table.loc[metric, "ratio"] == pytest.approx(1.0, abs=0.03), metric


def test_bundled_straggler_sample_suspects_the_sleeping_rank():
    from pathlib import Path

    # Rank 1 sleeps 50 ms before each forward, but the window holds 2 matched all-reduces: last at 2 of 2 is what
    # chance gives 1 time in 4. A suspicion, with the wait it caused; not a proven straggler.
    s = tracekit.summarize(Path(__file__).resolve().parents[1] / "sample_traces" / "gpt-gloo-2rank-straggler", cache=False)
    assert s.stragglers.empty
    [row] = s.run.straggler_suspicions.to_dict("records")
    assert (row["rank"], row["last_arrivals"], row["matched"]) == (1, 2, 2) and row["p_value"] == pytest.approx(0.25)
    assert 30e3 < row["caused_wait_us_per_step"] < 60e3
    assert [f.ranks for f in s.findings if f.kind == "straggler_suspected"] == [(1,)]
