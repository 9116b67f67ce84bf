"""Replay on real traces: the baseline reproduces every multi-rank run, and predictions match re-measured runs.

Prediction against a re-measured run. On CPU ranks sharing one machine, ranks that compute at the same time compute
more slowly (each takes a share of the cores), and no trace of the run with a straggler can show it: while the
straggler sleeps, the other rank computes alone. So each check reports two errors: the raw one, and one after scaling
each rank's compute by the slowdown tracekit measures between the two runs (compute time per step, run without the
straggler / run with it), passed to the replay as ``compute_scale``.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import tracekit

ROOT = Path(__file__).resolve().parents[1]
HTA = ROOT.parent / "shared" / "traces" / "hta"
MULTI_RANK = sorted(p for p in (ROOT / "sample_traces").iterdir() if p.is_dir()) + sorted(
    p for p in HTA.iterdir() if p.is_dir() and len(list(p.glob("*.json*"))) >= 2) if HTA.is_dir() else []


@pytest.mark.parametrize("run", MULTI_RANK, ids=lambda p: p.name)
def test_baseline_reproduces_the_measured_step_time(run, summaries):
    s = summaries(run, cache=False, workers=1)
    measured = float(s.ranks["step_time_us"].mean())
    replayed = float(tracekit.whatif(s, ["baseline"]).loc[0, "step_time_us"])
    error = abs(replayed - measured) / measured
    print(f"{run.name}: measured {measured:.1f} us, replayed {replayed:.1f} us, error {100 * error:.4f}%")
    assert error < 0.05


def _prediction_errors(with_straggler, without, summarize=tracekit.summarize) -> tuple[float, float, dict]:
    """(no_straggler predicted from ``with_straggler``: raw error, error with compute scaled, the per-rank compute
    slowdown) against ``without``'s measured mean step time. ``summarize``: the conftest's ``summaries`` for runs
    that other tests read too."""
    a = summarize(with_straggler, cache=False, workers=1)
    b = summarize(without, cache=False, workers=1)
    measured = float(b.ranks["step_time_us"].mean())
    per_step_a, per_step_b = (s.ranks.set_index("rank")["compute_us"] / s.ranks.set_index("rank")["steps"]
                              for s in (a, b))
    slowdown = (per_step_b / per_step_a).to_dict()
    raw = float(tracekit.whatif(a, ["no_straggler"]).loc[0, "step_time_us"])
    scaled = float(tracekit.whatif(a, ["no_straggler"], compute_scale=slowdown).loc[0, "step_time_us"])
    print(f"measured without straggler {measured:.0f} us; predicted raw {raw:.0f} us "
          f"({100 * (raw - measured) / measured:+.1f}%), compute x {slowdown} -> {scaled:.0f} us "
          f"({100 * (scaled - measured) / measured:+.1f}%); with straggler {a.ranks['step_time_us'].mean():.0f} us")
    return (raw - measured) / measured, (scaled - measured) / measured, slowdown


# The raw comparison presumes the machine computed at the same speed in both runs. tracekit measures each rank's
# compute speed in both runs; where another job on the shared machine moved it, the raw error measures that job,
# not the replay: it follows the drift about one for one (CI, 2026-12-01: compute x0.80 and x0.86 gave a raw error
# of +22.9% while the scaled one was +3.2%). So a pair counts as steady only within 10%, half the raw bound of 20%.
SAME_SPEED = 1.10


def _steady(slowdown: dict) -> bool:
    return all(1 / SAME_SPEED <= float(x) <= SAME_SPEED for x in slowdown.values())


def test_sample_straggler_pair(summaries):
    """sample_traces: the same GPT run with and without rank 1 sleeping 50 ms before every forward pass."""
    raw, scaled, slowdown = _prediction_errors(ROOT / "sample_traces/gpt-gloo-2rank-straggler",
                                               ROOT / "sample_traces/gpt-gloo-2rank", summaries)
    assert abs(raw) < 0.20 and abs(scaled) < 0.10


def test_waits_found_on_a_real_gloo_trace(summaries):
    """The training thread's wait for the all-reduce is not recorded: the node after the gap must wait for it."""
    s = summaries(ROOT / "sample_traces/gpt-gloo-2rank-straggler", cache=False, workers=1)
    g = s.graph
    comm = g.index[(g["cat"] == "comm").to_numpy() & (g["group"] >= 0).to_numpy()]
    waited_on = set(g.loc[g["pe"] >= 0, "pe"])
    assert len(comm) >= 4 and set(comm) <= waited_on
    # Rank 0 waited for rank 1 at every step; the path of each step runs through rank 1's sleep.
    events = s.critical_path_events
    assert set(events.loc[events["name"] == "straggler_sleep", "step"]) == set(s.critical_path["step"])


def _run_gpt(out: Path, *extra: str) -> Path:
    """The bundled GPT workload on 2 CPU ranks, its CPU-sized default config (as the sample traces), 4 profiled steps."""
    short = ["--steps", "7", "--wait", "1", "--warmup", "1", "--active", "4"]
    subprocess.run([sys.executable, "-m", "workloads.gpt", "--profile", "--cpu", "--nproc", "2", *short, *extra,
                    "--out", str(out)], check=True, cwd=ROOT, timeout=600, capture_output=True)
    return out


@pytest.mark.slow
@pytest.mark.serial  # times two live runs against each other: alone, so no neighbouring test skews one of them
def test_no_straggler_predicts_a_rerun_without_it(tmp_path):
    """The scaled error is always checked. The raw one is checked on a pair whose compute speed tracekit measures as
    steady (``SAME_SPEED``); a pair disturbed by other load on the machine is measured once more, and if that one is
    disturbed too, its raw error is reported as a warning, not asserted. A scaled error over the bound is measured
    once more too, and must hold on one of the two pairs (a CI run saw -0.4% on an unsteady pair, then -11.7% on
    a second one that was disturbed too): gloo's step times move by several % between two runs of one CPU job (scaled
    errors of -6.9% to +1.6% over 8 pairs on a quiet machine, one of -11.3% in a CI run), while a wrong replay
    is wrong on every pair."""
    pytest.importorskip("torch")
    scaled_errors = []
    for attempt in range(2):
        with_straggler = _run_gpt(tmp_path / f"straggler{attempt}", "--straggler-rank", "1", "--straggler-ms", "100")
        without = _run_gpt(tmp_path / f"plain{attempt}")
        raw, scaled, slowdown = _prediction_errors(with_straggler, without)
        scaled_errors.append(scaled)
        if abs(scaled) < 0.10 and _steady(slowdown):
            assert abs(raw) < 0.20
            return
    # No steady pair: the scaled error must hold on one of the two (a wrong replay misses on both).
    assert min(abs(e) for e in scaled_errors) < 0.10, scaled_errors
    warnings.warn(f"raw no_straggler error {100 * raw:+.1f}% not checked: compute speed moved x{slowdown} "
                  "between the runs (other load on the machine)")
