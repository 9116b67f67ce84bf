"""Peak compute, memory bandwidth and memory size of the accelerators people train and serve on.

The table
---------
:data:`PEAKS` holds one :class:`DevicePeaks` per board variant. Every figure is taken from the
vendor document named in that entry's ``source`` (title and, where known, URL).

* **Dense, never sparse.** NVIDIA datasheets print most tensor-core figures "with sparsity"
  (2:4 structured sparsity), marked with an asterisk; the dense figure is half of that, and the
  half is what is stored. Where the vendor prints the dense figure itself (A100, A10 and L40S
  datasheets, the Hopper whitepaper, AMD's spec pages) that number is stored as printed. Each
  entry's comment says which.
* ``tflops`` maps ``fp64``, ``fp32``, ``tf32``, ``bf16``, ``fp16``, ``fp8``, ``int8`` to TFLOPS
  (``int8`` in tera-operations/s). All but ``fp32`` are the tensor-core / matrix-core figure where
  the device has such units (``fp64`` is the plain FP64 rate on devices without FP64 tensor
  cores); ``fp32`` is the non-tensor FP32 vector figure. A key that is absent is unknown: either
  the device lacks the type or no vendor figure was found. Nothing is guessed.
* ``memory_gbps`` is peak memory bandwidth in GB/s (1e9 bytes/s); ``memory_gb`` is the memory
  size as the datasheet prints it (NVIDIA's "80GB" is close to 80 GiB of ``totalGlobalMem``).
* ``host_link`` names the link to the host (``PCIe Gen4 x16``) as the same source prints it, and
  ``host_link_gbps`` is its bandwidth in **one direction**: half of the printed figure, which counts both
  directions (NVIDIA prints "PCIe Gen4: 64GB/s" for a link that carries 32 GB/s each way). A copy between host
  and device moves one way, so this is its bound. NaN where the source gives no figure (V100 SXM2, B200, B300).

Matching
--------
:func:`match` takes a ``deviceProperties`` ``name`` as the PyTorch profiler writes it in a Kineto
trace, and optionally ``totalGlobalMem``. The name is lower-cased and cut into alphanumeric tokens,
so case, '-', '_', '/' and spaces do not matter. Exactly one token must name a model in the table
(``a100``, ``h100``, ``mi300x``, ...; ``a10g`` or ``l40`` name none). Form-factor tokens (``sxm4``,
``pcie``, ``nvl``, ``hbm3``, ``pg509``, ...) and an ``NNgb`` token narrow the model to variants; a
bare name matches only the board that really reports a bare name (``NVIDIA H200`` and ``NVIDIA H800``
are the SXM boards, the others say NVL/PCIe). Total memory then settles what is left (``NVIDIA
A100-PG509-200``, an SXM4 board sold with 40 or 80 GB) and rejects a MIG slice or a compute
partition whose memory is far below the board's. Whatever still names several entries, or none,
gives None: ``NVIDIA H100`` alone (SXM or PCIe, both 80 GB), ``AMD Instinct MI250X/MI250`` (two
products), ``AMD Radeon Graphics``. Never a guess.

AMD MI250X and MI250 carry two GCDs per OAM module and ROCm presents each GCD as its own device with
half the memory; a trace's MI250X is therefore one GCD and matches the "(one GCD)" entry, which holds
exactly half of the module's datasheet figures.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

__all__ = ["DevicePeaks", "PEAKS", "DTYPES", "TFLOPS_KEYS", "match", "peak_tflops", "dtype_key"]

TFLOPS_KEYS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")


@dataclass(frozen=True)
class DevicePeaks:
    """One board variant's dense peaks (see the module docstring for units and conventions)."""

    name: str  # canonical, e.g. "NVIDIA A100 SXM4 80GB"
    vendor: str  # "nvidia" | "amd"
    tflops: Mapping[str, float] = field(hash=False)  # dtype -> dense TFLOPS; a missing key is unknown
    memory_gbps: float
    memory_gb: float
    source: str
    host_link: str = ""  # "PCIe Gen4 x16", as the source prints it; "" when unknown
    host_link_gbps: float = math.nan  # one direction (half the printed both-ways figure); NaN when unknown


_ROWS: list[tuple[str, frozenset[str], DevicePeaks]] = []  # (model token, form tokens accepted, entry)


def _add(name: str, vendor: str, model: str, forms: str, gb: float, gbps: float, source: str, **tf: float) -> None:
    """forms: comma-separated form tokens the entry accepts; a leading empty item means a bare name matches it."""
    tflops = MappingProxyType({k: float(tf[k]) for k in TFLOPS_KEYS if k in tf})
    entry = DevicePeaks(name, vendor, tflops, float(gbps), float(gb), source)
    _ROWS.append((model, frozenset(forms.split(",")), entry))


_V100 = ("NVIDIA V100 Tensor Core GPU datasheet (V100 PCIe / V100 SXM2 / V100S PCIe), "
         "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf")
_A100 = ("NVIDIA A100 Tensor Core GPU datasheet (A100 40GB/80GB PCIe and SXM columns), https://www.nvidia.com/content/dam/"
         "en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
_A10 = "NVIDIA A10 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/products/a10-gpu/"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM / NVL / PCIe), https://www.nvidia.com/en-us/data-center/h100/"
_HOPPER_WP = ("NVIDIA H100 Tensor Core GPU Architecture whitepaper (GH100 in H100 SXM5: dense and sparse columns), "
              "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper")
_H200 = "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM / H200 NVL), https://www.nvidia.com/en-us/data-center/h200/"
_H800 = "NVIDIA H800 Tensor Core GPU datasheet (H800 SXM / H800 PCIe), https://www.nvidia.cn/data-center/h800/"
_B200 = ("NVIDIA HGX B200 specifications, 'Individual Blackwell GPU Specifications' (HGX B200 column, tensor figures "
         "with sparsity), https://www.nvidia.com/en-us/data-center/hgx/")
_B300 = ("NVIDIA HGX B300 specifications (8-GPU totals, tensor figures with sparsity; 2.3 TB memory), "
         "https://www.nvidia.com/en-us/data-center/hgx/; bandwidth: GB300 NVL72 specifications, 576 TB/s over 72 "
         "Blackwell Ultra GPUs, https://www.nvidia.com/en-us/data-center/gb300-nvl72/")
_L4 = "NVIDIA L4 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/l4/"
_L40S = "NVIDIA L40S GPU datasheet, https://www.nvidia.com/en-us/data-center/l40s/"
_AMD = "https://www.amd.com/en/products/accelerators/instinct/"
_MI250X = "AMD Instinct MI250X accelerator specifications, " + _AMD + "mi200/mi250x.html"
_MI250 = "AMD Instinct MI250 accelerator specifications, " + _AMD + "mi200/mi250.html"
_GCD = "; one GCD = exactly half the OAM module (ROCm shows each of the two GCDs as its own device)"
_MI300X = "AMD Instinct MI300X accelerator data sheet / specifications, " + _AMD + "mi300/mi300x.html"
_MI325X = "AMD Instinct MI325X accelerator specifications, " + _AMD + "mi300/mi325x.html"
_MI350X = "AMD Instinct MI350X GPU specifications, " + _AMD + "mi350/mi350x.html"
_MI355X = "AMD Instinct MI355X GPU specifications, " + _AMD + "mi350/mi355x.html"

# --- NVIDIA Volta: no sparsity feature. fp16 = "Tensor Performance" (FP16 tensor cores); fp64 = plain FP64 (no FP64 TC).
for _gb in (16, 32):
    _add(f"NVIDIA V100 SXM2 {_gb}GB", "nvidia", "v100", "sxm2", _gb, 900, _V100, fp64=7.8, fp32=15.7, fp16=125)
    _add(f"NVIDIA V100 PCIe {_gb}GB", "nvidia", "v100", "pcie", _gb, 900, _V100, fp64=7, fp32=14, fp16=112)
_add("NVIDIA V100S PCIe 32GB", "nvidia", "v100s", ",pcie", 32, 1134, _V100, fp64=8.2, fp32=16.4, fp16=130)

# --- NVIDIA Ampere: the A100 and A10 datasheets print "dense | sparse*"; the dense figure is stored as printed.
_A100_TF = dict(fp64=19.5, fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624)
_add("NVIDIA A100 SXM4 40GB", "nvidia", "a100", "sxm,sxm4,pg509", 40, 1555, _A100, **_A100_TF)
_add("NVIDIA A100 SXM4 80GB", "nvidia", "a100", "sxm,sxm4,pg509", 80, 2039, _A100, **_A100_TF)
_add("NVIDIA A100 PCIe 40GB", "nvidia", "a100", "pcie", 40, 1555, _A100, **_A100_TF)
_add("NVIDIA A100 PCIe 80GB", "nvidia", "a100", "pcie", 80, 1935, _A100, **_A100_TF)
_add("NVIDIA A10", "nvidia", "a10", ",pcie", 24, 600, _A10, fp32=31.2, tf32=62.5, bf16=125, fp16=125, int8=250)

# --- NVIDIA Hopper. H100 SXM5: the whitepaper's dense column (the datasheet prints 1,979 BF16 *with sparsity*).
# Every other Hopper entry: half of the datasheet's with-sparsity tf32/bf16/fp16/fp8/int8; fp64/fp32 as printed.
_add("NVIDIA H100 SXM5 80GB", "nvidia", "h100", "sxm,sxm5,hbm3", 80, 3350, _HOPPER_WP + "; bandwidth: " + _H100,
     fp64=66.9, fp32=66.9, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9, int8=1978.9)
_add("NVIDIA H100 PCIe 80GB", "nvidia", "h100", "pcie", 80, 2000, _H100,  # 756/1,513/3,026 with sparsity
     fp64=51, fp32=51, tf32=378, bf16=756.5, fp16=756.5, fp8=1513, int8=1513)
_add("NVIDIA H100 NVL 94GB", "nvidia", "h100", "nvl", 94, 3900, _H100,  # 835/1,671/3,341 with sparsity
     fp64=60, fp32=60, tf32=417.5, bf16=835.5, fp16=835.5, fp8=1670.5, int8=1670.5)
_add("NVIDIA H200 SXM 141GB", "nvidia", "h200", ",sxm,sxm5", 141, 4800, _H200,  # 989/1,979/3,958 with sparsity
     fp64=67, fp32=67, tf32=494.5, bf16=989.5, fp16=989.5, fp8=1979, int8=1979)
_add("NVIDIA H200 NVL 141GB", "nvidia", "h200", "nvl", 141, 4800, _H200,  # 835/1,671/3,341 with sparsity
     fp64=60, fp32=60, tf32=417.5, bf16=835.5, fp16=835.5, fp8=1670.5, int8=1670.5)
_add("NVIDIA H800 SXM5 80GB", "nvidia", "h800", ",sxm,sxm5", 80, 3350, _H800,  # 989/1,979/3,958 with sparsity
     fp64=1, fp32=67, tf32=494.5, bf16=989.5, fp16=989.5, fp8=1979, int8=1979)
_add("NVIDIA H800 PCIe 80GB", "nvidia", "h800", "pcie", 80, 2000, _H800,  # 756/1,513/3,026 with sparsity; fp64 not found
     fp32=51, tf32=378, bf16=756.5, fp16=756.5, fp8=1513, int8=1513)

# --- NVIDIA Blackwell: per-GPU tensor figures printed with sparsity (B200: 2.2/4.5/9/9 PFLOPS tf32/bf16/fp8/int8;
# B300: HGX totals 18/36/72 PFLOPS over 8 GPUs). Stored: half. B300 int8 left out (not found per GPU unambiguously).
_add("NVIDIA B200 (HGX)", "nvidia", "b200", ",sxm,sxm6", 180, 7700, _B200,
     fp64=37, fp32=75, tf32=1100, bf16=2250, fp16=2250, fp8=4500, int8=4500)
_add("NVIDIA B300 (HGX)", "nvidia", "b300", ",sxm,sxm6", 288, 8000, _B300,
     fp64=1.25, fp32=75, tf32=1125, bf16=2250, fp16=2250, fp8=4500)

# --- NVIDIA Ada: the L4 datasheet prints tensor figures with sparsity only (120/242/485/485*): stored half.
# The L40S datasheet prints "dense | sparse*" (183|366, 362.05|733, 733|1,466): dense as printed. Neither gives fp64.
_add("NVIDIA L4", "nvidia", "l4", ",pcie", 24, 300, _L4, fp32=30.3, tf32=60, bf16=121, fp16=121, fp8=242.5, int8=242.5)
_add("NVIDIA L40S", "nvidia", "l40s", ",pcie", 48, 864, _L40S,
     fp32=91.6, tf32=183, bf16=362.05, fp16=362.05, fp8=733, int8=733)

# --- AMD: the spec pages print dense peaks, with sparse ones separately labelled; dense as printed.
# fp64 = FP64 matrix, fp32 = FP32 vector. CDNA2 has no TF32 or FP8; CDNA4 (MI350) has no TF32 hardware.
_add("AMD Instinct MI250X", "amd", "mi250x", "oam", 128, 3200, _MI250X,
     fp64=95.7, fp32=47.9, bf16=383, fp16=383, int8=383)
_add("AMD Instinct MI250X (one GCD)", "amd", "mi250x", "", 64, 1600, _MI250X + _GCD,
     fp64=47.85, fp32=23.95, bf16=191.5, fp16=191.5, int8=191.5)
_add("AMD Instinct MI250", "amd", "mi250", "oam", 128, 3200, _MI250,
     fp64=90.5, fp32=45.3, bf16=362.1, fp16=362.1, int8=362.1)
_add("AMD Instinct MI250 (one GCD)", "amd", "mi250", "", 64, 1600, _MI250 + _GCD,
     fp64=45.25, fp32=22.65, bf16=181.05, fp16=181.05, int8=181.05)
_MI300_TF = dict(fp64=163.4, fp32=163.4, tf32=653.7, bf16=1307.4, fp16=1307.4, fp8=2614.9, int8=2614.9)
_add("AMD Instinct MI300X", "amd", "mi300x", ",oam", 192, 5300, _MI300X, **_MI300_TF)
_add("AMD Instinct MI325X", "amd", "mi325x", ",oam", 256, 6000, _MI325X, **_MI300_TF)
_add("AMD Instinct MI350X", "amd", "mi350x", ",oam", 288, 8000, _MI350X,
     fp64=72.1, fp32=144.2, bf16=2306.9, fp16=2306.9, fp8=4613.7, int8=4613.7)
_add("AMD Instinct MI355X", "amd", "mi355x", ",oam", 288, 8000, _MI355X,
     fp64=78.6, fp32=157.3, bf16=2516.6, fp16=2516.6, fp8=5033.2, int8=5033.2)

# The link to the host, from each entry's own source: (link, GB/s both directions as printed). NVIDIA's datasheets
# print "PCIe 32GB/s" (V100 PCIe; the SXM2 column gives NVLink only, and POWER9 hosts reach it over NVLink: left
# unknown), "PCIe Gen4: 64GB/s" (A100, A10, L4, L40S), "PCIe Gen5: 128GB/s" (H100, H200,
# H800); AMD's spec pages give the bus, "PCIe 4.0 x16" (MI250X, MI250) or "PCIe Gen 5 x16, 128 GB/s" (MI300X and
# later), and PCIe 4.0 x16 is the same 64 GB/s both ways. Not found per GPU for HGX B200/B300: left unknown.
_PCIE = {3: ("PCIe Gen3 x16", 32.0), 4: ("PCIe Gen4 x16", 64.0), 5: ("PCIe Gen5 x16", 128.0)}
_LINK_GEN = {"v100": 3, "v100s": 3, "a100": 4, "a10": 4, "l4": 4, "l40s": 4, "h100": 5, "h200": 5, "h800": 5,
             "mi250x": 4, "mi250": 4, "mi300x": 5, "mi325x": 5, "mi350x": 5, "mi355x": 5}
_ROWS[:] = [(mdl, ok, replace(p, host_link=_PCIE[_LINK_GEN[mdl]][0], host_link_gbps=_PCIE[_LINK_GEN[mdl]][1] / 2)
             if mdl in _LINK_GEN and "SXM2" not in p.name else p) for mdl, ok, p in _ROWS]
PEAKS: tuple[DevicePeaks, ...] = tuple(row[2] for row in _ROWS)
_MODELS = frozenset(row[0] for row in _ROWS)
_FORM = re.compile(r"sxm\d*|pcie|nvl|oam|hbm\d*e?|pg\d+")
_MEM = re.compile(r"(\d+)gb")


def _fits(total_memory_bytes: float, memory_gb: float) -> bool:
    """Whether a device's totalGlobalMem is this board's memory (not a MIG slice or partition of it)."""
    return total_memory_bytes / 2**30 >= 0.8 * memory_gb and total_memory_bytes / 1e9 <= 1.15 * memory_gb


def match(device_name: str | None, total_memory_bytes: float | None = None) -> DevicePeaks | None:
    """The entry for a deviceProperties `name` (as the PyTorch profiler writes it in Kineto traces), or None when
    the name does not identify one entry: never a guess.

    ``total_memory_bytes`` (deviceProperties ``totalGlobalMem``) picks between variants that differ only in memory
    (A100 40 vs 80 GB) and turns a MIG slice or a partitioned device into None.
    """
    if not isinstance(device_name, str):
        return None
    tokens = re.findall(r"[a-z0-9]+", device_name.lower())
    models = {t for t in tokens if t in _MODELS}
    if len(models) != 1 or "mig" in tokens:
        return None
    (model,) = models
    forms = {t for t in tokens if _FORM.fullmatch(t)} or {""}
    mems = {float(m.group(1)) for t in tokens if (m := _MEM.fullmatch(t))}
    cands = [p for mdl, ok, p in _ROWS if mdl == model and forms <= ok and (not mems or p.memory_gb in mems)]
    if total_memory_bytes is not None and math.isfinite(total_memory_bytes) and total_memory_bytes > 0:
        cands = [p for p in cands if _fits(float(total_memory_bytes), p.memory_gb)]
    return cands[0] if len(cands) == 1 else None


# The profiler's "Input type" strings -> the table's dtype keys. "float" is fp32, not tf32: fp32 matmuls run on
# TF32 tensor cores when torch.backends.cuda.matmul.allow_tf32 (or set_float32_matmul_precision) allows it, and the
# trace does not record that setting. "unsigned char" is uint8, which tensor cores also take for int8 matmuls; a
# uint8 tensor elsewhere (a mask, packed 4-bit weights) has no meaningful int8 peak, so apply it to matmuls only.
DTYPES: dict[str, str] = {
    "double": "fp64",
    "float": "fp32",
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
    "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
    "signed char": "int8",
    "unsigned char": "int8",
    "c10::qint8": "int8",
    "c10::quint8": "int8",
}


def dtype_key(input_type: str | None) -> str | None:
    """The table key ("fp32", "bf16", ...) for a profiler "Input type" string, or None when it has none.

    "float" maps to "fp32", never "tf32": an fp32 matmul may in fact run on TF32 tensor cores when
    ``torch.backends.cuda.matmul.allow_tf32`` is on, which the trace does not record, so the fp32 peak understates
    what such a kernel can reach. A table key itself ("bf16") maps to itself.
    """
    if not isinstance(input_type, str):
        return None
    s = input_type.strip()
    return s if s in TFLOPS_KEYS else DTYPES.get(s)


def peak_tflops(peaks: DevicePeaks | None, dtype: str | None) -> float:
    """Dense peak TFLOPS of ``peaks`` for ``dtype`` (a table key or a profiler "Input type"); NaN when unknown."""
    key = dtype_key(dtype)
    if peaks is None or key is None or key not in peaks.tflops:
        return math.nan
    return float(peaks.tflops[key])
