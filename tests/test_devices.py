"""tracekit.devices: the datasheet table of dense peaks, device-name matching and dtype keys."""

import ast
import math
from pathlib import Path

import pytest

from tracekit import devices
from tracekit.devices import DTYPES, PEAKS, TFLOPS_KEYS, DevicePeaks, dtype_key, match, peak_tflops

GiB = 2**30
BY_NAME = {p.name: p for p in PEAKS}

# totalGlobalMem as real boards report it (bytes)
A100_40 = 42_505_273_344  # 39.6 GiB
A100_80 = 85_198_045_184  # 79.3 GiB
H100_80 = 85_029_158_912
MI250X_GCD = 68_702_699_520  # 64 GiB: one of the two GCDs


@pytest.mark.parametrize(
    "name, mem, expected",
    [
        ("NVIDIA A100-SXM4-80GB", None, "NVIDIA A100 SXM4 80GB"),
        ("NVIDIA A100-SXM4-80GB", A100_80, "NVIDIA A100 SXM4 80GB"),
        ("NVIDIA A100-SXM4-40GB", None, "NVIDIA A100 SXM4 40GB"),
        ("NVIDIA A100-SXM-80GB", None, "NVIDIA A100 SXM4 80GB"),
        ("NVIDIA A100-PCIE-40GB", None, "NVIDIA A100 PCIe 40GB"),
        ("NVIDIA A100 80GB PCIe", None, "NVIDIA A100 PCIe 80GB"),
        ("NVIDIA A100-PG509-200", A100_40, "NVIDIA A100 SXM4 40GB"),
        ("NVIDIA A100-PG509-200", A100_80, "NVIDIA A100 SXM4 80GB"),
        ("NVIDIA A100-PG509-200", None, None),  # 40 or 80 GB: only memory tells
        ("NVIDIA H100 80GB HBM3", None, "NVIDIA H100 SXM5 80GB"),
        ("NVIDIA H100 80GB HBM3", H100_80, "NVIDIA H100 SXM5 80GB"),
        ("NVIDIA H100 PCIe", None, "NVIDIA H100 PCIe 80GB"),
        ("NVIDIA H100 NVL", None, "NVIDIA H100 NVL 94GB"),
        ("NVIDIA H100 NVL", 100_485_038_080, "NVIDIA H100 NVL 94GB"),
        ("NVIDIA H100", None, None),  # SXM, PCIe or NVL
        ("NVIDIA H100", H100_80, None),  # SXM and PCIe are both 80 GB
        ("NVIDIA H200", None, "NVIDIA H200 SXM 141GB"),
        ("NVIDIA H200", 150_754_820_096, "NVIDIA H200 SXM 141GB"),
        ("NVIDIA H200 NVL", None, "NVIDIA H200 NVL 141GB"),
        ("NVIDIA H800", None, "NVIDIA H800 SXM5 80GB"),
        ("NVIDIA H800 PCIe", None, "NVIDIA H800 PCIe 80GB"),
        ("NVIDIA B200", None, "NVIDIA B200 (HGX)"),
        ("NVIDIA B200", 192_265_846_784, "NVIDIA B200 (HGX)"),
        ("NVIDIA B300 SXM6 AC", None, "NVIDIA B300 (HGX)"),
        ("NVIDIA L4", None, "NVIDIA L4"),
        ("NVIDIA L4", 24_152_899_584, "NVIDIA L4"),
        ("NVIDIA L40S", None, "NVIDIA L40S"),
        ("NVIDIA A10", None, "NVIDIA A10"),
        ("Tesla V100-SXM2-32GB", None, "NVIDIA V100 SXM2 32GB"),
        ("Tesla V100-SXM2-16GB", None, "NVIDIA V100 SXM2 16GB"),
        ("Tesla V100-PCIE-16GB", None, "NVIDIA V100 PCIe 16GB"),
        ("Tesla V100S-PCIE-32GB", None, "NVIDIA V100S PCIe 32GB"),
        ("AMD Instinct MI300X", None, "AMD Instinct MI300X"),
        ("AMD Instinct MI300X", 192 * GiB, "AMD Instinct MI300X"),
        ("AMD Instinct MI325X", None, "AMD Instinct MI325X"),
        ("AMD Instinct MI250X/MI250", None, None),  # two products
        ("AMD Instinct MI250X/MI250", MI250X_GCD, None),
        ("AMD Instinct MI250X", None, "AMD Instinct MI250X (one GCD)"),
        ("AMD Instinct MI250X", MI250X_GCD, "AMD Instinct MI250X (one GCD)"),
        ("AMD Instinct MI350X", None, "AMD Instinct MI350X"),
        ("AMD Instinct MI355X", None, "AMD Instinct MI355X"),
        ("AMD Radeon Graphics", None, None),  # unidentifiable ROCm name
    ],
)
def test_real_device_names(name, mem, expected):
    got = match(name, mem)
    assert (got.name if got else None) == expected
    if expected is not None:
        assert got is BY_NAME[expected]


@pytest.mark.parametrize(
    "name",
    ["nvidia a100_sxm4_80gb", "NVIDIA  A100 SXM4 80GB", "nvidia-a100-sxm4-80gb", "NVIDIA_A100-SXM4_80GB"],
)
def test_matching_ignores_case_and_separators(name):
    assert match(name) is BY_NAME["NVIDIA A100 SXM4 80GB"]


@pytest.mark.parametrize(
    "name, mem",
    [
        (None, None),
        ("", None),
        ("cpu", None),
        ("NVIDIA GeForce RTX 4090", None),
        ("NVIDIA A10G", None),  # AWS variant with its own figures: not the A10
        ("NVIDIA L40", None),  # not the L40S
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA H20", None),
        ("Tesla T4", None),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", None),  # a MIG slice
        ("NVIDIA A100-SXM4-80GB", 10 * GiB),  # memory far below the board's: a slice, not the board
        ("AMD Instinct MI300X", 24 * GiB),  # a CPX compute partition
        ("NVIDIA A100-SXM4-80GB", A100_40),  # name and memory disagree
    ],
)
def test_unknown_or_ambiguous_gives_none(name, mem):
    assert match(name, mem) is None


def test_memory_that_is_not_a_number_is_ignored():
    assert match("NVIDIA A100-SXM4-80GB", float("nan")) is BY_NAME["NVIDIA A100 SXM4 80GB"]
    assert match("NVIDIA A100-PG509-200", 0) is None


def test_a100_sxm4_80gb_figures():
    # A100 datasheet: BF16 Tensor Core 312 TFLOPS | 624 with sparsity; 2,039 GB/s; 80 GB HBM2e
    a100 = BY_NAME["NVIDIA A100 SXM4 80GB"]
    assert a100.vendor == "nvidia"
    assert a100.tflops["bf16"] == 312 and a100.tflops["fp16"] == 312
    assert a100.tflops["tf32"] == 156 and a100.tflops["fp32"] == 19.5 and a100.tflops["fp64"] == 19.5
    assert a100.tflops["int8"] == 624
    assert "fp8" not in a100.tflops  # Ampere has no FP8 tensor cores
    assert a100.memory_gbps == 2039 and a100.memory_gb == 80
    assert BY_NAME["NVIDIA A100 PCIe 80GB"].memory_gbps == 1935
    assert BY_NAME["NVIDIA A100 SXM4 40GB"].memory_gbps == 1555


def test_h100_sxm_is_dense_not_sparse():
    # the datasheet prints 1,979 TFLOPS BF16 with sparsity; the whitepaper's dense figure is 989.4
    h100 = BY_NAME["NVIDIA H100 SXM5 80GB"]
    assert h100.tflops["bf16"] == pytest.approx(989.4, abs=0.1)
    assert h100.tflops["fp8"] == pytest.approx(1978.9, abs=0.1)
    assert h100.tflops["tf32"] == pytest.approx(494.7, abs=0.1)
    assert h100.memory_gbps == 3350 and h100.memory_gb == 80
    assert peak_tflops(match("NVIDIA H100 80GB HBM3"), "c10::BFloat16") == pytest.approx(989.4, abs=0.1)


def test_halved_datasheet_figures():
    assert BY_NAME["NVIDIA H200 SXM 141GB"].tflops["bf16"] == 1979 / 2
    assert BY_NAME["NVIDIA H200 SXM 141GB"].memory_gbps == 4800
    assert BY_NAME["NVIDIA H100 NVL 94GB"].tflops["fp8"] == 3341 / 2
    assert BY_NAME["NVIDIA H100 PCIe 80GB"].tflops["bf16"] == 1513 / 2
    assert BY_NAME["NVIDIA L4"].tflops["fp8"] == 485 / 2
    assert BY_NAME["NVIDIA B200 (HGX)"].tflops["bf16"] == 4500 / 2
    assert BY_NAME["NVIDIA B300 (HGX)"].tflops["fp8"] == 72_000 / 8 / 2  # HGX B300: 72 PFLOPS FP8* over 8 GPUs


def test_amd_dense_figures():
    mi300x = BY_NAME["AMD Instinct MI300X"]
    assert mi300x.vendor == "amd"
    assert mi300x.tflops["bf16"] == 1307.4 and mi300x.tflops["fp8"] == 2614.9
    assert mi300x.memory_gbps == 5300 and mi300x.memory_gb == 192
    assert BY_NAME["AMD Instinct MI325X"].tflops == mi300x.tflops  # same CDNA3 compute, more HBM3E
    assert BY_NAME["AMD Instinct MI325X"].memory_gb == 256


@pytest.mark.parametrize("model", ["MI250X", "MI250"])
def test_gcd_entries_are_half_the_module(model):
    module, gcd = BY_NAME[f"AMD Instinct {model}"], BY_NAME[f"AMD Instinct {model} (one GCD)"]
    assert set(gcd.tflops) == set(module.tflops)
    for key, value in module.tflops.items():
        assert gcd.tflops[key] == pytest.approx(value / 2)
    assert gcd.memory_gb == module.memory_gb / 2 and gcd.memory_gbps == module.memory_gbps / 2


def test_peak_tflops():
    a100 = BY_NAME["NVIDIA A100 SXM4 80GB"]
    assert peak_tflops(a100, "bf16") == 312
    assert peak_tflops(a100, "c10::BFloat16") == 312
    assert peak_tflops(a100, "float") == 19.5  # fp32, not the tf32 figure
    assert math.isnan(peak_tflops(None, "bf16"))
    assert math.isnan(peak_tflops(a100, None))
    assert math.isnan(peak_tflops(a100, "c10::Float8_e4m3fn"))  # no fp8 on A100
    assert math.isnan(peak_tflops(a100, "c10::ComplexFloat"))
    assert math.isnan(peak_tflops(BY_NAME["NVIDIA V100 SXM2 32GB"], "bf16"))  # Volta has no bf16
    assert math.isnan(peak_tflops(match("NVIDIA GeForce RTX 4090"), "bf16"))


@pytest.mark.parametrize(
    "input_type, key",
    [
        ("float", "fp32"),
        ("double", "fp64"),
        ("c10::Half", "fp16"),
        ("c10::BFloat16", "bf16"),
        ("c10::Float8_e4m3fn", "fp8"),
        ("c10::Float8_e5m2", "fp8"),
        ("c10::Float8_e4m3fnuz", "fp8"),
        ("c10::Float8_e5m2fnuz", "fp8"),
        ("signed char", "int8"),
        ("unsigned char", "int8"),
        ("c10::qint8", "int8"),
        (" c10::BFloat16 ", "bf16"),
        ("bf16", "bf16"),
        ("int", None),
        ("long int", None),
        ("bool", None),
        ("c10::ComplexFloat", None),
        ("", None),
        (None, None),
    ],
)
def test_dtype_key(input_type, key):
    assert dtype_key(input_type) == key


def test_dtypes_map_onto_table_keys():
    assert DTYPES["float"] == "fp32" and DTYPES["c10::BFloat16"] == "bf16"
    assert set(DTYPES.values()) <= set(TFLOPS_KEYS)
    assert "tf32" not in DTYPES.values()  # the trace never says a matmul ran as TF32


def test_every_entry_is_sourced_and_positive():
    assert len(PEAKS) >= 25
    for p in PEAKS:
        assert isinstance(p, DevicePeaks)
        assert p.vendor in {"nvidia", "amd"}
        assert p.name.startswith({"nvidia": "NVIDIA ", "amd": "AMD "}[p.vendor])
        assert p.source.strip() and ("nvidia" in p.source.lower() or "amd" in p.source.lower())
        assert p.tflops and set(p.tflops) <= set(TFLOPS_KEYS)
        for value in (*p.tflops.values(), p.memory_gbps, p.memory_gb):
            assert isinstance(value, float) and math.isfinite(value) and value > 0, (p.name, value)


def test_figures_are_ordered_as_dense_peaks_must_be():
    # a sparse figure slipped in where dense belongs would break one of these orderings
    for p in PEAKS:
        t = p.tflops
        ladder = [t[k] for k in ("fp32", "tf32", "bf16", "fp8") if k in t]
        assert ladder == sorted(ladder), p.name
        if "bf16" in t and "fp16" in t:
            assert t["bf16"] == t["fp16"], p.name
        if "fp8" in t and "bf16" in t:
            assert 1.9 <= t["fp8"] / t["bf16"] <= 2.1, p.name
        if "tf32" in t and "bf16" in t:
            assert 1.9 <= t["bf16"] / t["tf32"] <= 2.1, p.name


def test_names_are_unique():
    names = [p.name for p in PEAKS]
    assert len(names) == len(set(names))


def test_entries_are_immutable():
    p = PEAKS[0]
    with pytest.raises(Exception):
        p.memory_gb = 1.0
    with pytest.raises(TypeError):
        p.tflops["bf16"] = 1.0
    assert hash(p) == hash(p)


def test_module_is_base_layer_and_short():
    path = Path(devices.__file__)
    source = path.read_text()
    assert len(source.splitlines()) < 300
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert not node.module.startswith("tracekit") or node.module == "tracekit.errors", node.module
            imported.add(node.module.split(".")[0])
    assert imported <= {"__future__", "math", "re", "dataclasses", "types", "typing", "numpy", "tracekit"}
