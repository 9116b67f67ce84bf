"""Which physical bound each operator is judged against, and the rule that no rate printed exceeds it.

- **Math mode from the kernels.** The profiler's ``Input type`` says ``float`` for an fp32 matmul that ran on TF32
  tensor cores (``torch.backends.cuda.matmul.allow_tf32``): its kernels say so (``cutlass_80_tensorop_s1688gemm_*``,
  ``sm80_xmma_*_tf32f32_*``, ``*_tf32_*``; hipBLASLt's ``xf32``). An fp32 op whose own or descendants' kernels
  match ``TF32_KERNEL`` is judged at the TF32 peak; ``ampere_sgemm_*`` / ``volta_sgemm_*`` (no tensor op) keep
  FP32.
- **Host <-> device copies** (``Memcpy HtoD`` / ``DtoH``, pinned or pageable) cross the host link (PCIe, NVLink-C2C),
  not device memory: an op that launched one (``aten::copy_`` between cpu and cuda) has its bytes over that link,
  one buffer (``aten::copy_``'s read + write halved), judged at ``DevicePeaks.host_link_gbps``.
- **The invariant.** A rate above the bound it is judged against means the bound's assumption is wrong (data served
  from cache, a math mode the trace does not show): ``pct_of_roofline`` above 100 makes the row's roofline unknown,
  an achieved TFLOPS/s above its peak or GB/s above its bandwidth makes that rate unknown (NaN), and the row is
  counted in the rank's ``ops_beyond_bound`` data-quality column, which a note explains.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit import devices

TF32_KERNEL = re.compile(r"tf32|xf32|tensorop_s1688gemm", re.IGNORECASE)
HOST_COPY = re.compile(r"^Memcpy (?:HtoD|DtoH)|Host ?-> ?Device|Device ?-> ?Host|Pinned|Pageable", re.IGNORECASE)


def launch_flags(names: pd.Series, row: np.ndarray, n_ops: int) -> tuple[np.ndarray, np.ndarray]:
    """(TF32 kernels, host copies) each op launched itself, as counts per op; ``names``: the device events' names,
    ``row``: the op that launched each (-1: unknown). Matched once per distinct name."""
    names = names.astype("category")
    cats = names.cat.categories.astype(str)
    codes = names.cat.codes.to_numpy()
    known = (row >= 0) & (codes >= 0)
    out = []
    for pattern in (TF32_KERNEL, HOST_COPY):
        hit = np.append(np.asarray(cats.str.contains(pattern), dtype=bool), False)[codes]
        counts = np.zeros(n_ops)
        np.add.at(counts, row[known & hit], 1.0)
        out.append(counts)
    return out[0], out[1]


def math_keys(dtypes, inverse: np.ndarray, tf32: np.ndarray) -> np.ndarray:
    """Per call, the peak's key: its dtype's (``devices.dtype_key``; ``dtypes`` per distinct call, ``inverse`` each
    call's), ``tf32`` for fp32 calls that ran TF32 kernels."""
    keys = np.array([devices.dtype_key(d) for d in dtypes] + [None], dtype=object)[inverse]
    return np.where((keys == "fp32") & tf32, "tf32", keys).astype(object)


def rooflines(out: pd.DataFrame, peaks: devices.DevicePeaks | None, measured_us: np.ndarray) -> pd.DataFrame:
    """achieved_tflops, achieved_gbps, roofline_us and pct_of_roofline of an op table with summed flops, bytes,
    host_link_bytes (the part over the host link) and its math key per row; every rate within its bound (module doc),
    and ``beyond_bound`` True on rows where a figure was made unknown for that."""
    measured_us = np.where(measured_us > 0, measured_us, np.nan)
    flops, total = out["flops"].to_numpy(dtype=float), out["bytes"].to_numpy(dtype=float)
    link = out["host_link_bytes"].to_numpy(dtype=float)
    codes, uniques = pd.factorize(out["math"], use_na_sentinel=False)
    peak = np.array([devices.peak_tflops(peaks, u) for u in uniques], dtype=float)[codes] * 1e12 if len(codes) \
        else np.empty(0)
    bandwidth = peaks.memory_gbps * 1e9 if peaks is not None else np.nan
    link_bw = peaks.host_link_gbps * 1e9 if peaks is not None else np.nan
    compute_us = flops / peak * 1e6
    over_link = np.where(link > 0, link / link_bw, 0.0)
    memory_us = ((total - link) / bandwidth + over_link) * 1e6
    # Both roofs where FLOPs are known (the peak at its math key must be too); the memory roof alone where not.
    known = np.isfinite(memory_us) & (np.isfinite(compute_us) | ~np.isfinite(flops))
    roofline = np.where(known, np.fmax(compute_us, memory_us), np.nan)
    tflops, gbps = flops / measured_us / 1e6, total / measured_us / 1e3
    fast_math, fast_memory = compute_us > measured_us, memory_us > measured_us  # NaN compares False
    beyond = roofline > measured_us
    return out.assign(achieved_tflops=np.where(fast_math, np.nan, tflops),
                      achieved_gbps=np.where(fast_memory, np.nan, gbps),
                      roofline_us=np.where(beyond, np.nan, roofline),
                      pct_of_roofline=np.where(beyond, np.nan, roofline / measured_us * 100),
                      beyond_bound=beyond | fast_math | fast_memory)
