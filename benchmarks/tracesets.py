"""Benchmark inputs made from a real trace: its steps repeated to a target size, then copied to N ranks.

A copy of the trace's events is shifted in time by the trace's span and its ids (correlation, External id, flow id)
and step numbers are moved past the previous copy's, so every copy is a valid continuation and the metrics still
link kernels to their launches. Each rank file gets its own ``distributedInfo.rank`` and file name.

A rank file is written as two gzip members (the rank's header, then the shared event body); gunzip and every
gzip reader see one ordinary JSON document, and 64 ranks are written in seconds instead of minutes.

    python benchmarks/tracesets.py ../shared/traces/hta/ns_resolution_1rank /tmp/tk-bench/8x54 --ranks 8 --mb 54
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
from pathlib import Path

import msgspec

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_ID_KEYS = ("correlation", "External id", "external id")


def load_trace(source: Path) -> dict:
    """The one trace file in ``source`` (a folder or a file), as plain JSON values."""
    files = [source] if source.is_file() else sorted(p for p in source.iterdir() if p.name.endswith((".json", ".gz")))
    data = files[0].read_bytes()
    return msgspec.json.decode(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def repeated_events(trace: dict, target_bytes: int):
    """The trace's timed events, repeated with shifted times, ids and step numbers until they reach ``target_bytes``.

    Yields one list per copy (the metadata events first), so a writer never holds more than one copy.
    """
    events = trace["traceEvents"]
    meta = [e for e in events if e.get("ph") in ("M", "i", "I")]
    timed = [e for e in events if e.get("ph") not in ("M", "i", "I") and isinstance(e.get("ts"), (int, float))]
    ts = [e["ts"] for e in timed]
    span_us = math.ceil(max(ts) - min(ts)) + 1000
    id_stride = 10 ** len(str(_max_id(timed)))
    steps = [int(m.group(1)) for e in timed if (m := _STEP.match(str(e.get("name", ""))))]
    step_stride = (max(steps) - min(steps) + 1) if steps else 0
    one_copy = len(msgspec.json.encode(timed))
    copies = max(target_bytes / one_copy, 1.0)
    yield meta
    for k in range(math.ceil(copies)):
        cut = min(ts) + span_us * (copies - k)  # the last copy may be partial
        yield [_shifted(e, k, span_us, id_stride, step_stride) for e in timed if e["ts"] < cut]


def _max_id(events: list[dict]) -> int:
    ids = [e.get("id", 0) for e in events] + [
        e.get("args", {}).get(k, 0) for e in events for k in _ID_KEYS]
    return max((i for i in ids if isinstance(i, int)), default=1)


def _shifted(event: dict, k: int, span_us: int, id_stride: int, step_stride: int) -> dict:
    if k == 0:
        return event
    e = dict(event, ts=event["ts"] + k * span_us)
    if isinstance(e.get("id"), int):
        e["id"] += k * id_stride
    args = e.get("args")
    if isinstance(args, dict) and any(isinstance(args.get(key), int) for key in _ID_KEYS):
        e["args"] = {key: (v + k * id_stride if key in _ID_KEYS and isinstance(v, int) else v)
                     for key, v in args.items()}
    m = _STEP.match(str(e.get("name", "")))
    if m:
        e["name"] = f"ProfilerStep#{int(m.group(1)) + k * step_stride}"
    return e


def _array(copies) -> bytes:
    return b"[" + b",".join(msgspec.json.encode(c)[1:-1] for c in copies if c) + b"]"


def _header(trace: dict, rank: int, world_size: int) -> bytes:
    """The document up to the events array, with this rank's distributedInfo."""
    top = {k: v for k, v in trace.items() if k != "traceEvents"}
    info = dict(top.get("distributedInfo") or {}, rank=rank, world_size=world_size)
    top["distributedInfo"] = info
    body = msgspec.json.encode(top)
    return body[:-1] + b',"traceEvents":'  # reopen the object for the events


def write_rank_set(source: Path, out: Path, ranks: int, mb: float) -> list[Path]:
    """``ranks`` files ``rank-<r>.pt.trace.json.gz`` in ``out``, each about ``mb`` MB of JSON. Reused when present."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"rank-{r}.pt.trace.json.gz" for r in range(ranks)]
    stamp = out / ".complete"
    if stamp.exists() and stamp.read_text() == f"{source.resolve()} {ranks} {mb}":
        return paths
    trace = load_trace(source)
    body = gzip.compress(_array(repeated_events(trace, int(mb * 1e6))) + b"}", compresslevel=6)
    for rank, path in enumerate(paths):
        path.write_bytes(gzip.compress(_header(trace, rank, ranks), compresslevel=6) + body)
    stamp.write_text(f"{source.resolve()} {ranks} {mb}")
    return paths


def write_large(source: Path, out: Path, mb: float) -> Path:
    """One plain ``.json`` trace of about ``mb`` MB (torch.profiler's default output is uncompressed)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "rank-0.pt.trace.json"
    stamp = out / ".complete"
    if stamp.exists() and stamp.read_text() == f"{source.resolve()} {mb}":
        return path
    trace = load_trace(source)
    with path.open("wb") as f:
        f.write(_header(trace, 0, 1) + b"[")
        for i, copy in enumerate(repeated_events(trace, int(mb * 1e6))):
            f.write((b"," if i and copy else b"") + msgspec.json.encode(copy)[1:-1])
        f.write(b"]}")
    stamp.write_text(f"{source.resolve()} {mb}")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--mb", type=float, default=54.0)
    parser.add_argument("--single", action="store_true", help="write one plain .json file instead of a rank set")
    args = parser.parse_args()
    if args.single:
        print(write_large(args.source, args.out, args.mb))
    else:
        print(json.dumps([str(p) for p in write_rank_set(args.source, args.out, args.ranks, args.mb)]))


if __name__ == "__main__":
    main()
