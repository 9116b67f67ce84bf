"""The GPU check's launch-bound run: a small ResNet at a tiny batch, eager under torch.profiler, then as a CUDA graph.

    python -m benchmarks.gpu_check_graph --out DIR [--force] [--cpu] [--steps 12 --wait 2 --warmup 1 --active 3]
        [--model resnet18 --batch-size 4 --image-size 32] [--graph-steps 60] [--profile-memory] [--with-flops]

One static-shape training step (SGD with momentum, as workloads.resnet; synthetic images and labels that stay on the
device, so no data loader is in the step):
1. eager: `--steps` steps, those of the `--wait/--warmup/--active` window under torch.profiler (shapes recorded),
   each step ended by `loss.item()`; writes DIR/rank-0.pt.trace.json.gz. Its kernels are far shorter than the host's
   dispatch of them: the GPU waits for launches, which is what tracekit's `no_host_gaps` scenario removes.
2. graph (CUDA only): the same step captured once with torch.cuda.graph (three warm-up steps on a side stream first,
   as PyTorch's whole-network capture recipe does) and replayed `--graph-steps` times, each replay ended by
   `loss.item()`; the first GRAPH_WARMUP replays are left out of its mean.
run.json has the keys of workloads/record.py's (step_ms and throughput are the eager run's; FlopCounterMode's count
of one step; the eager phase's torch.cuda.max_memory_allocated) and `graph`: the replays' step times and their mean,
the graph phase's own memory peak, or `error` when capture failed, or `skipped` on a CPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torchvision
from torch.nn import functional as F

from workloads import record

GRAPH_WARMUP = 5
MODELS = ("resnet18", "resnet34", "resnet50")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, as the workloads' parsers
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def parse_config(argv: list[str] | None = None) -> argparse.Namespace:
    p = _Parser(prog="benchmarks.gpu_check_graph", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="output folder (one holding a run is refused without --force)")
    p.add_argument("--force", action="store_true")
    p.add_argument("--cpu", action="store_true", help="run on the CPU (no graph phase)")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--wait", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--active", type=int, default=3)
    p.add_argument("--model", choices=MODELS, default="resnet18")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--graph-steps", type=int, default=60)
    p.add_argument("--profile-memory", action="store_true")
    p.add_argument("--with-flops", action="store_true")
    args = p.parse_args(argv)
    if args.batch_size < 2 or min(args.active, args.classes) < 1 or min(args.wait, args.warmup) < 0:
        p.error("need --batch-size >= 2 (BatchNorm), --active, --classes >= 1 and --wait, --warmup >= 0")
    if args.steps < args.wait + args.warmup + args.active:
        p.error(f"--steps {args.steps} ends before the profiled window")
    if args.image_size < 16:
        p.error(f"--image-size must be >= 16, got {args.image_size}")
    if args.graph_steps <= GRAPH_WARMUP:
        p.error(f"--graph-steps must be > {GRAPH_WARMUP}, got {args.graph_steps}")
    return args


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step(model, optimizer, x, y) -> torch.Tensor:
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def eager(args, model, optimizer, x, y, device: torch.device, trace: Path) -> list[float]:
    """The profiled eager steps; their wall times in ms (each ends with loss.item(), so the device is done)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    else:
        os.environ.setdefault("KINETO_LOG_LEVEL", record.KINETO_QUIET_LEVEL)
    schedule = torch.profiler.schedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=1)
    step_ms = []
    with torch.profiler.profile(activities=activities, schedule=schedule, record_shapes=True,
                                profile_memory=args.profile_memory, with_flops=args.with_flops,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(trace))) as prof:
        for step in range(args.steps):
            t0 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss = _step(model, optimizer, x, y).item()
            step_ms.append((time.perf_counter() - t0) * 1e3)
            print(f"eager step {step + 1:>3}/{args.steps} | loss {loss:8.4f} | {step_ms[-1]:8.2f} ms", flush=True)
            prof.step()
    if hasattr(prof, "wait_for_exports"):
        prof.wait_for_exports()
    return step_ms


def graphed(args, model, optimizer, x, y, device: torch.device) -> dict:
    """The same step captured in one CUDA graph and replayed; its step times (ms) and memory peak."""
    torch.cuda.reset_peak_memory_stats(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm-up outside the default stream, as the capture recipe asks
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            _step(model, optimizer, x, y)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)  # backward in the capture allocates the gradients from the graph's pool
    with torch.cuda.graph(graph):
        loss = _step(model, optimizer, x, y)
    step_ms = []
    for _ in range(args.graph_steps):
        t0 = time.perf_counter()
        graph.replay()
        value = loss.item()
        step_ms.append((time.perf_counter() - t0) * 1e3)
    timed = step_ms[GRAPH_WARMUP:]
    print(f"graph: {len(timed)} replays, mean {sum(timed) / len(timed):.3f} ms (loss {value:.4f})", flush=True)
    return {"step_ms": [round(ms, 4) for ms in step_ms], "warmup_replays": GRAPH_WARMUP,
            "mean_step_ms": round(sum(timed) / len(timed), 4),
            "cuda_max_memory_allocated_bytes": torch.cuda.max_memory_allocated(device)}


def count_flops(model, x, y) -> float:
    """FlopCounterMode's count of one forward and backward (the optimizer adds no matmul), as the workloads count."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), y).backward()
    return float(counter.get_total_flops())


def _rate(samples: int, step_ms: list[float]) -> float | None:
    return round(samples * len(step_ms) / sum(step_ms) * 1e3, 3) if step_ms else None


def main(argv: list[str] | None = None) -> int:
    args = parse_config(argv)
    device = torch.device("cuda", 0) if torch.cuda.is_available() and not args.cpu else torch.device("cpu")
    out = Path(args.out or f"runs/gpu_check_graph-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    try:
        record.claim_out(out, force=args.force)
    except record.ConfigError as e:
        print(f"benchmarks.gpu_check_graph: error: {e}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = torchvision.models.get_model(args.model, num_classes=args.classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-5)
    x = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    y = torch.randint(args.classes, (args.batch_size,), device=device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"benchmarks.gpu_check_graph: {args.model}, {args.image_size}px, batch {args.batch_size} on {name}",
          flush=True)
    step_ms = eager(args, model, optimizer, x, y, device, out / record.trace_name(0))
    optimizer.zero_grad(set_to_none=True)
    flops = count_flops(model, x, y)
    optimizer.zero_grad(set_to_none=True)
    _sync(device)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    if device.type != "cuda":
        graph = {"skipped": "CUDA graphs need a GPU: not applicable on CPU"}
    else:
        try:
            graph = graphed(args, model, optimizer, x, y, device)
        except Exception as e:  # the eager run stands; the check reports the capture's failure
            traceback.print_exc()
            graph = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
    profiled = range(args.wait + args.warmup, args.wait + args.warmup + args.active)
    window = range(args.wait, profiled.stop)
    run = {
        "workload": "gpu_check_graph", "config": vars(args), "world_size": 1, "backend": None,
        "mode": "eager, then one CUDA graph", "devices": [name],
        "versions": record._versions(),  # the workloads' own: torch, CUDA, NCCL, Python
        "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "optimizer_steps": args.steps, "micro_batches_per_step": 1, "samples_per_step": args.batch_size,
        "profiled_steps": list(profiled), "traces": [record.trace_name(0)],
        "step_ms": [round(ms, 4) for ms in step_ms],
        "throughput_samples_per_s": {
            "unprofiled": _rate(args.batch_size, [ms for i, ms in enumerate(step_ms) if i > 0 and i not in window]),
            "profiled": _rate(args.batch_size, [ms for i, ms in enumerate(step_ms) if i in profiled])},
        "flop_counter_flops_per_step": flops if math.isfinite(flops) else None,
        "cuda_max_memory_allocated_bytes": peak,
        "graph": graph,
        "argv": sys.argv[1:] if argv is None else list(argv),
        "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    (out / record.RUN_JSON).write_text(json.dumps(run, indent=2) + "\n")
    print(f"wrote {out / record.RUN_JSON}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
