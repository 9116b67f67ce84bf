"""NCCL's batched send/recv (``batch_isend_irecv``, ``tracekit.events.batchp2p``): one SendRecv kernel per batch,
split back into its ops and paired; a plain NCCL send/recv beside it still pairs by its Dst/Src Rank."""

from __future__ import annotations

import tracekit
from tracedata import cpu, kernel, step, write_trace

SR = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
PP = ("7", "mesh_pp", [0, 2])
GROUPS = [("0", "default_pg", [0, 1, 2]), PP]


def posted(op, ts, local_peer, nelems, peer=None, launch=None):
    """A ``c10d::send``/``c10d::recv_`` as torch records it on NCCL: the op (group-local peer in Concrete Inputs),
    the ``record_param_comms`` inside it (global peer only where ``peer`` is given, as newer torch writes it), and,
    for a plain call, the kernel launch inside that (``launch``: correlation id)."""
    name = "c10d::send" if op == "send" else "c10d::recv_"
    params = {"Collective name": op, "In msg nelems": nelems, "Out msg nelems": nelems, "dtype": "Float",
              "Group size": 2, "Process Group Name": PP[0], "Process Group Description": PP[1], "Rank": local_peer}
    if peer is not None:
        params["Dst Rank" if op == "send" else "Src Rank"] = peer
    out = [cpu(name, ts, 20 if launch else 8, **{"Concrete Inputs": ["", "", str(local_peer), "0"],
                                                 "Input Dims": [[], [], [], []],
                                                 "Input type": ["TensorList", "", "Int", "Int"]}),
           cpu("record_param_comms", ts + 2, 16 if launch else 4, **params)]
    if launch:
        out.append(cpu("cudaLaunchKernel", ts + 6, 2, cat="cuda_runtime", correlation=launch))
    return out


def coalesced(ts, correlation):
    """The end of the batch: ``nccl:coalesced`` around the one kernel launch."""
    return [cpu("nccl:coalesced", ts, 10, cat="user_annotation"),
            cpu("cudaLaunchKernel", ts + 2, 2, cat="cuda_runtime", correlation=correlation)]


def write(path, events, rank):
    info = {"backend": "nccl", "rank": rank, "world_size": 3,
            "pg_config": [{"pg_name": n, "pg_desc": d, "pg_size": len(r), "ranks": r} for n, d, r in GROUPS]}
    write_trace(path, events, rank=None, distributedInfo=info)


def test_batched_ops_split_and_pair_beside_a_plain_send(tmp_path):
    # Pipeline group [0, 2] of a 3-rank world. Rank 0: a plain send to 2 (kernel 100..150), then a batch
    # [send to local 1, recv from local 1] whose args name no global peer (kernel 300..400). Rank 2: the plain recv
    # (kernel 80..170), then a batch [recv from 0, send to 0] with Src/Dst Rank (kernel 350..460).
    #   plain 0->2:  arrive = max(100, 80) = 100: recv_wait 20, send_wait 0, transfer 170 - 100 = 70; 250 x 4 B
    #   batch 0->2:  arrive = max(300, 350) = 350: send_wait 50, recv_wait 0, transfer 460 - 350 = 110; 1000 x 4 B
    #   batch 2->0:  arrive = max(350, 300) = 350: recv_wait 50, send_wait 0, transfer 400 - 350 = 50; 500 x 4 B
    # Local peer 1 is rank 2 only through the pipeline group (through the default group it would be rank 1).
    r0 = [step(1, 0, 1000), *posted("send", 10, 1, 250, peer=2, launch=1),
          *posted("send", 40, 1, 1000), *posted("recv", 50, 1, 500), *coalesced(60, 2),
          kernel(SR, 100, 50, stream=20, correlation=1), kernel(SR, 300, 100, stream=20, correlation=2)]
    r2 = [step(1, 0, 1000), *posted("recv", 10, 0, 250, peer=0, launch=1),
          *posted("recv", 40, 0, 1000, peer=0), *posted("send", 50, 0, 500, peer=0), *coalesced(60, 2),
          kernel(SR, 80, 90, stream=20, correlation=1), kernel(SR, 350, 110, stream=20, correlation=2)]
    write(tmp_path / "rank0.json", r0, 0)
    write(tmp_path / "rank2.json", r2, 2)
    s = tracekit.summarize(tmp_path, cache=False, window="all_steps")
    assert s.collectives.empty and s.mismatches.empty  # no coalesced "other" collective is left
    p = s.p2p.sort_values(["src_rank", "pair_index"])
    got = p[["src_rank", "dst_rank", "pair_index", "status", "pg", "dim", "bytes"]].values.tolist()
    assert got == [[0, 2, 0, "matched", "7", "pp", 1000], [0, 2, 1, "matched", "7", "pp", 4000],
                   [2, 0, 0, "matched", "7", "pp", 2000]]
    assert p[["recv_wait_us", "send_wait_us", "transfer_us"]].values.tolist() == [[20, 0, 70], [0, 50, 110],
                                                                                  [50, 0, 50]]
    assert p[["send_start_us", "recv_start_us"]].values.tolist() == [[100, 80], [300, 350], [350, 300]]
    # Waiting that no transfer covers (the pipeline's bubble): rank 0's batch kernel 300..400 waits until both
    # sides posted at 350 (its two calls share the kernel, counted once): 50; rank 2's plain recv 80..100: 20.
    assert s.ranks.set_index("rank")["p2p_wait_us"].to_dict() == {0: 50, 2: 20}


def test_a_coalesced_kernel_without_p2p_ops_stays_a_collective(tmp_path):
    # allreduce_coalesced-like: a kernel under nccl:coalesced with no c10d::send/recv_ before it.
    events = [step(1, 0, 1000), cpu("c10d::send", 5, 20), *coalesced(60, 2),
              cpu("cudaLaunchKernel", 10, 2, cat="cuda_runtime", correlation=1),
              kernel(SR, 30, 10, stream=20, correlation=1),
              kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 300, 100, stream=20, correlation=2)]
    write(tmp_path / "rank0.json", events, 0)
    s = tracekit.summarize(tmp_path, cache=False, window="all_steps")
    assert s.collectives["dur_us"].tolist() == [100]
