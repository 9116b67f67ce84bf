"""Every row of FORMATS.md's "Format variations" table, each as a tiny inline trace with a hand-computed answer.

Times in the comments are microseconds. Unless a test says otherwise a trace has no ProfilerStep, so the
metrics cover the whole trace.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

import tracekit
from tracekit.events.classify import classify
from tracekit.read.files import find_trace_files
from tracekit.read.reader import read_rank
from tracedata import cpu, kernel, launch, memcpy, step

NCCL_AR = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"


def write(path: Path, events, *, rank=0, dist=None, gz=False, compact=False, array=False, schema=True, **top) -> Path:
    """One trace file. ``dist`` replaces ``distributedInfo`` (``rank=None`` and no ``dist``: none at all);
    ``array`` writes the bare event list; ``top`` adds top-level keys such as ``baseTimeNanoseconds``."""
    if array:
        doc = events
    else:
        doc = {"schemaVersion": 1} if schema else {}
        if dist is not None or rank is not None:
            doc["distributedInfo"] = dist if dist is not None else {"rank": rank}
        doc.update(traceEvents=events, **top)
    text = json.dumps(doc, separators=(",", ":") if compact else None).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def comm_args(coll="allreduce", n_in=1024, n_out=None, dtype="Float", group=2, pg="0", **extra):
    """record_param_comms args as PyTorch 2.2+ writes them (era c); ``None`` leaves a field out."""
    args = {"Collective name": coll, "In msg nelems": n_in, "Out msg nelems": n_in if n_out is None else n_out,
            "Group size": group, "dtype": dtype, "In split size": "[]", "Out split size": "[]",
            "Process Group Name": pg, "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1]",
            **extra}
    return {k: v for k, v in args.items() if v is not None}


def nested_allreduce(rpc_args, *, corr=42, kernel_name="ncclDevKernel_Generic", annotation="nccl:all_reduce"):
    """c10d::allreduce_ [100, 300) > record_param_comms [110, 290) > nccl:* [120, 280) > cudaLaunchKernel at 130;
    the kernel it launches runs [500, 600) on stream 20 with no args of its own."""
    return [
        cpu("c10d::allreduce_", 100, 200),
        cpu("record_param_comms", 110, 180, **rpc_args),
        cpu(annotation, 120, 160, cat="user_annotation"),
        launch(130, corr),
        kernel(kernel_name, 500, 100, stream=20, correlation=corr),
    ]


def one(frame):
    assert len(frame) == 1, frame
    return frame.iloc[0]


def kinds(path) -> dict[str, str]:
    _, events, comm_args = read_rank(path, default_rank=0)
    events = classify(events, comm_args)
    dev = events[events["kind"].notna()]
    return dict(zip(dev["name"].astype(str), dev["kind"].astype(str)))


# --- the file: .json or .json.gz, object or bare array, schemaVersion --------------------------------------------

@pytest.mark.parametrize("name, gz", [
    ("rank0.json", False),
    ("rank0.json.gz", True),
    ("rank0.json", True),       # gzip content under a .json name: detected by the magic bytes
    ("rank0.json.gz", False),   # plain JSON under a .gz name
])
def test_plain_or_gzip_detected_by_content(tmp_path, name, gz):
    path = write(tmp_path / name, [kernel(GEMM, 10, 90)], gz=gz)
    r = one(tracekit.summarize(path).ranks)
    assert (r["rank"], r["span_us"], r["compute_us"]) == (0, 90, 90)


def test_bare_json_array_takes_rank_from_file_name(tmp_path):
    path = write(tmp_path / "rank2.json", [kernel(GEMM, 10, 90), kernel(NCCL_AR, 100, 50)], array=True)
    r = one(tracekit.summarize(path).ranks)
    assert (r["rank"], r["compute_us"], r["comm_us"], r["span_us"]) == (2, 90, 50, 140)


@pytest.mark.parametrize("schema", [True, False])
def test_schema_version_present_or_absent(tmp_path, schema):
    path = write(tmp_path / "rank0.json", [kernel(GEMM, 0, 40)], schema=schema)
    assert one(tracekit.summarize(path).ranks)["compute_us"] == 40


# --- timestamps ------------------------------------------------------------------------------------------------

def test_int_microseconds(tmp_path):
    path = write(tmp_path / "rank0.json", [kernel(GEMM, 1000, 250)])
    e = one(read_rank(path, default_rank=0)[1])
    assert (e["ts_ns"], e["dur_ns"]) == (1_000_000, 250_000)


def test_float_microseconds_keep_every_nanosecond(tmp_path):
    # Real magnitude (nccl_a100_2rank): 4.4e12 us with 3 decimals still resolves single nanoseconds.
    path = write(tmp_path / "rank0.json", [kernel(GEMM, 4458676524595.135, 0.001), kernel(GEMM, 4458676524595.137, 2.999)])
    e = read_rank(path, default_rank=0)[1].sort_values("ts_ns")
    assert e["ts_ns"].tolist() == [4458676524595135, 4458676524595137]
    assert e["dur_ns"].tolist() == [1, 2999]


def test_nanosecond_arithmetic_survives_into_the_summary(tmp_path):
    # [1000.001, 1000.003) and [1000.004, 1000.010): span 9 ns, busy 8 ns, one 1 ns gap.
    path = write(tmp_path / "rank0.json", [kernel(GEMM, 1000.001, 0.002), kernel(GEMM, 1000.004, 0.006)])
    s = tracekit.summarize(path)
    r = one(s.ranks)
    assert r["span_us"] == pytest.approx(0.009, abs=1e-12)
    assert r["busy_us"] == pytest.approx(0.008, abs=1e-12)
    assert r["idle_us"] == pytest.approx(0.001, abs=1e-12)
    assert one(s.gaps)["dur_us"] == pytest.approx(0.001, abs=1e-12)


def test_mixed_int_ts_and_float_dur(tmp_path):
    path = write(tmp_path / "rank0.json", [kernel(GEMM, 1000, 2.5), kernel(GEMM, 1003, 0.125)])
    e = read_rank(path, default_rank=0)[1].sort_values("ts_ns")
    assert e["ts_ns"].tolist() == [1_000_000, 1_003_000]
    assert e["dur_ns"].tolist() == [2_500, 125]
    assert one(tracekit.summarize(path).ranks)["busy_us"] == pytest.approx(2.625)


def test_relative_and_absolute_clocks_line_up(tmp_path):
    # Rank 0 (newer): ts relative to baseTimeNanoseconds. Rank 1 (older): absolute epoch us.
    # Rank 2: relative to a base one second earlier. All three kernels start at the same instant.
    base_ns = 1_700_000_000_000_000_000
    ar = comm_args()
    write(tmp_path / "rank0.json", [kernel(NCCL_AR, 500, 100, **ar)], rank=0, baseTimeNanoseconds=base_ns)
    write(tmp_path / "rank1.json", [kernel(NCCL_AR, base_ns // 1000 + 500, 100, **ar)], rank=1)
    write(tmp_path / "rank2.json", [kernel(NCCL_AR, 1_000_500, 100, **ar)], rank=2,
          baseTimeNanoseconds=base_ns - 1_000_000_000)
    starts = [read_rank(f)[1]["ts_ns"].tolist() for f in find_trace_files(tmp_path)]
    assert starts == [[base_ns + 500_000]] * 3
    c = tracekit.summarize(tmp_path).collectives
    assert c["rank"].tolist() == [0, 1, 2]
    assert c["start_us"].tolist() == [0.0, 0.0, 0.0]


# --- unusable durations ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("absurd", [
    1e15,
    7.5e15,
    18446744073709551,  # above ~9.2e15 us: would overflow int64 ns
])
def test_unfinished_zero_length_and_absurd_durations(tmp_path, absurd):
    # Kernels [0, 100) and [200, 300); a zero-length kernel at 150; an unfinished CPU op (dur -1);
    # a kernel at 350 with an absurd duration (an overflowed end time, pytorch#124080). Only the first
    # two count: span 300, idle 100, one gap.
    events = [
        kernel(GEMM, 0, 100), kernel(GEMM, 200, 100), kernel("zero_len_kernel", 150, 0),
        cpu("aten::to", 50, -1), kernel("broken_kernel", 350, absurd),
    ]
    s = tracekit.summarize(write(tmp_path / "rank0.json", events))
    r = one(s.ranks)
    assert (r["span_us"], r["busy_us"], r["compute_us"], r["idle_us"]) == (300, 200, 200, 100)
    assert s.gaps["dur_us"].tolist() == [100]
    assert s.run.files[0].dropped_events == 2


# --- old names and flows ---------------------------------------------------------------------------------------

def _old_trace():
    """A 2021-style trace: categories Operator/Runtime/Kernel/Memcpy/Memset/async_gpu, lowercase 'external id',
    flows of cat async_cpu_to_gpu and fwdbwd. Step 1 is [0, 100); the gemm is launched at 20 but runs [150, 250)."""
    x = lambda cat, name, ts, dur, pid=100, tid=1, **args: {  # noqa: E731
        "ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
    flow = lambda ph, cat, fid, ts, pid, tid: {  # noqa: E731
        "ph": ph, "cat": cat, "name": cat, "id": fid, "pid": pid, "tid": tid, "ts": ts, **({"bp": "e"} if ph == "f" else {})}
    return [
        x("Operator", "ProfilerStep#1", 0, 100), x("Operator", "ProfilerStep#2", 100, 400),
        x("Operator", "aten::mm", 10, 50, **{"external id": 5}),
        x("Runtime", "cudaLaunchKernel", 20, 10, **{"external id": 5, "correlation": 9}),
        x("Kernel", "volta_sgemm_128x64_nn", 150, 100, pid=0, tid=7, **{"external id": 5, "correlation": 9, "stream": 7}),
        x("Memcpy", "Memcpy HtoD (Pageable -> Device)", 260, 10, pid=0, tid=7, stream=7),
        x("Memset", "Memset (Device)", 280, 5, pid=0, tid=7, stream=7),
        x("Kernel", "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 300, 100, pid=0, tid=20, stream=20),
        x("async_gpu", "nccl:all_reduce", 300, 100, pid=0, tid=20),
        flow("s", "async_cpu_to_gpu", 9, 20, 100, 1), flow("f", "async_cpu_to_gpu", 9, 150, 0, 7),
        flow("s", "fwdbwd", 1, 10, 100, 1), flow("f", "fwdbwd", 1, 60, 100, 2),
    ]


def test_old_category_names_are_normalised(tmp_path):
    _, events, _ = read_rank(write(tmp_path / "rank0.json", _old_trace()), default_rank=0)
    assert len(events) == 9  # the four flow events are not events
    cats = dict(zip(events["name"].astype(str), events["cat"].astype(str)))
    assert cats["aten::mm"] == "cpu_op"
    assert cats["cudaLaunchKernel"] == "cuda_runtime"
    assert cats["volta_sgemm_128x64_nn"] == "kernel"
    assert cats["Memcpy HtoD (Pageable -> Device)"] == "gpu_memcpy"
    assert cats["Memset (Device)"] == "gpu_memset"
    assert cats["nccl:all_reduce"] == "gpu_user_annotation"


def test_old_lowercase_external_id_and_launch_link(tmp_path):
    _, events, comm_args = read_rank(write(tmp_path / "rank0.json", _old_trace()), default_rank=0)
    events = classify(events, comm_args)
    gemm = one(events[events["name"] == "volta_sgemm_128x64_nn"])
    assert (gemm["external_id"], gemm["correlation"], gemm["kind"]) == (5, 9, "compute")
    assert gemm["step"] == 1  # by its launch at 20, not by its start at 150
    assert one(events[events["name"] == "aten::mm"])["external_id"] == 5


def test_old_trace_summary_ignores_flows(tmp_path):
    # Whole trace: gemm [150, 250), memcpy [260, 270), memset [280, 285), nccl [300, 400).
    s = tracekit.summarize(write(tmp_path / "rank0.json", _old_trace()), window="trace")
    r = one(s.ranks)
    assert (r["span_us"], r["compute_us"], r["memory_us"], r["comm_us"], r["idle_us"]) == (250, 100, 15, 100, 35)
    assert one(s.collectives)["op"] == "all_reduce"


# --- distributedInfo and the rank ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["rank3.json", "rank-3.Jul_15_10_52_41.1074.pt.trace.json", "worker3.json.gz",
                                  "host12_rank_3.json"])
def test_rank_from_file_name_without_distributed_info(tmp_path, name):
    path = write(tmp_path / name, [kernel(GEMM, 0, 10)], rank=None)
    assert one(tracekit.summarize(path).ranks)["rank"] == 3


def test_ranks_from_file_names_in_a_folder(tmp_path):
    write(tmp_path / "trainer-rank-3.json", [kernel(GEMM, 0, 10)], rank=None)
    write(tmp_path / "worker5.json", [kernel(GEMM, 0, 20)], rank=None)
    r = tracekit.summarize(tmp_path).ranks
    assert r["rank"].tolist() == [3, 5]
    assert r["compute_us"].tolist() == [10, 20]


def test_distributed_info_rank_wins_over_file_name(tmp_path):
    path = write(tmp_path / "rank-5.json", [kernel(GEMM, 0, 10)], dist={"rank": 2})
    assert read_rank(path, default_rank=0)[0].rank == 2


def test_no_rank_anywhere_in_a_folder_is_an_error(tmp_path):
    write(tmp_path / "a.json", [kernel(GEMM, 0, 10)], rank=None)
    write(tmp_path / "b.json", [kernel(GEMM, 0, 10)], rank=None)
    files = find_trace_files(tmp_path)
    assert len(files) == 2
    with pytest.raises(tracekit.RankUnknownError):
        for file in files:
            read_rank(file)  # a folder's files have no default rank


def test_distributed_info_rank_only(tmp_path):
    s = tracekit.summarize(write(tmp_path / "trace.json", [kernel(NCCL_AR, 0, 10, **comm_args(group=None))],
                                 dist={"rank": 0}))
    assert s.run.backend is None and s.run.world_size is None
    assert math.isnan(one(s.collectives)["group_size"])  # no Group size, no pg_config: unknown


def test_distributed_info_full(tmp_path):
    dist = {"backend": "nccl", "rank": 1, "world_size": 2, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 2,
                           "ranks": [0, 1]}],
            "nccl_version": "2.17.1"}
    gpu = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85031714816, "computeMajor": 8}]
    path = write(tmp_path / "trace.json", [kernel(NCCL_AR, 0, 10, **comm_args(group=None))], dist=dist,
                 deviceProperties=gpu)
    s = tracekit.summarize(path)
    assert (s.run.backend, s.run.world_size, s.run.nccl_version) == ("nccl", 2, "2.17.1")
    r = one(s.ranks)
    assert (r["rank"], r["device"]) == (1, "NVIDIA A100-SXM4-80GB")
    c = one(s.collectives)
    assert (c["pg"], c["group_size"], c["bytes"]) == ("0", 2, 4096)  # group size from pg_config


def test_compact_json(tmp_path):
    path = write(tmp_path / "trace.json", [kernel(GEMM, 0, 10)], dist={"rank": 7, "backend": "nccl"}, compact=True)
    assert b'"rank":7' in path.read_bytes()
    assert one(tracekit.summarize(path).ranks)["rank"] == 7


@pytest.mark.parametrize("names, dists", [
    (("a.json", "b.json"), ({"rank": 0}, {"rank": 0})),
    (("rank3.json", "worker3.json"), (None, None)),
    (("rank-1.json", "rank-2.json"), ({"rank": 1}, {"rank": 1})),
])
def test_two_files_with_the_same_rank_is_an_error(tmp_path, names, dists):
    for name, dist in zip(names, dists):
        write(tmp_path / name, [kernel(GEMM, 0, 10)], rank=None, dist=dist)
    with pytest.raises(tracekit.DuplicateRankError):
        tracekit.summarize(tmp_path)


# --- record_param_comms by era ---------------------------------------------------------------------------------

def test_era_a_input_dims_only(tmp_path):
    rpc = {"Input Dims": [[1024]], "Input type": ["float"]}
    events = nested_allreduce(rpc, kernel_name="ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)")
    c = one(tracekit.summarize(write(tmp_path / "rank0.json", events)).collectives)
    assert (c["op"], c["bytes"], c["dtype"]) == ("all_reduce", 4096, "float")
    assert c["pg"] is None and math.isnan(c["group_size"]) and math.isnan(c["seq"])


def test_era_a_without_annotation_keeps_the_op_of_the_kernel_name(tmp_path):
    rpc = {"Input Dims": [[1024]], "Input type": ["float"]}
    events = nested_allreduce(rpc, kernel_name="ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)")
    events = [e for e in events if e["name"] != "nccl:all_reduce"]
    c = one(tracekit.summarize(write(tmp_path / "rank0.json", events)).collectives)
    assert (c["op"], c["bytes"]) == ("all_reduce", 4096)


def test_era_b_collective_name_and_process_group_id(tmp_path):
    rpc = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1024, "Out msg nelems": 1024,
           "Group size": 2, "Process Group Ranks": "[0, 1]", "Process Group ID": 3}
    c = one(tracekit.summarize(write(tmp_path / "rank0.json", nested_allreduce(rpc))).collectives)
    assert (c["op"], c["bytes"], c["dtype"], c["group_size"], c["pg"]) == ("all_reduce", 4096, "Float", 2, "3")


def test_era_c_process_group_name_and_split_sizes(tmp_path):
    rpc = comm_args("_allgather_base", n_in=1024, n_out=2048, dtype="BFloat16", pg="1")
    events = nested_allreduce(rpc, annotation="nccl:_all_gather_base")
    c = one(tracekit.summarize(write(tmp_path / "rank0.json", events)).collectives)
    assert (c["op"], c["bytes"], c["dtype"], c["group_size"], c["pg"]) == ("all_gather", 2048 * 2, "BFloat16", 2, "1")
    assert math.isnan(c["seq"])


def test_era_d_seq_and_comms_id(tmp_path):
    rpc = comm_args(**{"Seq": 7, "Comms Id": 18446744073709551615, "Is asynchronized op": False, "Rank": 0})
    c = one(tracekit.summarize(write(tmp_path / "rank0.json", nested_allreduce(rpc))).collectives)
    assert (c["op"], c["bytes"], c["pg"], c["seq"], c["group_size"]) == ("all_reduce", 4096, "0", 7, 2)


def test_wait_pseudo_entries_make_no_collective(tmp_path):
    wait = {"Collective name": "wait", "dtype": "Byte", "In msg nelems": 0, "Out msg nelems": 0, "Group size": 1,
            "Process Group Ranks": "[]", "In split size": "[]", "Out split size": "[]"}
    events = nested_allreduce(comm_args()) + [
        cpu("record_param_comms", 700, 40, **wait),
        cpu("cudaStreamWaitEvent", 710, 5, cat="cuda_runtime", correlation=43),
    ]
    s = tracekit.summarize(write(tmp_path / "rank0.json", events))
    c = one(s.collectives)
    assert (c["op"], c["bytes"]) == ("all_reduce", 4096)
    assert one(s.ranks)["allreduce_count"] == 1


def test_nesting_links_kernel_to_its_launch_by_correlation(tmp_path):
    # The kernel has no args; its size comes from the record_param_comms around the launch with the same
    # correlation. A GPU-side copy of the annotation and a compute kernel launched outside it change nothing.
    events = nested_allreduce(comm_args(), corr=42) + [
        cpu("nccl:all_reduce", 495, 110, cat="gpu_user_annotation", tid=20),
        launch(350, 43), kernel(GEMM, 400, 50, correlation=43),
    ]
    path = write(tmp_path / "rank0.json", events)
    assert kinds(path) == {"ncclDevKernel_Generic": "comm", GEMM: "compute"}
    s = tracekit.summarize(path)
    c = one(s.collectives)
    assert (c["op"], c["bytes"], c["pg"], c["group_size"], c["dtype"]) == ("all_reduce", 4096, "0", 2, "Float")
    assert (c["start_us"], c["dur_us"]) == (400, 100)  # origin is the first event, c10d::allreduce_ at 100
    r = one(s.ranks)
    assert (r["compute_us"], r["comm_us"], r["overlap_us"], r["idle_us"]) == (50, 100, 0, 50)


@pytest.mark.parametrize("with_cpu_side", [False, True])
def test_comm_metadata_on_the_kernel_args(tmp_path, with_cpu_side):
    # Newer traces copy the metadata onto the kernel: no CPU events are needed, and with them it is still one call.
    args = comm_args(n_in=2049000)
    events = [kernel(NCCL_AR, 500, 100, stream=20, correlation=42, **args)]
    if with_cpu_side:
        events = nested_allreduce(args, corr=42)[:-1] + events
    c = one(tracekit.summarize(write(tmp_path / "rank0.json", events)).collectives)
    assert (c["op"], c["bytes"], c["pg"], c["group_size"], c["dtype"]) == ("all_reduce", 2049000 * 4, "0", 2, "Float")


def test_process_group_ranks_and_split_sizes_as_string_or_list(tmp_path):
    as_text = comm_args(**{"Process Group Ranks": "[0, 1]", "In split size": "[]", "Out split size": "[]"})
    as_list = comm_args(**{"Process Group Ranks": [0, 1], "In split size": [], "Out split size": []})
    write(tmp_path / "rank0.json", [kernel(NCCL_AR, 0, 100, **as_text)], rank=0)
    write(tmp_path / "rank1.json", [kernel(NCCL_AR, 0, 100, **as_list)], rank=1)
    c = tracekit.summarize(tmp_path).collectives
    assert c["rank"].tolist() == [0, 1]
    assert c["bytes"].tolist() == [4096, 4096]
    assert c["group_size"].tolist() == [2, 2]


# --- kernel classification -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    "ncclDevKernel_Generic",
    "ncclKernelAllGatherCtranDirect(int*, CtranAlgoDeviceState*, CtranKernelAllGatherArgs)",
    "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",                # RCCL (ROCm)
    "_Z23ncclDevKernel_Generic_424ncclDevKernelArgsStorageILm4096EE",          # RCCL, mangled
])
def test_nccl_kernel_names_are_comm(tmp_path, name):
    path = write(tmp_path / "rank0.json", [kernel(name, 100, 30), kernel(GEMM, 0, 50)])
    assert kinds(path) == {name: "comm", GEMM: "compute"}
    r = one(tracekit.summarize(path).ranks)
    assert (r["comm_us"], r["compute_us"], r["idle_us"]) == (30, 50, 50)


def test_kernel_launched_inside_a_comm_annotation_is_comm(tmp_path):
    # ROCm/RCCL kernels can have names that say nothing; the nccl:* annotation around the launch does.
    events = [
        cpu("nccl:all_reduce", 100, 50, cat="user_annotation"), launch(110, 1), kernel("generic_copy_kernel", 200, 40, correlation=1),
        launch(10, 2), kernel(GEMM, 20, 60, correlation=2),
    ]
    assert kinds(write(tmp_path / "rank0.json", events)) == {"generic_copy_kernel": "comm", GEMM: "compute"}


@pytest.mark.parametrize("cat, name", [
    ("gpu_memcpy", "Memcpy DtoD (Device -> Device)"),
    ("gpu_memset", "Memset (Device)"),
    ("Memcpy", "Memcpy HtoD (Pageable -> Device)"),  # old category names
    ("Memset", "Memset (Device)"),
])
def test_memcpy_and_memset_are_memory(tmp_path, cat, name):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": 0, "dur": 25, "args": {"stream": 7}}
    path = write(tmp_path / "rank0.json", [ev])
    assert kinds(path) == {name: "memory"}
    r = one(tracekit.summarize(path).ranks)
    assert (r["memory_us"], r["compute_us"], r["comm_us"]) == (25, 0, 0)


def test_breakdown_of_compute_comm_and_memory(tmp_path):
    # compute [0, 100), comm [50, 200) on another stream, memcpy [250, 300).
    events = [kernel(GEMM, 0, 100), kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 50, 150, stream=20),
              memcpy(250, 50)]
    r = one(tracekit.summarize(write(tmp_path / "rank0.json", events)).ranks)
    assert (r["span_us"], r["busy_us"], r["idle_us"]) == (300, 250, 50)
    assert (r["compute_us"], r["comm_us"], r["overlap_us"], r["exposed_comm_us"], r["memory_us"]) == (100, 150, 50, 100, 50)
    assert r["overlap_pct"] == pytest.approx(100 / 3)


# --- CPU comm annotations --------------------------------------------------------------------------------------

@pytest.mark.parametrize("annotation, op", [
    ("nccl:all_reduce", "all_reduce"),
    ("nccl:_all_gather_base", "all_gather"),
    ("nccl:_reduce_scatter_base", "reduce_scatter"),
    ("nccl:all_to_all", "all_to_all"),
    ("nccl:broadcast", "broadcast"),
])
def test_cpu_comm_annotation_gives_the_op(tmp_path, annotation, op):
    # A bare ncclDevKernel_Generic says nothing; the annotation around its launch names the op.
    events = [cpu(annotation, 100, 50, cat="user_annotation"), launch(110, 1),
              kernel("ncclDevKernel_Generic", 200, 40, correlation=1)]
    c = one(tracekit.summarize(write(tmp_path / "rank0.json", events)).collectives)
    assert (c["op"], c["dur_us"]) == (op, 40)
    assert math.isnan(c["bytes"])  # no sizes anywhere: unknown, not 0


# --- gloo (CPU) ------------------------------------------------------------------------------------------------

def _gloo_trace(tmp_path, **gloo_args):
    # Training thread 1: step 1 [0, 1000), aten::mm [100, 400). gloo thread 2: all_reduce [300, 700).
    dist = {"backend": "gloo", "rank": 0, "world_size": 2,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo,cuda:gloo",
                           "pg_size": 2, "ranks": [0, 1]}]}
    events = [step(1, 0, 1000), cpu("aten::mm", 100, 300),
              cpu("gloo:all_reduce", 300, 400, cat="user_annotation", tid=2, **gloo_args)]
    return write(tmp_path / "rank-0.json", events, dist=dist, deviceProperties=[])


def test_gloo_all_reduce_sized_from_input_dims(tmp_path):
    s = tracekit.summarize(_gloo_trace(tmp_path, **{"Input Dims": [[1000]], "Input type": ["float"]}))
    r = one(s.ranks)
    assert r["device"] == "cpu"
    assert (r["span_us"], r["compute_us"], r["comm_us"], r["overlap_us"], r["idle_us"]) == (600, 300, 400, 100, 0)
    assert (r["allreduce_count"], r["allreduce_bytes"]) == (1, 4000)
    c = one(s.collectives)
    assert (c["op"], c["bytes"], c["dtype"], c["group_size"]) == ("all_reduce", 4000, "float", 2)
    assert c["algbw_gbps"] == pytest.approx(4000 / 400e-6 / 1e9)
    st = one(s.steps)
    assert (st["step_us"], st["compute_us"], st["overlap_us"], st["exposed_comm_us"], st["other_us"]) == (
        1000, 200, 100, 300, 400)


def test_gloo_without_input_dims_has_unknown_bytes(tmp_path):
    s = tracekit.summarize(_gloo_trace(tmp_path))
    c = one(s.collectives)
    assert c["op"] == "all_reduce" and math.isnan(c["bytes"]) and math.isnan(c["algbw_gbps"])
    r = one(s.ranks)
    assert r["allreduce_count"] == 1 and math.isnan(r["allreduce_bytes"])


# --- no GPU events, no ProfilerStep, a non-trace file --------------------------------------------------------

def test_cpu_only_trace_without_gpu_events(tmp_path):
    # Step 1 [0, 1000): ops [100, 300), [200, 500) (overlapping), [600, 700). Step 2 [1000, 2000): op [1100, 1500).
    # Around them, what every real trace carries: the "PyTorch Profiler" span, metadata and instant events.
    events = [step(1, 0, 1000), step(2, 1000, 1000), cpu("aten::linear", 100, 200), cpu("aten::addmm", 200, 300),
              cpu("aten::relu", 600, 100), cpu("aten::linear", 1100, 400),
              {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
               "ts": -10, "dur": 2100, "args": {"Op count": 0}},
              {"name": "thread_name", "ph": "M", "ts": -10, "pid": 100, "tid": 1, "args": {"name": "pt_main_thread"}},
              {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 2090}]
    path = write(tmp_path / "rank0.json", events)
    r = one(tracekit.summarize(path).ranks)  # drop_last: step 1 only
    assert (r["device"], r["steps"], r["span_us"], r["compute_us"], r["idle_us"]) == ("cpu", 1, 600, 500, 100)
    assert r["comm_us"] == 0 and math.isnan(r["overlap_pct"])
    r = one(tracekit.summarize(path, window="all_steps").ranks)
    assert (r["steps"], r["span_us"], r["compute_us"], r["idle_us"]) == (2, 1400, 900, 500)


@pytest.mark.parametrize("window", ["drop_last", "all_steps", "trace"])
def test_no_profiler_steps_means_the_whole_trace(tmp_path, window):
    path = write(tmp_path / "rank0.json", [kernel(GEMM, 0, 100), kernel(GEMM, 300, 100)])
    s = tracekit.summarize(path, window=window)
    r = one(s.ranks)
    assert (r["steps"], r["span_us"], r["busy_us"], r["idle_us"]) == (0, 400, 200, 200)
    assert s.gaps["dur_us"].tolist() == [200]


def test_non_trace_json_in_the_folder_is_skipped_and_listed(tmp_path):
    write(tmp_path / "rank0.json", [kernel(GEMM, 0, 10)])
    (tmp_path / "run.json").write_text(json.dumps({"world_size": 1, "model": "resnet18", "steps": 5}))
    (tmp_path / "notes.json").write_text(json.dumps({"note": "not a trace"}))
    s = tracekit.summarize(tmp_path)
    assert s.run.ranks_read == 1
    # The workload's run.json is read as the run's facts; another JSON that is not a trace is skipped and listed.
    assert s.run.workload is not None and s.run.workload.world_size == 1
    assert [Path(x.path).name for x in s.run.skipped] == ["notes.json"]
    assert s.run.skipped[0].reason


# --- bus bandwidth (nccl-tests PERFORMANCE.md) -----------------------------------------------------------------

@pytest.mark.parametrize("coll, n_in, n_out, n, dur, nbytes, busbw", [
    ("allreduce", 1_000_000, 1_000_000, 2, 100, 4e6, 40 * 2 * 1 / 2),
    ("allreduce", 1_000_000, 1_000_000, 4, 100, 4e6, 40 * 2 * 3 / 4),
    ("_allgather_base", 1_000_000, 2_000_000, 2, 200, 8e6, 40 * 1 / 2),      # S = out bytes
    ("_reduce_scatter_base", 2_000_000, 1_000_000, 2, 200, 8e6, 40 * 1 / 2),  # S = total (in) bytes
    ("broadcast", 1_000_000, 1_000_000, 2, 100, 4e6, 40),
    ("all_to_all", 1_000_000, 1_000_000, 2, 100, 4e6, 40 * 1 / 2),
])
def test_bus_bandwidth(tmp_path, coll, n_in, n_out, n, dur, nbytes, busbw):
    # algbw = S / t: every case is 40 GB/s.
    for rank in (0, 1):
        write(tmp_path / f"rank{rank}.json", [kernel(NCCL_AR, 0, dur, **comm_args(coll, n_in, n_out, group=n))], rank=rank)
    c = tracekit.summarize(tmp_path).collectives
    assert c["bytes"].tolist() == [nbytes, nbytes]
    assert c["algbw_gbps"].to_numpy() == pytest.approx(np.array([40.0, 40.0]))
    assert c["busbw_gbps"].to_numpy() == pytest.approx(np.array([busbw, busbw]))


def test_scalar_all_reduce_is_one_element(tmp_path):
    def gloo(ts, dims):
        return cpu("gloo:all_reduce", ts, 10, cat="user_annotation", tid=9, **{"Input Dims": dims, "Input type": ["float"]})
    events = [step(1, 0, 1000), step(2, 1000, 10), cpu("aten::mm", 0, 900),
              gloo(100, [[1000]]), gloo(300, [[]]), gloo(500, [[1000]])]
    s = tracekit.summarize(write(tmp_path / "rank0.json", events))
    assert s.collectives["bytes"].tolist() == [4000, 4, 4000]
    assert s.ranks.iloc[0]["allreduce_bytes"] == 8004


def test_device_copy_of_profiler_step_does_not_move_the_step(tmp_path):
    gpu_step = {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#1", "pid": 0, "tid": 7,
                "ts": 500, "dur": 100, "args": {}}
    events = [gpu_step, step(1, 0, 1000), step(2, 1000, 10), launch(5, 1), kernel("gemm", 10, 100, correlation=1)]
    s = tracekit.summarize(write(tmp_path / "rank0.json", events))
    assert s.steps.loc[s.steps["step"] == 1, "step_us"].tolist() == [1000]
    assert s.ranks.iloc[0]["compute_us"] == 100
