"""The JSON of a PyTorch profiler (Kineto / Chrome) trace as msgspec structs: only the fields tracekit reads.

Fields that are not declared here are skipped without being built, which is what makes loading many times faster
than ``json.load``. Besides the general decoder (``TRACE_DECODER``), which names any error, there are fast ones that build
only complete ("X") events: of a whole document (``FAST_DECODER``), or of one chunk of a streamed one
(``CHUNK_DECODER``, see ``tracekit.read.stream``); ``tracekit.read.reader`` chooses among them.
"""

from __future__ import annotations

from typing import Union

import msgspec

_Id = int | str | None
_Num = int | float | None


class Args(msgspec.Struct, gc=False):
    external_id: _Id = msgspec.field(default=None, name="External id")
    external_id_old: _Id = msgspec.field(default=None, name="external id")
    correlation: _Id = None
    stream: _Id = None
    device: _Id = None
    collective: str | None = msgspec.field(default=None, name="Collective name")
    dtype: str | None = None
    in_nelems: _Num = msgspec.field(default=None, name="In msg nelems")
    out_nelems: _Num = msgspec.field(default=None, name="Out msg nelems")
    group_size: _Num = msgspec.field(default=None, name="Group size")
    pg_name: _Id = msgspec.field(default=None, name="Process Group Name")
    pg_id: _Id = msgspec.field(default=None, name="Process Group ID")
    pg_desc: str | None = msgspec.field(default=None, name="Process Group Description")
    dst_rank: _Id = msgspec.field(default=None, name="Dst Rank")  # NCCL send: the peer's global rank
    src_rank: _Id = msgspec.field(default=None, name="Src Rank")  # NCCL recv: the peer's global rank
    seq: _Num = msgspec.field(default=None, name="Seq")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Concrete Inputs")
    flops: _Num = None  # with_flops=True: the profiler's own estimate for matmul and conv ops
    # [memory] instant events (profile_memory=True)
    total_allocated: _Num = msgspec.field(default=None, name="Total Allocated")
    total_reserved: _Num = msgspec.field(default=None, name="Total Reserved")
    nbytes: _Num = msgspec.field(default=None, name="Bytes")
    device_type: _Id = msgspec.field(default=None, name="Device Type")
    device_id: _Id = msgspec.field(default=None, name="Device Id")
    addr: _Id = msgspec.field(default=None, name="Addr")


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: _Id = None
    tid: _Id = None
    ts: _Num = None
    dur: _Num = None
    args: Args | None = None


class DistributedInfo(msgspec.Struct, gc=False):
    rank: _Id = None
    backend: str | None = None
    world_size: _Num = None
    nccl_version: str | None = None
    pg_config: msgspec.Raw = msgspec.Raw()


class _DeviceProperties(msgspec.Struct, gc=False):
    name: str | None = None
    computeMajor: _Num = None
    totalGlobalMem: _Num = None


class _Trace(msgspec.Struct, gc=False):
    traceEvents: list[_Event] | None = None
    distributedInfo: DistributedInfo | None = None
    baseTimeNanoseconds: _Num = None
    deviceProperties: list[_DeviceProperties] | None = None
    host_name: str | None = None


TRACE_DECODER = msgspec.json.Decoder(_Trace | list[_Event])


def _retyped(struct: type, name: str, types: dict, drop: tuple = (), factories: dict | None = None, **options) -> type:
    """A copy of ``struct`` with some field types (and default factories) replaced: it follows fields added to it."""
    factories = factories or {}
    fields = [(f.name, types.get(f.name, f.type),
               msgspec.field(default_factory=factories[f.name], name=f.encode_name) if f.name in factories else
               msgspec.field(default=f.default, default_factory=f.default_factory, name=f.encode_name))
              for f in msgspec.structs.fields(struct) if f.name not in drop]
    return msgspec.defstruct(name, fields, **options)


# The fast decoders. A union tagged on "ph" builds complete ("X") events and makes every other phase (flows,
# counters, metadata: a third of a Kineto trace) an empty struct. What they refuse (an unknown phase, an event
# without "ph", "args": null) is decoded again by the general decoder above, which also names any error.
_OTHER_PHASES = ("I", "C", "b", "n", "e", "s", "t", "f", "P", "O", "N", "D", "M", "V", "v", "R", "c",
                 "(", ")")
Complete = _retyped(_Event, "Complete", {"args": Args}, drop=("ph",), factories={"args": Args},
                     tag="X", tag_field="ph", gc=False)
# Instant ("i") events are built too: profile_memory's ``[memory]`` events are instants.
Instant = _retyped(_Event, "Instant", {"args": Args}, drop=("ph", "dur"), factories={"args": Args},
                   tag="i", tag_field="ph", gc=False)
# Begin / end ("B" / "E") events of non-Kineto Chrome traces: paired into complete events (tracekit.read.pairs).
Begin = _retyped(_Event, "Begin", {"args": Args}, drop=("ph", "dur"), factories={"args": Args},
                 tag="B", tag_field="ph", gc=False)
End = _retyped(_Event, "End", {"args": Args}, drop=("ph", "dur"), factories={"args": Args},
               tag="E", tag_field="ph", gc=False)
_AnyEvent = Union[(Complete, Instant, Begin, End, *(msgspec.defstruct(f"_Skipped{i}", [], tag=ph, tag_field="ph", gc=False)
                                for i, ph in enumerate(_OTHER_PHASES)))]
FAST_DECODER = msgspec.json.Decoder(_retyped(_Trace, "_FastTrace", {"traceEvents": list[_AnyEvent] | None})
                                     | list[_AnyEvent])
CHUNK_DECODER = msgspec.json.Decoder(list[_AnyEvent])
NO_ARGS = Args()  # what an event without args reads as
MEMORY_EVENT = "[memory]"  # the name of profile_memory's instant events


def decode_raw(raw, kind):
    """A Raw field (``Input Dims``, ``pg_config``) as a value of type ``kind``; None where absent or not one."""
    if raw is None or len(raw) == 0:
        return None
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    if isinstance(value, str):  # "[0, 1]" written as a string
        try:
            value = msgspec.json.decode(value)
        except msgspec.DecodeError:
            return None
    return value if isinstance(value, kind) else None

