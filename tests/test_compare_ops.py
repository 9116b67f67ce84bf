"""compare's per-op and per-kernel tables on tiny hand-built GPU runs whose every number is worked out here: calls
and ms per window step (mean over ranks), change b - a, ratio b / a, status, the ordering, the text and the JSON."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

import tracekit
from tracedata import cpu, kernel, step, write_trace
from tracekit.cli.main import main
from tracekit.render.compare_ops import COLUMNS

# Run a, per step: aten::mm launches a 200 us gemm, aten::relu a 50 us relu_kernel, aten::dropout a 30 us
# dropout_kernel. Run b, per step: the gemm takes 400 us (the op's time doubles), aten::relu runs twice (the
# kernel's calls go 1 -> 2), aten::gelu launches an 80 us gelu_kernel (added), and there is no dropout (removed).
A_STEP = [("aten::mm", "gemm", 200), ("aten::relu", "relu_kernel", 50), ("aten::dropout", "dropout_kernel", 30)]
B_STEP = [("aten::mm", "gemm", 400), ("aten::relu", "relu_kernel", 50), ("aten::relu", "relu_kernel", 50),
          ("aten::gelu", "gelu_kernel", 80)]


def _launch(ts, correlation, external_id):
    return cpu("cudaLaunchKernel", ts, 2, cat="cuda_runtime", correlation=correlation,
               **{"External id": external_id})


def gpu_run(folder: Path, n_steps: int, per_step, ranks=1, skip_on_rank1=()) -> Path:
    """``n_steps`` 1000 us steps (the default window drops the last), each running ``per_step``'s (op, kernel,
    kernel_us) in order: op i at 10 + 60 i for 40 us on the host, its kernel launched 10 us in and run one after the
    other from 100 us on the device. Rank 1 leaves out the ops named in ``skip_on_rank1``."""
    for rank in range(ranks):
        events, ids = [], 0
        for k in range(n_steps):
            t = 1000 * k
            events.append(step(k + 1, t, 1000))
            device_t = t + 100
            for i, (op, kname, kus) in enumerate(per_step):
                if rank == 1 and op in skip_on_rank1:
                    continue
                ids += 1
                host = t + 10 + 60 * i
                events += [cpu(op, host, 40, **{"External id": ids}), _launch(host + 10, ids, ids),
                           kernel(kname, device_t, kus, correlation=ids, **{"External id": ids})]
                device_t += kus
        write_trace(folder / f"rank{rank}.json", events, rank=rank, world_size=ranks)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    # a: 2 steps, 1 in the window; b: 3 steps, 2 in the window: b's sums are halved to be per step.
    return gpu_run(root / "a", 2, A_STEP), gpu_run(root / "b", 3, B_STEP)


@pytest.fixture(scope="module")
def comparison(folders):
    return tracekit.compare(*(tracekit.summarize(f, cache=False, workers=1) for f in folders))


def _rows(table):
    return table.set_index("name")


def test_ops_per_window_step_by_hand(comparison):
    ops = _rows(comparison.ops)
    assert list(comparison.ops.columns) == list(COLUMNS)
    assert comparison.op_time == ("device", "device")
    cols = ["calls_per_step_a", "calls_per_step_b", "ms_per_step_a", "ms_per_step_b", "change_ms"]
    expected = {"aten::mm": [1, 1, 0.2, 0.4, 0.2],  # b: 2 x 400 us over 2 steps, not 0.8
                "aten::gelu": [0, 1, 0.0, 0.08, 0.08],
                "aten::relu": [1, 2, 0.05, 0.1, 0.05],
                "aten::dropout": [1, 0, 0.03, 0.0, -0.03]}
    for name, values in expected.items():
        assert ops.loc[name, cols].tolist() == pytest.approx(values), name
    assert ops.loc["aten::mm", "ratio"] == pytest.approx(2.0) and ops.loc["aten::relu", "ratio"] == pytest.approx(2.0)
    assert ops.loc["aten::dropout", "ratio"] == 0.0 and math.isnan(ops.loc["aten::gelu", "ratio"])  # b / 0
    assert ops.loc[list(expected), "status"].tolist() == ["both", "added", "both", "removed"]
    # Largest |change| first: 0.2, 0.08, 0.05, 0.03; the step annotations (no device time) change 0.
    assert comparison.ops["name"].tolist()[:4] == list(expected)
    assert ops.loc["ProfilerStep#*", ["status", "calls_per_step_a", "calls_per_step_b", "change_ms"]].tolist() == \
        ["both", 1, 1, 0]  # ProfilerStep#1 in a, #1 and #2 in b: one name


def test_kernels_per_window_step_by_hand(comparison):
    k = _rows(comparison.kernels)
    cols = ["status", "calls_per_step_a", "calls_per_step_b", "ms_per_step_a", "ms_per_step_b", "change_ms"]
    expected = {"gemm": ["both", 1, 1, 0.2, 0.4, 0.2], "gelu_kernel": ["added", 0, 1, 0.0, 0.08, 0.08],
                "relu_kernel": ["both", 1, 2, 0.05, 0.1, 0.05],
                "dropout_kernel": ["removed", 1, 0, 0.03, 0.0, -0.03]}
    assert comparison.kernels["name"].tolist() == list(expected)
    for name, values in expected.items():
        assert k.loc[name, cols[0]] == values[0], name
        assert k.loc[name, cols[1:]].tolist() == pytest.approx(values[1:]), name
    assert k.loc["relu_kernel", "ratio"] == pytest.approx(2.0) and k.loc["dropout_kernel", "ratio"] == 0.0


def test_the_mean_over_ranks_counts_zero_where_a_rank_never_calls(folders, tmp_path):
    """Two ranks, 2 window steps; rank 1 never runs dropout: (1 + 0) / 2 calls and (30 + 0) / 2 us per step."""
    a = tracekit.summarize(folders[0], cache=False, workers=1)
    c = tracekit.summarize(gpu_run(tmp_path / "c", 3, A_STEP, ranks=2, skip_on_rank1={"aten::dropout"}),
                           cache=False, workers=1)
    result = tracekit.compare(a, c)
    ops, kernels = _rows(result.ops), _rows(result.kernels)
    assert ops.loc["aten::dropout", ["calls_per_step_b", "ms_per_step_b", "change_ms", "ratio"]].tolist() == \
        pytest.approx([0.5, 0.015, -0.015, 0.5])
    assert kernels.loc["dropout_kernel", ["calls_per_step_b", "ms_per_step_b"]].tolist() == pytest.approx([0.5, 0.015])
    assert ops.loc["aten::mm", ["ms_per_step_b", "change_ms"]].tolist() == pytest.approx([0.2, 0.0])
    assert set(result.ops["status"]) == {"both"}


def test_the_text_has_both_sections_after_the_metrics(comparison):
    text = str(comparison)
    assert text.index("step_time_ms") < text.index("By op (top 10 by change") < text.index("By kernel (top 10")
    lines = text.splitlines()
    ops_at = next(i for i, line in enumerate(lines) if line.startswith("By op"))
    assert "device self time" in lines[ops_at]
    assert lines[ops_at + 1].split() == ["op", "status", "calls/step", "a", "calls/step", "b", "ms/step", "a",
                                         "ms/step", "b", "change", "ms", "ratio"]
    assert lines[ops_at + 2].split() == ["aten::mm", "both", "1", "1", "0.200", "0.400", "+0.200", "2.00x"]
    assert lines[ops_at + 3].split() == ["aten::gelu", "added", "0", "1", "0.00", "0.0800", "+0.0800", "n/a"]
    assert lines[ops_at + 5].split() == ["aten::dropout", "removed", "1", "0", "0.0300", "0.00", "-0.0300", "0.00x"]
    kernel_rows = lines[next(i for i, line in enumerate(lines) if line.startswith("By kernel")) + 2:]
    assert kernel_rows[2].split() == ["relu_kernel", "both", "1", "2", "0.0500", "0.100", "+0.0500", "2.00x"]


def test_long_names_are_shortened_in_the_text_only(tmp_path):
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, float)"
    a = tracekit.summarize(gpu_run(tmp_path / "a", 2, [("aten::fill_", name, 10)]), cache=False, workers=1)
    b = tracekit.summarize(gpu_run(tmp_path / "b", 2, [("aten::fill_", name, 20)]), cache=False, workers=1)
    result = tracekit.compare(a, b)
    assert result.kernels["name"].tolist() == [name]
    row = next(line for line in str(result).splitlines() if "vectorized_elementwise" in line)
    assert row.split("  ")[1] == name[:57] + "..."  # 57 characters and "...": 60
    assert row.split()[-6:] == ["1", "1", "0.0100", "0.0200", "+0.0100", "2.00x"]


def test_runs_without_ops_or_kernels_say_so_in_one_line(comparison, folders):
    a = tracekit.summarize(folders[0], cache=False, workers=1)
    empty = {t: getattr(a, t).iloc[0:0] for t in ("ops", "op_steps", "kernels")}
    older = dataclasses.replace(a, **empty)  # as a Summary of an older trace, without op or kernel tables
    result = tracekit.compare(older, older)
    assert result.ops.empty and result.kernels.empty and list(result.ops.columns) == list(COLUMNS)
    tail = str(result).split("\n\n")[-2:]
    assert tail[0].strip().splitlines() == ["By op: neither run has ops (no cpu_op events in the traces, or an older "
                                            "trace)"]
    assert tail[1].strip() == "By kernel: neither run has device kernels (CPU-only runs)"
    d = result.to_dict()
    assert d["ops"] == [] and d["kernels"] == []


def test_cli_prints_the_tables_and_their_json(folders, capsys):
    a, b = map(str, folders)
    assert main(["compare", a, b, "--no-cache"]) == 0
    text = capsys.readouterr().out
    assert "By op (top 10 by change" in text and "By kernel (top 10 by change" in text
    assert any(line.split()[:2] == ["gelu_kernel", "added"] for line in text.splitlines())
    assert main(["compare", a, b, "--no-cache", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["op_time"] == {"a": "device", "b": "device"}
    ops = {r["name"]: r for r in doc["ops"]}
    assert ops["aten::gelu"]["ratio"] is None and ops["aten::gelu"]["status"] == "added"  # NaN as null
    assert ops["aten::mm"]["ms_per_step_b"] == pytest.approx(0.4)
    assert [r["name"] for r in doc["kernels"]] == ["gemm", "gelu_kernel", "relu_kernel", "dropout_kernel"]
    assert set(doc["kernels"][0]) == set(COLUMNS)


def test_a_cpu_only_pair_uses_host_self_time(summaries):
    samples = Path(__file__).resolve().parents[1] / "sample_traces"
    a, b = (summaries(samples / n, workers=1, cache=False)
            for n in ("resnet-gloo-2rank", "resnet-gloo-2rank-accum2"))
    result = tracekit.compare(a, b)
    assert result.op_time == ("host", "host") and result.kernels.empty
    ops = _rows(result.ops)
    # Hand check against op_steps: a has 2 window steps per rank, b 1.
    for s, side in ((a, "a"), (b, "b")):
        o = s.op_steps[s.op_steps["name"].astype(str) == "aten::convolution_backward"]
        per_rank = o.groupby("rank")["host_self_us"].sum() / s.ranks.set_index("rank")["steps"]
        assert ops.loc["aten::convolution_backward", f"ms_per_step_{side}"] == pytest.approx(per_rank.mean() / 1e3)
    assert ops.loc["aten::convolution_backward", ["calls_per_step_a", "calls_per_step_b"]].tolist() == [20, 40]
    changes = result.ops["change_ms"].abs()
    assert changes.is_monotonic_decreasing
    assert "By kernel: neither run has device kernels" in str(result)
