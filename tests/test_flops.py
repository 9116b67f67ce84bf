"""tracekit.events.flops: one op call's FLOPs and bytes from its recorded shapes.

The unit tests work their numbers out by hand. The torch tests run small models under the profiler and under
``FlopCounterMode`` and check that the innermost matmul-class ops of the trace add up to FlopCounterMode's total.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict

import pytest

from tracekit.events.flops import MATMUL_CLASS, OpCost, op_cost

F, B16 = "float", "c10::BFloat16"


def test_mm():
    c = op_cost("aten::mm", [[64, 128], [128, 32]], [F, F], ["", ""])
    assert c == OpCost(2 * 64 * 128 * 32, 4 * (64 * 128 + 128 * 32 + 64 * 32), F, "matmul")


def test_addmm_ignores_the_bias_in_flops_but_reads_it():
    c = op_cost("aten::addmm", [[32], [64, 128], [128, 32], [], []], [F, F, F, "Scalar", "Scalar"],
                ["", "", "", "1", "1"])
    assert c.flops == 2 * 64 * 128 * 32
    assert c.bytes == 4 * (32 + 64 * 128 + 128 * 32 + 64 * 32)


def test_bmm_in_bf16():
    c = op_cost("aten::bmm", [[4, 16, 8], [4, 8, 10]], [B16, B16])
    assert c.flops == 2 * 4 * 16 * 8 * 10
    assert c.bytes == 2 * (4 * 16 * 8 + 4 * 8 * 10 + 4 * 16 * 10)
    assert c.dtype == "c10::BFloat16" and c.kind == "matmul"


def test_dtype_is_the_first_floating_tensor_input():
    c = op_cost("aten::index_select", [[], [5, 3], [], [7]], ["Scalar", B16, "Scalar", "long int"])
    assert (c.dtype, c.kind) == ("c10::BFloat16", None) and math.isnan(c.flops)


def test_linear_and_matmul_broadcast_their_batch_dims():
    lin = op_cost("aten::linear", [[4, 5, 6], [7, 6], [7]], [F, F, F])
    assert lin.flops == 2 * 4 * 5 * 6 * 7 and lin.bytes == 4 * (120 + 42 + 7 + 4 * 5 * 7)
    mat = op_cost("aten::matmul", [[3, 1, 16, 8], [2, 8, 24]], [F, F])  # batch [3, 1] x [2] -> [3, 2]
    assert mat.flops == 2 * 3 * 2 * 16 * 8 * 24 and mat.bytes == 4 * (3 * 16 * 8 + 2 * 8 * 24 + 3 * 2 * 16 * 24)
    assert {"aten::linear", "aten::matmul", "aten::addmm", "aten::mm"} <= MATMUL_CLASS


CONV2D_DIMS = [[2, 3, 32, 32], [8, 3, 3, 3], [8], [], [], [], []]
CONV2D_TYPES = [F, F, F, "ScalarList", "ScalarList", "ScalarList", "Scalar"]


def test_conv2d_with_stride_and_padding_from_concrete_inputs():
    c = op_cost("aten::conv2d", CONV2D_DIMS, CONV2D_TYPES, ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"])
    # Output: (32 + 2*1 - 1*(3-1) - 1) // 2 + 1 = 16, so [2, 8, 16, 16].
    out = 2 * 8 * 16 * 16
    assert c.flops == 2 * out * 3 * 3 * 3  # 2 * output elements * in channels / groups * kernel elements
    assert c.bytes == 4 * (2 * 3 * 32 * 32 + 8 * 3 * 3 * 3 + 8 + out)
    # mkldnn_convolution takes padding before stride.
    mk = op_cost("aten::mkldnn_convolution", CONV2D_DIMS, CONV2D_TYPES, ["", "", "", "[1, 1]", "[2, 2]", "[1, 1]", "1"])
    assert (mk.flops, mk.bytes) == (c.flops, c.bytes)


def test_conv_values_never_guessed_but_schema_defaults_apply_to_a_short_list():
    missing = op_cost("aten::conv2d", CONV2D_DIMS, CONV2D_TYPES, None)  # recorded as [] without Concrete Inputs
    assert math.isnan(missing.flops) and math.isnan(missing.bytes) and missing.kind == "conv"
    # Only input, weight, bias recorded: conv2d's schema defaults (stride 1, padding 0, dilation 1) -> 30x30.
    short = op_cost("aten::conv2d", CONV2D_DIMS[:3], CONV2D_TYPES[:3])
    assert short.flops == 2 * (2 * 8 * 30 * 30) * 3 * 9
    # aten::convolution has no defaults.
    assert math.isnan(op_cost("aten::convolution", CONV2D_DIMS[:3], CONV2D_TYPES[:3]).flops)


def test_grouped_and_transposed_conv():
    g = op_cost("aten::convolution", [[1, 4, 5, 5], [6, 2, 3, 3], [], [], [], [], [], [], []],
                [F, F, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
                ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "2"])
    assert g.flops == 2 * (1 * 6 * 3 * 3) * 2 * 9  # in channels / groups = weight.shape[1] = 2
    # Transposed (FlopCounterMode's rule): 2 * input elements * weight.shape[1] * kernel elements; output
    # (5 - 1)*2 - 2*1 + 1*(3 - 1) + 1 + 1 = 10, channels weight.shape[1] * groups = 3 * 2.
    t = op_cost("aten::conv_transpose2d", [[1, 4, 5, 5], [4, 3, 3, 3], [], [], [], [], [], []],
                [F, F, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList"],
                ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "2", "[1, 1]"])
    assert t.flops == 2 * (1 * 4 * 5 * 5) * 3 * 9
    assert t.bytes == 4 * (100 + 108 + 1 * 6 * 10 * 10)


BWD_DIMS = [[2, 8, 16, 16], [2, 3, 32, 32], [8, 3, 3, 3], [], [], [], [], [], [], [], []]
BWD_TYPES = [F, F, F, "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar",
             "ScalarList"]


def _bwd_concrete(mask, groups="1"):
    return ["", "", "", "[8]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", groups, mask]


def test_convolution_backward_output_mask():
    c = op_cost("aten::convolution_backward", BWD_DIMS, BWD_TYPES, _bwd_concrete("[True, True, False]"))
    forward = 2 * (2 * 8 * 16 * 16) * 3 * 9
    assert c.flops == 2 * forward  # grad_input and grad_weight, one forward each
    # Reads grad_output, input, weight; writes grad_input (input's shape) and grad_weight (weight's).
    assert c.bytes == 4 * (4096 + 6144 + 216 + 6144 + 216)
    only_w = op_cost("aten::convolution_backward", BWD_DIMS, BWD_TYPES, _bwd_concrete("[False, True, True]"))
    assert only_w.flops == forward and only_w.bytes == 4 * (4096 + 6144 + 216 + 216 + 8)
    assert math.isnan(op_cost("aten::convolution_backward", BWD_DIMS, BWD_TYPES, None).flops)


def test_grouped_convolution_backward_weight_term_is_flopcountermodes():
    # groups 2, weight [8, 2, 3, 3] on input [1, 4, 6, 6], grad_output [1, 8, 4, 4]: one forward is
    # 2 * 128 * 2 * 9; FlopCounterMode's grad_weight term is 2 * in channels(4) * out channels * 4*4 * 9.
    dims = [[1, 8, 4, 4], [1, 4, 6, 6], [8, 2, 3, 3], *BWD_DIMS[3:]]
    concrete = ["", "", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "2", "[False, True, False]"]
    assert op_cost("aten::convolution_backward", dims, BWD_TYPES, concrete).flops == 2 * 4 * 8 * 16 * 9


Q, K, V = [2, 4, 16, 8], [2, 4, 24, 8], [2, 4, 24, 12]


def test_sdpa_forward_and_backward():
    c = op_cost("aten::_scaled_dot_product_flash_attention", [Q, K, V, [], [], [], []],
                [F, F, F, "Scalar", "Scalar", "Scalar", ""])
    qk, pv = 2 * 8 * 16 * 8 * 24, 2 * 8 * 16 * 24 * 12  # [16, 8] x [8, 24] and [16, 24] x [24, 12] per (b, h)
    assert c.flops == qk + pv and c.kind == "attention"
    assert c.bytes == 4 * (1024 + 1536 + 2304 + 2 * 4 * 16 * 12)  # output [2, 4, 16, 12]
    go, out, lse = [2, 4, 16, 12], [2, 4, 16, 12], [2, 4, 16]
    b = op_cost("aten::_scaled_dot_product_flash_attention_for_cpu_backward", [go, Q, K, V, out, lse, [], [], [], []],
                [F] * 6 + ["Scalar", "Scalar", "", ""])
    # Recompute QK^T, dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q.
    assert b.flops == qk + 2 * 8 * 16 * 12 * 24 + 2 * 8 * 24 * 16 * 12 + 2 * 8 * 16 * 24 * 8 + 2 * 8 * 8 * 16 * 24
    # Reads dO, q, k, v, out, logsumexp; writes dq, dk, dv.
    assert b.bytes == 4 * (1536 + 1024 + 1536 + 2304 + 1536 + 128 + 1024 + 1536 + 2304)


def test_efficient_attention_forward_reads_batch_seq_heads_dim():
    bshd = [[s[0], s[2], s[1], s[3]] for s in (Q, K, V)]
    e = op_cost("aten::_efficient_attention_forward", [*bshd, [], [], [], [], [], [], [], []],
                [F, F, F, "", "", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"])
    assert e.flops == 2 * 8 * 16 * 8 * 24 + 2 * 8 * 16 * 24 * 12


def test_elementwise_add_broadcasts():
    c = op_cost("aten::add", [[4, 1, 8], [3, 1], []], [F, F, "Scalar"], ["", "", "1"])
    # [4, 1, 8] + [3, 1] -> [4, 3, 8] = 96 elements; the alpha Scalar is no tensor.
    assert c == OpCost(96, 4 * (32 + 3 + 96), F, "elementwise")
    inplace = op_cost("aten::add_", [[4, 3, 8], [3, 1], []], [F, F, "Scalar"], ["", "", "1"])
    assert inplace.bytes == 4 * (96 + 3 + 96)
    # A 0-d tensor (dims [], a dtype) is one element; a copy is 0 FLOPs; the output takes the floating dtype.
    assert op_cost("aten::mul", [[10], []], [B16, "double"]).bytes == 2 * 10 + 8 + 2 * 10
    # copy_ only writes self (10 ints) and reads src (10 floats): self is not read too (it was 4 * 30).
    assert op_cost("aten::copy_", [[10], [10], []], ["int", F, "Scalar"]) == OpCost(0, 4 * 20, F, "elementwise")


def test_norm_bytes_and_unknown_flops():
    c = op_cost("aten::native_layer_norm", [[8, 16], [], [16], [16], []], [F, "ScalarList", F, F, "Scalar"])
    assert math.isnan(c.flops) and c.kind == "norm" and c.bytes == 4 * (128 + 16 + 16 + 128)


def test_missing_shapes_and_unknown_ops_are_nan():
    for c in (op_cost("aten::mm", None, None), op_cost("aten::mm", [], []), op_cost("aten::frobnicate", [[3]], [F])):
        assert math.isnan(c.flops) and math.isnan(c.bytes) and c.kind is None
    assert op_cost("aten::frobnicate", [[3]], [B16]).dtype == B16
    bad = op_cost("aten::mm", [[2, 3], [4, 5]], [F, F])  # inner dims disagree
    assert math.isnan(bad.flops) and math.isnan(bad.bytes)
    assert math.isnan(op_cost("aten::cat", [[[2], [3]], []], ["TensorList", "Scalar"]).bytes)


def test_imports_without_torch():
    code = "import sys; sys.modules['torch'] = None; import tracekit.events.flops"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- against FlopCounterMode ---------------------------------------------------------------------------------

MODEL_KINDS = ("matmul", "conv", "attention")


def _trace_counted_flops(path) -> tuple[float, list[dict]]:
    """Innermost rule: sum the FLOPs of matmul-class ops none of whose descendants is a matmul-class op with
    finite FLOPs; the parent of an op is the innermost op of its thread whose [ts, ts + dur] holds it."""
    ops = [e for e in json.load(open(path))["traceEvents"] if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    parent = [-1] * len(ops)
    by_thread = defaultdict(list)
    for i, e in enumerate(ops):
        by_thread[(e["pid"], e["tid"])].append(i)
    for idx in by_thread.values():
        stack: list[int] = []
        for i in sorted(idx, key=lambda i: (ops[i]["ts"], -ops[i]["dur"])):
            while stack and ops[stack[-1]]["ts"] + ops[stack[-1]]["dur"] <= ops[i]["ts"]:
                stack.pop()
            parent[i] = stack[-1] if stack else -1
            stack.append(i)
    costs = [op_cost(e["name"], e["args"].get("Input Dims"), e["args"].get("Input type"),
                     e["args"].get("Concrete Inputs")) for e in ops]
    marked = [c.kind in MODEL_KINDS and e["name"] in MATMUL_CLASS and math.isfinite(c.flops)
              for c, e in zip(costs, ops)]
    covered = set()
    for i in (i for i, m in enumerate(marked) if m):
        p = parent[i]
        while p >= 0 and p not in covered:
            covered.add(p)
            p = parent[p]
    return sum(c.flops for i, c in enumerate(costs) if marked[i] and i not in covered), ops


def _mlp(torch):
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    x = torch.randn(8, 32)
    return lambda: model(x).sum().backward()


def _convnet(torch):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 6, 3, padding=2, dilation=2, groups=2), torch.nn.ReLU(),
                                torch.nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1))
    x = torch.randn(2, 3, 17, 17)
    return lambda: model(x).sum().backward()


def _sdpa(torch, math_backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    d_v = 12 if math_backend else 8  # the CPU flash kernel needs equal head dims
    q, k, v = (torch.randn(*s, requires_grad=True) for s in ((2, 4, 16, 8), (2, 4, 24, 8), (2, 4, 24, d_v)))
    backends = [SDPBackend.MATH] if math_backend else [SDPBackend.FLASH_ATTENTION]

    def step():
        with sdpa_kernel(backends):
            torch.nn.functional.scaled_dot_product_attention(q, k, v).sum().backward()
    return step


@pytest.mark.parametrize("workload", ["mlp", "convnet", "sdpa_math", "sdpa_cpu_flash"])
def test_innermost_trace_flops_match_flopcountermode(workload, tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

    torch.manual_seed(0)
    step = {"mlp": lambda: _mlp(torch), "convnet": lambda: _convnet(torch),
            "sdpa_math": lambda: _sdpa(torch, True), "sdpa_cpu_flash": lambda: _sdpa(torch, False)}[workload]()
    # FlopCounterMode has no formula for the CPU flash-attention ops; give it its own sdpa formulas for them.
    aten = torch.ops.aten
    mapping = {aten._scaled_dot_product_flash_attention_for_cpu:
               lambda q, k, v, *a, out_shape=None, **kw: sdpa_flop_count(q, k, v),
               aten._scaled_dot_product_flash_attention_for_cpu_backward:
               lambda go, q, k, v, *a, out_shape=None, **kw: sdpa_backward_flop_count(go, q, k, v)}
    with FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        step()
    expected = counter.get_total_flops()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    got, ops = _trace_counted_flops(tmp_path / "trace.json")
    assert expected > 0
    assert got / expected == pytest.approx(1.0, rel=0.01), (got, expected)
    names = {e["name"] for e in ops}
    if workload == "sdpa_cpu_flash":
        assert "aten::_scaled_dot_product_flash_attention_for_cpu_backward" in names
    if workload == "convnet":  # this torch records Concrete Inputs with record_shapes=True
        conv = next(e for e in ops if e["name"] == "aten::convolution")
        assert conv["args"]["Concrete Inputs"][3] == "[2, 2]"


def test_conv_output_size_and_flops_agree_with_torch_on_random_configs():
    torch = pytest.importorskip("torch")
    import random

    from torch.utils.flop_counter import conv_backward_flop, conv_flop_count
    rng = random.Random(0)
    types = [F, F, F, "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]
    for _ in range(200):
        n, transposed, g = rng.choice((1, 2, 3)), rng.random() < 0.4, rng.choice((1, 2))
        ks, s, p, d = ([rng.randint(lo, hi) for _ in range(n)] for lo, hi in ((1, 3), (1, 3), (0, 2), (1, 2)))
        op = [rng.randint(0, min(si, di) - 1) for si, di in zip(s, d)] if transposed else [0] * n
        x = [2, 2 * g, *(rng.randint(6, 9) for _ in range(n))]
        w = [x[1], 3, *ks] if transposed else [2 * g, x[1] // g, *ks]
        xt, wt = torch.empty(x, device="meta"), torch.empty(w, device="meta")
        out = list(torch.ops.aten.convolution(xt, wt, None, s, p, d, transposed, op, g).shape)
        dims = [x, w, [out[1]], [], [], [], [], [], []]
        concrete = ["", "", "", str(s), str(p), str(d), str(transposed), str(op), str(g)]
        c = op_cost("aten::convolution", dims, types, concrete)
        assert c.flops == conv_flop_count(x, w, out, transposed)
        assert c.bytes == 4 * (math.prod(x) + math.prod(w) + out[1] + math.prod(out))  # the output size is torch's
        bwd = op_cost("aten::convolution_backward", [out, x, w, *[[]] * 8], BWD_TYPES,
                      ["", "", "", f"[{out[1]}]", *concrete[3:], "[True, True, True]"])
        assert bwd.flops == conv_backward_flop(out, x, w, None, s, p, d, transposed, op, g, [True, True, True],
                                               out_val=[x, w, [out[1]]])


def test_attention_names_agree_with_torch_formulas():
    torch = pytest.importorskip("torch")
    from torch.utils import flop_counter as fc
    q, k, v = (2, 4, 16, 8), (2, 2, 24, 8), (2, 2, 24, 12)  # grouped-query: 4 query heads, 2 kv heads
    go = (2, 4, 16, 12)
    fwd, bwd = fc.sdpa_flop_count(q, k, v), fc.sdpa_backward_flop_count(go, q, k, v)
    for name in ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                 "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                 "_scaled_dot_product_flash_attention_for_cpu"):
        assert op_cost("aten::" + name, [list(q), list(k), list(v)], [F] * 3).flops == fwd, name
    for name in ("_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention_backward",
                 "_scaled_dot_product_cudnn_attention_backward",
                 "_scaled_dot_product_flash_attention_for_cpu_backward"):
        assert op_cost("aten::" + name, [list(go), list(q), list(k), list(v)], [F] * 4).flops == bwd, name
    # The [B, S, H, D] ops, against FlopCounterMode's own (raw-tensor) formulas for the flash ones.
    t = [[s[0], s[2], s[1], s[3]] for s in (go, q, k, v)]
    meta = [torch.empty(s, device="meta") for s in t]
    assert op_cost("aten::_flash_attention_forward", t[1:], [F] * 3).flops == fc._flash_attention_forward_flop(
        *meta[1:], None, None, 16, 24) == fwd
    assert op_cost("aten::_flash_attention_backward", t, [F] * 4).flops == fc._flash_attention_backward_flop(
        *meta, None, None, None, None, 16, 24) == bwd
    assert op_cost("aten::_efficient_attention_forward", t[1:], [F] * 3).flops == fwd
    assert op_cost("aten::_efficient_attention_backward", t, [F] * 4).flops == bwd


def test_concrete_inputs_are_read_the_same_from_many_threads():
    """Concrete Inputs literals are read without ast (ast.literal_eval from Dask's threads can raise CPython 3.11's
    'AST constructor recursion depth mismatch'): the same values as ast gives, from 8 threads at once."""
    import ast
    from concurrent.futures import ThreadPoolExecutor

    from tracekit.events.literal import literal

    texts = ["[1, 1]", "[2, 2]", "False", "True", "None", "0.5", "-3", "[[1, 2], [3]]", "(1, 2)", "(1,)", "1e-05",
             "", " ", "abc", "[True, False, False]", "[0, 0]", "7"] * 50

    def by_ast(s):
        try:
            v = ast.literal_eval(s) if s.strip() else None
        except (ValueError, SyntaxError):
            return None
        return list(v) if isinstance(v, tuple) else None if isinstance(v, str) else v

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(literal, texts))
    assert got == [by_ast(s) for s in texts]


@pytest.mark.parametrize("operators, peaks_known, expected", [
    # step 1: 10 FLOPs in 2 us at peak; step 2: no op started in it; step 3: one op of unknown FLOPs.
    (True, True, [(10.0, 2.0), (0.0, 0.0), (math.nan, math.nan)]),
    (True, False, [(10.0, 2.0), (0.0, math.nan), (math.nan, math.nan)]),
    (False, True, [(math.nan, math.nan)] * 3),  # annotations only: nothing can be counted
])
def test_every_step_has_its_flops_and_a_step_no_op_started_in_has_zero(operators, peaks_known, expected):
    import numpy as np
    import pandas as pd

    from tracekit.events.ops import _every_step

    steps = pd.DataFrame({"step": [1, 2, 3], "start_ns": [0, 10, 20], "end_ns": [10, 20, 30]})
    flop_steps = pd.DataFrame({"rank": [4, 4], "step": [3, 1], "matmul_flops": [np.nan, 10.0],
                               "matmul_at_peak_us": [np.nan, 2.0]})
    out = _every_step(flop_steps, steps, 4, operators, peaks_known)
    assert out["rank"].tolist() == [4, 4, 4] and out["step"].tolist() == [1, 2, 3]
    assert out["step"].dtype == np.int64 and out["matmul_flops"].dtype == float
    got = list(zip(out["matmul_flops"], out["matmul_at_peak_us"]))
    assert np.array_equal(np.array(got), np.array(expected), equal_nan=True)
