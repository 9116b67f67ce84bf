"""Names that say an op is communication: the one definition the reader, classifier, causes and collectives share.

``COMM_ANNOTATION``: a backend's own annotation of a collective (``nccl:all_reduce``, ``gloo:all_reduce``).
``HOST_COMM_PREFIXES``: what a host op's name starts with when it only hands work to a communication backend.
``OPS``: the collective kinds of the collectives table, in its category order.

``c10d::*`` ops (the dispatcher's collectives), and every other op whose name is a collective's in any namespace:
torch's ``_c10d_functional::all_gather_into_tensor``, ``symm_mem::multimem_all_reduce_``,
``symm_mem::two_shot_all_reduce_``, inference engines' ``_C_custom_ar::all_reduce`` or ``vllm::all_reduce``.
Ops that only contain a collective among other work (``symm_mem::fused_all_gather_matmul``) and ATen's
``aten::gather``/``aten::scatter`` (compute) do not match: the name must be the collective, with at most a
variant word before it and a flavour after it.
"""

from __future__ import annotations

import re

_BEFORE = r"(?:(?:multimem|one_shot|two_shot|nvshmem|custom|qr|inplace|outplace)_)*"
_COLLECTIVE = r"(?:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|send|recv|barrier)"
_AFTER = r"(?:_(?:into|tensor|coalesced|single|base|out|copy|vdev|2d))*"
COLLECTIVE_OP = re.compile(rf"(?i)^(?:c10d::|\w[\w.]*::_?{_BEFORE}{_COLLECTIVE}{_AFTER}_?$)")
# c10d's ops whose two first inputs are plain tensors take (output, input): _allgather_base_, _reduce_scatter_base_,
# alltoall_base_. Every other collective op here takes its input first.
OUTPUT_FIRST_OP = re.compile(r"^c10d::")

COMM_ANNOTATION = re.compile(r"^(nccl|rccl|gloo):")
HOST_COMM_PREFIXES = ("nccl:", "gloo:", "rccl:", "c10d::", "record_param_comms")
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send", "recv", "barrier", "other")
