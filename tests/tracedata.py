"""Builders of tiny inline traces for the tests: a few events whose metrics can be computed by hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def kernel(name, ts, dur, stream=7, correlation=None, **args):
    a = {"device": 0, "stream": stream, **args}
    if correlation is not None:
        a["correlation"] = correlation
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": a}


def memcpy(ts, dur, stream=7):
    return {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": stream,
            "ts": ts, "dur": dur, "args": {"device": 0, "stream": stream}}


def cpu(name, ts, dur, cat="cpu_op", tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur, "args": args}


def launch(ts, correlation, tid=1, dur=2):
    return cpu("cudaLaunchKernel", ts, dur, cat="cuda_runtime", tid=tid, correlation=correlation)


def step(n, ts, dur, tid=1):
    return cpu(f"ProfilerStep#{n}", ts, dur, cat="user_annotation", tid=tid)


def write_trace(path: Path, events, rank=0, world_size=2, backend="nccl", gz=True, **top) -> Path:
    doc = {"schemaVersion": 1, "traceEvents": events, **top}
    if rank is not None:
        doc["distributedInfo"] = {"backend": backend, "rank": rank, "world_size": world_size}
    data = json.dumps(doc).encode()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path
