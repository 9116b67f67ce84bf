"""The GPU check's report: `gpu_check.md`: one table of runs and checks, the speed-ups with AMP's memory saving,
FLOPs, MFU and memory per run, the launch-bound prediction against its CUDA graph, and what was not run."""

from __future__ import annotations

import math
from datetime import datetime, timezone

import gpu_check_tables as tables
import gpu_check_verify as verify

CLAIM = (1.5, 2.5)  # the seeds' mixed-precision speed-up on a modern GPU
CHECKS = ("exit", "summarize", "comm kernels", "all-reduce bytes", "HTA agreement", "kernel table", "FLOPs", "MFU",
          "memory", "prediction")
GRAPH_SENTENCE = (
    "A CUDA graph changes more than the host's lateness that `no_host_gaps` removes: the eager step's kernel launches "
    "(counted above from its trace) become one graph launch, the CPU does no dispatch, autograd or optimizer work per "
    "step (only the replay call and the loss read-back), and the GPU starts each captured kernel with the graph's own, "
    "shorter launch latency; the kernels themselves are the ones the eager step ran, captured once. The replay keeps "
    "every kernel's measured duration and puts dependent kernels back to back, so a graph's remaining gaps between "
    "kernels land above the prediction, and the profiler's cost per kernel (none in the graph) below it.")
SPEEDUPS = (  # (what, faster run, baseline run)
    ("--amp bf16 vs fp32", "resnet-bf16", "resnet-fp32"),
    ("--amp fp16 vs fp32", "resnet-fp16", "resnet-fp32"),
    ("--amp bf16 --channels-last vs fp32", "resnet-bf16-cl", "resnet-fp32"),
    ("--amp fp16 --channels-last vs fp32", "resnet-fp16-cl", "resnet-fp32"),
    ("--channels-last vs not, bf16", "resnet-bf16-cl", "resnet-bf16"),
    ("--channels-last vs not, fp16", "resnet-fp16-cl", "resnet-fp16"),
)


def throughput(result, which: str) -> float:
    """Samples/s from run.json (`unprofiled` or `profiled`); NaN when the run or the number is missing."""
    value = (result.run_json.get("throughput_samples_per_s") or {}).get(which) if result else None
    return math.nan if value is None else float(value)


def overhead_pct(result) -> float:
    """How much slower the profiled steps ran than the others, in % of the profiled rate."""
    return (throughput(result, "unprofiled") / throughput(result, "profiled") - 1) * 100


def tolerances() -> dict[str, str]:
    """Each check's tolerance, in words (checks.json and the report)."""
    return {
        "HTA agreement": f"idle % and overlap % within {verify.HTA_TOLERANCE_PT:g} pt of HTA (ns rounding off)",
        "kernel table": f"top {tables.TOP_KERNELS} kernels by total_us per rank: calls equal, total_us within "
                        f"{tables.KERNEL_REL_TOL:g} relative of HTA's get_gpu_kernel_breakdown (ns rounding off)",
        "FLOPs": f"each window step's matmul_flops within {tables.FLOPS_TOL * 100:g}% of run.json's "
                 "flop_counter_flops_per_step (FlopCounterMode)",
        "MFU": "mfu_pct finite and in (0, 100] on every GPU rank, the device matched to its tracekit.devices entry "
               "('NVIDIA H200' -> NVIDIA H200 SXM 141GB); n/a on CPU",
        "memory": f"rank 0's trace peak allocated within {tables.MEMORY_TOL * 100:g}% of run.json's "
                  "cuda_max_memory_allocated_bytes; n/a on CPU (the memory table is still read)",
        "prediction": f"no_host_gaps' predicted step time within +-{tables.PREDICTION_TOL * 100:g}% of the CUDA "
                      "graph's measured one; n/a on CPU",
    }


def markdown(results, parses, extra, *, dry_run: bool, seconds: float) -> str:
    by_name = {r.plan.name: r for r in results}
    first = next((r.run_json for r in results if r.run_json), {})
    versions = first.get("versions", {})
    lines = [
        "# GPU check" + (" (dry run on a CPU machine: not GPU figures)" if dry_run else ""),
        "",
        f"Made by `benchmarks/gpu_check.sh{' --dry-run' if dry_run else ''}` on "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC in {seconds:.0f} s: "
        f"{', '.join(sorted(set(first.get('devices', [])))) or 'unknown device'}; torch {versions.get('torch')}, "
        f"CUDA {versions.get('cuda')}, NCCL {versions.get('nccl')}, Python {versions.get('python')}.",
        "Throughput is samples/s from each run's `run.json`: un-profiled steps (1 and after the profiler) and the "
        "profiled ones (which record shapes, memory and FLOPs); overhead = un-profiled / profiled - 1.",
        "Tolerances: " + "; ".join(f"{k}: {v}" for k, v in tolerances().items()) + ".",
        "",
        "| run | what | ranks | samples/s | profiled | profiler overhead | " + " | ".join(CHECKS) + " |",
        "|---|---|---|---|---|---|" + "---|" * len(CHECKS),
    ]
    for r in results:
        if not r.ran:
            lines.append(f"| `{r.plan.name}` | {r.plan.what} | {r.note} |" + " |" * (3 + len(CHECKS)))
            continue
        ranks = _ranks(r.run_json)
        cells = [_status(r.checks.get(c)) for c in CHECKS]
        lines.append(f"| `{r.plan.name}` | {r.plan.what} | {ranks} | {_num(throughput(r, 'unprofiled'))} | "
                     f"{_num(throughput(r, 'profiled'))} | {_num(overhead_pct(r), '%')} | " + " | ".join(cells) + " |")
    lines += ["", "## Speed-ups (un-profiled throughput) and memory", "",
              "Peak memory: torch.cuda.max_memory_allocated from run.json (the whole run) and the trace's largest "
              "allocated (the profiled steps), rank 0, in GB; saving = 1 - faster run's peak / baseline's (run.json).",
              "", "| comparison | speed-up | peak, run.json | peak, trace | memory saving |", "|---|---|---|---|---|"]
    amp = []
    for what, fast, base in SPEEDUPS:
        f, b = by_name.get(fast), by_name.get(base)
        ratio = throughput(f, "unprofiled") / throughput(b, "unprofiled")
        saving = (1 - peak_bytes(f, "run.json") / peak_bytes(b, "run.json")) * 100
        lines.append(f"| {what} | {_num(ratio, 'x', 2)} | {_gb(peak_bytes(f, 'run.json'))} vs "
                     f"{_gb(peak_bytes(b, 'run.json'))} | {_gb(peak_bytes(f, 'trace'))} vs "
                     f"{_gb(peak_bytes(b, 'trace'))} | {_num(saving, '%')} |")
        if "vs fp32" in what and not math.isnan(ratio):
            amp.append((what, ratio))
    lines += ["", _claim(amp), ""]
    lines += _tables(results)
    lines += _prediction(results)
    lines += ["## Check details", ""]
    for r in results:
        for name, c in r.checks.items():
            lines.append(f"- `{r.plan.name}` {name}: **{c.status}**: {c.detail}")
    for name, c in extra.items():
        lines.append(f"- reference {name}: **{c.status}**: {c.detail}")
    lines += ["", "## Commands", "", "Each run adds `--out runs/<run> --force`; every one is also parsed by its workload"
              " first (`parses`).", ""]
    for r in results:
        p = parses.get(r.plan.name)
        lines.append(f"- `{r.plan.name}`: `python -m {' '.join(r.plan.argv)}`" + (f" ({p.status}: {p.detail})" if p else ""))
    for name, p in parses.items():
        if name not in by_name:
            lines.append(f"- `{name}` (GPU plan, not run here): {p.status}: {p.detail}")
    return "\n".join(lines) + "\n"


def peak_bytes(result, which: str) -> float:
    """Rank 0's peak allocated bytes: run.json's torch.cuda.max_memory_allocated (`run.json`) or the trace's (`trace`,
    from the memory check); NaN when unknown."""
    if result is None:
        return math.nan
    if which == "run.json":
        value = result.run_json.get("cuda_max_memory_allocated_bytes")
    else:
        check = result.checks.get("memory")
        value = check.values.get("rank0_trace_peak_bytes") if check is not None else None
    return math.nan if value is None else float(value)


def _tables(results) -> list[str]:
    lines = ["## FLOPs, MFU and memory per run", "",
             "FLOPs per step: tracekit's summary.steps matmul_flops (mean over window steps and ranks) and "
             "FlopCounterMode's count from run.json. MFU: summary.ranks mfu_pct per rank, against the dense peaks of "
             "the device's tracekit.devices entry (TFLOPS).", "",
             "| run | FLOPs/step, tracekit | FlopCounterMode | MFU % | device entry: dense peaks | memory |",
             "|---|---|---|---|---|---|"]
    for r in results:
        if not r.run_json:
            continue
        flops, mfu, mem = (r.checks.get(k) for k in ("FLOPs", "MFU", "memory"))
        ours = list((flops.values.get("tracekit") or {}).values()) if flops else []
        mine = sum(ours) / len(ours) if ours else math.nan
        ref = r.run_json.get("flop_counter_flops_per_step")
        per_rank = ", ".join(f"r{k} {v:.2f}" for k, v in (mfu.values.get("mfu_pct") or {}).items()) if mfu else ""
        peaks = "; ".join(f"{n}: " + ", ".join(f"{k} {v:g}" for k, v in p.items() if v is not None)
                          for n, p in (mfu.values.get("peaks") or {}).items()) if mfu else ""
        mfu_cell = per_rank if mfu and mfu.status != verify.NA else f"n/a ({mfu.detail.split(':')[0]})" if mfu else "-"
        mem_cell = (f"{_gb(peak_bytes(r, 'trace'))} trace vs {_gb(peak_bytes(r, 'run.json'))} run.json"
                    if mem and mem.status != verify.NA else "n/a on CPU" if mem else "-")
        lines.append(f"| `{r.plan.name}` | {_sci(mine)} | {_sci(ref)} | {mfu_cell} | {peaks or '-'} | {mem_cell} |")
    return lines + [""]


def _prediction(results) -> list[str]:
    runs = [r for r in results if "prediction" in r.checks]
    if not runs:
        return []
    lines = ["## Launch-bound run: predicted against measured", "",
             "`tracekit.whatif(summary, [\"baseline\", \"no_host_gaps\"])` of the eager run's trace predicts the step "
             "time with the host never late; the same step captured in a CUDA graph is then timed (ms per step).", "",
             "| run | eager, measured | baseline replay | predicted no_host_gaps | CUDA graph, measured | "
             "measured / predicted | kernels per step | check |", "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        c = r.checks["prediction"]
        v = c.values
        lines.append(f"| `{r.plan.name}` | {_num(v.get('eager_ms'), digits=3)} | "
                     f"{_num(v.get('baseline_ms'), digits=3)} | {_num(v.get('predicted_ms'), digits=3)} | "
                     f"{_num(v.get('graph_ms'), digits=3)} | "
                     f"{_num(v.get('ratio'), digits=2)} | {_num(v.get('kernels_per_step'), digits=0)} | {c.status} |")
    return lines + ["", GRAPH_SENTENCE, ""]


def _ranks(run: dict) -> str:
    if not run:
        return "-"
    how = run.get("backend") or ("DP" if run.get("mode") == "dp" else "no process group")
    return f"{run.get('world_size', '?')} x {how}"


def _gb(x: float) -> str:
    return "unknown" if x is None or math.isnan(x) else f"{x / 1e9:.2f}"


def _sci(x) -> str:
    return "unknown" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{float(x):.4g}"


def _claim(amp: list[tuple[str, float]]) -> str:
    if not amp:
        return f"The seeds' claim of {CLAIM[0]}-{CLAIM[1]}x from mixed precision: unknown (no AMP run to compare)."
    said = [f"{what} {ratio:.2f}x ({_where(ratio)})" for what, ratio in amp]
    return f"The seeds claim {CLAIM[0]}-{CLAIM[1]}x from mixed precision on a modern GPU; measured: " + "; ".join(said) + "."


def _where(ratio: float) -> str:
    return "below the claim" if ratio < CLAIM[0] else "above the claim" if ratio > CLAIM[1] else "within the claim"


def _status(check) -> str:
    return "-" if check is None else check.status


def _num(x: float, unit: str = "", digits: int = 1) -> str:
    return "unknown" if x is None or math.isnan(float(x)) else f"{x:.{digits}f}{unit}"
