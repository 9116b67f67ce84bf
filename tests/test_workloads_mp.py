"""The model-parallel workloads (workloads.pipeline, workloads.hybrid): their flags, the seeded heavy stage, the
"layout" block of run.json, and (slow) tiny real runs read back: traces per rank, the layout, and the P2P bytes."""

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")
import torch  # noqa: E402

from tests.workload_cli import run_main  # noqa: E402
from workloads.config import ConfigError  # noqa: E402
from workloads.gpt_model import GPTShape  # noqa: E402
from workloads.hybrid import HybridConfig, comm_counts_by_dim, parse_mesh  # noqa: E402
from workloads.pipeline import PipelineConfig  # noqa: E402
from workloads.stages import (block_passes, build_stage, intended_schedule, layer_split, layout,  # noqa: E402
                              mesh_ranks, parse_stage_weights, stage_to_rank, stages_of_rank)

ROOT = Path(__file__).resolve().parents[1]
SIZES = dict(vocab_size=64, seq_len=8, n_layer=4, n_head=2, n_embd=16, batch_size=2, steps=4)
CONTRACT_KEYS = {"mesh", "schedule", "microbatches", "stages_per_rank", "num_stages", "stage_to_rank",
                 "params_per_stage", "stage_weights", "activation_bytes_per_microbatch", "intended_schedule"}


def workload(name: str, *flags: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"workloads.{name}", *flags], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


# ------------------------------------------------------------------------------------ flags and config

def test_stage_weights_parse_to_sorted_pairs():
    assert parse_stage_weights("2=1.5, 1=3") == ((1, 3.0), (2, 1.5))
    assert parse_stage_weights("") == () and parse_stage_weights(None) == ()


@pytest.mark.parametrize("text", ["1", "x=2", "1=0", "1=-2", "-1=2", "1=2,1=3", "1=two"])
def test_bad_stage_weights_are_named(text):
    with pytest.raises(ConfigError, match="--stage-weights"):
        parse_stage_weights(text)


def test_a_weight_is_whole_block_passes():
    assert block_passes(2, 3.0, 1) == 6 and block_passes(2, 1.5, 1) == 3 and block_passes(1, 3.0, 0) == 3
    with pytest.raises(ConfigError, match="multiple of 1/2"):
        block_passes(2, 1.2, 1)


def test_layers_split_as_evenly_as_possible():
    assert layer_split(5, 2) == [3, 2] and layer_split(4, 4) == [1, 1, 1, 1] and layer_split(7, 3) == [3, 2, 2]
    with pytest.raises(ConfigError, match="gives no block"):
        layer_split(3, 4)


@pytest.mark.parametrize("flags, message", [
    (dict(schedule="1f1b", stages_per_rank=2), "holds one stage per rank"),
    (dict(schedule="interleaved", stages_per_rank=1), "needs --stages-per-rank >= 2"),
    (dict(schedule="zbv", stages_per_rank=3), "exactly 2 stages per rank"),
    (dict(schedule="dualpipev", stages_per_rank=1), "exactly 2 stages per rank"),
    (dict(schedule="looped_bfs", stages_per_rank=1), "needs --stages-per-rank >= 2"),
    (dict(schedule="interleaved_zb", stages_per_rank=1), "needs --stages-per-rank >= 2"),
    (dict(schedule="dualpipe"), "--schedule must be one of"),
    (dict(microbatches=0), "must be >= 1"),
    (dict(accum=2), "--accum is not supported"),
    (dict(amp="bf16"), "--amp is not supported"),
])
def test_pipeline_config_refuses_what_cannot_run(flags, message):
    with pytest.raises(ConfigError, match=message):
        PipelineConfig(**SIZES, **flags)


def test_seeded_stages_must_exist_once_the_world_is_known():
    cfg = PipelineConfig(**SIZES, stage_weights=((3, 2.0),))
    cfg.check_world(4)
    with pytest.raises(ConfigError, match="names stage 3, but there are 2 stages"):
        cfg.check_world(2)
    with pytest.raises(ConfigError, match=">= 2 stages"):
        PipelineConfig(**SIZES).check_world(1)


def test_mesh_flag_is_put_in_pp_dp_tp_order_and_checked():
    assert parse_mesh("tp=2,dp=2") == (("dp", 2), ("tp", 2))
    assert parse_mesh("dp=2,pp=4") == (("pp", 4), ("dp", 2))
    for bad in ("dp=2,dp=2", "ep=2,dp=2", "dp=1,tp=2", "dp=2,tp", "pp=2,tp=2", "dp=4"):
        with pytest.raises(ConfigError, match="--mesh"):
            parse_mesh(bad)
    with pytest.raises(ConfigError, match="must divide --n-head"):
        HybridConfig(**{**SIZES, "n_head": 2}, mesh=(("dp", 2), ("tp", 4)))
    with pytest.raises(ConfigError, match="needs a pp dimension"):
        HybridConfig(**SIZES, stage_weights=((1, 2.0),))


def test_bad_flags_exit_with_one_line():
    done = run_main("pipeline", "--cpu", "--schedule", "gpipe", "--stages-per-rank", "2")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "workloads.pipeline: error: --schedule gpipe holds one stage per rank; --stages-per-rank 2 needs --schedule "
        "interleaved (or zbv, 2)"]
    done = run_main("hybrid", "--cpu", "--mesh", "dp=2,cp=2")
    assert done.returncode == 2 and done.stderr.startswith("workloads.hybrid: error: --mesh wants DIM=SIZE")


@pytest.mark.parametrize("name", ["pipeline", "hybrid"])
def test_help_is_the_manual(name):
    done = workload(name, "--help")  # a real process: the module runs under -m and prints no warning at import
    assert done.returncode == 0 and done.stderr == ""
    for words in ("torchrun --standalone", "--profile", "--nproc", "--mesh", "--schedule", "--stage-weights"):
        assert words in done.stdout, words


# --------------------------------------------------------------------------------- stages and layout

def test_a_heavy_stage_applies_its_blocks_weight_times_with_the_same_parameters():
    shape = GPTShape(vocab_size=64, seq_len=8, n_layer=6, n_head=2, n_embd=16)
    plain, heavy = build_stage(shape, 1, 3, 1.0, seed=0), build_stage(shape, 1, 3, 1.5, seed=0)  # a middle stage
    assert [len(s.blocks) for s in (plain, heavy)] == [2, 2] and (plain.passes, heavy.passes) == (2, 3)
    assert sum(p.numel() for p in plain.parameters()) == sum(p.numel() for p in heavy.parameters())
    x = torch.randn(2, 8, 16)
    b0, b1 = heavy.blocks
    with torch.no_grad():
        torch.testing.assert_close(heavy(x), b0(b1(b0(x))))  # blocks 0, 1, 0 in turn
        torch.testing.assert_close(plain(x), b1(b0(x)))
    assert heavy.sent_bytes == 2 * 8 * 16 * 4


def test_a_heavy_stage_under_a_split_backward_passes_through_copies():
    """interleaved_zb, zbv, dualpipev: torch's weight-gradient pass cannot reuse parameters, so weight 1.5 on 2
    blocks applies blocks 0, 1 and a copy of 0 (same initial values: the same output), and holds 1.5x the parameters."""
    shape = GPTShape(vocab_size=64, seq_len=8, n_layer=6, n_head=2, n_embd=16)
    shared, copied = build_stage(shape, 1, 3, 1.5, seed=0), build_stage(shape, 1, 3, 1.5, seed=0, copies=True)
    assert len(copied.blocks) == copied.passes == 3
    count = (lambda m: sum(p.numel() for p in m.parameters()))
    assert count(copied) == count(shared) + count(shared.blocks[0])
    assert copied.blocks[2] is not copied.blocks[0]
    x = torch.randn(2, 8, 16)
    with torch.no_grad():
        torch.testing.assert_close(copied(x), shared(x))


def test_stages_are_cut_from_one_gpt():
    shape = GPTShape(vocab_size=64, seq_len=8, n_layer=4, n_head=2, n_embd=16)
    first, last = build_stage(shape, 0, 2, 1.0, seed=3), build_stage(shape, 1, 2, 1.0, seed=3)
    torch.testing.assert_close(last.head.weight, first.tok.weight)  # untied copy of the tied init
    assert not hasattr(first, "head") and not hasattr(last, "tok")
    tokens = torch.randint(64, (2, 8))
    with torch.no_grad():
        assert last(first(tokens)).shape == (2, 8, 64)


def test_stage_placement_loop_and_v():
    assert stage_to_rank("1f1b", 4, 1) == {"0": 0, "1": 1, "2": 2, "3": 3}
    assert stage_to_rank("interleaved", 2, 2) == {"0": 0, "2": 0, "1": 1, "3": 1}
    assert stages_of_rank("zbv", 0, 2, 2) == [0, 3] and stages_of_rank("zbv", 1, 2, 2) == [1, 2]


def test_intended_1f1b_order_numbers_each_stage_in_order():
    from torch.distributed.pipelining import Schedule1F1B

    stub = SimpleNamespace(_num_stages=4, _n_microbatches=8,
                           _get_pipeline_order=lambda: Schedule1F1B._get_pipeline_order(stub))
    torch_order = stub._get_pipeline_order()
    assert [str(a) for a in torch_order[3] if a is not None][:3] == ["3F1", "3B0", "3F2"]  # torch 2.14's numbering
    order, with_comms = intended_schedule(stub, "1f1b")
    assert with_comms is None and order["3"][:4] == ["3F0", "3B0", "3F1", "3B1"]
    assert order["0"][:6] == ["0F0", "0F1", "0F2", "0F3", "0B0", "0F4"]
    for rank, actions in order.items():
        for phase in "FB":
            assert [a for a in actions if a[1:2] == phase] == [f"{rank}{phase}{m}" for m in range(8)]


def test_mesh_ranks_are_row_major():
    assert mesh_ranks({"dp": 2, "tp": 2}) == {"dp": [[0, 2], [1, 3]], "tp": [[0, 1], [2, 3]]}
    assert mesh_ranks({"pp": 2, "dp": 3}) == {"pp": [[0, 3], [1, 4], [2, 5]], "dp": [[0, 1, 2], [3, 4, 5]]}


def test_layout_block_has_the_contract_names_and_the_global_ranks_of_each_stage():
    block = layout(mesh={"pp": 2, "dp": 2}, schedule="1f1b", microbatches=8, stages_per_rank=1,
                   stage_ranks={"0": 0, "1": 1}, params_per_stage={"0": 10, "1": 12}, stage_weights={},
                   activation_bytes=4096, intended={"0": ["0F0"], "1": ["1F0"]})
    assert CONTRACT_KEYS <= set(block) and block["num_stages"] == 2
    assert block["stage_to_global_ranks"] == {"0": [0, 1], "1": [2, 3]}
    assert "comm_debug_counts" not in block


def test_comm_debug_counts_split_tp_from_fsdp():
    ops = {"c10d_functional.all_reduce": 12, "c10d._allgather_base_": 5, "c10d._reduce_scatter_base_": 3,
           "_c10d_functional.all_gather_into_tensor": 2}
    assert comm_counts_by_dim(ops) == {"tp": {"all_reduce": 12, "all_gather": 2},
                                       "fsdp": {"all_gather": 5, "reduce_scatter": 3}, "ops": ops}


# ---------------------------------------------------------------------------------- tiny real runs

TINY = ["--cpu", "--steps", "4", "--wait", "1", "--warmup", "1", "--active", "1", "--batch-size", "2",
        "--n-layer", "4", "--n-embd", "32", "--n-head", "2", "--seq-len", "16", "--vocab-size", "128"]


def _trace(run: Path, rank: int) -> dict:
    with gzip.open(run / f"rank-{rank}.pt.trace.json.gz") as f:
        return json.load(f)


def _ops(doc: dict, name: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e["name"] == name]


def _profiled_run(name: str, out: Path, *flags: str) -> dict:
    done = workload(name, *TINY, *flags, "--profile", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return json.loads((out / "run.json").read_text())


# Two ranks, 4 stages, 4 microbatches. Interleaved puts stage s on rank s mod 2, so all 3 stage boundaries cross
# ranks; ZBV's V puts stages 0, 3 on rank 0 and 1, 2 on rank 1, so the 1 -> 2 boundary stays on rank 1 (no send).
# Sends per rank and profiled step = boundaries crossing ranks x 4 microbatches x 2 directions / 2 ranks.
PIPELINES = {
    "interleaved": (["--stage-weights", "1=2.0"], {"0": 0, "1": 1, "2": 0, "3": 1}, 3 * 4 * 2 // 2),
    "zbv": ([], {"0": 0, "1": 1, "2": 1, "3": 0}, 2 * 4 * 2 // 2),
    # DualPipeV's V as ZBV's; its weighted stage passes through a copy of its block (a split backward).
    "dualpipev": (["--stage-weights", "3=2.0"], {"0": 0, "1": 1, "2": 1, "3": 0}, 2 * 4 * 2 // 2),
}


@pytest.mark.slow
@pytest.mark.parametrize("schedule", sorted(PIPELINES))
def test_pipeline_run_records_its_layout_and_the_p2p_bytes_are_the_activations(schedule, tmp_path):
    extra, placement, sends = PIPELINES[schedule]
    run = _profiled_run("pipeline", tmp_path, "--nproc", "2", "--schedule", schedule, "--stages-per-rank", "2",
                        "--microbatches", "4", *extra)
    lay = run["layout"]
    assert lay["mesh"] == {"pp": 2} and lay["schedule"] == schedule and lay["microbatches"] == 4
    assert lay["stage_to_rank"] == placement and lay["num_stages"] == 4
    assert lay["stage_weights"] == ({extra[1].split("=")[0]: 2.0} if extra else {})
    assert lay["activation_bytes_per_microbatch"] == 2 * 16 * 32 * 4  # microbatch x seq x hidden x float32
    assert sum(lay["params_per_stage"].values()) == run["trainable_params"]
    assert sorted(lay["intended_schedule"]) == ["0", "1"]
    for rank in (0, 1):
        doc = _trace(tmp_path, rank)
        assert doc["distributedInfo"]["rank"] == rank
        assert len(_ops(doc, "c10d::send")) == len(_ops(doc, "c10d::recv_")) == sends  # one profiled step
        p2p = _ops(doc, "c10d::send") + _ops(doc, "c10d::recv_")
        sizes = {4 * math.prod(e["args"]["Input Dims"][0][0]) for e in p2p}  # a TensorList of one float32 tensor
        assert sizes == {lay["activation_bytes_per_microbatch"]}
        actions = {e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith("PP:")}
        assert {f"PP:{a}" for a in lay["intended_schedule"][str(rank)]} <= actions  # torch's plan, as it ran


@pytest.mark.slow
def test_tp_inside_fsdp_run_counts_its_tp_all_reduces_as_torch_does(tmp_path):
    run = _profiled_run("hybrid", tmp_path, "--mesh", "dp=2,tp=2", "--n-layer", "2")
    lay = run["layout"]
    assert lay["mesh"] == {"dp": 2, "tp": 2} and lay["mesh_ranks"]["tp"] == [[0, 1], [2, 3]]
    assert lay["schedule"] is None and lay["stage_to_rank"] == {}
    # per block: forward 2 (attn.proj and mlp.2, RowwiseParallel), backward 4 (the input gradients of q, k, v, mlp.0)
    assert lay["comm_debug_counts"]["tp"] == {"all_reduce": 2 * 6}
    for rank in range(4):
        doc = _trace(tmp_path, rank)
        assert len(_ops(doc, "_c10d_functional::all_reduce")) == 12  # one profiled step
        groups = {g["pg_desc"]: g["ranks"] for g in doc["distributedInfo"]["pg_config"]}
        assert groups["mesh_tp"] in lay["mesh_ranks"]["tp"] and rank in groups["mesh_tp"]


# ------------------------------------------------------------------------------------ bundled samples

PP_SAMPLES = sorted(p for p in (ROOT / "sample_traces").glob("pp-*") if (p / "run.json").is_file())


@pytest.mark.parametrize("run", PP_SAMPLES, ids=lambda p: p.name)
def test_bundled_pipeline_samples_agree_with_their_layout(run):
    meta = json.loads((run / "run.json").read_text())
    lay, cfg = meta["layout"], meta["config"]
    assert lay["activation_bytes_per_microbatch"] == cfg["batch_size"] * cfg["seq_len"] * cfg["n_embd"] * 4
    assert sorted(map(int, lay["stage_to_rank"])) == list(range(lay["num_stages"]))
    assert lay["num_stages"] == lay["mesh"]["pp"] * lay["stages_per_rank"]
    phases = "FIW" if lay["schedule"] == "zbv" else "FB"  # ZBV splits backward into input and weight
    for pos, actions in lay["intended_schedule"].items():
        mine = [s for s, r in lay["stage_to_rank"].items() if str(r) == pos]
        planned = sorted(a for a in actions if "REDUCE" not in a)
        assert planned == sorted(f"{s}{p}{m}" for s in mine for p in phases for m in range(lay["microbatches"]))
    for rank in range(meta["world_size"]):
        doc = _trace(run, rank)
        p2p = _ops(doc, "c10d::send") + _ops(doc, "c10d::recv_")
        assert p2p and {4 * math.prod(e["args"]["Input Dims"][0][0]) for e in p2p} == {
            lay["activation_bytes_per_microbatch"]}
