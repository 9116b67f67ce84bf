"""The exposed-communication finding told which parallelism dimensions its time belongs to (``by_dimension``)."""

from __future__ import annotations

import dataclasses

import pandas as pd

from tracekit.findings.comm_findings import _OP_ADVICE

_MODEL_PARALLEL = frozenset({"pp", "tp", "ep", "cp"})


def by_dimension(found: tuple, comm_by_dim: pd.DataFrame) -> tuple:
    """The findings, the exposed-communication one told which parallelism dimensions its exposed time belongs to
    (``summary.comm_by_dim``), where a model-parallel one (pp, tp, ep, cp) is among them; a pipeline's
    transfers get the pipeline's advice. Its waiting for the neighbour stage is not in it (``p2p_wait_us``: no
    overlap can hide a bubble), so nothing here calls that hidable."""
    out = []
    for f in found:
        if f.kind != "exposed_comm" or comm_by_dim.empty:
            out.append(f)
            continue
        mine = comm_by_dim[comm_by_dim["rank"].isin(list(f.ranks))]
        per_dim = mine.groupby("dim")["exposed_us"].sum().sort_values(ascending=False, kind="stable")
        total = float(per_dim.sum())
        if total <= 0 or not set(per_dim.index) & _MODEL_PARALLEL:  # data parallel alone: said by op already
            out.append(f)
            continue
        shares = {str(d): float(v) / total for d, v in per_dim.items() if v > 0}
        said = ", ".join(f"{d} {v:.0%}" for d, v in shares.items())
        advice = f.recommendation
        if next(iter(shares)) == "pp":
            advice = _OP_ADVICE["send"] + " " + advice if f.evidence.get("op_shares") else _OP_ADVICE["send"]
        waits = (" (a pipeline's waits for its neighbour stage are left out: they are its bubble, p2p_wait_us)"
                 if "pp" in shares else "")
        out.append(dataclasses.replace(
            f, message=f"{f.message} By parallelism dimension: {said} of the exposed communication{waits}.",
            recommendation=advice, evidence={**f.evidence, "dim_shares": shares}))
    return tuple(out)
