"""A real CPU DDP run (gloo) with one rank delayed on purpose, and ``tracekit compare`` on two workload runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]
DELAY_MS = 80


@pytest.fixture(scope="module")
def straggler_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("straggler")
    tiny = ["--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--vocab-size", "2048", "--seq-len", "16",
            "--batch-size", "4", "--steps", "8", "--wait", "1", "--warmup", "1", "--active", "5"]
    subprocess.run([sys.executable, "-m", "workloads.gpt", "--profile", "--nproc", "2", *tiny,
                    "--bucket-cap-mb", "0.05", "--straggler-rank", "1", "--straggler-ms", str(DELAY_MS), "--out", str(out)],
                   check=True, cwd=ROOT, timeout=300, capture_output=True)
    return tracekit.summarize(out)


@pytest.mark.slow
@pytest.mark.serial  # the live run (the fixture) is timed: arrival order and waits against the delay
def test_delayed_rank_is_named_the_straggler(straggler_run):
    s = straggler_run
    assert s.stragglers["rank"].tolist() == [1]
    row = s.stragglers.iloc[0]  # the binomial test passes: p = 1/2^k when last at every one of k calls with 2 ranks
    assert row["p_value"] < 0.01 and row["matched"] >= 5 and s.run.straggler_suspicions.empty
    calls = s.collectives[s.collectives["in_window"] & (s.collectives["matched_ranks"] == 2)]
    last = calls[calls["last_arrival"]]
    assert (last["rank"] == 1).mean() >= 0.9 and len(last) >= 6
    assert any(f.kind == "straggler" and f.ranks == (1,) for f in s.findings)


@pytest.mark.slow
@pytest.mark.serial
def test_others_wait_accounts_for_the_delay(straggler_run):
    s = straggler_run
    rank0 = s.ranks.set_index("rank").loc[0]
    per_step_ms = rank0["comm_wait_us"] / rank0["steps"] / 1e3
    assert 0.6 * DELAY_MS <= per_step_ms <= 1.3 * DELAY_MS, per_step_ms
    assert s.ranks.set_index("rank").loc[1, "comm_wait_us"] < 0.1 * rank0["comm_wait_us"]


def test_compare_cli_prints_a_table():
    a, b = ROOT / "sample_traces/resnet-gloo-2rank", ROOT / "sample_traces/resnet-gloo-2rank-accum2"
    done = subprocess.run([sys.executable, "-m", "tracekit", "compare", str(a), str(b)], capture_output=True, text=True,
                          check=True)
    lines = done.stdout.splitlines()
    assert any(line.split()[:1] == ["step_time_ms"] for line in lines)
    assert any(line.split()[0] == "all_reduce_MB_per_step" and line.split()[-2:] == ["1.00x", "trace"] for line in lines if line.split())
    as_json = json.loads(subprocess.run([sys.executable, "-m", "tracekit", "compare", str(a), str(b), "--json"],
                                        capture_output=True, text=True, check=True).stdout)
    metrics = {m["metric"]: m for m in as_json["metrics"]}
    assert metrics["throughput_samples_per_s"]["a"] > 0 and metrics["all_reduce_MB_per_step"]["ratio"] == pytest.approx(1)
