"""``--profile-stages``: each stage's time and peak, recorded only when asked, never cached, never changing a result."""

from __future__ import annotations

import time

import pytest

from tracekit import stageclock
from tracekit.cli.main import main
from tracekit.rank import cache
from tracekit.rank.analyze import RankResult, analyze_rank
from tracekit.events.config import Config

RUN = "sample_traces/pp-gpipe-2rank"
RANK_STAGES = ["read", "classify and steps", "collectives, p2p, fsdp", "step breakdown, pipeline, gaps",
               "rank breakdown, kernels", "ops, flops, memory", "quality, graph"]


@pytest.fixture
def recording():
    stageclock.enable()
    yield
    stageclock.enable(False)
    stageclock.take()


def test_off_records_nothing():
    stageclock.enable(False)
    with stageclock.stage("x"):
        pass
    stageclock.Laps()("y")
    assert stageclock.take() == ()


def test_a_sleeping_stage_is_wall_time_not_cpu(recording):
    with stageclock.stage("sleep"):
        time.sleep(0.2)
    laps = stageclock.Laps()
    sum(i * i for i in range(300_000))  # CPU work
    laps("spin")
    sleep, spin = stageclock.take(rank=3)
    assert (sleep.stage, sleep.rank, spin.stage, spin.rank) == ("sleep", 3, "spin", 3)
    assert sleep.wall_s >= 0.2 and sleep.cpu_s < 0.1
    assert spin.cpu_s > 0 and spin.peak_mb > 10  # a Python process's resident size is tens of MB at least
    assert sleep.own_peak and spin.own_peak  # Linux: the high-water mark is reset for each stage
    assert stageclock.take() == ()  # taken: emptied


def test_each_stage_has_its_own_peak(recording):
    block = bytearray(300 * 2**20)
    with stageclock.stage("big"):
        block[::4096] = b"x" * len(block[::4096])  # touch every page: 300 MiB more resident
    del block
    with stageclock.stage("small"):  # the big block is gone: its peak is not this stage's
        pass
    big, small = stageclock.take()
    assert big.own_peak and small.own_peak
    assert big.peak_mb - small.peak_mb > 250


def test_rank_stages_travel_with_the_result_but_not_into_the_cache(recording, tmp_path):
    result = analyze_rank(f"{RUN}/rank-1.pt.trace.json.gz", Config())
    assert [t.stage for t in result.stage_times] == RANK_STAGES
    assert {t.rank for t in result.stage_times} == {result.meta.rank}
    store = cache.Store(tmp_path, RankResult)
    store.put("k", result)
    assert store.get("k").stage_times == ()


def test_cli_prints_every_stage_on_stderr_and_the_same_report(capsys):
    assert main(["summarize", RUN, "--no-cache", "--workers", "1"]) == 0
    plain = capsys.readouterr().out
    assert main(["summarize", RUN, "--no-cache", "--workers", "1", "--profile-stages"]) == 0
    captured = capsys.readouterr()
    assert captured.out == plain
    lines = captured.err.splitlines()
    for name in RANK_STAGES:
        assert any(line.startswith(f"rank: {name} ") for line in lines), name
    for name in ("analyse ranks (parallel)", "cross-rank join, clocks, p2p pairs", "graph replays, critical path, "
                 "what-ifs", "render"):
        assert any(line.startswith(f"run: {name} ") for line in lines), name
    assert "summarize:" in lines[-1] and "s wall in all" in lines[-1]
    assert not stageclock.enabled()  # off again after the command


def test_table_sums_rank_stages_and_keeps_the_slowest():
    rows = [stageclock.StageTime("read", 2.0, 1.5, 100.0, True, 0), stageclock.StageTime("read", 3.0, 1.0, 150.0, True, 1),
            stageclock.StageTime("join", 0.5, 0.25, 300.0, False)]
    text = stageclock.table(rows).splitlines()
    assert text[1].split() == ["rank:", "read", "5.00", "2.50", "3.00", "150"]
    assert text[2].split() == ["run:", "join", "0.50", "0.25", "300*"]
    assert text[3].startswith("* the process's peak so far")
