"""Why the device idles (issue 33, classes 1, 2 and 5): each gap's time split by what the launching host thread did
over it (``tracekit.events.gapsplit``), interval by interval, innermost call first, unrecorded time its own cause;
allocator stalls a cause (``alloc``) with advice of their own; and exposed-communication advice that follows the
calls' wait and transfer. Every answer below is worked by hand."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit.events.causes import CAUSES
from tracekit.findings import comm_findings
from tracedata import cpu, kernel, launch, step, write_trace

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
AR = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "Float",
      "Group size": 2, "Process Group Name": "0"}
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
A100 = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "totalGlobalMem": 85e9}]


def summarize(tmp_path, events, **top):
    return tracekit.summarize(write_trace(tmp_path / "rank0.json.gz", events, **top), window="all_steps", cache=False)


def split(s) -> list[dict]:
    """Each gap's non-zero parts (us), in time order."""
    cols = [f"idle_{c}_us" for c in CAUSES]
    return [{c.removeprefix("idle_").removesuffix("_us"): v for c, v in row.items() if v}
            for row in s.gaps[cols].to_dict("records")]


def test_each_cause_is_the_time_under_its_call(tmp_path):
    events = [step(1, 0, 2000), step(2, 2000, 100),
              launch(1, 1), kernel("gemm", 10, 90, correlation=1),                      # busy [10, 100)
              cpu("cudaDeviceSynchronize", 95, 95, cat="cuda_runtime"),                # gap [100, 200)
              launch(190, 2), kernel("gemm", 200, 100, correlation=2),
              cpu(LOADER, 290, 90, cat="user_annotation"),                             # gap [300, 400)
              launch(385, 3), kernel("gemm", 400, 100, correlation=3),
              cpu("c10d::allreduce_", 505, 85), launch(580, 4),                        # gap [500, 600)
              kernel(NCCL, 600, 100, stream=20, correlation=4, **AR),
              cpu("aten::mm", 690, 80), launch(775, 5), kernel("gemm", 800, 100, correlation=5),  # gap [700, 800)
              launch(850, 6), kernel("gemm", 1000, 100, correlation=6),               # gap [900, 1000)
              cpu("cudaMalloc", 1090, 90, cat="cuda_runtime"),                         # gap [1100, 1200)
              launch(1185, 7), kernel("gemm", 1200, 100, correlation=7),
              launch(1390, 8), kernel("gemm", 1400, 100, correlation=8)]               # gap [1300, 1400)
    s = summarize(tmp_path, events)
    assert split(s) == [
        {"sync": 90, "host": 2, "host_unrecorded": 8},       # the sync [100, 190), the launch [190, 192)
        {"data": 80, "host": 2, "host_unrecorded": 18},      # the loader [300, 380), the launch [385, 387)
        {"comm_wait": 85, "host_unrecorded": 15},            # [505, 590): the launch inside is the collective's
        {"host": 72, "host_unrecorded": 28},                 # aten::mm [700, 770) and the launch [775, 777)
        {"other": 100},                                      # launched at 850, before the gap: a dependency
        {"alloc": 80, "host": 2, "host_unrecorded": 18},     # cudaMalloc [1100, 1180), the launch [1185, 1187)
        {"host": 2, "host_unrecorded": 98},                  # nothing but the launch at 1390
    ]
    assert s.gaps["cause"].tolist() == ["sync", "data", "comm_wait", "host", "other", "alloc", "host_unrecorded"]
    r = s.ranks.iloc[0]
    assert [r[f"idle_{c}_us"] for c in CAUSES] == [90, 80, 80, 85, 80, 185, 100]
    assert r["idle_us"] == 700


def test_a_long_loader_outweighs_a_brief_sync(tmp_path):
    # The inference case: a 122 ms gap [100, 122100) holds a 1 us cudaStreamSynchronize [100, 101) and the
    # DataLoader [150, 121150); the next kernel is launched at 122000 (2 us). Data 121000 us, sync 1, host 2, the
    # rest 997.
    events = [step(1, 0, 130_000), step(2, 130_000, 100),
              launch(1, 1), kernel("gemm", 10, 90, correlation=1),
              cpu("cudaStreamSynchronize", 100, 1, cat="cuda_runtime"),
              cpu(LOADER, 150, 121_000, cat="user_annotation"),
              launch(122_000, 2), kernel("gemm", 122_100, 100, correlation=2)]
    s = summarize(tmp_path, events)
    assert split(s) == [{"sync": 1, "data": 121_000, "host": 2, "host_unrecorded": 997}]
    assert s.gaps["cause"].tolist() == ["data"]
    kinds = {f.kind for f in s.findings}
    assert "data_loading" in kinds and "sync_in_step" not in kinds


def test_a_late_host_op_is_host_time_though_a_collective_grazes_the_gap(tmp_path):
    # DLRM: gap [100, 32900). The host's all_to_all [0, 150) grazes its first 50 us; aten::split_with_sizes runs
    # [200, 21200) (21 ms); the next kernel is launched at 32850. Host 21002, comm 50, unrecorded 11748.
    a2a = {**AR, "Collective name": "all_to_all"}
    events = [step(1, 0, 40_000), step(2, 40_000, 100),
              launch(1, 1), kernel("gemm", 10, 90, correlation=1),
              cpu("c10d::alltoall_", 0, 150), cpu("aten::split_with_sizes", 200, 21_000),
              launch(32_850, 2), kernel("ncclDevKernel_SendRecv", 32_900, 100, stream=20, correlation=2, **a2a)]
    s = summarize(tmp_path, events)
    assert split(s) == [{"comm_wait": 50, "host": 21_002, "host_unrecorded": 11_748}]
    assert s.gaps["cause"].tolist() == ["host"]


def test_a_gap_with_no_host_op_is_unrecorded_not_the_next_collective(tmp_path):
    # A straggler's 1 s gap [100, 1000100): the host records nothing but the launch [1000050, 1000052) of the
    # all-reduce that ends it. Not comm_wait (the next work being a collective says nothing of the host).
    events = [step(1, 0, 1_100_000), step(2, 1_100_000, 100),
              launch(1, 1), kernel("gemm", 10, 90, correlation=1),
              launch(1_000_050, 2), kernel(NCCL, 1_000_100, 100, stream=20, correlation=2, **AR)]
    s = summarize(tmp_path, events)
    assert split(s) == [{"host": 2, "host_unrecorded": 999_998}]
    assert s.ranks.iloc[0]["idle_comm_wait_us"] == 0
    # Span [10, 1000200): 999,998 / 1,000,190 unrecorded. What to do is first to record it: no launch-overhead advice.
    found = {f.kind: f for f in s.findings}
    assert "host_bound" not in found and found["host_unrecorded"].severity == "high"
    assert found["host_unrecorded"].evidence["share"] == pytest.approx(999_998 / 1_000_190)
    assert "with_stack=True" in found["host_unrecorded"].recommendation


def test_without_launch_links_the_busiest_thread_is_read(tmp_path):
    # No kernel names its launch (no correlation): each gap is read on the thread with the most recorded host work.
    # Thread 2 records 60 us of ops, thread 1 40 us; the sync on thread 2 explains gap [100, 200), the loader on
    # thread 1 explains nothing.
    events = [step(1, 0, 400), step(2, 400, 100),
              kernel("gemm", 10, 90), kernel("gemm", 200, 100),
              cpu("aten::mm", 0, 40, tid=1), cpu(LOADER, 110, 80, cat="user_annotation", tid=1),
              cpu("aten::mm", 300, 60, tid=2), cpu("cudaStreamSynchronize", 120, 50, cat="cuda_runtime", tid=2)]
    assert split(summarize(tmp_path, events)) == [{"sync": 50, "host_unrecorded": 50}]


def test_zero_length_host_work_still_names_its_thread(tmp_path):
    # No launch links and every host op recorded with no duration: the gaps are still read on that thread, where
    # nothing was open (host_unrecorded), not counted as "other" (no host thread known).
    events = [step(1, 0, 100), step(2, 100, 100), kernel("k", 10, 20), kernel("k", 50, 20), kernel("k", 110, 20),
              kernel("k", 150, 20), cpu("cudaLaunchKernel", 40, 0, cat="cuda_runtime"), cpu("aten::mm", 45, 0)]
    assert split(summarize(tmp_path, events)) == [{"host_unrecorded": 20}, {"host_unrecorded": 40},
                                                  {"host_unrecorded": 20}]


def test_nested_calls_the_innermost_wins(tmp_path):
    # Gap [100, 1000). The DataLoader [100, 900) holds aten::to [200, 600), which holds a blocking cudaMemcpy
    # [300, 500), and aten::stack [650, 700). Innermost: sync [300, 500) = 200; the rest of the loader is data
    # (600: the ops inside it are its work); the launch [980, 982) host 2; unrecorded 98.
    events = [step(1, 0, 1100), step(2, 1100, 100),
              launch(1, 1), kernel("gemm", 10, 90, correlation=1),
              cpu(LOADER, 100, 800, cat="user_annotation"), cpu("aten::to", 200, 400),
              cpu("cudaMemcpy", 300, 200, cat="cuda_runtime"), cpu("aten::stack", 650, 50),
              launch(980, 2), kernel("gemm", 1000, 50, correlation=2)]
    s = summarize(tmp_path, events)
    assert split(s) == [{"sync": 200, "data": 600, "host": 2, "host_unrecorded": 98}]


def test_innermost_is_read_from_the_calls_as_recorded_not_cut_to_the_gaps(tmp_path):
    # An all-reduce's first call allocates NCCL's buffers: c10d::allreduce_ [50, 1500) holds cudaMalloc [60, 1400).
    # The only gap, [100, 1000), lies inside both (its next kernel has no launch link: read on the launching thread
    # 1). The innermost call is cudaMalloc: alloc 900. (Cut to the gaps' reach [100, 1000) the two calls are equal
    # spans, and the outer one, listed after, was taken for the inner: comm_wait 900.)
    events = [step(1, 0, 1600), step(2, 1600, 100),
              launch(1, 1), kernel("gemm", 10, 90, correlation=1),
              cpu("c10d::allreduce_", 50, 1450), cpu("cudaMalloc", 60, 1340, cat="cuda_runtime"),
              kernel("gemm", 1000, 50)]
    s = summarize(tmp_path, events)
    assert split(s) == [{"alloc": 900}]


def test_a_launch_call_still_running_when_the_gap_begins_is_host_time(tmp_path):
    # Gap [100, 160): the next kernel's cudaLaunchKernel runs [90, 150): it began before the gap but the host was
    # still launching for 50 us of it (host), then 10 us unrecorded. Gap [200, 335): a cudaGraphLaunch [190, 400)
    # issues k1 [335, 350) and k2 [360, 370): host 135, a graph launch's wait. Gap [350, 360): that call had already
    # started k1 on the device before it: the wait is the device's (other), though the call still runs.
    graph = cpu("cudaGraphLaunch", 190, 210, cat="cuda_runtime", correlation=3)
    events = [step(1, 0, 1000), step(2, 1000, 100),
              launch(1, 1), kernel("gemm", 10, 90, correlation=1),
              launch(90, 2, dur=60), kernel("gemm", 160, 40, correlation=2),
              graph, kernel("k1", 335, 15, correlation=3), kernel("k2", 360, 10, correlation=3)]
    s = summarize(tmp_path, events)
    assert split(s) == [{"host": 50, "host_unrecorded": 10}, {"host": 135}, {"other": 10}]
    assert s.gaps["host_kind"].tolist() == ["kernel launch", "graph launch", ""]


@pytest.mark.parametrize("late_first", [True, False])
def test_work_that_starts_together_is_read_the_same_in_either_order(tmp_path, late_first):
    # Gap [100, 600) ends with two kernels at 600: "a" on stream 8, launched at 50 (before the gap), and "b" on
    # stream 7, launched at 550 (in it). The device waited for the later launch: aten::mm [100, 500) host 400, the
    # launch [550, 552) 2, unrecorded 98, whichever of the two the trace lists first.
    pair = [kernel("b", 600, 100, correlation=3), kernel("a", 600, 100, stream=8, correlation=2)]
    events = [step(1, 0, 1000), step(2, 1000, 100),
              launch(1, 1), kernel("gemm", 10, 90, correlation=1),
              launch(50, 2), cpu("aten::mm", 100, 400), launch(550, 3), *(pair if late_first else pair[::-1])]
    s = summarize(tmp_path, events)
    assert split(s) == [{"host": 402, "host_unrecorded": 98}]


def test_the_thread_that_launches_next_is_the_one_read(tmp_path):
    # Gap [100, 600). Thread 2 launches the next kernel at 590; thread 1 sits in cudaDeviceSynchronize [100, 600)
    # meanwhile, thread 2 in aten::mm [100, 400). Thread 2's story: host 300 + 2, unrecorded 198.
    events = [step(1, 0, 700), step(2, 700, 100),
              launch(1, 1), kernel("gemm", 10, 90, correlation=1),
              cpu("cudaDeviceSynchronize", 100, 500, cat="cuda_runtime"), cpu("aten::mm", 100, 300, tid=2),
              launch(590, 2, tid=2), kernel("gemm", 600, 50, correlation=2)]
    s = summarize(tmp_path, events)
    assert split(s) == [{"host": 302, "host_unrecorded": 198}]


def test_allocator_stalls_are_alloc_with_allocator_advice(tmp_path):
    # Gaps [100, 35100) under cudaMalloc [100, 35000) and [35200, 121200) under cudaMallocAsync [35200, 121100):
    # The span [10, 121300) is 121,290 us, 121,000 of it idle: 34,900 + 85,900 = 120,800 alloc (99.6%), the launches
    # [35050, 35052) and [121150, 121152) host, the rest (296) unrecorded.
    events = [step(1, 0, 130_000), step(2, 130_000, 100),
              launch(1, 1), kernel("gemm", 10, 90, correlation=1),
              cpu("cudaMalloc", 100, 34_900, cat="cuda_runtime"),
              launch(35_050, 2), kernel("gemm", 35_100, 100, correlation=2),
              cpu("cudaMallocAsync", 35_200, 85_900, cat="cuda_runtime"),
              launch(121_150, 3), kernel("gemm", 121_200, 100, correlation=3)]
    s = summarize(tmp_path, events, deviceProperties=A100)
    r = s.ranks.iloc[0]
    assert (r["idle_alloc_us"], r["idle_sync_us"], r["idle_host_us"]) == (120_800, 0, 4)
    assert s.gaps["cause"].tolist() == ["alloc", "alloc"]
    found = {f.kind: f for f in s.findings}
    assert "host_bound" not in found and "sync_in_step" not in found
    f = found["allocator_stall"]
    assert f.severity == "high" and f.evidence["share"] == pytest.approx(120_800 / 121_290)
    assert "expandable_segments" in f.recommendation and "up front" in f.recommendation
    assert "graph" not in f.recommendation.lower() and "batch size" not in f.recommendation


def test_cuda_free_stays_sync(tmp_path):
    events = [step(1, 0, 6000), step(2, 6000, 100),
              launch(1, 1), kernel("gemm", 10, 90, correlation=1),
              cpu("cudaFree", 100, 4800, cat="cuda_runtime"),
              launch(4950, 2), kernel("gemm", 5000, 100, correlation=2)]
    s = summarize(tmp_path, events)
    assert split(s) == [{"sync": 4800, "host": 2, "host_unrecorded": 98}]


def test_cpu_rank_gaps_are_split_on_the_training_thread(tmp_path):
    # The training thread (tid 1) is the device: gaps are where it runs no operator. [100, 150): nothing open on it
    # (the step annotation explains nothing): unrecorded. [250, 300): the DataLoader [240, 320) is open: data.
    # [450, 460): gloo's all_reduce ran [350, 450) on its own thread; nothing on tid 1: unrecorded.
    events = [step(1, 0, 1000), step(2, 1000, 100),
              cpu("aten::mm", 0, 100), cpu("aten::mm", 150, 100),
              cpu(LOADER, 240, 80, cat="user_annotation"), cpu("aten::add", 300, 50),
              cpu("gloo:all_reduce", 350, 100, cat="user_annotation", tid=9,
                  **{"Input Dims": [[10]], "Input type": ["float"]}),
              cpu("aten::mm", 460, 40)]
    s = summarize(tmp_path, events, backend="gloo")
    assert split(s) == [{"host_unrecorded": 50}, {"data": 50}, {"host_unrecorded": 10}]
    r = s.ranks.iloc[0]
    assert (r["idle_host_unrecorded_us"], r["idle_data_us"], r["idle_host_us"]) == (60, 50, 0)


# --- class 5: the exposed-communication advice follows wait vs transfer ----------------------------------------------

def exposed(wait_us: float, transfer_us: float, stragglers=None):
    """Rank 0 spends ``wait_us + transfer_us`` in one all_to_all, exposed, over a 100 ms span; rank 1 arrives
    ``wait_us`` later (last) and spends ``transfer_us``. Only rank 0 is over the 10% bar."""
    dur = wait_us + transfer_us
    coll = pd.DataFrame({"rank": [0, 1], "op": ["all_to_all"] * 2, "dur_us": [dur, transfer_us], "in_window": True,
                         "matched": True, "match_id": [7, 7], "wait_us": [wait_us, 0.0],
                         "transfer_us": [transfer_us, transfer_us], "last_arrival": [False, True]})
    ranks = pd.DataFrame({"rank": [0, 1], "span_us": [100_000.0] * 2, "exposed_comm_us": [dur, transfer_us],
                          "ddp": [False] * 2, "training": [True] * 2})
    return comm_findings.exposed_comm(ranks, coll, stragglers, None)[0]


def test_a_call_that_mostly_waits_points_to_the_late_rank_not_the_transfer():
    # The tensor-parallel case: 48,198 us waiting, 230 us transfer: 99.5% waiting. The all_to_all's transfer share
    # (230 / 48,428 = 0.5%) is under DOMINANT_OP_SHARE: no transfer advice; rank 1 is behind all of the wait.
    f = exposed(48_198.0, 230.0, stragglers=pd.DataFrame({"rank": [1]}))
    assert f.ranks == (0,) and f.severity == "high"
    assert f.evidence["wait_share"] == pytest.approx(48_198 / 48_428)
    assert (f.evidence["late_rank"], f.evidence["late_wait_share"]) == (1, 1.0)
    assert f.recommendation.startswith(">99% of this communication time is waiting")
    assert "Rank 1 arrives last at the calls behind 100% of the wait (a straggler" in f.recommendation
    assert "TrainPipelineSparseDist" not in f.recommendation and "quantized communication" not in f.recommendation
    assert "48.20 ms is waiting for the last rank to arrive and 0.230 ms transfer" in f.message


def test_a_call_that_mostly_transfers_keeps_its_transfer_advice():
    # 1,000 us waiting, 9,000 us transfer: 10% waiting, the transfer advice stands and no late rank is named.
    f = exposed(1_000.0, 9_000.0)
    assert f.evidence["wait_share"] == pytest.approx(0.1) and "late_rank" not in f.evidence
    assert f.recommendation.startswith("all_to_all (embedding tables") and "Rank 1" not in f.recommendation


def test_a_call_that_waits_more_than_half_gets_both_in_proportion():
    # 6,000 us waiting, 4,000 transfer: 60% waiting (over WAIT_SHARE), 40% transfer (over DOMINANT_OP_SHARE):
    # the late rank first, then the all_to_all's transfer advice.
    f = exposed(6_000.0, 4_000.0)
    assert f.recommendation.startswith("60% of this communication time is waiting")
    assert f.recommendation.index("Rank 1 arrives last") < f.recommendation.index("TrainPipelineSparseDist")


SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces" / "hta"


SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.mark.parametrize("run", [SHARED / "alexnet_1gpu", SHARED / "amd_mi250", SHARED / "nccl_a100_2rank",
                                 SHARED / "ns_resolution_1rank", SHARED / "sampled_128rank", SHARED / "cpu_only_gloo",
                                 SAMPLES / "gpt-gloo-2rank-straggler", SAMPLES / "fsdp-gloo-2rank"],
                         ids=lambda p: p.name)
def test_every_gaps_split_adds_up_to_it_and_the_ranks_sums(run, summaries):
    # On real traces (GPU: A100, MI250, 128 sampled ranks; CPU-only gloo ranks, the samples with thousands of gaps):
    # no part negative, each gap's parts add up to its length, its cause is its largest part, and the rank's
    # idle_<cause>_us are the sums of its gaps' parts (idle_us in all).
    if not run.is_dir():
        pytest.skip(f"{run} not here")
    s = summaries(run, cache=False)
    cols = [f"idle_{c}_us" for c in CAUSES]
    parts = s.gaps[cols]
    assert (parts.to_numpy() >= 0).all()
    assert parts.sum(axis=1).to_numpy() == pytest.approx(s.gaps["dur_us"].to_numpy(), abs=1e-6)
    assert (parts.to_numpy().argmax(axis=1) == [CAUSES.index(c) for c in s.gaps["cause"]]).all()
    sums = s.gaps.groupby("rank")[cols].sum()
    ranks = s.ranks.set_index("rank").loc[sums.index]
    assert ranks[cols].to_numpy() == pytest.approx(sums.to_numpy(), rel=1e-9, abs=1e-6)
    assert ranks[cols].sum(axis=1).to_numpy() == pytest.approx(ranks["idle_us"].to_numpy(), rel=1e-9, abs=1e-3)


def test_waiting_all_reduces_end_to_end_point_to_the_late_rank(tmp_path):
    # Three 6000 us steps (the last dropped). Each step: rank 0 computes [0, 100) and enters the all_reduce at 100;
    # rank 1 computes [0, 4900) and enters at 4900; both finish at 5100. Matched: rank 0 waits 4800 us and
    # transfers 200 per call (96% waiting); its exposed comm is 2 x 5000 of an 11,100 us span (90%).
    for rank, (compute_us, enter) in enumerate([(100, 100), (4900, 4900)]):
        events = [step(i + 1, i * 6000, 6000) for i in range(3)]
        for i in range(3):
            base = i * 6000
            events += [kernel("gemm", base, compute_us), kernel(NCCL, base + enter, 5100 - enter, stream=20, **AR)]
        write_trace(tmp_path / f"rank{rank}.json", events, rank=rank)
    s = tracekit.summarize(tmp_path, cache=False)
    f = next(f for f in s.findings if f.kind == "exposed_comm")
    assert f.ranks == (0,)
    assert (f.evidence["comm_wait_us"], f.evidence["comm_transfer_us"]) == pytest.approx((9600.0, 400.0))
    assert f.evidence["late_rank"] == 1 and f.evidence["wait_share"] == pytest.approx(0.96)
    assert "Rank 1 arrives last at the calls behind 100% of the wait" in f.recommendation
    assert "async_op=True" not in f.recommendation and "bucket_cap_mb" not in f.recommendation
