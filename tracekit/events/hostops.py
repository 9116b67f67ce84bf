"""The host ops the analysis of a GPU rank reads, by name: ``reads_host_op``, the reader's filter (``read_rank``'s
``host_ops``) and the graph's, so that both keep exactly the same ops.

The reader leaves every other CPU op of a GPU trace out of the table (about half its events); a CPU-only trace keeps
all, since its ops are the device work.
"""

from __future__ import annotations

from tracekit.events import causes
from tracekit.events.classify import STEP_NAME
from tracekit.commnames import COLLECTIVE_OP, COMM_ANNOTATION
from tracekit.events.fsdp_hooks import ANNOTATION as FSDP_ANNOTATION

_HOST_OPS_READ = (STEP_NAME, COMM_ANNOTATION, COLLECTIVE_OP, causes.HOST_COMM, causes.SYNC_CALL, causes.DATA_LOADER,
                  FSDP_ANNOTATION, causes.DDP_OP)


def reads_host_op(name: str) -> bool:
    """Whether the analysis of a GPU rank (``rank.reduce_rank``) looks at a host op of this name.

    >>> reads_host_op("ProfilerStep#3"), reads_host_op("aten::mm")
    (True, False)
    """
    return name == causes.DATA_PARALLEL_OP or any(p.search(name) for p in _HOST_OPS_READ)
