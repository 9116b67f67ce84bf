"""A real CPU DDP run (torch + gloo) made by the test itself: DDP all-reduces exactly the trainable gradients each step."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tracekit
from workloads.ports import free_port

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    script = Path(__file__).with_name("ddp_cpu_run.py")
    subprocess.run([sys.executable, str(script), str(out), "2", str(free_port())], check=True, timeout=300,
                   capture_output=True)
    return out


@pytest.mark.slow
def test_allreduce_bytes_per_step_equal_trainable_gradients(ddp_run):
    params = json.loads((ddp_run / "params.json").read_text())
    s = tracekit.summarize(ddp_run)  # params.json is not a trace: skipped and listed
    assert [Path(p.path).name for p in s.run.skipped] == ["params.json"]
    assert s.run.backend == "gloo" and s.run.world_size == 2
    ar = s.collectives[(s.collectives["op"] == "all_reduce") & (s.collectives["step"] >= 0)]
    per_step = ar.groupby(["rank", "step"])["bytes"].sum()
    assert len(per_step) == 2 * params["profiled_steps"]
    assert (per_step == 4 * params["trainable_params"]).all(), per_step
    assert set(ar["group_size"]) == {2.0}


@pytest.mark.slow
def test_cpu_ranks_are_analysed(ddp_run):
    s = tracekit.summarize(ddp_run)
    r = s.ranks
    assert list(r["rank"]) == [0, 1] and set(r["device"]) == {"cpu"}
    assert (r["steps"] == 3).all()  # 4 profiled steps, the last dropped
    assert (r["compute_us"] > 0).all() and (r["comm_us"] > 0).all()
    assert np.allclose(r["busy_us"] + r["idle_us"], r["span_us"])
    assert (r["allreduce_bytes"] == 3 * 4 * json.loads((ddp_run / "params.json").read_text())["trainable_params"]).all()
