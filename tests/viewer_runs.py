"""Runs for the viewer's tests: a tiny 2-rank NCCL-style run built inline, and the bundled sample runs when present."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tracedata import cpu, kernel, launch, memcpy, step, write_trace

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def tiny_gpu_rank(rank: int, delay: int = 0) -> list[dict]:
    """Three 1000 us steps: two gemms on stream 7, a memcpy, and two all-reduces of 1M floats on stream 20.
    ``delay`` shifts this rank's second all-reduce, so the other rank waits for it."""
    events = []
    for n in range(3):
        t = 1000 * n
        events += [
            step(n + 1, t, 1000),
            launch(t + 5, 10 * n + 1), kernel("sm90_gemm_bf16", t + 10, 300, correlation=10 * n + 1),
            launch(t + 6, 10 * n + 2), kernel("sm90_gemm_bf16", t + 320, 200, correlation=10 * n + 2),
            launch(t + 7, 10 * n + 3), {**memcpy(t + 600, 50), "args": {"device": 0, "stream": 7, "correlation": 10 * n + 3}},
        ]
        for i, (at, dur) in enumerate(((t + 200, 250), (t + 700 + delay, 150))):
            args = {"Collective name": "allreduce", "In msg nelems": 1_000_000, "Out msg nelems": 1_000_000,
                    "dtype": "Float", "Group size": 2, "Process Group Name": "0", "Seq": 2 * n + i}
            events += [launch(at - 5, 10 * n + 4 + i), kernel(NCCL, at, dur, stream=20, correlation=10 * n + 4 + i, **args)]
        events.append(cpu("aten::mm", t + 1, 4))
    return events


def write_tiny_run(folder: Path, with_run_json: bool = True) -> Path:
    """A 2-rank run folder (rank 1 late to the second all-reduce of each step), with a run.json."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in (0, 1):
        write_trace(folder / f"rank-{rank}.pt.trace.json.gz", tiny_gpu_rank(rank, delay=40 * rank), rank=rank,
                    deviceProperties=[{"name": "NVIDIA H100"}])
    if with_run_json:
        (folder / "run.json").write_text(json.dumps({"workload": "tiny", "throughput_samples_per_s":
                                                     {"unprofiled": 1234.5, "profiled": 1200.0}}))
    return folder


def make_root(root: Path) -> Path:
    """A root folder with the tiny run, a copy of it (for Compare), and the sample runs that exist."""
    write_tiny_run(root / "tiny")
    write_tiny_run(root / "tiny-copy", with_run_json=False)
    for sample in sorted(SAMPLES.glob("*")) if SAMPLES.is_dir() else []:
        if sample.is_dir() and any(sample.glob("*.json.gz")):
            shutil.copytree(sample, root / sample.name)
    return root


def sample_run_names() -> list[str]:
    """The bundled sample runs: the viewer's tests run on each, and on the tiny run."""
    if not SAMPLES.is_dir():
        return []
    return sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and any(p.glob("*.json.gz")))
