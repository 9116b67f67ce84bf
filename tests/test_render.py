"""The text report shows the Summary's numbers in the stated units (ms, MB, GB/s, % of span), computed by hand here."""

import json
from pathlib import Path

import pytest

import tracekit
from tracedata import kernel, step, write_trace

ROOT = Path(__file__).resolve().parents[1]

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
AR = {"Collective name": "allreduce", "In msg nelems": 250_000, "Out msg nelems": 250_000, "dtype": "Float",
      "Group size": 2, "Process Group Name": "0"}


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    # Two 2000 us steps in the window (a third is dropped). Each: compute [0, 1500), then a 1 MB all_reduce taking
    # 250 us, nothing under it. Span 0 -> 3750 us; compute 3000 (80%); exposed comm 500 (13%); idle 250 (7%).
    events = [step(i + 1, i * 2000, 2000) for i in range(3)]
    for base in (0, 2000):
        events += [kernel("gemm_bf16", base, 1500), kernel(NCCL, base + 1500, 250, stream=20, **AR)]
    events += [kernel("gemm_bf16", 4000, 100)]
    path = write_trace(tmp_path_factory.mktemp("run") / "rank0.json", events, rank=0, world_size=1)
    return tracekit.summarize(path, cache=False)


def rank_line(text: str) -> str:
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Per rank"))
    return lines[at + 2]  # the header, then rank 0


def test_the_summary_behind_the_report(summary):
    r = summary.ranks.iloc[0]
    assert [r["step_time_us"], r["span_us"], r["compute_us"], r["exposed_comm_us"], r["idle_us"]] == \
        [2000, 3750, 3000, 500, 250]
    assert r["allreduce_count"] == 2 and r["allreduce_bytes"] == 2_000_000 and r["allreduce_us"] == 500


def test_unnamed_gpu_is_not_called_cpu(summary):
    assert "devices: gpu" in str(summary).splitlines()[1]


def test_rank_line_in_ms_with_shares_of_the_span(summary):
    line = rank_line(str(summary))
    assert line.split()[:3] == ["0", "gpu", "2"]  # rank, device, steps
    for shown in ("2.00", "3.75", "3.00 (80%)", "0.500 (13%)", "0.250 (7%)", "0.0"):  # step, span, compute, exposed,
        assert f" {shown} " in f" {line} ", (shown, line)                            # idle, overlap %
    assert line.split()[-3:] == ["2", "0.500", "2.00"]  # all_reduce n, ms, MB


def test_per_op_line_in_ms_mb_and_gbps(summary):
    text = str(summary)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Collectives in the window"))
    op = lines[at + 2].split()
    # 2 calls, 0.5 ms, 2 MB; busbw = 1e6 B / 250 us = 4 GB/s, x 2(n-1)/n = 1 for n = 2.
    assert op == ["all_reduce", "2", "0.500", "2.00", "4.00"]


def test_json_carries_the_same_numbers(summary):
    doc = json.loads(summary.to_json())
    assert doc["ranks"][0]["span_us"] == 3750 and doc["ranks"][0]["step_time_us"] == 2000


def test_the_json_leaves_out_the_event_tables_unless_asked(summaries):
    s = summaries(ROOT / "sample_traces" / "resnet-gloo-2rank", cache=False, workers=1)
    lean = json.loads(s.to_json())
    left_out = ["gaps", "critical_path_events", "ops_by_shape", "op_steps", "memory_timeline", "graph"]
    assert not set(left_out) & set(lean) and lean["tables_left_out"] == left_out
    assert len(lean["collectives"]) == len(s.collectives) and len(lean["steps"]) == len(s.steps)
    import gzip

    trace_bytes = sum(len(gzip.decompress(p.read_bytes()))
                      for p in (ROOT / "sample_traces" / "resnet-gloo-2rank").glob("*.gz"))
    assert len(s.to_json()) < 0.02 * trace_bytes  # well under 10% of the traces' JSON
    some = json.loads(s.to_json(tables=["gaps"]))
    assert len(some["gaps"]) == len(s.gaps) and some["tables_left_out"] == left_out[1:]
    every = json.loads(s.to_json(tables="all"))
    assert len(every["graph"]) == len(s.graph) and len(every["critical_path_events"]) == len(s.critical_path_events)
    assert "tables_left_out" not in every
    with pytest.raises(ValueError, match="no such table: gapz"):
        s.to_dict(tables=["gapz"])


def test_the_cli_json_takes_tables(capsys):
    from tracekit.cli.main import main

    run = str(ROOT / "sample_traces" / "resnet-gloo-2rank")
    assert main(["summarize", run, "--json", "--tables", "gaps,critical_path_events", "--no-cache"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gaps"] and doc["critical_path_events"] and "graph" in doc["tables_left_out"]
    assert main(["summarize", run, "--json", "--all-tables", "--no-cache"]) == 0
    assert json.loads(capsys.readouterr().out)["graph"]
    assert main(["summarize", run, "--json", "--tables", "nope"]) == 2
    assert "no such table: nope" in capsys.readouterr().err


def test_mfu_is_na_without_a_known_peak_and_a_number_with_one(summaries):
    """One meaning everywhere: n/a on a device with no known peak (a CPU among them), a number where the peak is known."""
    from tracekit.fmt import mfu

    assert mfu(float("nan"), "") == "n/a"  # a CPU-only rank
    assert mfu(float("nan"), "unknown: AMD Radeon Graphics") == "n/a"
    assert mfu(float("nan"), "NVIDIA A100 SXM4 80GB") == "unknown"  # the peak is known, the FLOPs are not
    assert mfu(41.26, "NVIDIA A100 SXM4 80GB") == "41.3"
    text = str(summaries(ROOT / "sample_traces" / "resnet-gloo-2rank", cache=False))
    mfu_block = text.split("Matmul FLOPs and MFU per rank")[1].split("\n\n")[0]
    rows = [line.split() for line in mfu_block.splitlines()[2:]]
    assert len(rows) == 2 and all(row[-1] == "n/a" for row in rows)
