"""Expert-parallel all-to-all outside NCCL (DeepEP, pplx-kernels, NVSHMEM) is communication.

Shaped like a DeepSeek-V3 EP64 trace: the GEMMs on one stream, the EP dispatch/combine kernels (templated names, no
collective args, no record_shapes) on their own stream, mostly under the GEMMs. Times in us; every expected number
is worked out in the comments from the events written.
"""

from __future__ import annotations

import math

import pytest

import tracekit
from tracekit import quality
from tracekit.commnames import ep_kernel_op
from tracedata import kernel, launch, step, write_trace

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
DISPATCH = "void dpsk::ep::internode::dispatch<false, 8, 7168, 24, 2>(int4*, float*, long*, float*, int*, int)"
COMBINE = "void deep_ep::internode::combine<__nv_bfloat16, 8, 7168, 4>(int4*, float*, int const*, int)"
NOTIFY = "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int)"
PPLX = "void dispatchKernel<10u, true, false>(int*, unsigned long, std::byte*, unsigned long)"
BARRIER = "void barrier_on_stream_kernel_threadgroup<1>(int, int, int, long*, long*)"
# Near misses: compute kernels whose names hold "dispatch", one even in DeepEP's namespace (a local token count).
MOE_PERMUTE = "moe_dispatch_fused"
LAYOUT = "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int)"


def ep_rank():
    """Steps [0, 1000), [1000, 2000), [2000, 2100) (the last one is out of the window). Stream 7: GEMMs [100, 500),
    [600, 900), [1100, 1500), [1600, 1900) and the near-miss [500, 550); stream 20: the near-miss layout kernel
    [550, 600), then dispatch [150, 450), combine [850, 950), notify_dispatch [1050, 1100), pplx dispatch
    [1150, 1450), NVSHMEM's barrier [1950, 1970). Each kernel is launched in the step it runs in."""
    runs = [(GEMM, 100, 400, 7), (MOE_PERMUTE, 500, 50, 7), (LAYOUT, 550, 50, 20), (GEMM, 600, 300, 7),
            (DISPATCH, 150, 300, 20), (COMBINE, 850, 100, 20),
            (GEMM, 1100, 400, 7), (GEMM, 1600, 300, 7), (NOTIFY, 1050, 50, 20), (PPLX, 1150, 300, 20),
            (BARRIER, 1950, 20, 20), (GEMM, 2020, 30, 7)]
    events = [step(1, 0, 1000), step(2, 1000, 1000), step(3, 2000, 100)]
    for cid, (name, start, dur, stream) in enumerate(runs, 1):
        at = (start // 1000) * 1000 + 10 + cid  # in the kernel's own step, before it runs
        events += [launch(at, cid), kernel(name, start, dur, stream=stream, correlation=cid)]
    return events


def test_ep_kernels_are_communication_overlapped_with_the_gemms(tmp_path):
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json.gz", ep_rank(), world_size=64), cache=False)
    r = s.ranks.iloc[0]
    # Compute K = [100, 900) (GEMMs with both near misses) + [1100, 1500) + [1600, 1900) = 800 + 400 + 300 = 1500.
    # Comm C = dispatch 300 + combine 100 + notify 50 + pplx 300 + barrier 20 = 770.
    # C ∩ K: dispatch 300 (under [100, 500)), combine [850, 900) 50, notify 0 (the GEMM starts at 1100), pplx 300,
    # barrier 0: 650. Exposed 770 - 650 = 120; overlap 650 / 770 = 84.42%.
    # Span [100, 1970) = 1870; busy [100, 950) 850 + [1050, 1500) 450 + [1600, 1900) 300 + 20 = 1620.
    assert (r["compute_us"], r["comm_us"], r["overlap_us"], r["exposed_comm_us"]) == (1500, 770, 650, 120)
    assert r["overlap_pct"] == pytest.approx(650 / 770 * 100)
    assert (r["span_us"], r["busy_us"], r["idle_us"]) == (1870, 1620, 250)


def test_ep_kernels_make_all_to_all_rows_of_unknown_size(tmp_path):
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json.gz", ep_rank(), world_size=64), cache=False)
    calls = s.collectives[s.collectives["in_window"]]
    assert calls["name"].tolist() == [DISPATCH, COMBINE, NOTIFY, PPLX, BARRIER]
    assert calls["op"].astype(str).tolist() == ["all_to_all"] * 4 + ["barrier"]
    a2a = calls[calls["op"] == "all_to_all"]
    assert a2a["dur_us"].tolist() == [300, 100, 50, 300]
    # No args, no record_param_comms, no Input Dims: sizes and bandwidths unknown, not 0; the EP group is not the
    # world (64) the trace's distributedInfo names, and the kernel does not say which it is.
    assert a2a["bytes"].isna().all() and a2a["busbw_gbps"].isna().all() and calls["group_size"].isna().all()
    # The text report says "(no collectives)" no more, and its total MB for all_to_all is unknown.
    assert "(no collectives)" not in str(s) and "all_to_all" in str(s)
    # The near misses are compute kernels, not collectives.
    assert not s.collectives["name"].isin([MOE_PERMUTE, LAYOUT]).any()
    q = s.data_quality.iloc[0]
    assert q["unsized_ep_comm"] == 5
    assert quality.notes(s.data_quality)[0] == (
        "rank 0: 5 expert-parallel all-to-all kernels (DeepEP, pplx-kernels, NVSHMEM) are communication known by "
        "name only: their sizes, bandwidths and group are unknown (NaN)")


def test_the_comm_whatifs_see_the_ep_kernels(tmp_path):
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json.gz", ep_rank(), world_size=64), cache=False)
    # comm_x<k> and perfect_overlap change the transfer time of the graph's comm nodes: every EP kernel is one,
    # the near misses are compute nodes.
    g = s.graph
    names = g["name"].astype(str)
    assert sorted(names[g["cat"] == "comm"]) == sorted([DISPATCH, COMBINE, NOTIFY, PPLX, BARRIER])
    assert set(g.loc[names.isin([MOE_PERMUTE, LAYOUT]), "cat"].astype(str)) == {"compute"}


@pytest.mark.parametrize("name, op", [
    ("deep_ep::intranode::dispatch", "all_to_all"),
    ("void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(int4*, float*)", "all_to_all"),
    ("void deep_ep::internode_ll::dispatch<false, 3, 7168>(void*, float*)", "all_to_all"),
    ("void deep_ep::ep::hybrid_dispatch_impl<true, false, 24>()", "all_to_all"),
    ("void deep_ep::internode::cached_notify<8>(int, int*)", "other"),
    ("void (anonymous namespace)::combineKernel<__nv_bfloat16, 8ul, true, true>(__nv_bfloat16*)", "all_to_all"),
    ("nvshmemi_barrier_all_kernel", "barrier"),
    ("void nvshmemi_alltoall_on_stream_kernel<float>(int, float*)", "all_to_all"),
    ("void rdxn_on_stream_kernel<float, (rdxn_ops)0>(int, float*)", "all_reduce"),
    ("nvshmemi_transfer_rma_signal_entrypoint_blocking", "other"),
    # compute, even with "dispatch"/"combine" or nvshmem in the name
    (LAYOUT, None), (MOE_PERMUTE, None),
    ("void at::native::(anonymous namespace)::dispatch_kernel<float>(float*, long)", None),
    ("void combineKernel<float>(float*, float*, int)", None),  # a local MoE combine: no (DO_SEND, DO_RECV) pair
    ("void my_gemm<float>(nvshmem_team_t, float*)", None),  # nvshmem only in an argument's type
    ("nvshmemi_init_array_kernel", None),
    ("ncclDevKernel_Generic", None),  # NCCL's own rule, not this table's
])
def test_the_table_needs_the_ep_namespace_or_shape(name, op):
    assert ep_kernel_op(name) == op


@pytest.mark.parametrize("name, op", [
    # deep_ep:: then one of its kernel namespaces (intranode, internode*, ep, elastic), then dispatch/combine...
    ("void deep_ep::internode::dispatch<false, 8, 7168>(int4*, float*)", "all_to_all"),
    ("void deep_ep::ep::dispatch_copy_epilogue_impl<true, false>(void*)", "all_to_all"),  # v2: dispatch\w*
    ("void deep_ep::elastic::hybrid_combine_impl<8, 7168>(void*)", "all_to_all"),
    ("void deep_ep::internode_ll_two_stage::dispatch<3>(void*)", "all_to_all"),  # a fork's internode variant
    ("void paddle::deep_ep::internode_ll::combine<8>(void*)", "all_to_all"),  # deep_ep inside a framework's namespace
    ("void deep_ep::intranode::barrier<8>(int**, int)", "barrier"),
    # ... or a fork that renames deep_ep to ep, at the top or one level down
    ("void dpsk::ep::intranode::combine<__nv_bfloat16, 8>(int4*)", "all_to_all"),
    ("void ep::internode::notify_dispatch<8>(int const*)", "all_to_all"),
    # an ep segment deeper than one level below the top: not DeepEP's shape
    ("void at::native::ep::internode::dispatch<float>(float*)", None),
    ("void at::native::ep::intranode::combine<float>(float*)", None),
    # an ep namespace without a node namespace, deep_ep without a kernel namespace, or a look-alike of deep_ep
    ("void at::native::ep::foo<int>(int)", None), ("void my::ep::dispatch<int>(int*)", None),
    ("void deep_ep::dispatch<8>(int4*)", None), ("void deep_ep::layout::dispatch_layout<256>(long const*)", None),
    ("void deep_ep_utils::intranode::dispatch<8>(int4*)", None), ("void mydeep_ep::internode::combine<8>(int4*)", None),
    # words ending in "ep", with or without dispatch/combine in them
    ("sleep", None), ("step", None), ("keep", None), ("void sleep_kernel<int>(int)", None),
    ("void keep_dispatch_kernel<int>(int)", None), ("void step::combine<int>(int)", None),
])
def test_deepep_needs_its_namespace_and_a_node_namespace(name, op):
    """Each name worked out from ``_DEEP_EP``: ``(ns::)*deep_ep::{intranode,internode*,ep,elastic}::`` or
    ``(ns::)?ep::{intra,inter}node*::``, then the kernel's word."""
    assert ep_kernel_op(name) == op


def test_nvshmem_all_to_all_is_measured_with_nan_bytes(tmp_path):
    # One NVSHMEM all-to-all [100, 200) beside a GEMM [0, 150) in one step: comm 100, overlap 50 (50%).
    events = [step(1, 0, 1000), launch(1, 1), kernel(GEMM, 0, 150, correlation=1),
              launch(2, 2), kernel("void nvshmemi_alltoall_on_stream_kernel<float>(int, float*)", 100, 100,
                                   stream=20, correlation=2)]
    s = tracekit.summarize(write_trace(tmp_path / "rank0.json.gz", events), cache=False)
    r = s.ranks.iloc[0]
    assert (r["comm_us"], r["overlap_us"], r["overlap_pct"]) == (100, 50, 50)
    row = s.collectives.iloc[0]
    assert row["op"] == "all_to_all" and math.isnan(row["bytes"])


def _ep_group_rank(dispatch_at):
    """Steps of 10 ms from 0 on every rank (one clock: the ranks' steps truly start together); a GEMM at [60, 8060)
    of each step and a DeepEP dispatch of 50 us at ``dispatch_at`` into it."""
    events = []
    for k in range(5):
        t, cid = 10_000 * k, 100 + 10 * k
        events += [step(k + 1, t, 10_000), launch(t + 50, cid), kernel(GEMM, t + 60, 8_000, correlation=cid),
                   launch(t + dispatch_at - 40, cid + 1),
                   kernel(COMBINE, t + dispatch_at, 50, stream=20, correlation=cid + 1)]
    return events


def test_ep_kernels_of_different_groups_are_not_matched_across_ranks(tmp_path):
    # EP groups {0, 1} and {2, 3} dispatch 3 ms apart in each step (other MoE layers). The kernels name no group, so
    # matching them across the world would read the 3 ms as rank 2's and 3's clocks running late and "correct" them.
    # They are matched with nothing: no clock evidence (no samples, no correction), no waits, steps where they were.
    for rank, at in ((0, 100), (1, 100), (2, 3_100), (3, 3_100)):
        write_trace(tmp_path / f"rank{rank}.json.gz", _ep_group_rank(at), rank=rank, world_size=4)
    s = tracekit.summarize(tmp_path, cache=False, workers=1)
    offsets = s.run.clock_offsets.set_index("rank")
    assert not offsets["corrected"].any() and (offsets.loc[[1, 2, 3], "samples"] == 0).all()
    assert (s.steps.groupby("step")["start_us"].nunique() == 1).all()  # every rank's step starts together
    assert s.collectives["wait_us"].isna().all()  # matched with nothing: no wait is known
