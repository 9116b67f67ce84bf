"""Run-level tables on tiny multi-rank traces with hand-computed answers: step imbalance, op-order mismatches, and
every table in the JSON."""

import json

import pytest

import tracekit
from tracedata import kernel, step, write_trace

AR = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "Float", "Group size": 2,
      "Process Group Name": "0"}
BC = {**AR, "Collective name": "broadcast"}


def summarize(tmp_path, per_rank):
    for rank, events in per_rank.items():
        write_trace(tmp_path / f"rank{rank}.json", events, rank=rank, world_size=len(per_rank))
    return tracekit.summarize(tmp_path, cache=False)


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    # Ranks 0 and 1 run 1000 us steps, rank 2 1500 us steps; 4 steps each, the last dropped from the window.
    lengths = {0: 1000, 1: 1000, 2: 1500}
    return summarize(tmp_path_factory.mktemp("uneven"), {
        r: [step(i + 1, i * n, n) for i in range(4)] + [kernel("gemm", i * n, 400) for i in range(4)]
        for r, n in lengths.items()})


def test_imbalance_is_slowest_over_median(uneven):
    imb = uneven.imbalance
    assert imb["step"].tolist() == [1, 2, 3]
    assert imb["max_step_us"].tolist() == [1500] * 3 and imb["median_step_us"].tolist() == [1000] * 3
    assert imb["imbalance"].tolist() == [1.5] * 3 and imb["slowest_rank"].tolist() == [2] * 3
    assert uneven.step_times().loc[2].tolist() == [1500] * 4  # every step, the dropped last one too


def test_json_has_every_table(uneven):
    doc = json.loads(uneven.to_json(tables="all"))
    assert {"run", "ranks", "steps", "collectives", "gaps", "stragglers", "imbalance", "mismatches",
            "findings", "kernels", "ops", "ops_by_shape", "memory", "memory_top", "graph"} <= set(doc)
    assert doc["imbalance"] == [{"step": s, "ranks": 3, "max_step_us": 1500.0, "median_step_us": 1000.0,
                                 "imbalance": 1.5, "slowest_rank": 2} for s in (1, 2, 3)]
    assert len(doc["steps"]) == 12 and [r["rank"] for r in doc["ranks"]] == [0, 1, 2]


def test_ops_issued_in_another_order_are_reported(tmp_path):
    # Step 1: rank 0 issues all_reduce then broadcast; rank 1 broadcast then all_reduce (no Seq in these traces).
    nccl_ar, nccl_bc = "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ncclDevKernel_Broadcast_RING_LL"
    base = [step(i + 1, i * 1000, 1000) for i in range(3)]
    s = summarize(tmp_path, {
        0: base + [kernel(nccl_ar, 100, 50, stream=20, **AR), kernel(nccl_bc, 200, 50, stream=20, **BC)],
        1: base + [kernel(nccl_bc, 100, 50, stream=20, **BC), kernel(nccl_ar, 200, 50, stream=20, **AR)]})
    order = s.mismatches[s.mismatches["kind"] == "order"]
    assert len(order) == 1
    row = order.iloc[0]
    assert row["ranks"] == [0, 1] and row["position"] == "step 1 call 0" and row["op"] == "broadcast vs all_reduce"
    assert row["detail"] == "rank 1 issues broadcast where rank 0 issues all_reduce"


def test_same_order_is_no_mismatch(tmp_path):
    nccl_ar, nccl_bc = "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ncclDevKernel_Broadcast_RING_LL"
    base = [step(i + 1, i * 1000, 1000) for i in range(3)]
    calls = [kernel(nccl_ar, 100, 50, stream=20, **AR), kernel(nccl_bc, 200, 50, stream=20, **BC)]
    assert summarize(tmp_path, {0: base + calls, 1: base + calls}).mismatches.empty


# --- sizes that do not line up without Seq -------------------------------------------------------------------------

def _ar(ts, nelems=1000):
    return kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", ts, 50, stream=20,
                  **{**AR, "In msg nelems": nelems, "Out msg nelems": nelems})


def test_size_mismatch_in_a_later_step_is_reported(tmp_path):
    # Step 1 agrees (4000 B each); step 2: rank 1 sends 8000 B where rank 0 sends 4000 B.
    base = [step(i + 1, i * 1000, 1000) for i in range(3)]
    s = summarize(tmp_path, {0: base + [_ar(100), _ar(1100)], 1: base + [_ar(100), _ar(1100, nelems=2000)]})
    sizes = s.mismatches[(s.mismatches["kind"] == "size") & (s.mismatches["match_id"] == -1)]
    assert sizes["position"].tolist() == ["step 2"]
    assert sizes["detail"].tolist() == ["rank 0: 4000 B; rank 1: 8000 B"] and sizes["ranks"].tolist() == [[0, 1]]


def test_unknown_sizes_on_every_rank_are_no_mismatch(tmp_path):
    # gloo without record_shapes: no sizes anywhere, the same calls on both ranks.
    def gloo(ts):
        return {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 100, "tid": 9, "ts": ts,
                "dur": 50, "args": {}}
    events = [step(i + 1, i * 1000, 1000, tid=1) for i in range(3)] + [gloo(100), gloo(1100)]
    s = summarize(tmp_path, {0: events, 1: events})
    assert s.collectives["bytes"].isna().all() and len(s.collectives) == 4
    assert s.mismatches.empty, s.mismatches.to_dict("records")


def test_a_dtype_nobody_knows_has_unknown_size():
    import math

    from tracekit.events.collectives import dtype_bytes
    assert dtype_bytes("c10::BFloat16") == 2 and dtype_bytes("unsigned char") == 1
    assert math.isnan(dtype_bytes("QuantizedInt4x2")) and math.isnan(dtype_bytes(None))


# --- how a missing call is described -------------------------------------------------------------------------------

def _missing(s):
    rows = s.mismatches[s.mismatches["kind"] == "missing"]
    assert len(rows) == 1, s.mismatches.to_dict("records")
    return rows.iloc[0]


def test_missing_call_with_seq_is_placed_by_seq(tmp_path):
    base = [step(i + 1, i * 1000, 1000) for i in range(3)]
    s = summarize(tmp_path, {0: base + [_ar(100) | {"args": {**_ar(100)["args"], "Seq": 1}},
                                        _ar(300) | {"args": {**_ar(300)["args"], "Seq": 2}}],
                             1: base + [_ar(100) | {"args": {**_ar(100)["args"], "Seq": 1}}]})
    row = _missing(s)
    assert (row["position"], row["ranks"], row["detail"]) == ("Seq 2", [1], "a 4000 B call present on ranks [0] only")


def test_missing_call_of_unknown_size_outside_steps(tmp_path):
    def gloo(ts):
        return {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 100, "tid": 9, "ts": ts,
                "dur": 50, "args": {}}
    base = [step(i + 1, 1000 + i * 1000, 1000, tid=1) for i in range(3)] + [gloo(1100)]
    row = _missing(summarize(tmp_path, {0: base + [gloo(100)], 1: base}))
    assert (row["position"], row["detail"]) == ("outside steps", "a call of unknown size present on ranks [0] only")


def test_step_zero_is_a_step(tmp_path):
    base = [step(i, i * 1000, 1000) for i in range(3)]  # ProfilerStep#0, #1, #2
    row = _missing(summarize(tmp_path, {0: base + [_ar(100), _ar(300)], 1: base + [_ar(100)]}))
    assert row["position"] == "step 0"


def test_order_mismatch_rows_have_no_match_id(tmp_path):
    nccl_ar, nccl_bc = "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ncclDevKernel_Broadcast_RING_LL"
    base = [step(i + 1, i * 1000, 1000) for i in range(3)]
    s = summarize(tmp_path, {
        0: base + [kernel(nccl_ar, 100, 50, stream=20, **AR), kernel(nccl_bc, 200, 50, stream=20, **BC)],
        1: base + [kernel(nccl_bc, 100, 50, stream=20, **BC), kernel(nccl_ar, 200, 50, stream=20, **AR)]})
    assert s.mismatches.loc[s.mismatches["kind"] == "order", "match_id"].tolist() == [-1]  # -1: not one collective
