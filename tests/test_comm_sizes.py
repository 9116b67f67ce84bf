"""What is communication, its size and its group (issue 10, items 2-4), on tiny traces shaped like real ones.

Every number is computed by hand in the test: bytes from the shapes and dtypes written in the trace, algbw =
bytes / dur, busbw = algbw x the nccl-tests factor (all_reduce 2(n-1)/n, all_gather / reduce_scatter /
all_to_all (n-1)/n, broadcast / send / recv 1). Times are microseconds. The older traces' ``distributedInfo`` is
``{backend, rank, world_size}`` with no ``pg_config`` (``tracedata.write_trace``): the default group then has
``world_size`` members.
"""

from __future__ import annotations

import math

import pytest

import tracekit
from tracekit.events.hostops import reads_host_op
from tracekit.read.commargs import _first_tensor_nelems
from tracedata import cpu, kernel, launch, write_trace

NCCL_V100 = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "volta_sgemm_128x64_nn"
KERNEL_START, KERNEL_DUR = 1000, 100  # every collective kernel below runs [1000, 1100) unless a test says otherwise


def summarize(tmp_path, events, world_size=8, backend="nccl", **top):
    path = write_trace(tmp_path / "rank0.json", events, rank=0, world_size=world_size, backend=backend, gz=False,
                       **top)
    return tracekit.summarize(path, cache=False)


def dims(*shapes_and_types):
    """``Input Dims``/``Input type`` args from (shape, type) pairs."""
    return {"Input Dims": [s for s, _ in shapes_and_types], "Input type": [t for _, t in shapes_and_types]}


def one(frame):
    assert len(frame) == 1, frame
    return frame.iloc[0]


def check_call(summary, op, nbytes, group, factor):
    """The one call's size: send/recv are P2P pairs (``summary.p2p``, lone here: no peer's trace), the rest collectives."""
    if op in ("send", "recv"):
        assert summary.collectives.empty
        assert one(summary.p2p)["bytes"] == nbytes
    else:
        check(one(summary.collectives), op, nbytes, group, factor)


def bandwidths(nbytes, dur_us, factor):
    algbw = nbytes / (dur_us * 1e-6) / 1e9
    return algbw, algbw * factor


def check(c, op, nbytes, group, factor, dur_us=KERNEL_DUR):
    algbw, busbw = bandwidths(nbytes, dur_us, factor)
    assert (c["op"], c["bytes"], c["group_size"]) == (op, nbytes, group)
    assert c["algbw_gbps"] == pytest.approx(algbw) and c["busbw_gbps"] == pytest.approx(busbw)


# --- item 3: sizes of every op, in each era ---------------------------------------------------------------------
# (op, annotation name, payload Input Dims, hand-computed bytes, busbw factor at world_size 8)
OPS_N8 = [
    ("all_reduce", "nccl:all_reduce", dims(([1000], "float")), 1000 * 4, 2 * 7 / 8),
    ("all_to_all", "nccl:all_to_all", dims(([6144], "float")), 6144 * 4, 7 / 8),            # the real 8-rank case
    ("all_gather", "nccl:_all_gather_base", dims(([1000], "float")), 1000 * 4 * 8, 7 / 8),  # output = input x 8
    ("reduce_scatter", "nccl:_reduce_scatter_base", dims(([8000], "float")), 8000 * 4, 7 / 8),
    ("broadcast", "nccl:broadcast", dims(([1000], "float")), 1000 * 4, 1),
    ("send", "nccl:send", dims(([1000], "c10::Half")), 1000 * 2, 1),
    ("recv", "nccl:recv", dims(([1000], "c10::Half")), 1000 * 2, 1),
]


@pytest.mark.parametrize("op, annotation, shapes, nbytes, factor", OPS_N8)
def test_record_param_comms_era_sizes_every_op(tmp_path, op, annotation, shapes, nbytes, factor):
    # Older NCCL traces: record_param_comms carries only Input Dims (its first input is the payload, then Scalars);
    # the nccl:* annotation names the op and carries nothing; the V100 kernel name says SendRecv for every op.
    rpc = {"Input Dims": shapes["Input Dims"] + [[], [], []],
           "Input type": shapes["Input type"] + ["Scalar", "Scalar", ""]}
    events = [cpu("record_param_comms", 100, 200, **rpc), cpu(annotation, 110, 180, cat="user_annotation"),
              launch(120, 1), kernel(NCCL_V100, KERNEL_START, KERNEL_DUR, stream=20, correlation=1)]
    check_call(summarize(tmp_path, events), op, nbytes, 8, factor)


@pytest.mark.parametrize("op, annotation, shapes, nbytes, factor", OPS_N8)
def test_annotation_only_era_sizes_every_op(tmp_path, op, annotation, shapes, nbytes, factor):
    # nccl:* annotations with Input Dims and nothing else around the launch.
    events = [cpu(annotation, 110, 180, cat="user_annotation", **shapes), launch(120, 1),
              kernel("ncclDevKernel_Generic", KERNEL_START, KERNEL_DUR, stream=20, correlation=1)]
    check_call(summarize(tmp_path, events), op, nbytes, 8, factor)


@pytest.mark.parametrize("coll, n_in, n_out, op, nbytes, factor", [
    ("allreduce", 1000, 1000, "all_reduce", 4000, 2 * 3 / 4),
    ("_allgather_base", 1000, 4000, "all_gather", 16000, 3 / 4),      # S = output
    ("_reduce_scatter_base", 4000, 1000, "reduce_scatter", 16000, 3 / 4),  # S = input
    ("all_to_all", 1000, 1000, "all_to_all", 4000, 3 / 4),
    ("send", 1000, 1000, "send", 4000, 1),
    ("recv", 1000, 1000, "recv", 4000, 1),
])
def test_kernel_args_era_group_of_four(tmp_path, coll, n_in, n_out, op, nbytes, factor):
    args = {"Collective name": coll, "In msg nelems": n_in, "Out msg nelems": n_out, "Group size": 4,
            "dtype": "Float", "Process Group Name": "0"}
    events = [kernel("ncclDevKernel_Generic", KERNEL_START, KERNEL_DUR, stream=20, **args)]
    check_call(summarize(tmp_path, events, world_size=16), op, nbytes, 4, factor)  # Group size wins


@pytest.mark.parametrize("annotation, shapes, op, nbytes, factor", [
    ("gloo:all_reduce", dims(([2, 3], "float"), ([], "Scalar")), "all_reduce", 6 * 4, 2 * 3 / 4),
    ("gloo:all_gather", dims(([250], "float")), "all_gather", 250 * 4 * 4, 3 / 4),
    ("gloo:all_to_all", dims(([6144], "float")), "all_to_all", 6144 * 4, 3 / 4),
    ("gloo:reduce_scatter", dims(([1000], "double")), "reduce_scatter", 1000 * 8, 3 / 4),
    ("gloo:send", dims(([10], "long int")), "send", 10 * 8, 1),
    ("gloo:recv", dims(([10], "long int")), "recv", 10 * 8, 1),
])
def test_gloo_input_dims_era(tmp_path, annotation, shapes, op, nbytes, factor):
    # CPU-only: each gloo:* annotation on gloo's thread is one call; 4 ranks and no pg_config.
    events = [cpu("aten::mm", 0, 2000), cpu(annotation, KERNEL_START, KERNEL_DUR, cat="user_annotation", tid=9, **shapes)]
    check_call(summarize(tmp_path, events, world_size=4, backend="gloo"), op, nbytes, 4, factor)


def test_c10d_base_ops_give_output_and_the_group_from_their_shapes(tmp_path):
    # c10d::_allgather_base_ takes (output, input): 8000 and 1000 elements say the group has 8 members even in a
    # job of 16 ranks; the payload is the output, 8000 x 1 B. The reduce-scatter the other way round: input 8000.
    def call(name, annotation, out_n, in_n, ts, corr):
        return [cpu(name, ts, 300, **dims(([out_n], "signed char"), ([in_n], "signed char"), ([], ""))),
                cpu(annotation, ts + 10, 200, cat="user_annotation"), launch(ts + 20, corr),
                kernel(NCCL_V100, KERNEL_START + ts, KERNEL_DUR, stream=20, correlation=corr)]
    events = (call("c10d::_allgather_base_", "nccl:_all_gather_base", 8000, 1000, 0, 1)
              + call("c10d::_reduce_scatter_base_", "nccl:_reduce_scatter_base", 1000, 8000, 400, 2))
    c = summarize(tmp_path, events, world_size=16).collectives
    check(c.iloc[0], "all_gather", 8000, 8, 7 / 8)
    check(c.iloc[1], "reduce_scatter", 8000, 8, 7 / 8)



def test_each_field_comes_from_the_first_source_that_knows_it(tmp_path):
    # Three calls, each with every source disagreeing. Call 1: the kernel's own args (all_reduce of 1000 floats in
    # a group of 4) beat the record_param_comms and the nccl:* annotation around its launch. Call 2: no args of its
    # own; record_param_comms (all_gather, 100 -> 400 floats, group 4) beats the annotation. Call 3: the
    # annotation's Input Dims (2000 halves) beat the c10d op's (500 doubles), and its name gives the op.
    own = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "Group size": 4,
           "dtype": "Float"}
    rpc = {"Collective name": "allgather", "In msg nelems": 100, "Out msg nelems": 400, "Group size": 4,
           "dtype": "Float"}
    annotation = dims(([2000], "c10::Half"))
    events = [cpu("record_param_comms", 100, 200, **rpc), cpu("nccl:all_reduce", 110, 180, cat="user_annotation",
                                                               **annotation),
              launch(120, 1), kernel("ncclDevKernel_Generic", KERNEL_START, KERNEL_DUR, stream=20, correlation=1, **own),
              cpu("record_param_comms", 2000, 200, **rpc), cpu("nccl:all_reduce", 2010, 180, cat="user_annotation",
                                                                **annotation),
              launch(2020, 2), kernel("ncclDevKernel_Generic", 3000, KERNEL_DUR, stream=20, correlation=2),
              cpu("c10d::allreduce_", 4000, 300, **dims(([500], "double"))),
              cpu("nccl:all_reduce", 4010, 200, cat="user_annotation", **annotation), launch(4020, 3),
              kernel("ncclDevKernel_Generic", 5000, KERNEL_DUR, stream=20, correlation=3)]
    c = summarize(tmp_path, events, world_size=8).collectives
    check(c.iloc[0], "all_reduce", 1000 * 4, 4, 2 * 3 / 4)
    check(c.iloc[1], "all_gather", 400 * 4, 4, 3 / 4)
    check(c.iloc[2], "all_reduce", 2000 * 2, 8, 2 * 7 / 8)
    assert c["dtype"].tolist() == ["Float", "Float", "c10::Half"]

# --- item 4: group size without pg_config -----------------------------------------------------------------------

def test_world_size_is_the_group_of_calls_that_name_none(tmp_path):
    events = [cpu("nccl:all_reduce", 110, 180, cat="user_annotation", **dims(([1000], "float"))), launch(120, 1),
              kernel(NCCL_V100, KERNEL_START, KERNEL_DUR, stream=20, correlation=1)]
    check(one(summarize(tmp_path, events, world_size=8).collectives), "all_reduce", 4000, 8, 2 * 7 / 8)
    check(one(summarize(tmp_path, events, world_size=3).collectives), "all_reduce", 4000, 3, 2 * 2 / 3)
    # No world_size: the group is unknown, and so is busbw; bytes and algbw are still known.
    path = write_trace(tmp_path / "nows.json", events, rank=0, world_size=None, gz=False)
    c = one(tracekit.summarize(path, cache=False).collectives)
    assert math.isnan(c["group_size"]) and math.isnan(c["busbw_gbps"]) and c["bytes"] == 4000


def test_pg_config_of_mixed_sizes_gives_no_default(tmp_path):
    # pg_config lists groups of 8 and 2: a call that names none could be in either, so its group is unknown.
    dist = {"backend": "nccl", "rank": 0, "world_size": 8,
            "pg_config": [{"pg_name": "0", "pg_size": 8}, {"pg_name": "1", "pg_size": 2}]}
    events = [cpu("nccl:all_reduce", 110, 180, cat="user_annotation", **dims(([1000], "float"))), launch(120, 1),
              kernel(NCCL_V100, KERNEL_START, KERNEL_DUR, stream=20, correlation=1)]
    path = write_trace(tmp_path / "rank0.json", events, rank=None, gz=False, distributedInfo=dist)
    assert math.isnan(one(tracekit.summarize(path, cache=False).collectives)["group_size"])


# --- item 2: communication that is not NCCL ---------------------------------------------------------------------

@pytest.mark.parametrize("kernel_name", [
    "multimem_all_reduce_kernel",
    "void c10d::symmetric_memory::opaque_kernel<8>(unsigned long, int)",  # the launching op alone says comm
])
def test_symmetric_memory_all_reduce(tmp_path, kernel_name):
    # symm_mem::multimem_all_reduce_(Tensor input, str reduce_op, str group_name): 1 Mi bf16 elements = 2 MiB.
    # A GEMM launched before it, outside any collective, stays compute.
    events = [launch(10, 5), kernel(GEMM, 200, 300, correlation=5),
              cpu("symm_mem::multimem_all_reduce_", 100, 50, **dims(([1048576], "c10::BFloat16"), ([], ""), ([], ""))),
              launch(110, 1), kernel(kernel_name, KERNEL_START, KERNEL_DUR, stream=20, correlation=1)]
    s = summarize(tmp_path, events)
    check(one(s.collectives), "all_reduce", 2 * 1048576, 8, 2 * 7 / 8)
    r = one(s.ranks)
    assert (r["comm_us"], r["compute_us"], r["allreduce_count"], r["allreduce_bytes"]) == (100, 300, 1, 2 * 1048576)


def test_inference_engine_custom_all_reduce(tmp_path):
    # vLLM: _C_custom_ar::all_reduce(int fa, Tensor inp, Tensor out, int reg_buffer, int reg_buffer_sz_bytes): the
    # handle comes first and is passed over; the payload is inp, 4096 bf16 elements.
    shapes = dims(([], "Scalar"), ([4096], "c10::BFloat16"), ([4096], "c10::BFloat16"), ([], "Scalar"), ([], "Scalar"))
    events = [cpu("_C_custom_ar::all_reduce", 100, 50, **shapes), launch(110, 1),
              kernel("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
                     "vllm::Signal*, __nv_bfloat16*, int, int)", KERNEL_START, KERNEL_DUR, stream=20, correlation=1)]
    check(one(summarize(tmp_path, events, world_size=4).collectives), "all_reduce", 8192, 4, 2 * 3 / 4)


@pytest.mark.parametrize("kernel_name", [
    "void vllm::cross_device_reduce_2stage<half, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, half*, int, int)",
    "one_shot_all_reduce_kernel", "two_shot_all_reduce_kernel", "multimem_all_reduce_kernel",
    "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(AllReduceParams)",
    "void (anonymous namespace)::all_reduce_one_shot_push_kernel<__nv_bfloat16, 4u, true>(AllReducePushData)",  # SGLang
    "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<1, __nv_bfloat16, 8>(Params)",
])
def test_custom_all_reduce_kernel_names_are_comm_without_their_host_op(tmp_path, kernel_name):
    s = summarize(tmp_path, [kernel(GEMM, 0, 400), kernel(kernel_name, KERNEL_START, KERNEL_DUR, stream=20)])
    c = one(s.collectives)
    assert c["op"] == "all_reduce" and math.isnan(c["bytes"]) and math.isnan(c["busbw_gbps"])  # unknown, not 0
    assert (one(s.ranks)["comm_us"], one(s.ranks)["compute_us"]) == (100, 400)


def test_functional_collective(tmp_path):
    # _c10d_functional::all_gather_into_tensor(Tensor input, int group_size, str group_name): 1024 floats in,
    # 4 ranks: S = 1024 x 4 x 4 B. Its kernel's name says nothing.
    events = [cpu("_c10d_functional::all_gather_into_tensor", 100, 50, **dims(([1024], "float"), ([], "Scalar"), ([], ""))),
              launch(110, 1), kernel("generic_kernel_0", KERNEL_START, KERNEL_DUR, stream=20, correlation=1)]
    check(one(summarize(tmp_path, events, world_size=4).collectives), "all_gather", 1024 * 4 * 4, 4, 3 / 4)


def test_functional_all_reduce_clone_is_not_a_collective(tmp_path):
    # _c10d_functional::all_reduce clones its input (a copy kernel) and then all-reduces the clone (NCCL):
    # one collective, and the copy is compute.
    copy = "void at::native::elementwise_kernel<128, 2>(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&))"
    events = [cpu("_c10d_functional::all_reduce", 100, 100, **dims(([1000], "float"), ([], ""), ([], ""))),
              launch(110, 1), kernel(copy, 500, 20, correlation=1),
              launch(150, 2), kernel("ncclDevKernel_Generic", KERNEL_START, KERNEL_DUR, stream=20, correlation=2)]
    s = summarize(tmp_path, events)
    check(one(s.collectives), "all_reduce", 4000, 8, 2 * 7 / 8)
    r = one(s.ranks)
    assert (r["comm_us"], r["compute_us"]) == (100, 20)


@pytest.mark.parametrize("host_op", ["symm_mem::fused_all_gather_matmul", "aten::gather", "fb::fast_gather",
                                     "_c10d_functional::wait_tensor"])
def test_ops_that_are_not_collectives_launch_compute(tmp_path, host_op):
    events = [cpu(host_op, 100, 50, **dims(([1024], "float"))), launch(110, 1), kernel(GEMM, 500, 100, correlation=1)]
    s = summarize(tmp_path, events)
    assert s.collectives.empty
    assert (one(s.ranks)["comm_us"], one(s.ranks)["compute_us"]) == (0, 100)


@pytest.mark.parametrize("name, read", [
    ("symm_mem::multimem_all_reduce_", True), ("_c10d_functional::all_to_all_single", True),
    ("_C_custom_ar::all_reduce", True), ("vllm::all_reduce", True), ("record_param_comms", True),
    ("aten::gather", False), ("symm_mem::fused_all_gather_matmul", False), ("aten::mm", False),
])
def test_gpu_ranks_read_the_ops_that_launch_collectives(name, read):
    assert reads_host_op(name) is read


def test_the_collectives_table_names_only_the_ops_commnames_lists():
    from tracekit.events import collectives
    from tracekit.commnames import OPS

    assert {op for op, _ in collectives._OP_PATTERNS} <= set(OPS)
    assert set(collectives._BUS_FACTOR) <= set(OPS)
    assert {collectives.normalize_op(n) for n in ("nccl:_all_gather_base", "ncclDevKernel_SendRecv", "gloo:barrier",
                                                  "c10d::alltoall_", "quick_reduce", None)} <= set(OPS)


# --- Input Dims forms ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shapes, types, expected", [
    ([[6144]], ["float"], (6144, "float", None)),
    ([[2, 3], []], ["float", "Scalar"], (6, "float", None)),
    ([[]], ["float"], (1, "float", None)),                                      # a 0-dim tensor is one element
    ([[8000], [1000], []], ["signed char", "signed char", ""], (8000, "signed char", 1000)),
    ([[], [4096], [4096]], ["Scalar", "c10::BFloat16", "c10::BFloat16"], (4096, "c10::BFloat16", 4096)),
    ([[], [], []], ["TensorList", "", "Scalar"], (None, None, None)),            # sizes of a list: not recorded
    ([[[1024], [1024]]], ["GenericList"], (None, None, None)),
    ([[1024]], [], (None, None, None)),                                         # no Input type: dtype unknown
    ([], [], (None, None, None)),
])
def test_input_dims_forms(shapes, types, expected):
    assert _first_tensor_nelems(shapes, types) == expected


def test_uneven_all_to_all_still_matches_across_ranks(tmp_path):
    # One all_to_all with split sizes: rank 0 sends 6144 floats, rank 1 4096. Sizes differ by design, so they
    # neither split the match nor count as a mismatch. Rank 0 starts at 1000, rank 1 at 1030; both end at 1100.
    for rank, (nelems, start) in enumerate([(6144, 1000), (4096, 1030)]):
        events = [cpu("nccl:all_to_all", 110, 180, cat="user_annotation", **dims(([nelems], "float"))),
                  launch(120, 1), kernel(NCCL_V100, start, 1100 - start, stream=20, correlation=1)]
        write_trace(tmp_path / f"rank{rank}.json", events, rank=rank, world_size=2, gz=False)
    s = tracekit.summarize(tmp_path, cache=False)
    c = s.collectives.set_index("rank")
    assert c["bytes"].tolist() == [6144 * 4, 4096 * 4]
    assert c["wait_us"].tolist() == [30, 0] and c["transfer_us"].tolist() == [70, 70]
    assert s.mismatches.empty


@pytest.mark.parametrize("kernel_name", [
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>(x)",
    "void cunn_SoftMaxForward<4, float, float, float, Epilogue>(float*, const float*, int)",
    "void layernorm_kernel_blockAllReduceSum<float>(float*, int)",  # a device function's name inside: not a collective
])
def test_reductions_that_are_compute_stay_compute(tmp_path, kernel_name):
    s = summarize(tmp_path, [kernel(kernel_name, 0, 100)])
    assert s.collectives.empty and (one(s.ranks)["comm_us"], one(s.ranks)["compute_us"]) == (0, 100)


def test_all_gather_output_is_the_payload_even_when_its_shapes_give_no_group(tmp_path):
    # An uneven all_gather (args: 1000 in, 2500 out, no Group size) in a job of 8: 2500 / 1000 is no group size,
    # so the group is the default one (8); the payload is the recorded output, 2500 x 4 B, not 1000 x 8 x 4 B.
    args = {"Collective name": "_allgather_base", "In msg nelems": 1000, "Out msg nelems": 2500, "dtype": "Float"}
    events = [kernel("ncclDevKernel_Generic", KERNEL_START, KERNEL_DUR, stream=20, **args)]
    check(one(summarize(tmp_path, events, world_size=8).collectives), "all_gather", 2500 * 4, 8, 7 / 8)


@pytest.mark.parametrize("trace", ["../shared/traces/hta/nccl_a100_2rank/rank-0.json.gz",
                                   "sample_traces/gpt-gloo-2rank/rank-0.pt.trace.json.gz", "tiny"])
def test_a_rank_without_calls_has_the_typed_empty_table_the_full_pass_gives(trace, tmp_path):
    """``collective_table`` skips its passes for a rank with no call: the same columns and types as they give."""
    from pathlib import Path

    from tracekit.events import collectives
    from tracekit.events.classify import classify
    from tracekit.events.steps import find_steps
    from tracekit.read.reader import read_tables
    from frame_equal import assert_frame_equal

    root = Path(__file__).resolve().parents[1]
    if trace == "tiny":  # a GPU rank with a kernel and no collective at all
        events = [cpu("aten::mm", 5, 20), launch(6, 1), kernel("gemm", 10, 30, correlation=1)]
        write_trace(tmp_path / "rank0.json", events)
        path = tmp_path / "rank0.json"
    else:
        path = root / trace
        if not path.exists():
            pytest.skip(f"{trace} is not beside the checkout")
    tables = read_tables(path, default_rank=0, host_ops=reads_host_op)
    events = tables.events.assign(**{c: tables.events[c].astype("category") for c in ("cat", "name", "pid", "tid")})
    steps, _ = find_steps(events, None)
    events = classify(events, tables.comm_args, device_ranks=[] if "gloo" in trace else [0], steps=steps)
    full = collectives.collective_table(events, tables.comm_args, {})
    assert (len(full) == 0) == (trace == "tiny")
    calls = events.iloc[:0]  # no call: the rows the table would have, none of them
    assert_frame_equal(collectives._no_calls(calls), collectives._table(events, tables.comm_args, {}, calls))
    if trace == "tiny":  # the table ``summarize`` gets is that one
        assert_frame_equal(full, collectives._table(events, tables.comm_args, {}, calls))
