"""Small synthetic GPU runs for the golden Summaries: what no real trace bundled here exercises (issue 33, class 9).

    python -m tests.golden_runs.make      # rewrites tests/golden_runs/<run>/rank-<r>.json.gz (deterministic)

Each run is a folder of gzipped Kineto-shaped traces written by the builders of ``tests/tracedata.py``; the gzip
header's time is fixed, so the bytes do not change from one run of this script to the next. Times are in us.

- ``synth-a100-gemm``: one rank, A100 SXM4 80GB, three ProfilerSteps of 850 us (the window drops the last). Per
  step, with record_shapes-style ``Input Dims``/``Input type``: aten::mm bf16 (1024x4096 @ 4096x4096, 34.36 GFLOP,
  kernel 160 us), aten::addmm float on a TF32 tensor-op kernel (1024x4096 @ 4096x2048, 17.18 GFLOP, 250 us),
  aten::conv2d bf16 (8x64x56x56 * 64x64x3x3, stride/padding/dilation 1, 1.850 GFLOP, 200 us). Pins roofline,
  pct_of_roofline, MFU and the optimisation table on a known device.
- ``synth-h100-decode-graphs``: one rank, H100 SXM5, an engine's decode loop without ProfilerStep: four
  ``step[DECODE bs=16]`` annotations of 1000 us. Step 1 captures a CUDA graph (cudaStreamBeginCapture, 8 launches,
  cudaStreamEndCapture, cudaGraphInstantiate) and replays it; steps 2-4 each replay it once: one cudaGraphLaunch at
  +300 us and its 8 kernels of 60 us back to back from +310 us.
- ``synth-h800-ep-2rank``: two ranks, H800 SXM5, expert-parallel training shaped like DeepEP: three ProfilerSteps of
  1000 us; stream 7 runs two GEMMs per step, stream 20 a ``deep_ep::intranode::dispatch`` under the first and a
  ``deep_ep::intranode::combine`` partly exposed after the second. Rank 1's combine is 40 us longer than rank 0's.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tests.tracedata import cpu, kernel, launch, step

HERE = Path(__file__).resolve().parent
A100 = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85_198_045_184, "computeMajor": 8,
         "computeMinor": 0}]
H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85_520_809_984, "computeMajor": 9,
         "computeMinor": 0}]
H800 = [{"id": 0, "name": "NVIDIA H800", "totalGlobalMem": 85_520_809_984, "computeMajor": 9, "computeMinor": 0}]

# (op, Input Dims, Input type, Concrete Inputs, kernel, kernel us)
A100_OPS = [
    ("aten::mm", [[1024, 4096], [4096, 4096]], ["c10::BFloat16"] * 2, None,
     "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16", 160),
    ("aten::addmm", [[2048], [1024, 4096], [4096, 2048]], ["float"] * 3, None,
     "cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align4", 250),
    ("aten::conv2d", [[8, 64, 56, 56], [64, 64, 3, 3], [], [], [], [], []], ["c10::BFloat16"] * 2 + [""] * 5,
     ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"],
     "sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4", 200),
]


STEP_US = 850


def a100_gemm() -> dict[int, list[dict]]:
    """Steps of 850 us. Each op's host call at +20/+60/+100 us (30 us), its launch inside it; the kernels back to back
    from +200 us to +810 us; the host waits in cudaDeviceSynchronize [+130, +812) (the device's work is the step's
    critical path), then 38 us of host time to the next step."""
    events = [step(i + 1, i * STEP_US, STEP_US) for i in range(3)]
    for i in range(3):
        base, at = i * STEP_US, i * STEP_US + 200
        events.append(cpu("cudaDeviceSynchronize", base + 130, 682, cat="cuda_runtime", correlation=900 + i))
        for k, (op, dims, types, concrete, name, dur) in enumerate(A100_OPS):
            args = {"Input Dims": dims, "Input type": types}
            if concrete:
                args["Concrete Inputs"] = concrete
            corr = 10 * (i + 1) + k
            events += [cpu(op, base + 20 + 40 * k, 30, **args), launch(base + 25 + 40 * k, corr),
                       kernel(name, at, dur, correlation=corr)]
            at += dur
    return {0: events}


GRAPH_KERNEL = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off"


def _runtime(name, ts, dur, corr):
    return cpu(name, ts, dur, cat="cuda_runtime", correlation=corr)


def decode_graphs() -> dict[int, list[dict]]:
    events = []
    for i in range(4):
        base, corr = i * 1000, 1000 * (i + 1)
        events += [cpu("step[DECODE bs=16]", base, 1000, cat="user_annotation"),
                   cpu("engine.py(120): step", base, 1000, cat="python_function")]
        if i == 0:  # the capture: recorded launches run nothing
            events += ([_runtime("cudaStreamBeginCapture", base + 50, 5, corr)]
                       + [_runtime("cudaLaunchKernel", base + 100 + 5 * k, 4, corr + 1 + k) for k in range(8)]
                       + [_runtime("cudaStreamEndCapture", base + 200, 5, corr + 11),
                          _runtime("cudaGraphInstantiate", base + 210, 80, corr + 12)])
            corr += 100
        events += [_runtime("cudaGraphLaunch", base + 300, 20, corr)]
        events += [kernel(GRAPH_KERNEL, base + 310 + 60 * k, 60, correlation=corr) for k in range(8)]
    return {0: events}


EP_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
DISPATCH = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int)"
COMBINE = "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(int4*, float*, int const*, int)"


def ep() -> dict[int, list[dict]]:
    """Per step: GEMMs [100, 500) and [550, 850) on stream 7; dispatch [150, 450) on stream 20 (under the first GEMM),
    combine [800, 900) (rank 1: [800, 940)), 50 us under the second GEMM."""
    out = {}
    for rank in (0, 1):
        events = [step(i + 1, i * 1000, 1000) for i in range(3)]
        for i in range(3):
            base = i * 1000
            runs = [(EP_GEMM, 100, 400, 7), (DISPATCH, 150, 300, 20), (EP_GEMM, 550, 300, 7),
                    (COMBINE, 800, 100 + 40 * rank, 20)]
            for k, (name, start, dur, stream) in enumerate(runs):
                corr = 10 * (i + 1) + k
                events += [launch(base + 10 + 5 * k, corr),
                           kernel(name, base + start, dur, stream=stream, correlation=corr)]
        out[rank] = events
    return out


RUNS = {"synth-a100-gemm": (a100_gemm, A100, 1), "synth-h100-decode-graphs": (decode_graphs, H100, 1),
        "synth-h800-ep-2rank": (ep, H800, 2)}


def write(name: str) -> list[Path]:
    build, props, world = RUNS[name]
    paths = []
    for rank, events in build().items():
        doc = {"schemaVersion": 1, "deviceProperties": props, "traceEvents": events,
               "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world}}
        path = HERE / name / f"rank-{rank}.json.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(json.dumps(doc, sort_keys=True).encode(), mtime=0))
        paths.append(path)
    return paths


def main() -> int:
    for name in RUNS:
        for path in write(name):
            print(path.relative_to(HERE.parents[1]), path.stat().st_size, "bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
