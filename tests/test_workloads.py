"""The workloads: their command lines, their failures, and real 2-rank gloo runs read back with tracekit."""

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
import torch  # noqa: E402

import tracekit  # noqa: E402
from tests.workload_cli import run_main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--cpu", "--steps", "5", "--wait", "1", "--warmup", "1", "--active", "2", "--batch-size", "4", "--nproc", "2"]
TINY_RESNET = [*TINY, "--model", "resnet18", "--image-size", "32"]
TINY_GPT = [*TINY, "--n-layer", "1", "--n-embd", "64", "--n-head", "2", "--seq-len", "32", "--vocab-size", "8192"]


def workload(name: str, *flags: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"workloads.{name}", *flags], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def profiled_run(name: str, out: Path, *flags: str) -> Path:
    done = workload(name, *flags, "--profile", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def trace(run: Path, rank: int) -> dict:
    with gzip.open(run / f"rank-{rank}.pt.trace.json.gz") as f:
        return json.load(f)


def annotations(doc: dict, prefix: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e["name"].startswith(prefix)]


# --------------------------------------------------------------------------------------------- the CLI

@pytest.mark.parametrize("name", ["resnet", "gpt"])
def test_help_is_the_manual(name):
    done = workload(name, "--help")  # a real process: the module runs under -m and prints no warning at import
    assert done.returncode == 0 and done.stderr == ""
    for words in ("torchrun --standalone", "--nnodes", "CUDA_VISIBLE_DEVICES=0", "--nproc", "--profile", "--amp"):
        assert words in done.stdout


@pytest.mark.parametrize("name, flags, message", [
    ("resnet", ["--accum", "0"], "--accum must be >= 1, got 0"),
    ("resnet", ["--model", "resnet7"], "--model must be one of"),
    ("resnet", ["--mode", "dp", "--cpu"], "--mode dp runs on GPUs; drop --cpu"),
    ("resnet", ["--profile", "--steps", "3"], "ends before the profiled window"),
    ("gpt", ["--n-embd", "100", "--n-head", "3"], "--n-embd 100 is not a multiple of --n-head 3"),
])
def test_bad_flags_exit_with_one_line(name, flags, message):
    done = run_main(name, *flags)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert message in done.stderr and done.stderr.startswith(f"workloads.{name}: error:")


@pytest.mark.skipif(torch.cuda.is_available(), reason="DataParallel runs where there are GPUs")
def test_dp_without_gpus_exits_with_one_line():
    done = run_main("resnet", "--mode", "dp")
    assert done.returncode == 2
    assert done.stderr.strip() == ("workloads.resnet: error: --mode dp (DataParallel) needs CUDA GPUs and this machine"
                                   " has none; use --mode ddp")


@pytest.mark.slow
def test_a_failing_rank_stops_every_rank_and_is_named(tmp_path):
    done = workload("gpt", *TINY_GPT, "--fail-rank", "1", "--timeout-s", "30", "--out", str(tmp_path), timeout=60)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("workloads.gpt: error: rank 1 failed: RuntimeError: deliberate failure on rank 1")


@pytest.mark.parametrize("held", ["run.json", "rank-3.pt.trace.json.gz"])
def test_out_holding_a_run_is_refused_without_force(tmp_path, held):
    (tmp_path / held).write_text("an earlier run")
    done = run_main("resnet", *TINY_RESNET, "--profile", "--out", str(tmp_path))
    assert done.returncode == 2 and done.stdout == ""  # refused before anything started
    assert done.stderr.strip() == (f"workloads.resnet: error: --out {tmp_path} already holds a run ({held}); "
                                   "pick another folder, or add --force to replace it")
    assert [p.name for p in tmp_path.iterdir()] == [held] and (tmp_path / held).read_text() == "an earlier run"


def test_out_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("data")
    done = run_main("gpt", *TINY_GPT, "--out", str(tmp_path / "f"))
    assert done.returncode == 2 and done.stderr.strip() == f"workloads.gpt: error: --out {tmp_path / 'f'} is a file, not a folder"
    assert (tmp_path / "f").read_text() == "data"


@pytest.mark.slow
def test_force_replaces_only_the_run_and_the_output_is_quiet_with_progress(tmp_path):
    (tmp_path / "rank-3.pt.trace.json.gz").write_text("rank 3 of an earlier 4-rank run")  # must not join this run
    (tmp_path / "run.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("the user's")
    done = workload("gpt", *TINY_GPT, "--profile", "--out", str(tmp_path), "--force")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "rank-0.pt.trace.json.gz",
                                                          "rank-1.pt.trace.json.gz", "run.json"]
    assert (tmp_path / "notes.txt").read_text() == "the user's"
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["world_size"] == 2
    output = done.stdout + done.stderr
    for kineto in ("USDT", "profiler_start", "gpuGetDeviceCount", "ERROR"):  # Kineto's lines on CPU ranks
        assert kineto not in output
    progress = [line for line in done.stdout.splitlines() if line.startswith("step ")]
    # numbered as the trace numbers its ProfilerStep#N (from 0), the profiled ones named
    assert [line.split("|")[0].split()[1] for line in progress] == [str(i) for i in range(5)]
    assert all(line.split("|")[0].split()[2:] == ["of", "0-4"] for line in progress)
    profiled = [line.split("|")[0].split()[1] for line in progress if "[profiled" in line]
    assert [f"ProfilerStep#{n}" for n in profiled] == [f"ProfilerStep#{n}" for n in run["profiled_steps"]]
    assert all(f"[profiled: ProfilerStep#{n}]" in line for n, line in zip(profiled, (l for l in progress if "[prof" in l)))
    assert all("samples/s" in line for line in progress)
    rates = run["throughput_samples_per_s"]
    assert f"throughput: {rates['unprofiled']:.1f} samples/s unprofiled, {rates['profiled']:.1f} samples/s profiled" \
        in done.stdout


@pytest.mark.slow
def test_under_torchrun_each_rank_finishes_and_says_so(tmp_path):
    # Each torchrun rank leaves without the interpreter's teardown (workloads.common._leave), as a spawned rank
    # does: its files and its last lines must be out before it goes.
    at = TINY_GPT.index("--nproc")
    flags = TINY_GPT[:at] + TINY_GPT[at + 2:]  # torchrun starts the ranks
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "workloads.gpt", *flags, "--profile", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-0.pt.trace.json.gz", "rank-1.pt.trace.json.gz",
                                                          "run.json"]
    assert json.loads((tmp_path / "run.json").read_text())["world_size"] == 2
    assert f"wrote {tmp_path / 'run.json'}" in done.stdout  # rank 0's last line, flushed before it left
    assert len(tracekit.summarize(tmp_path, cache=False).ranks) == 2


@pytest.mark.slow
def test_image_folder_data(tmp_path):
    from PIL import Image

    for c in ("cat", "dog"):
        (tmp_path / "data" / c).mkdir(parents=True)
        for i in range(4):
            Image.new("RGB", (20, 20), (40 * i, 100, 200)).save(tmp_path / "data" / c / f"{i}.png")
    done = workload("resnet", "--cpu", "--data", str(tmp_path / "data"), "--steps", "2", "--batch-size", "2",
                    "--image-size", "16", "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["samples_per_step"] == 4 and run["traces"] == []


def test_memory_is_recorded_unless_turned_off():
    from workloads import resnet

    flags = ["--cpu", "--profile", "--steps", "5", "--wait", "1", "--warmup", "1", "--active", "2"]
    assert resnet.parse_config(flags)[0].profile_memory is True
    assert resnet.parse_config([*flags, "--no-profile-memory"])[0].profile_memory is False
    assert resnet.parse_config([*flags, "--profile-memory"])[0].profile_memory is True


def test_profiler_overhead_is_the_recorded_step_time_over_the_unprofiled_one():
    from workloads import resnet
    from workloads.record import StepClock

    cfg = resnet.parse_config(["--cpu", "--profile", "--steps", "5", "--wait", "1", "--warmup", "1", "--active", "2"])[0]
    clock = StepClock(cfg, None, samples_per_step=8)
    # The recorded steps (cfg.profiled_steps) take 15 ms, the un-profiled one after the profiler stops 10 ms; step 0
    # (start-up) and the steps between the profiler's start and its recording count as neither.
    clock.step_ms = [100.0, 10.0, 15.0, 15.0, 10.0]
    recorded = [clock.step_ms[i] for i in cfg.profiled_steps]
    unprofiled = [ms for i, ms in enumerate(clock.step_ms) if i > 0 and not cfg.wait <= i < cfg.profiled_steps.stop]
    assert (recorded, unprofiled) == ([15.0, 15.0], [10.0])  # 15 ms against 10 ms: 50% slower
    assert clock.profiler_overhead() == 0.5
    assert "profiler overhead +50.0% per step (with profile_memory)" in clock.summary()
    clock.step_ms = [100.0, 10.0, 15.0, 15.0]  # no un-profiled step: unknown
    assert clock.profiler_overhead() is None


# ------------------------------------------------------------------------------- real runs, read back

@pytest.fixture(scope="module")
def resnet_run(tmp_path_factory):
    return profiled_run("resnet", tmp_path_factory.mktemp("resnet"), *TINY_RESNET)


@pytest.fixture(scope="module")
def resnet_accum_run(tmp_path_factory):
    return profiled_run("resnet", tmp_path_factory.mktemp("resnet-accum2"), *TINY_RESNET, "--accum", "2")


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory):
    return profiled_run("gpt", tmp_path_factory.mktemp("gpt"), *TINY_GPT, "--straggler-rank", "1",
                        "--straggler-ms", "5")


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["resnet_run", "gpt_run", "resnet_accum_run"])
def test_run_json_describes_the_run(fixture, request):
    out = request.getfixturevalue(fixture)
    run = json.loads((out / "run.json").read_text())
    assert run["world_size"] == 2 and run["backend"] == "gloo" and len(run["devices"]) == 2
    assert run["traces"] == ["rank-0.pt.trace.json.gz", "rank-1.pt.trace.json.gz"]
    assert all((out / t).exists() for t in run["traces"])
    assert run["optimizer_steps"] == 5 and len(run["step_ms"]) == 5 and run["profiled_steps"] == [2, 3]
    assert run["micro_batches_per_step"] == run["config"]["accum"]
    assert run["samples_per_step"] == 4 * 2 * run["config"]["accum"]
    assert run["throughput_samples_per_s"]["unprofiled"] > 0 and run["throughput_samples_per_s"]["profiled"] > 0
    rates = run["throughput_samples_per_s"]
    assert run["profiler_overhead"] == pytest.approx(rates["unprofiled"] / rates["profiled"] - 1, abs=1e-3)
    assert run["config"]["profile_memory"] is True  # the default: the Memory page has data
    assert any(e.get("name") == "[memory]" for e in trace(out, 0)["traceEvents"])
    assert run["versions"]["torch"] == torch.__version__
    for rank in (0, 1):
        assert trace(out, rank)["distributedInfo"]["rank"] == rank


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["resnet_run", "gpt_run", "resnet_accum_run"])
def test_allreduce_bytes_per_optimizer_step_are_the_gradients(fixture, request):
    out = request.getfixturevalue(fixture)
    run = json.loads((out / "run.json").read_text())
    gradient_bytes = 4 * run["trainable_params"]  # float32 gradients
    s = tracekit.summarize(out)
    ar = s.collectives[s.collectives["op"] == "all_reduce"]
    per_step = ar.groupby(["rank", "step"])["bytes"].sum()
    assert sorted(per_step.index) == [(r, st) for r in (0, 1) for st in run["profiled_steps"]]
    assert (per_step == gradient_bytes).all(), per_step
    for rank in (0, 1):  # the same, straight from the trace: gloo's annotations carry the bucket sizes
        doc = trace(out, rank)
        for step in annotations(doc, "ProfilerStep#"):
            buckets = [e for e in annotations(doc, "gloo:all_reduce") if _inside(e["ts"], step)]
            assert sum(4 * math.prod(e["args"]["Input Dims"][0]) for e in buckets) == gradient_bytes


@pytest.mark.slow
def test_accumulation_all_reduces_only_in_the_last_micro_batch(resnet_accum_run, resnet_run):
    s = tracekit.summarize(resnet_accum_run)
    ar = s.collectives[s.collectives["op"] == "all_reduce"]
    for rank in (0, 1):
        doc = trace(resnet_accum_run, rank)
        to_summary_us = doc.get("baseTimeNanoseconds", 0) / 1e3 - s.run.origin_us
        last = {int(_step_of(e, doc).removeprefix("ProfilerStep#")): e for e in annotations(doc, "microbatch#1")}
        assert len(annotations(doc, "microbatch#0")) == len(last) == 2
        mine = ar[ar["rank"] == rank]
        assert len(mine) > 0
        for step, start_us in zip(mine["step"], mine["start_us"], strict=True):
            window = last[step]
            assert window["ts"] + to_summary_us <= start_us <= window["ts"] + window["dur"] + to_summary_us
    plain, accum = (json.loads((r / "run.json").read_text()) for r in (resnet_run, resnet_accum_run))
    assert plain["trainable_params"] == accum["trainable_params"]


@pytest.mark.slow
def test_the_straggler_sleeps_before_each_forward(gpt_run):
    assert len(annotations(trace(gpt_run, 1), "straggler_sleep")) == 2  # 2 profiled steps, 1 micro-batch each
    assert annotations(trace(gpt_run, 0), "straggler_sleep") == []


def _inside(ts: float, window: dict) -> bool:
    return window["ts"] <= ts <= window["ts"] + window["dur"]


def _step_of(event: dict, doc: dict) -> str:
    return next(s["name"] for s in annotations(doc, "ProfilerStep#") if _inside(event["ts"], s))
