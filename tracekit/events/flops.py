"""FLOPs and bytes moved of one operator call, from what a Kineto trace records with ``record_shapes=True``.

In: an op's name (``aten::addmm``), ``Input Dims``, ``Input type`` and, in newer torch, ``Concrete Inputs`` (values
of scalar and int-list inputs: stride, padding, output_mask ...). Out: ``OpCost(flops, bytes, dtype, kind)``.

FLOPs follow ``torch.utils.flop_counter.FlopCounterMode`` (its ``mm_flop``, ``bmm_flop``, ``conv_flop_count``,
``conv_backward_flop``, ``sdpa_flop_count``, ``sdpa_backward_flop_count``), so totals can be checked against it;
they agree with TraceLens's definitions (GEMM 2*M*N*K; conv 2 * output elements * in channels / groups * kernel
elements; bytes: each tensor once). Bias and the softmax are not counted, causal masks are not modelled (an upper
bound, as FlopCounterMode's), and nothing is guessed: a value the formula needs that was not recorded gives NaN.

- matmul: mm, addmm, _scaled_mm 2MKN; bmm, baddbmm 2BMKN; matmul and linear (composite) from their shapes, the
  batch dims broadcast.
- conv: forward ops (table ``_CONV``: where each takes stride, padding, dilation, transposed, output_padding and
  groups) 2 * output elements * weight.shape[1] * kernel elements, the output size from stride / padding /
  dilation; transposed: 2 * input elements * weight.shape[1] * kernel elements (FlopCounterMode's rule).
  Schema defaults (stride 1, padding 0, dilation 1) only where the schema has them and the input list stops
  short. convolution_backward: one forward per grad_input and per grad_weight in output_mask, each by
  FlopCounterMode's formula; for groups > 1 its grad_weight term is groups times a forward, kept for parity.
- attention: the sdpa ops, their backwards and the CPU ones (``_scaled_dot_product_flash_attention_for_cpu*``,
  which FlopCounterMode has no formula for); q [B, H, S, D], k [B, H, S_k, D], v [B, H, S_k, D_v]:
  2*B*H*S*S_k*(D + D_v) forward, 2*B*H*S*S_k*(3*D + 2*D_v) backward. ``_flash_attention_*`` and
  ``_efficient_attention_*`` take [B, S, H, D] and are read so (FlopCounterMode reads the efficient ones' dims
  as [B, H, S, D]); their varlen forms (3-D, or cu_seqlens given) are NaN.
- elementwise (table ``_ELEMENTWISE``): 1 FLOP per output element for arithmetic and activations (a convention:
  a transcendental counts as one), 0 for copies and fills. norm (``_NORM``): FLOPs NaN.

Bytes: every tensor input read once plus the output written once: for matmul-class ops the formula's output
(attention [.., S, D_v]; convolution_backward the grads in output_mask), elementwise the broadcast of the tensor
inputs (in place: self; ``_WRITE_ONLY`` ops, zero_ / fill_ / copy_, only write it: self counts once), norm one
tensor shaped as the first input (mean/rstd, grad_weight not counted), in the first floating input's dtype
(``_scaled_mm``: its out_dtype). NaN if a tensor's dtype is unknown (TensorList).

Nesting (the caller's rule): composite ops (linear, matmul, conv2d, convolution, scaled_dot_product_attention ...)
have FLOPs too, so in a call tree an op in ``MATMUL_CLASS`` with finite FLOPs counts only if none of its descendants
is one (not a linear and its addmm both); a matmul over 1-D operands (dot / mv: no formula) counts itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tracekit.events.literal import literal

NAN = float("nan")
_FLOAT8 = ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e8m0fnu")
ELEMENT_SIZE: dict[str, int] = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, **{f"c10::Float8_{f}": 1 for f in _FLOAT8},
    "c10::Float4_e2m1fn_x2": 1, "long int": 8, "long": 8, "int": 4, "short int": 2, "signed char": 1,
    "unsigned char": 1, "bool": 1, "short unsigned int": 2, "unsigned int": 4, "long unsigned int": 8,
    "c10::complex<c10::Half>": 4, "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::qint8": 1,
    "c10::quint8": 1, "c10::qint32": 4, "c10::quint4x2": 1}
FLOATING = frozenset(t for t in ELEMENT_SIZE if t in ("float", "double", "c10::Half", "c10::BFloat16")
                     or t.startswith(("c10::Float8", "c10::Float4")))
# ScalarType codes, as Concrete Inputs records a dtype argument -> the Input type name.
_SCALAR_TYPE = {5: "c10::Half", 6: "float", 7: "double", 15: "c10::BFloat16", 23: "c10::Float8_e5m2",
                24: "c10::Float8_e4m3fn", 25: "c10::Float8_e5m2fnuz", 26: "c10::Float8_e4m3fnuz"}

_MATMUL = {"mm": (0, 1), "addmm": (1, 2), "_scaled_mm": (0, 1), "bmm": (0, 1), "baddbmm": (1, 2), "matmul": (0, 1),
           "linear": (0, 1)}  # name -> positions of the two operands
# name -> positions of (stride, padding, dilation, transposed, output_padding, groups), and the first position
# from which the schema has defaults. A bool is a fixed transposed flag; None: not an argument (default value).
_CONV = {  # one line per schema family
    **dict.fromkeys(("convolution", "_convolution", "convolution_overrideable"), (3, 4, 5, 6, 7, 8, None)),
    **dict.fromkeys(("conv1d", "conv2d", "conv3d"), (3, 4, 5, False, None, 6, 3)),
    **dict.fromkeys(("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"), (3, 4, 7, True, 5, 6, 3)),
    "cudnn_convolution": (3, 2, 4, False, None, 5, None), "cudnn_convolution_transpose": (4, 2, 5, True, 3, 6, None),
    **dict.fromkeys(("mkldnn_convolution", "miopen_convolution", "miopen_depthwise_convolution"),
                    (4, 3, 5, False, None, 6, None)),
    "miopen_convolution_transpose": (5, 3, 6, True, 4, 7, None),
    **dict.fromkeys(("thnn_conv2d", "slow_conv3d"), (4, 5, None, False, None, None, 3)),
    **dict.fromkeys(("_slow_conv2d_forward", "slow_conv3d_forward"), (4, 5, None, False, None, None, None)),
    **dict.fromkeys(("slow_conv_dilated2d", "slow_conv_dilated3d"), (4, 5, 6, False, None, None, 3)),
    **dict.fromkeys(("_conv_depthwise2d", "conv_depthwise3d"), (4, 5, 6, False, None, None, None)),
    **dict.fromkeys(("slow_conv_transpose2d", "slow_conv_transpose3d"), (4, 5, 7, True, 6, None, 3)),
}
_CONV_DEFAULT = (1, 0, 1, False, 0, 1)
# name -> (backward?, layout [B,S,H,D]?, position of cu_seqlens_q (varlen when a tensor) or None)
_ATTENTION = {
    **dict.fromkeys(("scaled_dot_product_attention", "_scaled_dot_product_attention_math",
                     "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                     "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu"),
                    (False, False, None)),
    **dict.fromkeys(("_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_cudnn_attention_backward",
                     "_scaled_dot_product_efficient_attention_backward",
                     "_scaled_dot_product_flash_attention_for_cpu_backward"), (True, False, None)),
    "_flash_attention_forward": (False, True, 3), "_efficient_attention_forward": (False, True, 4),
    "_flash_attention_backward": (True, True, 6), "_efficient_attention_backward": (True, True, 6),
}
# Elementwise ops -> FLOPs per output element: 1 for arithmetic and activations, 0 for copies and fills.
_ELEMENTWISE = {
    **dict.fromkeys((
        "add add_ sub sub_ rsub mul mul_ div div_ neg neg_ reciprocal exp exp_ log sqrt rsqrt pow pow_ "
        "maximum minimum clamp clamp_ clamp_min clamp_min_ where addcmul addcmul_ addcdiv addcdiv_ lerp_ "
        "relu relu_ gelu gelu_ silu silu_ sigmoid sigmoid_ tanh tanh_ threshold threshold_ hardtanh hardtanh_ "
        "leaky_relu leaky_relu_ elu elu_ threshold_backward gelu_backward silu_backward sigmoid_backward "
        "tanh_backward hardtanh_backward leaky_relu_backward elu_backward").split(), 1),
    **dict.fromkeys("copy_ fill_ zero_ clone".split(), 0),
}
_WRITE_ONLY = frozenset(("zero_", "fill_", "copy_"))  # in place, self only written: one buffer, not read + written
_NORM = frozenset((
    "native_layer_norm native_layer_norm_backward layer_norm native_batch_norm native_batch_norm_backward "
    "batch_norm _native_batch_norm_legit _native_batch_norm_legit_no_training _native_batch_norm_legit_functional "
    "native_group_norm native_group_norm_backward group_norm rms_norm _fused_rms_norm softmax _softmax "
    "_safe_softmax log_softmax _log_softmax _softmax_backward_data _log_softmax_backward_data").split())

MATMUL_CLASS: frozenset[str] = frozenset("aten::" + n for n in (*_MATMUL, *_CONV, "convolution_backward", *_ATTENTION))
_KIND = {**dict.fromkeys(_MATMUL, "matmul"), **dict.fromkeys((*_CONV, "convolution_backward"), "conv"),
         **dict.fromkeys(_ATTENTION, "attention"),
         **dict.fromkeys(_ELEMENTWISE, "elementwise"), **dict.fromkeys(_NORM, "norm")}


@dataclass(frozen=True)
class OpCost:
    flops: float  # NaN when unknown
    bytes: float  # NaN when unknown: every input tensor read once + the output written once
    dtype: str | None  # the "Input type" of the op's first floating tensor input, as recorded
    kind: str | None  # "matmul" | "conv" | "attention" | "elementwise" | "norm" | None (not modelled)


def op_cost(name: str, dims: list | None, types: list | None, concrete: list | None = None) -> OpCost:
    """FLOPs and bytes of one call of ``name`` (``aten::`` optional) from its recorded inputs; see the module doc."""
    base = name[6:] if name.startswith("aten::") else name
    dtype = next((t for t, d in zip(types or [], dims or []) if t in FLOATING and _shape(d) is not None), None)
    kind = _KIND.get(base)
    if kind is None or not dims:
        return OpCost(NAN, NAN, dtype, None)
    out_type = dtype or next((t for t in types or [] if t in ELEMENT_SIZE), None)
    try:
        if kind == "matmul":
            flops, outs = _matmul(base, dims, types, concrete, out_type)
        elif kind == "conv":
            flops, outs = (_conv_backward if base == "convolution_backward" else _conv)(base, dims, types, concrete)
        else:
            flops, outs = (_attention(base, dims, types) if kind == "attention"
                           else _pointwise(base, dims, types, out_type))
        return OpCost(float(flops), _bytes(dims, types, outs, 0 if base in _WRITE_ONLY else None), dtype, kind)
    except (TypeError, ValueError, IndexError, ZeroDivisionError):  # inputs not as the schema has them
        return OpCost(NAN, NAN, dtype, kind)


def _shape(d) -> list[int] | None:
    """A tensor's shape, or None for anything else (a TensorList's list of shapes, a non-tensor, a size below 0)."""
    return list(d) if isinstance(d, list) and all(type(x) is int and x >= 0 for x in d) else None


def _tensor(dims, types, i) -> list[int] | None:
    """The shape of input ``i`` if it is a tensor (any list of ints when the types were not recorded)."""
    ok = i < len(dims) and (types is None or (i < len(types) and types[i] in ELEMENT_SIZE))
    return _shape(dims[i]) if ok else None


def _bytes(dims, types, outs, skip: int | None = None) -> float:
    """Every tensor input once (but ``skip``, not read) plus ``outs`` [(shape, Input type)]; NaN if one is unknown."""
    if outs is None or types is None or len(types) != len(dims):
        return NAN
    total = 0
    for d, t in (x for i, x in enumerate(zip(dims, types)) if i != skip):
        if t in ELEMENT_SIZE and _shape(d) is not None:
            total += math.prod(d) * ELEMENT_SIZE[t]
        elif t == "TensorList" or (t not in ("", "Scalar", "ScalarList") and d != []):
            return NAN
    for shape, t in outs:
        if shape is None or t not in ELEMENT_SIZE:
            return NAN
        total += math.prod(shape) * ELEMENT_SIZE[t]
    return float(total)


def _value(dims, concrete, i, default_from, default):
    """The recorded value of input ``i`` (parsed from Concrete Inputs), its schema default, or None if unknown."""
    if i >= len(dims):
        return default if default_from is not None and i >= default_from else None
    try:
        return literal(concrete[i])
    except (TypeError, IndexError, AttributeError):  # none recorded
        return None


def _matmul(base, dims, types, concrete, out_type):
    a, b = (_tensor(dims, types, i) for i in _MATMUL[base])
    if not a or not b:  # unknown, or 0-d
        return NAN, None
    if base == "linear":  # weight [N, K] (or [K])
        b = [b[1], b[0]] if len(b) == 2 else b
    elif base != "matmul" and (len(a), len(b)) != ((3, 3) if "bmm" in base else (2, 2)):
        return NAN, None
    a2, b2 = ([1, *a] if len(a) == 1 else a), ([*b, 1] if len(b) == 1 else b)
    (m, k), (k2, n) = a2[-2:], b2[-2:]
    if k != k2:
        return NAN, None
    batch = list(np.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2])))
    out = batch + ([m] if len(a) > 1 else []) + ([n] if len(b) > 1 else [])
    if base == "_scaled_mm":
        code = _value(dims, concrete, 6, None, None)
        out_type = _SCALAR_TYPE.get(code, out_type) if isinstance(code, int) else out_type
    return 2 * math.prod(batch) * m * k * n, [(out, out_type)]


def _spatial(v, n):
    """An int-list argument for ``n`` spatial dims: an int or a 1-list is repeated."""
    v = [v] if type(v) is int else v
    ok = isinstance(v, list) and all(type(x) is int for x in v) and len(v) in (1, n)
    return (v * n if len(v) == 1 else v) if ok else None


def _conv_args(base, dims, concrete, n):
    """(stride, padding, dilation, transposed, output_padding, groups) of a conv call; None for each unknown."""
    *where, default_from = _CONV[base]
    s, p, d, t, o, g = (default if pos is None else pos if isinstance(pos, bool)
                        else _value(dims, concrete, pos, default_from, default)
                        for pos, default in zip(where, _CONV_DEFAULT))
    return (*(_spatial(v, n) for v in (s, p, d)), t if isinstance(t, bool) else None, _spatial(o, n),
            g if type(g) is int and g > 0 else None)


def _conv_flop_count(x, w, out, transposed):
    """FlopCounterMode's conv_flop_count: 2 * batch * spatial points * w[0] * w[1] * kernel elements."""
    return 2 * x[0] * math.prod((x if transposed else out)[2:]) * w[0] * w[1] * math.prod(w[2:])


def _conv(base, dims, types, concrete):
    x, w = _tensor(dims, types, 0), _tensor(dims, types, 1)
    if x is None or w is None or not len(x) == len(w) >= 3:
        return NAN, None
    n, out_type = len(x) - 2, types[0] if types else None
    stride, padding, dilation, transposed, out_pad, groups = _conv_args(base, dims, concrete, n)
    if transposed is None:
        return NAN, None
    flops = _conv_flop_count(x, w, None, True) if transposed else NAN
    if stride is None or padding is None or dilation is None:
        return flops, None
    k = w[2:]
    if transposed:
        if out_pad is None or groups is None:
            return flops, None
        sp = [(i - 1) * s - 2 * p + d * (kk - 1) + o + 1
              for i, s, p, d, kk, o in zip(x[2:], stride, padding, dilation, k, out_pad)]
        return flops, [([x[0], w[1] * groups, *sp], out_type)]
    sp = [(i + 2 * p - d * (kk - 1) - 1) // s + 1 for i, s, p, d, kk in zip(x[2:], stride, padding, dilation, k)]
    out = [x[0], w[0], *sp]
    return _conv_flop_count(x, w, out, False), [(out, out_type)]


def _conv_backward(base, dims, types, concrete):
    """convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask), as FlopCounterMode's conv_backward_flop."""
    go, x, w = (_tensor(dims, types, i) for i in range(3))
    mask, transposed, bias = (_value(dims, concrete, i, None, None) for i in (10, 7, 3))
    if (None in (go, x, w) or not len(go) == len(x) == len(w) >= 3 or not isinstance(transposed, bool)
            or not isinstance(mask, list) or len(mask) != 3):
        return NAN, None
    t, ty = (lambda s: [s[1], s[0], *s[2:]]), types or [None] * 3
    flops, outs = 0, []
    if mask[0]:  # grad_input
        flops += _conv_flop_count(go, w, x, not transposed)
        outs.append((x, ty[1]))
    if mask[1]:  # grad_weight
        flops += _conv_flop_count(*((t(go), t(x)) if transposed else (t(x), t(go))), t(w), False)
        outs.append((w, ty[2]))
    if mask[2]:  # grad_bias
        outs.append((bias if isinstance(bias, list) else None, ty[0]))
    return flops, outs


def _attention(base, dims, types):
    backward, bshd, varlen = _ATTENTION[base]
    shapes = [_tensor(dims, types, i) for i in range(4 if backward else 3)]
    if any(s is None or len(s) != 4 for s in shapes) or (varlen is not None and _tensor(dims, types, varlen)):
        return NAN, None
    ty = types or [None] * 4
    outs = ([(s, ty[i]) for i, s in enumerate(shapes) if i > 0] if backward
            else [([*shapes[0][:-1], shapes[2][-1]], ty[0])])
    if bshd:
        shapes = [[s[0], s[2], s[1], s[3]] for s in shapes]
    *go, (b, h, s_q, d), (b2, h_kv, s_k, d2), (b3, h3, s_k3, d_v) = shapes
    if (not (b == b2 == b3 and h_kv == h3 and h_kv > 0 and h % h_kv == 0 and d == d2 and s_k == s_k3)
            or (go and go[0] != [b, h, s_q, d_v])):
        return NAN, None
    # As FlopCounterMode's: per (batch, head) [s_q, d] x [d, s_k] and [s_q, s_k] x [s_k, d_v], 2*m*k*n each;
    # backward: QK^T again, dO V^T, P^T dO, dS K, Q^T dS.
    return 2 * b * h * s_q * s_k * ((3 * d + 2 * d_v) if backward else (d + d_v)), outs


def _pointwise(base, dims, types, out_type):
    shapes = [s for i in range(len(dims)) if (s := _tensor(dims, types, i)) is not None]
    if not shapes or types is None:  # without types, a scalar's [] reads as a 0-d tensor
        return NAN, None
    if base in _NORM:
        return NAN, [(shapes[0], out_type)]
    if base.endswith("_"):  # in place: the output is self
        out, out_type = _tensor(dims, types, 0), types[0]
        if out is None:
            return NAN, None
    else:
        out = list(np.broadcast_shapes(*(tuple(s) for s in shapes)))
    return _ELEMENTWISE[base] * math.prod(out), [(out, out_type)]
