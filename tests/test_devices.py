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


# Every entry against the figures its cited source prints, transcribed as printed: (TFLOPS as printed, which of them
# are printed "with sparsity" (stored halved), memory GB/s, memory GB, host link GB/s both ways or None).
_SPARSE = ("tf32", "bf16", "fp16", "fp8", "int8")
_A100 = dict(fp64=19.5, fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624)
_H200_SXM = dict(fp64=67, fp32=67, tf32=989, bf16=1979, fp16=1979, fp8=3958, int8=3958)
_NVL = dict(fp64=60, fp32=60, tf32=835, bf16=1671, fp16=1671, fp8=3341, int8=3341)
_PCIE_H = dict(fp32=51, tf32=756, bf16=1513, fp16=1513, fp8=3026, int8=3026)
_MI300 = dict(fp64=163.4, fp32=163.4, tf32=653.7, bf16=1307.4, fp16=1307.4, fp8=2614.9, int8=2614.9)
PRINTED = {
    "NVIDIA V100 SXM2 16GB": (dict(fp64=7.8, fp32=15.7, fp16=125), (), 900, 16, None),
    "NVIDIA V100 SXM2 32GB": (dict(fp64=7.8, fp32=15.7, fp16=125), (), 900, 32, None),
    "NVIDIA V100 PCIe 16GB": (dict(fp64=7, fp32=14, fp16=112), (), 900, 16, 32),
    "NVIDIA V100 PCIe 32GB": (dict(fp64=7, fp32=14, fp16=112), (), 900, 32, 32),
    "NVIDIA V100S PCIe 32GB": (dict(fp64=8.2, fp32=16.4, fp16=130), (), 1134, 32, 32),
    "NVIDIA A100 SXM4 40GB": (_A100, (), 1555, 40, 64),
    "NVIDIA A100 SXM4 80GB": (_A100, (), 2039, 80, 64),
    "NVIDIA A100 PCIe 40GB": (_A100, (), 1555, 40, 64),
    "NVIDIA A100 PCIe 80GB": (_A100, (), 1935, 80, 64),
    "NVIDIA A10": (dict(fp32=31.2, tf32=62.5, bf16=125, fp16=125, int8=250), (), 600, 24, 64),
    # The Hopper whitepaper's dense column (its datasheet prints these doubled, with sparsity).
    "NVIDIA H100 SXM5 80GB": (dict(fp64=66.9, fp32=66.9, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9,
                                   int8=1978.9), (), 3350, 80, 128),
    "NVIDIA H100 PCIe 80GB": (dict(fp64=51, **_PCIE_H), _SPARSE, 2000, 80, 128),
    "NVIDIA H100 NVL 94GB": (_NVL, _SPARSE, 3900, 94, 128),
    "NVIDIA H200 SXM 141GB": (_H200_SXM, _SPARSE, 4800, 141, 128),
    "NVIDIA H200 NVL 141GB": (_NVL, _SPARSE, 4800, 141, 128),
    "NVIDIA H800 SXM5 80GB": ({**_H200_SXM, "fp64": 1}, _SPARSE, 3350, 80, 128),
    "NVIDIA H800 PCIe 80GB": (_PCIE_H, _SPARSE, 2000, 80, 128),
    "NVIDIA B200 (HGX)": (dict(fp64=37, fp32=75, tf32=2200, bf16=4500, fp16=4500, fp8=9000, int8=9000), _SPARSE,
                          7700, 180, None),
    # HGX B300: 8-GPU totals 18 / 36 / 72 PFLOPS with sparsity; GB300 NVL72: 576 TB/s over 72 GPUs.
    "NVIDIA B300 (HGX)": (dict(fp64=1.25, fp32=75, tf32=18000 / 8, bf16=36000 / 8, fp16=36000 / 8, fp8=72000 / 8),
                          _SPARSE, 576_000 / 72, 288, None),
    "NVIDIA L4": (dict(fp32=30.3, tf32=120, bf16=242, fp16=242, fp8=485, int8=485), _SPARSE, 300, 24, 64),
    "NVIDIA L40S": (dict(fp32=91.6, tf32=183, bf16=362.05, fp16=362.05, fp8=733, int8=733), (), 864, 48, 64),
    "AMD Instinct MI250X": (dict(fp64=95.7, fp32=47.9, bf16=383, fp16=383, int8=383), (), 3200, 128, 64),
    "AMD Instinct MI250": (dict(fp64=90.5, fp32=45.3, bf16=362.1, fp16=362.1, int8=362.1), (), 3200, 128, 64),
    "AMD Instinct MI300X": (_MI300, (), 5300, 192, 128),
    "AMD Instinct MI325X": (_MI300, (), 6000, 256, 128),
    "AMD Instinct MI350X": (dict(fp64=72.1, fp32=144.2, bf16=2306.9, fp16=2306.9, fp8=4613.7, int8=4613.7), (),
                            8000, 288, 128),
    "AMD Instinct MI355X": (dict(fp64=78.6, fp32=157.3, bf16=2516.6, fp16=2516.6, fp8=5033.2, int8=5033.2), (),
                            8000, 288, 128),
}


@pytest.mark.parametrize("name", sorted(PRINTED))
def test_entry_against_its_source(name):
    """Each entry holds its source's printed figures: dense as printed, 'with sparsity' halved; memory, its size,
    and the host link one way (half the both-ways figure), unknown where the source prints none."""
    printed, sparse, gbps, gb, link = PRINTED[name]
    entry = BY_NAME[name]
    assert dict(entry.tflops) == pytest.approx({k: v / 2 if k in sparse else v for k, v in printed.items()})
    assert (entry.memory_gbps, entry.memory_gb) == (pytest.approx(gbps), gb)
    assert (entry.host_link_gbps == pytest.approx(link / 2)) if link else math.isnan(entry.host_link_gbps)
    assert entry.source and (entry.host_link.startswith("PCIe") if link else entry.host_link == "")


def test_every_entry_has_its_printed_figures():
    """No entry without a transcription above; a GCD entry is half its module's (test_gcd_entries_are_half_the_module)
    with the module's link: one GCD alone may use the whole link."""
    modules = {p.name for p in PEAKS if "GCD" not in p.name}
    assert modules == set(PRINTED)
    for p in PEAKS:
        if "GCD" in p.name:
            assert p.host_link_gbps == BY_NAME[p.name.removesuffix(" (one GCD)")].host_link_gbps
