"""The GPU check script: its dry mode runs end to end on a CPU machine, and its checks fail when they should."""

import json
import math
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from tracedata import kernel, launch, write_trace

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402
import gpu_check_report as report  # noqa: E402
import gpu_check_verify as verify  # noqa: E402


# ----------------------------------------------------------------------------------------- the dry run

@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_check")
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run", "--out", str(tmp / "out"),
                           "--pack", str(tmp / "pack")], cwd=tmp, env=env, capture_output=True, text=True, timeout=400)
    return done, tmp / "out", tmp / "pack"


@pytest.mark.slow
def test_dry_run_passes_and_lays_out_its_folder(dry_run):
    done, out, pack = dry_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = out / "runs" / "resnet-cpu-2rank"
    assert sorted(p.name for p in run.iterdir()) == ["rank-0.pt.trace.json.gz", "rank-1.pt.trace.json.gz", "run.json"]
    assert (out / "logs" / "resnet-cpu-2rank.log").read_text().startswith("$ ")
    assert "--backend nccl runs on GPUs; drop --cpu" in (out / "logs" / "resnet-cpu-nccl.log").read_text()
    assert (out / "summaries" / "resnet-cpu-2rank.txt").read_text().strip()
    assert json.loads((out / "summaries" / "resnet-cpu-2rank.json").read_text())["ranks"]
    assert sorted(p.name for p in pack.iterdir()) == ["checks.json", "gpu_check.md", "results.tar.gz"]
    with tarfile.open(pack / "results.tar.gz") as t:
        names = set(t.getnames())
    assert {"logs/resnet-cpu-2rank.log", "summaries/resnet-cpu-2rank.txt", "runs/resnet-cpu-2rank/run.json"} <= names


@pytest.mark.slow
def test_dry_run_parses_every_gpu_command_and_checks_the_cpu_run(dry_run):
    _, out, _ = dry_run
    checks = json.loads((out / "checks.json").read_text())
    assert checks["dry_run"] is True
    assert set(checks["parses"]) == {p.name for p in gpu_check.GPU_PLAN}
    assert all(c["status"] == "pass" for name, c in checks["parses"].items() if name != "fsdp" or
               (ROOT / "workloads" / "fsdp.py").exists())
    runs = {r["name"]: r for r in checks["runs"]}
    refused, cpu = runs["resnet-cpu-nccl"], runs["resnet-cpu-2rank"]
    assert refused["returncode"] == 2 and refused["checks"]["exit"]["status"] == "n/a"
    statuses = {k: c["status"] for k, c in cpu["checks"].items()}
    assert statuses == {"exit": "pass", "summarize": "pass", "comm kernels": "n/a", "all-reduce bytes": "pass",
                        "HTA agreement": "n/a"}
    params = json.loads((out / "runs" / "resnet-cpu-2rank" / "run.json").read_text())["trainable_params"]
    assert cpu["checks"]["all-reduce bytes"]["detail"].startswith(f"{4 * params} bytes per step = 4 x {params} params")
    md = (out / "gpu_check.md").read_text()
    assert "| `resnet-cpu-2rank` | dry run: ResNet-18 on 2 gloo CPU ranks | 2 x gloo |" in md
    assert "| pass | pass | n/a | pass | n/a |" in md


# ------------------------------------------------------------------------------ the checks, on tiny inputs

def _summary(rows) -> SimpleNamespace:
    cols = ["rank", "step", "op", "bytes", "name"]
    return SimpleNamespace(collectives=pd.DataFrame(rows, columns=cols))


RUN = {"trainable_params": 10, "world_size": 2, "profiled_steps": [3, 4], "backend": "gloo"}


def test_allreduce_bytes_pass_only_when_every_rank_step_is_4_bytes_a_param():
    good = [(r, s, "all_reduce", b, "k") for r in (0, 1) for s in (3, 4) for b in (16, 24)]  # 16 + 24 = 4 x 10
    assert verify.check_allreduce_bytes(_summary(good), RUN, False).status == "pass"
    off = [*good[:-1], (1, 4, "all_reduce", 20, "k")]  # rank 1 step 4: 36 bytes
    assert verify.check_allreduce_bytes(_summary(off), RUN, False).status == "fail"
    missing = [row for row in good if row[1] == 3]  # step 4 never all-reduced
    assert verify.check_allreduce_bytes(_summary(missing), RUN, False).status == "fail"
    unknown = [*good[:-1], (1, 4, "all_reduce", math.nan, "k")]  # a size the trace does not give is not a pass
    assert verify.check_allreduce_bytes(_summary(unknown), RUN, False).status == "fail"
    outside = [(r, -1, "all_reduce", 40, "k") for r in (0, 1)]  # outside steps: not counted
    assert verify.check_allreduce_bytes(_summary(outside), RUN, False).status == "fail"
    nccl = {**RUN, "backend": "nccl"}
    assert verify.check_allreduce_bytes(_summary([]), nccl, False).status == "n/a"  # 1-rank NCCL, no kernel
    assert verify.check_allreduce_bytes(_summary([]), nccl, True).status == "fail"  # kernels there, none read


def test_nccl_kernels_are_counted_from_the_trace_when_launched_in_it(tmp_path):
    events = [launch(10, correlation=1), kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 20, 5, correlation=1),
              launch(30, correlation=2), kernel("ncclKernel_AllGather_RING_LL_Sum_int8_t", 40, 5, correlation=2),
              launch(50, correlation=3), kernel("volta_sgemm_128x64_nn", 60, 5, correlation=3),
              kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1, 5, correlation=99)]  # launched before the trace
    run = tmp_path / "run"
    write_trace(run / "rank-0.pt.trace.json.gz", events, rank=0, world_size=1)
    assert verify.nccl_kernels(run / "rank-0.pt.trace.json.gz") == {
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL": 1, "ncclKernel_AllGather_RING_LL_Sum_int8_t": 1}
    both = [(0, 3, "all_reduce", 4, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
            (0, 3, "all_gather", 4, "ncclKernel_AllGather_RING_LL_Sum_int8_t")]
    assert verify.check_comm_kernels(_summary(both), run).status == "pass"
    c = verify.check_comm_kernels(_summary(both[:1]), run)  # the all-gather kernel was not read as comm
    assert c.status == "fail" and "ncclKernel_AllGather_RING_LL_Sum_int8_t" in c.detail


def _result(name, unprofiled, profiled):
    plan = next(p for p in gpu_check.GPU_PLAN if p.name == name)
    run = {"world_size": 1, "backend": "nccl", "throughput_samples_per_s": {"unprofiled": unprofiled,
                                                                             "profiled": profiled}}
    return gpu_check.Result(plan, ran=True, returncode=0, run_json=run,
                            checks={"exit": verify.Check("pass", "exit 0")})


def test_report_speedups_and_overhead_are_ratios_of_run_json_throughput():
    fp32, bf16, bf16_cl = _result("resnet-fp32", 300, 200), _result("resnet-bf16", 600, 500), \
        _result("resnet-bf16-cl", 900, None)
    assert report.overhead_pct(fp32) == pytest.approx(50.0)  # 300 / 200 - 1
    assert math.isnan(report.overhead_pct(bf16_cl))  # profiled throughput unknown: overhead unknown, not 0
    md = report.markdown([fp32, bf16, bf16_cl], {}, {}, dry_run=False, seconds=1)
    assert "| --amp bf16 vs fp32 | 2.00x |" in md and "| --channels-last vs not, bf16 | 1.50x |" in md
    assert "| --amp bf16 --channels-last vs fp32 | 3.00x |" in md and "| --amp fp16 vs fp32 | unknown |" in md
    assert "--amp bf16 vs fp32 2.00x (within the claim)" in md
    assert "--amp bf16 --channels-last vs fp32 3.00x (above the claim)" in md
    assert "| `resnet-fp32` | ResNet-50, NCCL, world size 1, fp32 | 1 x nccl | 300.0 | 200.0 | 50.0% |" in md


def test_a_fallback_runs_only_when_the_first_try_did_not_pass_and_no_run_starts_out_of_time(monkeypatch, tmp_path):
    first = gpu_check.Plan("first", "resnet", (), "first try")
    second = gpu_check.Plan("second", "resnet", (), "fallback", fallback_for="first")
    for first_exit, second_runs in (("pass", False), ("n/a", True), ("fail", True)):
        def fake(plan, out, timeout_s, status=first_exit):
            exit_status = status if plan.name == "first" else "pass"
            return gpu_check.Result(plan, ran=True, returncode=0, checks={"exit": verify.Check(exit_status, "")})
        monkeypatch.setattr(gpu_check, "execute", fake)
        results = {r.plan.name: r for r in gpu_check.run_plan((first, second), tmp_path)}
        assert results["second"].ran is second_runs, first_exit
    monkeypatch.setattr(gpu_check, "RUNS_BUDGET_S", 0)
    results = gpu_check.run_plan((first,), tmp_path)
    assert not results[0].ran and results[0].failed  # a run the budget left out fails the check
