"""The GPU check script: its dry mode runs end to end on a CPU machine, and its checks fail when they should."""

import json
import math
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from tracedata import cpu, kernel, launch, step, write_trace

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402
import gpu_check_graph as graph_script  # noqa: E402
import gpu_check_report as report  # noqa: E402
import gpu_check_tables as tables  # noqa: E402
import gpu_check_verify as verify  # noqa: E402
import gpu_check_wheels as wheels  # noqa: E402


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
    refused, cpu_run = runs["resnet-cpu-nccl"], runs["resnet-cpu-2rank"]
    assert refused["returncode"] == 2 and refused["checks"]["exit"]["status"] == "n/a"
    statuses = {k: c["status"] for k, c in cpu_run["checks"].items()}
    assert statuses == {"exit": "pass", "summarize": "pass", "comm kernels": "n/a", "all-reduce bytes": "pass",
                        "HTA agreement": "n/a", "kernel table": "n/a", "FLOPs": "pass", "MFU": "n/a", "memory": "n/a"}
    params = json.loads((out / "runs" / "resnet-cpu-2rank" / "run.json").read_text())["trainable_params"]
    detail = cpu_run["checks"]["all-reduce bytes"]["detail"]
    assert detail.startswith(f"{4 * params} bytes per step = 4 x {params} params")
    md = (out / "gpu_check.md").read_text()
    assert "| `resnet-cpu-2rank` | dry run: ResNet-18 on 2 gloo CPU ranks | 2 x gloo |" in md
    assert "| pass | pass | n/a | pass | n/a | n/a | pass | n/a | n/a | - |" in md


@pytest.mark.slow
def test_dry_run_runs_the_new_checks_on_cpu_ranks_and_says_what_does_not_apply(dry_run):
    _, out, _ = dry_run
    checks = json.loads((out / "checks.json").read_text())
    assert set(checks["tolerances"]) == {"HTA agreement", "kernel table", "FLOPs", "MFU", "memory", "prediction"}
    runs = {r["name"]: r for r in checks["runs"]}
    for name in ("resnet-cpu-2rank", "launch-cpu"):
        run = runs[name]
        assert "--profile-memory" in run["command"] and "--with-flops" in run["command"]
        c = run["checks"]
        # FLOPs: tracekit's count of the window steps against FlopCounterMode's, a real comparison on CPU ranks
        flops = run["run_json"]["flop_counter_flops_per_step"]
        assert c["FLOPs"]["status"] == "pass" and flops > 0
        assert all(v == pytest.approx(flops, rel=0.03) for v in c["FLOPs"]["values"]["tracekit"].values())
        # MFU and CUDA memory: not applicable on CPU, and said so; never a pass
        assert c["MFU"]["status"] == "n/a" and c["MFU"]["detail"].startswith("not applicable on CPU")
        assert c["memory"]["status"] == "n/a" and c["memory"]["detail"].startswith("not applicable on CPU")
        # ... while the memory table itself was read from the CPU ranks' [memory] events
        peaks = c["memory"]["values"]["trace_peak_bytes"]
        assert peaks and all(v > 0 for v in peaks.values())
        assert run["run_json"]["cuda_max_memory_allocated_bytes"] is None
    prediction = runs["launch-cpu"]["checks"]["prediction"]
    assert prediction["status"] == "n/a" and "not applicable on CPU" in prediction["detail"]
    assert prediction["values"]["predicted_ms"] > 0 and prediction["values"]["graph_ms"] is None
    assert runs["launch-cpu"]["run_json"]["graph"] == {"skipped": "CUDA graphs need a GPU: not applicable on CPU"}
    assert "prediction" not in runs["resnet-cpu-2rank"]["checks"]
    if gpu_check.HTA_TRACES.is_dir():  # the kernel-table check's GPU path, on a real GPU trace
        assert checks["reference"]["kernel table (alexnet_1gpu)"]["status"] == "pass"
    md = (out / "gpu_check.md").read_text()
    for section in ("## FLOPs, MFU and memory per run", "## Launch-bound run: predicted against measured",
                    "| comparison | speed-up | peak, run.json | peak, trace | memory saving |"):
        assert section in md
    assert "| `launch-cpu` |" in md and "n/a (not applicable on CPU)" in md and report.GRAPH_SENTENCE in md


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


# ------------------------------------------------------------- the newer tables' checks, on a GPU-like trace

H200_MEM = 150754820096  # totalGlobalMem of the H200 the device machine has (143771 MiB)
STEP_FLOPS = 3 * 2 * 64 * 128 * 256  # three 64x128 @ 128x256 matmuls a step


def _gpu_run(folder: Path, device: str = "NVIDIA H200", memory: bool = True) -> Path:
    """A 1-rank GPU trace of 3 steps, each 3 aten::mm launching one kernel, with [memory] events on cuda:0."""
    events, corr, allocated = [], 1, 1_000_000
    for n in range(3):
        t = 1000 + n * 1000
        events.append(step(n + 1, t, 1000))
        for j in range(3):
            ts = t + 50 + j * 300
            events.append(cpu("aten::mm", ts, 40, **{"Input Dims": [[64, 128], [128, 256]],
                                                     "Input type": ["float", "float"], "External id": corr}))
            events.append(launch(ts + 10, corr))
            events.append(kernel("sgemm_64x64", ts + 100, 20 + j, correlation=corr, **{"External id": corr}))
            allocated += 65536
            if memory:
                events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 100,
                               "tid": 1, "ts": ts + 5, "args": {"Total Reserved": 1 << 24, "Bytes": 65536,
                                                                "Total Allocated": allocated, "Device Id": 0,
                                                                "Device Type": 1, "Addr": corr}})
            corr += 1
    props = [{"id": 0, "name": device, "totalGlobalMem": H200_MEM, "computeMajor": 9, "computeMinor": 0}]
    write_trace(folder / "rank-0.pt.trace.json.gz", events, rank=0, world_size=1, deviceProperties=props)
    return folder


@pytest.fixture(scope="module")
def gpu_summary(tmp_path_factory):
    import tracekit

    run = _gpu_run(tmp_path_factory.mktemp("gpu") / "run")
    return tracekit.summarize(run, cache=False, workers=1), run


PEAK = 1_000_000 + 9 * 65536  # the last [memory] event's Total Allocated


def test_flops_check_compares_every_window_step_with_flopcountermode(gpu_summary):
    s, _ = gpu_summary
    assert tables.check_flops(s, {"flop_counter_flops_per_step": STEP_FLOPS}).status == "pass"
    assert tables.check_flops(s, {"flop_counter_flops_per_step": STEP_FLOPS * 1.02}).status == "pass"  # 2% < 3%
    off = tables.check_flops(s, {"flop_counter_flops_per_step": STEP_FLOPS * 1.05})
    assert off.status == "fail" and "tolerance 3%" in off.detail
    assert tables.check_flops(s, {"flop_counter_flops_per_step": None}).status == "fail"  # nothing to compare
    unknown = SimpleNamespace(steps=s.steps.assign(matmul_flops=math.nan))
    assert tables.check_flops(unknown, {"flop_counter_flops_per_step": STEP_FLOPS}).status == "fail"  # NaN: no pass


def test_memory_check_compares_rank_0s_trace_peak_with_max_memory_allocated(gpu_summary):
    s, _ = gpu_summary
    ok = tables.check_memory(s, {"cuda_max_memory_allocated_bytes": PEAK * 1.015})  # the run peaked a little higher
    assert ok.status == "pass" and ok.values["rank0_trace_peak_bytes"] == PEAK and "whole run" in ok.detail
    assert tables.check_memory(s, {"cuda_max_memory_allocated_bytes": PEAK * 1.05}).status == "fail"
    assert tables.check_memory(s, {"cuda_max_memory_allocated_bytes": None}).status == "fail"  # GPU rank: no n/a
    no_events = SimpleNamespace(memory=s.memory.iloc[:0], ranks=s.ranks)
    assert tables.check_memory(no_events, {"cuda_max_memory_allocated_bytes": PEAK}).status == "fail"


def test_mfu_check_needs_a_finite_mfu_and_the_h200_sxm_entry(gpu_summary, tmp_path):
    import tracekit

    s, _ = gpu_summary
    c = tables.check_mfu(s)
    assert c.status == "pass", c.detail
    assert c.values["peaks"] == {"NVIDIA H200 SXM 141GB": {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0}}
    assert 0 < c.values["mfu_pct"][0] < 100 and c.values["dtypes"] == ["float"]
    nan = SimpleNamespace(ranks=s.ranks.assign(mfu_pct=math.nan), data_quality=s.data_quality, ops=s.ops)
    assert tables.check_mfu(nan).status == "fail"
    wrong = SimpleNamespace(ranks=s.ranks, data_quality=s.data_quality.assign(device_peaks="NVIDIA H200 NVL 141GB"),
                            ops=s.ops)
    assert "not NVIDIA H200 SXM 141GB" in tables.check_mfu(wrong).detail
    unknown = tracekit.summarize(_gpu_run(tmp_path / "a10g", device="NVIDIA A10G"), cache=False, workers=1)
    assert tables.check_mfu(unknown).status == "fail"  # no datasheet entry: no MFU, and the check says so


class _FakeHTA:
    def __init__(self, frame):
        self.frame = frame

    def get_gpu_kernel_breakdown(self, **kwargs):
        assert kwargs == {"visualize": False, "num_kernels": 10**6, "duration_ratio": 1.0,
                          "include_memory_kernels": True}
        return None, self.frame


def test_kernel_table_check_against_hta_on_a_gpu_trace(gpu_summary):
    s, run = gpu_summary
    hta = verify.hta_analysis(verify.trace_files(run))
    assert tables.check_kernel_table(s, hta).status == "pass"
    assert verify.check_hta(s, hta).status == "pass"
    assert os.environ.get("HTA_DISABLE_NS_ROUNDING") is None  # set only while HTA parsed
    _, theirs = hta.get_gpu_kernel_breakdown(visualize=False, num_kernels=10**6, duration_ratio=1.0,
                                             include_memory_kernels=True)
    more = theirs.assign(**{"sum (us)": theirs["sum (us)"] + theirs["mean (us)"]})  # one call more
    c = tables.check_kernel_table(s, _FakeHTA(more))
    assert c.status == "fail" and "6 calls" in c.detail and "7 calls" in c.detail
    assert tables.check_kernel_table(s, _FakeHTA(theirs.iloc[:0])).status == "fail"  # not in HTA's table
    other = theirs.assign(kernel_type="MEMORY")  # classified differently: not compared, and none left
    assert tables.check_kernel_table(s, _FakeHTA(other)).status == "fail"
    assert tables.check_kernel_table(s, RuntimeError("HTA broke")).status == "fail"


def test_prediction_check_is_the_graph_time_against_no_host_gaps(gpu_summary, monkeypatch):
    import tracekit

    s, _ = gpu_summary
    table = pd.DataFrame({"scenario": ["baseline", "no_host_gaps"], "step_time_us": [5000.0, 2000.0]})
    monkeypatch.setattr(tracekit, "whatif", lambda summary, scenarios: table)
    run = {"samples_per_step": 4, "throughput_samples_per_s": {"unprofiled": 1000.0}}
    close = tables.check_prediction(s, {**run, "graph": {"mean_step_ms": 2.4}})
    assert close.status == "pass" and close.values["ratio"] == pytest.approx(1.2)
    assert close.values["eager_ms"] == pytest.approx(4.0) and close.values["kernels_per_step"] == 3.0
    assert tables.check_prediction(s, {**run, "graph": {"mean_step_ms": 3.0}}).status == "fail"  # 1.5 > 1.3
    assert tables.check_prediction(s, {**run, "graph": {"error": "capture failed"}}).status == "fail"
    skipped = tables.check_prediction(s, {**run, "graph": {"skipped": "CUDA graphs need a GPU"}})
    assert skipped.status == "n/a" and "predicted no_host_gaps 2.000 ms" in skipped.detail


def test_analyse_runs_every_check_on_a_gpu_run(gpu_summary, tmp_path):
    _, trace_dir = gpu_summary
    out = tmp_path / "out"
    run_dir = out / "runs" / "launch-bound"
    run_dir.mkdir(parents=True)
    (run_dir / "rank-0.pt.trace.json.gz").symlink_to(next(trace_dir.glob("*.gz")))
    run = {"world_size": 1, "backend": None, "trainable_params": 1, "profiled_steps": [1, 2, 3],
           "flop_counter_flops_per_step": STEP_FLOPS, "cuda_max_memory_allocated_bytes": PEAK, "samples_per_step": 4,
           "throughput_samples_per_s": {"unprofiled": 1000.0}, "graph": {"mean_step_ms": 1e6}}
    (run_dir / "run.json").write_text(json.dumps(run))
    plan = next(p for p in gpu_check.GPU_PLAN if p.name == "launch-bound")
    result = gpu_check.analyse(gpu_check.Result(plan, ran=True, returncode=0, run_json=run), out)
    statuses = {k: c.status for k, c in result.checks.items()}
    assert statuses == {"summarize": "pass", "comm kernels": "n/a", "all-reduce bytes": "n/a", "HTA agreement": "pass",
                        "kernel table": "pass", "FLOPs": "pass", "MFU": "pass", "memory": "pass",
                        "prediction": "fail"}  # a graph a million ms long is far from any prediction
    md = report.markdown([result], {}, {}, dry_run=False, seconds=1)
    assert "| `launch-bound` | 1.258e+07 | 1.258e+07 |" in md and "NVIDIA H200 SXM 141GB: bf16 989.5" in md


def test_report_puts_amps_memory_saving_beside_its_speedup():
    fp32, bf16 = _result("resnet-fp32", 300, 200), _result("resnet-bf16", 600, 500)
    fp32.run_json["cuda_max_memory_allocated_bytes"], bf16.run_json["cuda_max_memory_allocated_bytes"] = 20e9, 12e9
    fp32.checks["memory"] = verify.Check("pass", "", {"rank0_trace_peak_bytes": 19.9e9})
    md = report.markdown([fp32, bf16], {}, {}, dry_run=False, seconds=1)
    assert "| --amp bf16 vs fp32 | 2.00x | 12.00 vs 20.00 | unknown vs 19.90 | 40.0% |" in md


def _slow_analyse(result, out):
    time.sleep(60)
    return result


def test_analysis_past_the_deadline_fails_and_is_stopped(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_check, "analyse", _slow_analyse)
    r = gpu_check.Result(gpu_check.GPU_PLAN[0], ran=True, returncode=0, run_json={"world_size": 1},
                         checks={"exit": verify.Check("pass", "")})
    t0 = time.monotonic()
    done = gpu_check.analyse_all([r], tmp_path, deadline=t0 + 1)
    assert time.monotonic() - t0 < 20 and done[0].failed
    assert "time budget" in done[0].checks["summarize"].detail


def test_the_launch_bound_script_parses_as_the_plan_runs_it():
    plan = next(p for p in gpu_check.GPU_PLAN if p.name == "launch-bound")
    args = graph_script.parse_config(list(plan.flags))
    assert (args.model, args.batch_size, args.image_size, args.profile_memory, args.with_flops) == \
        ("resnet18", 4, 32, True, True)
    for bad in (["--batch-size", "1"], ["--steps", "3"], ["--graph-steps", "5"]):
        with pytest.raises(SystemExit):
            graph_script.parse_config(bad)
    assert plan.argv[0] == "benchmarks.gpu_check_graph" and gpu_check.available(plan)


# ----------------------------------------------------------------------------------------- carried wheels

def _wheel(folder: Path, dist: str, module: str, filler: int = 0) -> Path:
    """A minimal pure-Python wheel of `dist` holding `module` (with `filler` bytes of padding)."""
    info = f"{dist}-1.0.dist-info"
    path = folder / f"{dist}-1.0-py3-none-any.whl"
    files = {f"{module}/__init__.py": f"VALUE = 42\nPAD = {os.urandom(filler // 2).hex()!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def test_wheels_are_packed_with_xz_and_installed_only_for_what_the_image_lacks(monkeypatch, tmp_path):
    carried = tmp_path / "wheels"
    carried.mkdir()
    big = _wheel(carried, "numba", "numba", filler=20_000)
    small = [_wheel(carried, "llvmlite", "llvmlite"), _wheel(carried, "msgspec", "msgspec")]
    monkeypatch.setattr(wheels, "PACK_OVER_BYTES", max(p.stat().st_size for p in small))
    packed = wheels.pack(carried)
    assert [p.name for p in packed] == [big.name + ".xz"] and not big.exists() and all(p.exists() for p in small)
    monkeypatch.setattr(wheels, "missing", lambda python=sys.executable: ["numba"])  # the image lacks numba only
    site = tmp_path / "site"
    assert wheels.install(carried, site) == 0
    assert sorted(p.name for p in site.iterdir() if not p.name.endswith("-info")) == ["llvmlite", "numba"]
    assert "VALUE = 42" in (site / "numba" / "__init__.py").read_text()  # the .xz unpacked to the same wheel
    monkeypatch.setattr(wheels, "missing", lambda python=sys.executable: ["hta"])  # no wheel for it: said, exit 1
    assert wheels.install(carried, tmp_path / "site2") == 1
