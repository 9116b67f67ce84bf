"""The finding read off ``summary.optimization`` (``tracekit.predict.optimize``): the ops whose reaching their
roofline would save the most step time by replay, with their measured and roofline times. None without a known
device and recorded shapes (no roofline), or when no op's saving reaches ``SAVING_SHARE``. Its advice follows the
bound: a better kernel for ops judged against the device's roofs; pinned memory, fewer copies or overlap for host <->
device copies (judged against the host link, ``tracekit.events.bounds``), never a faster kernel."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit import fmt
from tracekit.findings.finding import Finding, by_severity, severity

SAVING_SHARE = (0.05, 0.20)  # of the step: medium, high
SHOWN = 3
KERNEL_ADVICE = ("Make these ops reach the device's roofs: a better kernel (torch.compile, cuDNN/cuBLAS heuristics, "
                 "flash attention), larger or better-shaped matmuls (multiples of 8/64, fused), channels_last for "
                 "convolutions, or a lower precision on matrix cores.")
# A copy between host and device is bound by the host link (its roof): no kernel makes it faster.
COPY_ADVICE = ("Host <-> device copies are bound by the host link: copy from pinned memory (pin_memory=True in the "
               "DataLoader, .pin_memory()), copy less or less often (keep tensors on the device, batch small copies), "
               "and overlap the copies with compute (non_blocking=True from pinned memory, a side stream).")


def merged(findings: tuple, optimization: pd.DataFrame) -> tuple[Finding, ...]:
    """``findings`` and the roofline finding together, most severe first."""
    return by_severity(list(findings) + list(find(optimization)))


def find(optimization: pd.DataFrame) -> tuple[Finding, ...]:
    if optimization is None or optimization.empty:
        return ()
    top = optimization.sort_values("predicted_saving_us", ascending=False).head(SHOWN)
    share = float(top["saving_pct"].iloc[0]) / 100
    level = severity(share, SAVING_SHARE)
    if level is None:
        return ()
    shown = top[top["saving_pct"] >= SAVING_SHARE[0] * 100]
    parts = [f"{r.name} at {r.pct_of_roofline:.0f}% of its roofline ({fmt.ms(r.measured_us, unit=True)} measured, "
             f"{fmt.ms(r.roofline_us, unit=True)} at {'the host link' if getattr(r, 'host_copy', False) else 'the roofs'}; {fmt.ms(r.critical_path_us, unit=True)}/step on the critical "
             f"path) would save {fmt.ms(r.predicted_saving_us, unit=True)}/step (-{r.saving_pct:.0f}%)"
             for r in shown.itertuples(index=False)]
    ranks = tuple(sorted({int(x) for r in shown["ranks"] for x in r}))
    copies = shown["host_copy"].astype(bool).to_numpy() if "host_copy" in shown else np.zeros(len(shown), bool)
    advice = ([KERNEL_ADVICE] if not copies.all() else []) + ([COPY_ADVICE] if copies.any() else [])
    return (Finding(
        "roofline_gap", level, ranks,
        "Where optimisation pays, by replay: " + "; ".join(parts) + ".",
        " ".join(advice),
        {"share": share, "op": str(shown["name"].iloc[0]),
         "predicted_saving_us": float(shown["predicted_saving_us"].iloc[0])}),)
