"""Every finding the run's tables give, before the replay: the checks of each kind, in one chain."""

from __future__ import annotations

import pandas as pd

from tracekit.findings import checks, comm_dims, fsdp_findings, memory_findings
from tracekit.findings.finding import trains


def run_findings(ranks: pd.DataFrame, collectives: pd.DataFrame, stragglers: pd.DataFrame, run,
                 comm_by_dim: pd.DataFrame, fsdp: pd.DataFrame, steps: pd.DataFrame, memory: pd.DataFrame) -> list:
    """The idle, host and communication checks (communication split by parallelism dimension), then FSDP's and
    memory's, each merged into the list the one before made (the pipeline's and the roofline's follow the replay)."""
    found = comm_dims.by_dimension(checks.find(ranks, collectives, stragglers, run), comm_by_dim)
    found = fsdp_findings.merged(found, fsdp, steps, ranks)
    return memory_findings.merged(found, memory, steps, training=trains(ranks))
