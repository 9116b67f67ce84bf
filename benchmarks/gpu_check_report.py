"""The GPU check's report: `gpu_check.md`, one table of runs and checks, the speed-ups, and what was not run."""

from __future__ import annotations

import math
from datetime import datetime, timezone

CLAIM = (1.5, 2.5)  # the seeds' mixed-precision speed-up on a modern GPU
CHECKS = ("exit", "summarize", "comm kernels", "all-reduce bytes", "HTA agreement")
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
        "profiled ones; overhead = un-profiled / profiled - 1.",
        "",
        "| run | what | ranks | samples/s | profiled | profiler overhead | " + " | ".join(CHECKS) + " |",
        "|---|---|---|---|---|---|" + "---|" * len(CHECKS),
    ]
    for r in results:
        if not r.ran:
            lines.append(f"| `{r.plan.name}` | {r.plan.what} | {r.note} |" + " |" * (3 + len(CHECKS)))
            continue
        ranks = f"{r.run_json.get('world_size', '?')} x {r.run_json.get('backend') or 'DP'}" if r.run_json else "-"
        cells = [_status(r.checks.get(c)) for c in CHECKS]
        lines.append(f"| `{r.plan.name}` | {r.plan.what} | {ranks} | {_num(throughput(r, 'unprofiled'))} | "
                     f"{_num(throughput(r, 'profiled'))} | {_num(overhead_pct(r), '%')} | " + " | ".join(cells) + " |")
    lines += ["", "## Speed-ups (un-profiled throughput)", "", "| comparison | speed-up |", "|---|---|"]
    amp = []
    for what, fast, base in SPEEDUPS:
        ratio = throughput(by_name.get(fast), "unprofiled") / throughput(by_name.get(base), "unprofiled")
        lines.append(f"| {what} | {_num(ratio, 'x', 2)} |")
        if "vs fp32" in what and not math.isnan(ratio):
            amp.append((what, ratio))
    lines += ["", _claim(amp), "", "## Check details", ""]
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
    return "unknown" if x is None or math.isnan(x) else f"{x:.{digits}f}{unit}"
