"""Names that say an op is communication: the one definition the reader, classifier, causes and collectives share.

``COMM_ANNOTATION``: a backend's own annotation of a collective (``nccl:all_reduce``, ``gloo:all_reduce``).
``HOST_COMM_PREFIXES``: what a host op's name starts with when it only hands work to a communication backend.
``OPS``: the collective kinds of the collectives table, in its category order.
``EP_KERNELS``: expert-parallel all-to-all kernels outside NCCL (DeepEP, pplx-kernels, NVSHMEM), pattern -> op.

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

# Expert-parallel all-to-all outside NCCL: kernel name -> the op it does. These kernels carry no collective args and
# run under no collective host op, so their name is all the trace says: sizes, and so bytes and bandwidths, are
# unknown (NaN), and so is the group (the EP group is rarely the world). First match wins. Each pattern needs its
# library's namespace or its exact shape, so a compute kernel whose name merely holds "dispatch" or "combine"
# (``at::native::...dispatch...``, a MoE ``combineKernel``, triton's ``moe_dispatch_fused``: local permutes) stays
# compute. CUPTI names a template kernel ``void ns::f<...>(args)``: the optional ``void `` and the anchor at the start
# keep an argument's type from matching.
_KERNEL = r"^(?:void )?"
# DeepEP's kernels sit in deep_ep::<one of its kernel namespaces>::, those namespaces being intranode, internode and
# their variants (internode_ll, forks' internode_ll_two_stage), v2's ep and elastic; a fork may rename deep_ep to
# ep, at the top or one level down (dpsk::ep::internode::). Not any namespace chain ending in ep
# (at::native::ep::internode::), nor deep_ep's other namespaces (layout: local token counting).
_NODE = r"(?:intra|inter)node\w*"
_DEEP_EP = _KERNEL + rf"(?:(?:\w+::)*deep_ep::(?:{_NODE}|ep|elastic)|(?:\w+::)?ep::{_NODE})::"
_END = r"\w*(?![\w:])"


def _nvshmem(word: str) -> str:
    """An NVSHMEM kernel doing ``word``: ``nvshmem*_..._<word>...``, or ``<word>..._on_stream_kernel...``."""
    return rf"{_KERNEL}(?:nvshmem[a-z]*_(?:\w+_)?(?:{word})|(?:{word})\w*_on_stream_kernel){_END}"


EP_KERNELS = (
    # DeepEP (deepseek-ai/DeepEP): deep_ep::{intranode,internode,internode_ll}::dispatch/combine,
    # v2's deep_ep::ep::dispatch_impl, hybrid_dispatch_impl, dispatch_copy_epilogue_impl (the tail of dispatch),
    # deep_ep::elastic::hybrid_combine_impl, and forks that rename the top namespace
    # (dpsk::ep::internode::dispatch<...>). Not deep_ep::layout::get_dispatch_layout (it counts tokens locally).
    (_DEEP_EP + r"(?:hybrid_)?(?:dispatch|combine)" + _END, "all_to_all"),
    # DeepEP's notify_dispatch / notify_combine: every rank sends every other its token counts.
    (_DEEP_EP + r"notify_(?:dispatch|combine)" + _END, "all_to_all"),
    # DeepEP's cached_notify*: a barrier and buffer clean-up before a dispatch on a cached layout; no payload.
    (_DEEP_EP + r"cached_notify" + _END, "other"),
    (_DEEP_EP + r"barrier" + _END, "barrier"),
    # pplx-kernels (perplexityai/pplx-kernels) define dispatchKernel / combineKernel at file scope, so their shape is
    # the rule: the template arguments end with its (DO_SEND, DO_RECV) pair of bools.
    (_KERNEL + r"(?:pplx::(?:\w+::)*|\(anonymous namespace\)::)?(?:dispatch|combine)Kernel<[^<>]*"
     r"\b(?:true|false), (?:true|false)>", "all_to_all"),
    # NVSHMEM (nvshmem*, nvshmemi_*, nvshmemx_*): its device collectives and the kernels its on-stream collectives
    # launch (barrier_on_stream_kernel_threadgroup, alltoall/fcollect/rdxn/broadcast_on_stream_kernel); any other
    # nvshmem* kernel (puts, signals, proxies) is communication of op "other", but not its one-time nvshmemi_init_*.
    (_nvshmem(r"alltoall"), "all_to_all"),
    (_nvshmem(r"barrier|sync"), "barrier"),
    (_nvshmem(r"broadcast|bcast"), "broadcast"),
    (_nvshmem(r"fcollect"), "all_gather"),
    (_nvshmem(r"reducescatter"), "reduce_scatter"),
    (_nvshmem(r"rdxn|reduce"), "all_reduce"),
    (_KERNEL + r"nvshmem[a-z]*_(?!init)" + _END, "other"),
)
_EP_KERNELS = tuple((re.compile(pattern, re.IGNORECASE), op) for pattern, op in EP_KERNELS)
EP_KERNEL = re.compile("|".join(f"(?:{pattern})" for pattern, _ in EP_KERNELS), re.IGNORECASE)


def ep_kernel_op(name: str) -> str | None:
    """The op of an expert-parallel all-to-all kernel (``EP_KERNELS``), or None for any other name.

    Example:
      >>> ep_kernel_op("void dpsk::ep::internode::dispatch<false, 8, 7168>(int4*, float*)")
      'all_to_all'
      >>> ep_kernel_op("void at::native::unrolled_elementwise_kernel<dispatch_fn>(int)") is None
      True
    """
    return next((op for pattern, op in _EP_KERNELS if pattern.search(name)), None)
HOST_COMM_PREFIXES = ("nccl:", "gloo:", "rccl:", "c10d::", "record_param_comms")
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "send", "recv", "barrier", "other")
