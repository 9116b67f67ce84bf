"""A tiny pipeline run for the tests: two GPipe stages, two microbatches, on CPU (gloo) ranks, known times."""

from __future__ import annotations

from tests.tracedata import cpu, step, write_trace

PG = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}]


def annotation(name, ts, dur):
    return cpu(name, ts, dur, cat="user_annotation")


def backward(ts, dur):
    return cpu("autograd::engine::evaluate_function: AddmmBackward0", ts, dur)


def write_rank(path, rank, events, pg=PG):
    info = {"backend": "gloo", "rank": rank, "world_size": 2, "pg_config": pg}
    return write_trace(path / f"rank-{rank}.pt.trace.json.gz", [step(1, 0, 1000), *events], rank=None,
                       distributedInfo=info)


# Stage 0 of both cases: F0 [10,110), F1 [120,220), a receive posted at 230 and waited until 600, B0 [600,700),
# B1 [710,800), the optimizer [800,850) (busy, in no block), nothing until the step ends at 1000.
RANK0_OPS = [cpu("aten::linear", 10, 100), cpu("c10d::send", 110, 10), cpu("aten::linear", 120, 100),
             cpu("c10d::send", 220, 10), cpu("c10d::recv_", 230, 10), backward(600, 100), cpu("c10d::recv_", 700, 10),
             backward(710, 90), annotation("Optimizer.step#SGD.step", 800, 50), cpu("aten::add_", 800, 50)]


def write_gpipe_run(path):
    """Two stages, two microbatches of GPipe on CPU ranks (``tests/test_pipeline.py`` works its numbers by hand)."""
    # GPipe's annotations: each Backward/Forward includes its receive and the wait for it.
    write_rank(path, 0, RANK0_OPS + [annotation("Forward 0", 0, 110), annotation("Forward 1", 120, 100), annotation("Backward 0", 230, 470),
                                 annotation("Backward 1", 700, 100)])
    write_rank(path, 1, [annotation("Forward 0", 0, 300), cpu("c10d::recv_", 5, 10), cpu("aten::linear", 200, 100),
                     annotation("Forward 1", 300, 120), cpu("c10d::recv_", 300, 10), cpu("aten::linear", 320, 100),
                     annotation("Backward 0", 420, 150), backward(420, 150), cpu("c10d::send", 570, 10),
                     annotation("Backward 1", 580, 150), backward(580, 150), cpu("c10d::send", 730, 10)])
    return path
