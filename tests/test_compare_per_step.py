"""compare: two runs side by side, per optimizer step, in ms, with ratios b / a computed by hand here."""

import json

import pytest

import tracekit
from tracedata import kernel, step, write_trace


def one_rank_run(folder, step_us, compute_us, n_steps=4):
    """Steps of ``step_us``, each with one compute kernel of ``compute_us`` 100 us in; the last step is dropped."""
    events = [step(i + 1, i * step_us, step_us) for i in range(n_steps)]
    events += [kernel("gemm_bf16", i * step_us + 100, compute_us) for i in range(n_steps)]
    return tracekit.summarize(write_trace(folder / "rank0.json", events, rank=0, world_size=1), cache=False)


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    a = one_rank_run(tmp_path_factory.mktemp("a"), 1000, 500)
    b = one_rank_run(tmp_path_factory.mktemp("b"), 2000, 500, n_steps=6)
    return tracekit.compare(a, b)


def test_step_time_and_its_parts_per_step(comparison):
    t = comparison.table.set_index("metric")
    assert t.loc["step_time_ms", ["a", "b", "ratio"]].tolist() == pytest.approx([1.0, 2.0, 2.0])
    assert t.loc["compute_only_ms", ["a", "b", "ratio"]].tolist() == pytest.approx([0.5, 0.5, 1.0])
    # The rest of each step is idle: 1000 - 500 and 2000 - 500 us.
    assert t.loc["idle_ms", ["a", "b"]].tolist() == pytest.approx([0.5, 1.5])
    assert t.loc["exposed_comm_ms", ["a", "b"]].tolist() == [0.0, 0.0]
    assert (t.loc["step_time_ms", "unit"], t.loc["compute_only_ms", "unit"]) == ("ms/step", "ms/step")


def test_text_shows_ms_and_the_ratio(comparison):
    row = next(line for line in str(comparison).splitlines() if line.split()[:1] == ["step_time_ms"])
    # One format (fmt.figure): 2 decimals from 1 up.
    assert row.split()[1:] == ["ms/step", "1.00", "2.00", "2.00x", "trace"]


def test_json_of_a_comparison(comparison):
    rows = {m["metric"]: m for m in json.loads(json.dumps(comparison.to_dict()))["metrics"]}
    assert rows["step_time_ms"]["a"] == pytest.approx(1.0) and rows["step_time_ms"]["ratio"] == pytest.approx(2.0)
    assert rows["throughput_samples_per_s"]["a"] is None  # no run.json: unknown, not 0
    assert rows["throughput_samples_per_s"]["source"] == "run.json" and rows["step_time_ms"]["source"] == "trace"
