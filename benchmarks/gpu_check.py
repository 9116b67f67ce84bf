"""The GPU check (issues 14, 23): every workload variant briefly on one GPU, read back and checked; `gpu_check.md`.

Start it with `benchmarks/gpu_check.sh` (its header says how to prepare wheels, launch on the device machine, and
how long each part takes). `--dry-run` is the same script on a CPU machine: every GPU command is parsed by its
workload, two small CPU runs (the 2-rank ResNet, and the launch-bound run without its CUDA graph) go through the same
runner, checks and report, and the reference checks run on `../shared/traces/hta` when present.

Output folder (`--out`): `runs/<run>/` (traces and run.json, as the workload wrote them), `logs/<run>.log`,
`summaries/<run>.txt` and `.json` (tracekit), `checks.json`, `gpu_check.md`. Exit status 1 when any check fails.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, TimeoutError as FutureTimeout, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

import gpu_check_report as report
import gpu_check_tables as tables
import gpu_check_verify as verify

ROOT = Path(__file__).resolve().parents[1]
HTA_TRACES = ROOT.parent / "shared" / "traces" / "hta"
# Enough steps to time: profiled steps 3-5 (2, 3, 4 wait/warm up), steps 1 and 6-11 un-profiled.
WINDOW = ("--steps", "12", "--wait", "2", "--warmup", "1", "--active", "3")
TABLES = ("--profile-memory", "--with-flops")  # the memory table's [memory] events; FLOPs beside tracekit's own
TIMED = ("--profile", *WINDOW, *TABLES, "--timeout-s", "60")
LOADER = ("--workers", "8", "--pin-memory")  # synthetic 224px images: keep the loader off the critical path
SMALL = ("--model", "resnet18", "--image-size", "64", "--batch-size", "32", "--workers", "2")  # the sample trace
LAUNCH = ("--model", "resnet18", "--image-size", "32", "--batch-size", "4")  # kernels far shorter than their launch
# Time budget on one H200 (the shell script's header gives the expected seconds of each part): a run starts only
# within RUNS_BUDGET_S of the first; each is stopped after RUN_TIMEOUT_S; analysis that has not ended CHECK_BUDGET_S
# after the script started fails, so that with the wheels' install the whole check ends within 7 minutes.
RUN_TIMEOUT_S = 90
RUNS_BUDGET_S = 270
CHECK_BUDGET_S = 400
DRY_CHECK_BUDGET_S, DRY_RUN_TIMEOUT_S = 900, 300  # a shared 2-core CPU machine: no figure here is a GPU's
ANALYSIS_WORKERS = 6  # each summarizes with 2 processes: 12 of the 16 cores


@dataclass(frozen=True)
class Plan:
    name: str
    module: str  # <package>.<module>
    flags: tuple[str, ...]
    what: str
    allreduce: bool = True  # all-reduce bytes per step = 4 x trainable params applies
    gpu: bool = True  # True: compared with HTA (GPU traces)
    fallback_for: str | None = None  # run only when the named run failed
    may_refuse: tuple[str, ...] = ()  # a failure whose output holds one of these (lower case) is expected: n/a
    hta_overlap: bool = True  # False: HTA counts only NCCL kernels as communication, so compare idle % alone
    package: str = "workloads"  # or "benchmarks" (benchmarks/gpu_check_graph.py)
    predict: bool = False  # the launch-bound run: no_host_gaps predicted, checked against its CUDA graph

    @property
    def argv(self) -> list[str]:
        return [f"{self.package}.{self.module}", *self.flags]


GPU_PLAN = (
    Plan("resnet-fp32", "resnet", (*TIMED, *LOADER), "ResNet-50, NCCL, world size 1, fp32"),
    Plan("resnet-bf16", "resnet", (*TIMED, *LOADER, "--amp", "bf16"), "the same, --amp bf16"),
    Plan("resnet-bf16-cl", "resnet", (*TIMED, *LOADER, "--amp", "bf16", "--channels-last"), "--amp bf16 --channels-last"),
    Plan("resnet-fp16", "resnet", (*TIMED, *LOADER, "--amp", "fp16"), "--amp fp16 (GradScaler)"),
    Plan("resnet-fp16-cl", "resnet", (*TIMED, *LOADER, "--amp", "fp16", "--channels-last"), "--amp fp16 --channels-last"),
    Plan("resnet-dp", "resnet", (*TIMED, *LOADER, "--mode", "dp"), "DataParallel on one GPU", allreduce=False),
    Plan("gpt", "gpt", TIMED, "GPT-2 small, NCCL, world size 1"),
    Plan("fsdp", "fsdp", TIMED, "FSDP2 GPT, NCCL, world size 1", allreduce=False),
    Plan("resnet-2rank-nccl", "resnet", (*TIMED, *SMALL, "--nproc", "2", "--backend", "nccl", "--timeout-s", "30"),
         "ResNet-18, 2 NCCL ranks on the one GPU", may_refuse=("duplicate gpu", "invalid usage")),
    Plan("resnet-2rank-gloo", "resnet", (*TIMED, *SMALL, "--nproc", "2", "--backend", "gloo"),
         "ResNet-18, 2 gloo ranks on the one GPU (CUDA tensors)", fallback_for="resnet-2rank-nccl", hta_overlap=False),
    Plan("launch-bound", "gpu_check_graph", (*WINDOW, *TABLES, *LAUNCH, "--graph-steps", "60"),
         "ResNet-18, 32px, batch 4, no DDP: eager, then as a CUDA graph", allreduce=False, package="benchmarks",
         predict=True),
)
TINY_WINDOW = ("--steps", "5", "--wait", "1", "--warmup", "1", "--active", "2")
TINY = ("--cpu", "--profile", *TINY_WINDOW, *TABLES, "--batch-size", "4", "--nproc", "2", "--model", "resnet18",
        "--image-size", "32")
CPU_PLAN = (  # the dry run's mirror of the 2-rank pair (a refused first try, then its fallback) and the launch pair
    Plan("resnet-cpu-nccl", "resnet", (*TINY, "--backend", "nccl"), "dry run: NCCL refused on CPU ranks", gpu=False,
         may_refuse=("--backend nccl runs on gpus",)),
    Plan("resnet-cpu-2rank", "resnet", TINY, "dry run: ResNet-18 on 2 gloo CPU ranks", gpu=False,
         fallback_for="resnet-cpu-nccl"),
    Plan("launch-cpu", "gpu_check_graph", ("--cpu", *TINY_WINDOW, *TABLES, *LAUNCH[:4], "--batch-size", "2"),
         "dry run: the launch-bound run on the CPU (no CUDA graph)", allreduce=False, gpu=False,
         package="benchmarks", predict=True),
)


@dataclass
class Result:
    plan: Plan
    ran: bool = False
    returncode: int | None = None
    seconds: float = math.nan
    note: str = ""
    run_json: dict = field(default_factory=dict)
    checks: dict[str, verify.Check] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(c.status == verify.FAIL for c in self.checks.values())


def available(plan: Plan) -> bool:
    return (ROOT / plan.package / f"{plan.module}.py").exists()


def parse_check(plan: Plan) -> verify.Check:
    """The workload's own parser accepts the command (its flags, values and combinations)."""
    # benchmarks/ is no package: its modules are imported as the script's neighbours
    module = importlib.import_module(f"workloads.{plan.module}" if plan.package == "workloads" else plan.module)
    try:
        module.parse_config(list(plan.flags))
    except SystemExit as e:
        return verify.Check(verify.FAIL, f"rejected (exit {e.code}): python -m {' '.join(plan.argv)}")
    return verify.Check(verify.PASS, "parses")


def execute(plan: Plan, out: Path, timeout_s: float = RUN_TIMEOUT_S) -> Result:
    """Run one workload into out/runs/<name>, its output into out/logs/<name>.log."""
    result = Result(plan)
    run_dir, log = out / "runs" / plan.name, out / "logs" / f"{plan.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", *plan.argv, "--out", str(run_dir), "--force"]
    print(f"[gpu_check] {plan.name}: {' '.join(cmd[1:])}", flush=True)
    t0 = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        result.returncode, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        result.returncode, text = -1, f"{_text(e.stdout)}{_text(e.stderr)}\ntimed out after {timeout_s:.0f} s"
    result.seconds, result.ran = time.monotonic() - t0, True
    log.write_text(f"$ {' '.join(cmd)}\n{text}")
    ok = result.returncode == 0 and (run_dir / "run.json").exists()
    last = text.strip().splitlines()[-1] if text.strip() else ""
    refused = any(words in text.lower() for words in plan.may_refuse)
    status = verify.PASS if ok else verify.NA if refused else verify.FAIL
    result.checks["exit"] = verify.Check(status, f"exit {result.returncode} in {result.seconds:.0f} s"
                                         + ("" if ok else f" ({'refused, as expected' if status == verify.NA else 'failed'}): {last}"))
    if ok:
        result.run_json = json.loads((run_dir / "run.json").read_text())
    return result


def analyse(result: Result, out: Path) -> Result:
    """tracekit reads the run; comm kernels, all-reduce bytes, HTA agreement and the newer tables are checked."""
    import tracekit

    plan, run_dir = result.plan, out / "runs" / result.plan.name
    try:
        s = tracekit.summarize(run_dir, cache=False, workers=2)
    except Exception as e:
        result.checks["summarize"] = verify.Check(verify.FAIL, f"{type(e).__name__}: {e}")
        return result
    (out / "summaries").mkdir(exist_ok=True)
    (out / "summaries" / f"{plan.name}.txt").write_text(str(s))
    (out / "summaries" / f"{plan.name}.json").write_text(s.to_json())
    ranks = sorted(s.ranks["rank"])
    world = result.run_json["world_size"]
    result.checks["summarize"] = verify.Check(verify.PASS if ranks == list(range(world)) else verify.FAIL,
                                              f"ranks {ranks} of world size {world}")
    result.checks["comm kernels"] = verify.check_comm_kernels(s, run_dir)
    nccl_seen = result.checks["comm kernels"].status == verify.PASS
    result.checks["all-reduce bytes"] = (verify.check_allreduce_bytes(s, result.run_json, nccl_seen) if plan.allreduce
                                         else verify.Check(verify.NA, "no DDP all-reduce in this mode"))
    hta = verify.hta_analysis(verify.trace_files(run_dir)) if plan.gpu else None
    result.checks["HTA agreement"] = (_guard(verify.check_hta, s, hta, overlap=plan.hta_overlap) if plan.gpu
                                      else verify.Check(verify.NA, "CPU-only traces: HTA reads GPU traces only"))
    result.checks["kernel table"] = _guard(tables.check_kernel_table, s, hta)
    result.checks["FLOPs"] = _guard(tables.check_flops, s, result.run_json)
    result.checks["MFU"] = _guard(tables.check_mfu, s)
    result.checks["memory"] = _guard(tables.check_memory, s, result.run_json)
    if plan.predict:
        result.checks["prediction"] = _guard(tables.check_prediction, s, result.run_json)
    return result


def _guard(check, *args, **kwargs) -> verify.Check:
    """A check's result; an exception inside it fails that check alone."""
    try:
        return check(*args, **kwargs)
    except Exception as e:
        return verify.Check(verify.FAIL, f"the check raised {type(e).__name__}: {e}")


def _text(b: bytes | str | None) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else b or ""


def run_plan(plan: tuple[Plan, ...], out: Path, deadline: float | None = None,
             run_timeout_s: float = RUN_TIMEOUT_S) -> list[Result]:
    """Run the plan's runs one after the other, then analyse them in parallel until `deadline` (time.monotonic)."""
    results: dict[str, Result] = {}
    t0 = time.monotonic()
    for p in plan:
        left = RUNS_BUDGET_S - (time.monotonic() - t0)
        if left <= 0:
            results[p.name] = Result(p, note=f"skipped: the runs' {RUNS_BUDGET_S} s budget was spent; this counts as a failure")
            results[p.name].checks["exit"] = verify.Check(verify.FAIL, "not run: out of time")
            continue
        if not available(p):
            results[p.name] = Result(p, note=f"skipped: workloads/{p.module}.py does not exist yet")
            continue
        first = results.get(p.fallback_for) if p.fallback_for else None
        if p.fallback_for and (first is None or not first.ran or first.checks["exit"].status == verify.PASS):
            results[p.name] = Result(p, note=f"skipped: only needed when {p.fallback_for} fails")
            continue
        results[p.name] = execute(p, out, timeout_s=min(run_timeout_s, left + 30))
    ran = [r for r in results.values() if r.run_json]
    for done in analyse_all(ran, out, deadline or t0 + CHECK_BUDGET_S):
        results[done.plan.name] = done
    return list(results.values())


def analyse_all(ran: list[Result], out: Path, deadline: float) -> list[Result]:
    """`analyse` of each run, in parallel after the runs (their timings stay clean); one not done by `deadline`
    fails, and its worker is stopped."""
    if not ran:
        return []
    pool = ProcessPoolExecutor(max_workers=min(ANALYSIS_WORKERS, len(ran)))
    futures = {pool.submit(analyse, r, out): r for r in ran}
    done: list[Result] = []
    try:
        for f in as_completed(futures, timeout=max(1.0, deadline - time.monotonic())):
            r = futures[f]
            try:
                done.append(f.result())
            except Exception as e:
                r.checks["summarize"] = verify.Check(verify.FAIL, f"analysis raised {type(e).__name__}: {e}")
                done.append(r)
    except FutureTimeout:
        for f, r in futures.items():
            if not f.done():
                r.checks["summarize"] = verify.Check(verify.FAIL, "analysis not finished within the check's time "
                                                                  "budget (tracekit and HTA); this counts as a failure")
                done.append(r)
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.kill()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return done


def reference_checks() -> dict[str, verify.Check]:
    """The checks on real GPU traces from ../shared (dry run: the code paths a GPU run takes)."""
    import tracekit

    if not HTA_TRACES.is_dir():
        return {"reference traces": verify.Check(verify.NA, f"{HTA_TRACES} not found")}
    nccl = HTA_TRACES / "nccl_a100_2rank"
    s = tracekit.summarize(nccl, cache=False, workers=1)
    kernels = verify.nccl_kernels(next(nccl.glob("*.json.gz")))
    names = s.collectives["name"].value_counts()
    missing = {n: c for n, c in kernels.items() if names.get(n, 0) < c}
    comm = verify.Check(verify.FAIL if missing or not kernels else verify.PASS,
                        f"nccl_a100_2rank: {sum(kernels.values())} NCCL kernels, not read as comm: {missing or 'none'}")
    alexnet = HTA_TRACES / "alexnet_1gpu"
    summary = tracekit.summarize(alexnet, cache=False, workers=1)
    analysis = verify.hta_analysis(sorted(alexnet.glob("*.json.gz")))
    return {"comm kernels (nccl_a100_2rank)": comm, "HTA agreement (alexnet_1gpu)": verify.check_hta(summary, analysis),
            "kernel table (alexnet_1gpu)": tables.check_kernel_table(summary, analysis)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/gpu_check", help="output folder (replaced if it holds a gpu_check)")
    ap.add_argument("--dry-run", action="store_true", help="CPU machine: parse the GPU commands, small CPU runs")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_check: error: no CUDA GPU here; use --dry-run on a CPU machine", file=sys.stderr)
        return 2
    parses = {p.name: parse_check(p) if available(p) else verify.Check(verify.NA, f"no {p.package}/{p.module}.py")
              for p in GPU_PLAN}
    deadline = t0 + (DRY_CHECK_BUDGET_S if args.dry_run else CHECK_BUDGET_S)
    results = run_plan(CPU_PLAN if args.dry_run else GPU_PLAN, out, deadline,
                       DRY_RUN_TIMEOUT_S if args.dry_run else RUN_TIMEOUT_S)
    extra = reference_checks() if args.dry_run else {}
    text = report.markdown(results, parses, extra, dry_run=args.dry_run, seconds=time.monotonic() - t0)
    (out / "gpu_check.md").write_text(text)
    (out / "checks.json").write_text(json.dumps(
        {"dry_run": args.dry_run, "tolerances": report.tolerances(),
         "budget_s": {"runs_start_within": RUNS_BUDGET_S,
                      "run_timeout": DRY_RUN_TIMEOUT_S if args.dry_run else RUN_TIMEOUT_S,
                      "check": DRY_CHECK_BUDGET_S if args.dry_run else CHECK_BUDGET_S},
         "parses": {k: asdict(v) for k, v in parses.items()},
         "reference": {k: asdict(v) for k, v in extra.items()},
         "runs": [{"name": r.plan.name, "command": "python -m " + " ".join(r.plan.argv), "ran": r.ran, "note": r.note,
                   "returncode": r.returncode, "seconds": r.seconds, "run_json": r.run_json,
                   "checks": {k: asdict(v) for k, v in r.checks.items()}} for r in results]}, indent=2) + "\n")
    print(text)
    failed = [n for n, c in {**parses, **extra}.items() if c.status == verify.FAIL] + \
             [r.plan.name for r in results if r.failed]
    print(f"[gpu_check] {out}: {'FAILED: ' + ', '.join(failed) if failed else 'all checks passed'}"
          f" ({time.monotonic() - t0:.0f} s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
