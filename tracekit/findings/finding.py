"""The Finding type, and what every check of ``tracekit.findings.checks`` judges with: severity from thresholds, shares of
a rank's span, the GPUs' vendor (which decides how the link and tools are named)."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field

import pandas as pd

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


@dataclass(frozen=True)
class Finding:
    """One thing to change: its kind, severity (high/medium/low), the ranks it concerns, what was seen,
    what people do about it, and the numbers behind it."""

    kind: str
    severity: str
    ranks: tuple[int, ...]
    message: str
    recommendation: str
    evidence: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The finding as plain values."""
        return asdict(self)


def by_severity(found) -> tuple[Finding, ...]:
    """Findings most severe first, then by how much time is at stake (``evidence["share"]``)."""
    return tuple(sorted(found, key=lambda f: (SEVERITY_ORDER[f.severity], -f.evidence.get("share", 0.0))))


def share_of_span(ranks: pd.DataFrame, column: str) -> pd.Series:
    """Per rank: ``column`` as a share of the rank's span (NaN where the span is 0)."""
    return (ranks[column] / ranks["span_us"]).where(ranks["span_us"] > 0)


def severity(value: float, thresholds: tuple[float, float]) -> str | None:
    """``medium`` at or above the first threshold, ``high`` at or above the second; None below (or NaN)."""
    if math.isnan(value) or value < thresholds[0]:
        return None
    return "high" if value >= thresholds[1] else "medium"


def trains(ranks: pd.DataFrame) -> bool:
    """Whether any of these ranks trains (``ranks.training``): where ranks disagree training wins (a job with a
    training rank is set up as a training job), and unknown (no column, NaN) counts as training, the advice of old."""
    return "training" not in ranks or bool(ranks["training"].fillna(True).astype(bool).any())


def trains_on(ranks: pd.DataFrame | None, hit) -> bool:
    """``trains`` of the ranks ``hit``: False only where every one of them is known to run forward only (no table,
    or none of them in it: unknown, which counts as training)."""
    rows = ranks[ranks["rank"].isin([int(r) for r in hit])] if ranks is not None else None
    return rows is None or rows.empty or trains(rows)


def holds_on_any(ranks: pd.DataFrame, hit, column: str) -> bool:
    """Whether a host fact (``ddp``) holds on any of the ranks ``hit``; False when the table lacks it."""
    if column not in ranks:
        return False
    return bool(ranks.loc[ranks["rank"].isin(list(hit)), column].fillna(False).astype(bool).any())


# The vendor decides how the link is named and inspected. ROCm's runtime calls are hip*, CUDA's cuda*; device names
# settle traces without runtime calls. Unknown vendor: nothing vendor-specific is said.
_AMD_NAME = re.compile(r"(?i)\bamd\b|radeon|instinct|\bmi\d{2,3}")
_NVIDIA_NAME = re.compile(r"(?i)nvidia|tesla|geforce|quadro|titan|\b(gb|gh)?[abhlv]\d{2,3}\b")
VENDOR = {
    "nvidia": {"link": "NVLink", "inspect": "nvidia-smi topo -m; NCCL_DEBUG=INFO for the chosen transport",
               "graphs": "CUDA graphs", "matrix": "tensor cores"},
    "amd": {"link": "Infinity Fabric", "inspect": "rocm-smi --showtopo; NCCL_DEBUG=INFO, which RCCL reads too, for the "
            "chosen transport", "graphs": "HIP graphs (torch.cuda.CUDAGraph on ROCm)", "matrix": "matrix cores"},
    None: {"link": "GPU-to-GPU link", "inspect": "the GPU topology and the communication library's chosen transport",
           "graphs": "device graphs (CUDA/HIP graphs)", "matrix": "tensor/matrix cores"},
}


def gpu_vendor(ranks: pd.DataFrame, device_names=()) -> str | None:
    """``amd``, ``nvidia`` or None (unknown): from the runtime calls' names, else the device names."""
    runtimes = set(ranks["gpu_runtime"].dropna()) if "gpu_runtime" in ranks else set()
    names = [str(n) for n in device_names]
    if "hip" in runtimes or any(_AMD_NAME.search(n) for n in names):
        return "amd"
    if "cuda" in runtimes or any(_NVIDIA_NAME.search(n) for n in names):
        return "nvidia"
    return None
