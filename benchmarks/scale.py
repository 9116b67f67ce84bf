"""Speed and scale of tracekit against HolisticTraceAnalysis, on rank sets made from a real trace.

Every measured run is a fresh Python process, timed whole (start-up and imports included) and after its imports;
tracekit and HTA alternate so neither gets a warmer machine. Memory is the peak, over the run, of the summed PSS (proportional set size) of the
process and all its children, sampled every 20 ms from /proc/PID/smaps_rollup: worker pools count in full, shared
pages once; the ranks8 scenario also prints each tool's largest process (the issue's measure). Sampling costs CPU
(more for a tool with more processes), so wall times come from separate, unsampled runs.

    .venv/bin/python benchmarks/scale.py                    # every scenario below
    .venv/bin/python benchmarks/scale.py --only ranks8 cache --repeat 5

Scenarios:
  ranks8  8 ranks of ~54 MB of JSON each: tracekit (no cache, one worker per core) vs HTA's TraceAnalysis load +
          get_temporal_breakdown + get_comm_comp_overlap + get_idle_time_breakdown; and two decode floors with the
          same worker pool: gunzip + tracekit's own typed msgspec decode, and a leaner one (gunzip + a typed decode
          of ph, cat, name, ts, dur, pid, tid, args left raw). Each is timed as a whole process, start-up and
          imports included (``process_s``), and after its imports (``wall_s``); the ratios use whole processes.
  cache   the same set summarized twice with an empty cache folder: the second run reads the cache.
  ranks64 64 such ranks: peak memory against the 8-rank run's.
  large   one plain-JSON trace of ~1 GB, then ~4 GB (one rank: one process, with helpers that decode its chunks
          and a process that makes its operator tables beside the other stages when there are spare cores): peak
          memory (summed, and the largest process) against the JSON size and against the 1 GB run's peak, and the
          time against the decode floor of the same file (streamed where the whole document would not fit in
          memory). --large-mb sets the sizes, --large-repeat the alternating runs, --large-single adds tracekit in
          one process (workers=1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tracesets import write_large, write_rank_set  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "traces" / "hta" / "ns_resolution_1rank"

TRACEKIT = """
import json, sys, time
import tracekit
args = json.loads(sys.argv[1])
t = time.perf_counter()
tracekit.summarize(args["dir"], **args["kwargs"])
print(json.dumps({"wall_s": time.perf_counter() - t}))
"""

HTA = """
import json, logging, sys, time, warnings
warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
logging.getLogger("hta").setLevel(logging.ERROR)
args = json.loads(sys.argv[1])
t = time.perf_counter()
analysis = TraceAnalysis(trace_dir=args["dir"])
analysis.get_temporal_breakdown(visualize=False)
analysis.get_comm_comp_overlap(visualize=False)
analysis.get_idle_time_breakdown(visualize=False)
print(json.dumps({"wall_s": time.perf_counter() - t}))
"""

# The decode floor, in a process that loads only what decoding needs (not tracekit's package, whose import is part of
# tracekit's own cost): ISA-L's gunzip, as tracekit reads, then tracekit's typed msgspec decoder, loaded from its
# file (it imports msgspec alone).
FLOOR = """
import importlib.util, io, json, os, sys, time
from concurrent.futures import ProcessPoolExecutor
import multiprocessing
from pathlib import Path
from isal import igzip
spec = importlib.util.spec_from_file_location("kineto", "tracekit/read/kineto.py")
kineto = sys.modules["kineto"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kineto)
FAST_DECODER = kineto.FAST_DECODER

def decode(path):
    t = time.process_time()
    data = Path(path).read_bytes()
    if data[:2] == b"\\x1f\\x8b":
        data = igzip.decompress(data)   # gunzip (ISA-L inflate, as tracekit reads)
    trace = FAST_DECODER.decode(data)   # the typed decode
    events = trace if isinstance(trace, list) else trace.traceEvents or []
    return time.process_time() - t, len(events)

args = json.loads(sys.argv[1])
files = sorted(str(p) for p in Path(args["dir"]).glob("*.json*"))
t = time.perf_counter()
with ProcessPoolExecutor(min(len(os.sched_getaffinity(0)), len(files)),
                         mp_context=multiprocessing.get_context("fork")) as pool:
    done = list(pool.map(decode, files))
print(json.dumps({"wall_s": time.perf_counter() - t, "cpu_s": sum(c for c, _ in done),
                  "events": sum(n for _, n in done)}))
"""

# The leaner floor: the same, with a typed decode of the seven fields every tool needs, args kept as raw bytes.
LEAN_FLOOR = FLOOR.replace("""spec = importlib.util.spec_from_file_location("kineto", "tracekit/read/kineto.py")
kineto = sys.modules["kineto"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kineto)
FAST_DECODER = kineto.FAST_DECODER
""", """import msgspec
class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float | int | None = None
    dur: float | int | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    args: msgspec.Raw = msgspec.Raw()
class Trace(msgspec.Struct, gc=False):
    traceEvents: list[Event] = []
FAST_DECODER = msgspec.json.Decoder(Trace)
""")
assert LEAN_FLOOR != FLOOR

# The floor of a trace whose whole document's structs do not fit in memory (a 10 GB trace's pass 24 GB): the
# same typed decode, a chunk of events at a time, as any tool that reads it must stream it. It uses tracekit's own
# scan for the chunks' ends (``tracekit.read.stream``), so it pays tracekit's import (about 0.7 s) too.
STREAMED_FLOOR = """
import json, os, sys, time
from pathlib import Path
from tracekit.read.kineto import CHUNK_DECODER, FAST_DECODER
from tracekit.read.stream import BLOCK_BYTES, EventStream, open_trace, read_block

args = json.loads(sys.argv[1])
path = sorted(Path(args["dir"]).glob("*.json*"))[0]
t, cpu, events = time.perf_counter(), time.process_time(), 0
with open_trace(path) as stream:
    first = read_block(stream, path, BLOCK_BYTES)
    chunks = EventStream(stream, path, first, args.get("chunk_events", 20_000))  # tracekit's chunk size
    for chunk in chunks.chunks():
        events += len(CHUNK_DECODER.decode(chunk))
    FAST_DECODER.decode(chunks.trace_bytes())
print(json.dumps({"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - cpu, "events": events}))
"""


# Every measured process runs as a user's Python does by default: it caches modules' bytecode (this machine's
# environment sets PYTHONDONTWRITEBYTECODE, under which each start compiles tracekit's own modules again: 0.15 s of
# its 0.85 s of imports; the packages pip installed, HTA's among them, hold bytecode compiled at install either way).
RUN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def measure(code: str, args: dict, memory: bool = False, interval: float = 0.02) -> dict:
    """Run ``code`` in a fresh interpreter: its printed JSON, plus (``memory``) the peak summed PSS of its tree
    (``peak_mb``) and the peak PSS of its largest process (``largest_mb``: the issue's "largest process"), sampled
    every ``interval`` seconds. Reading a process's smaps_rollup walks its page tables and holds its memory map's
    lock: on a process of gigabytes that is milliseconds a read, which every 20 ms slows the process measured."""
    began = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=RUN_ENV)
    peak, largest = [0], [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            sizes = [_pss(pid) for pid in _tree(proc.pid)]
            peak[0], largest[0] = max(peak[0], sum(sizes)), max([largest[0], *sizes])
            stop.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    if memory:
        sampler.start()
    out, err = proc.communicate()
    process_s = time.perf_counter() - began
    stop.set()
    if memory:
        sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark process failed:\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_mb"], result["largest_mb"] = peak[0] / 1e6, largest[0] / 1e6
    result["process_s"] = process_s  # the whole process: interpreter start-up and imports included
    return result


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc/PID/task/*/children (no scan of every process)."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children", "rb") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return pids


def _pss(pid: int) -> int:
    """Bytes of proportional set size, from the kernel's one-line summary (cheap to read, unlike smaps)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def json_mb(folder: Path) -> float:
    import gzip

    total = 0
    for p in folder.glob("*.json*"):
        with open(p, "rb") as f:
            head = f.read(2)
        if head == b"\x1f\x8b":
            with gzip.open(p, "rb") as f:
                while chunk := f.read(1 << 24):
                    total += len(chunk)
        else:
            total += p.stat().st_size
    return total / 1e6


def _folder(work: Path, name: str, source: Path) -> Path:
    """Where a generated set is kept: named for the source trace too, unless it is the default one."""
    return work / (name if source.resolve() == SOURCE.resolve() else f"{name}-{source.name}")


def ranks8(work: Path, repeat: int, mb: float, with_hta: bool, source: Path = SOURCE) -> dict:
    """The issue's table for 8 ranks: each tool and each floor as whole processes (start-up and imports included),
    their ratios against the targets, and the largest process's memory."""
    folder = _folder(work, f"ranks8-{mb:g}mb", source)
    write_rank_set(source, folder, 8, mb)
    print(f"\n== 8 ranks: {folder} ({json_mb(folder):.0f} MB of JSON in all), {repeat} alternating runs, medians")
    runs: dict[str, list[dict]] = {"tracekit": [], "HTA": [], "floor": [], "lean floor": []}
    codes = {"tracekit": (TRACEKIT, {"dir": str(folder), "kwargs": {"cache": False}}),
             "HTA": (HTA, {"dir": str(folder)}), "floor": (FLOOR, {"dir": str(folder)}),
             "lean floor": (LEAN_FLOOR, {"dir": str(folder)})}
    if not with_hta:
        del runs["HTA"], codes["HTA"]
    for i in range(repeat):
        for name, (code, args) in codes.items():
            runs[name].append(measure(code, args))
        print(f"  time run {i + 1}: " + " | ".join(f"{name} {runs[name][-1]['process_s']:.2f} s" for name in runs))
    mem = {name: [] for name in ("tracekit", "HTA") if name in codes}
    for i in range(max(1, repeat // 2)):
        for name in mem:
            mem[name].append(measure(*codes[name], memory=True))
        print(f"  memory run {i + 1}: " + " | ".join(f"{name} {mem[name][-1]['peak_mb']:.0f} MB (largest process "
                                                     f"{mem[name][-1]['largest_mb']:.0f})" for name in mem))
    whole = {name: median(r, "process_s") for name, r in runs.items()}
    inner = {name: median(r, "wall_s") for name, r in runs.items()}
    print(f"  {'whole process (start-up, imports)':<36}{'s':>8}   {'after imports s':>15}")
    for name in runs:
        print(f"  {name:<36}{whole[name]:8.2f}   {inner[name]:15.2f}")
    t = whole["tracekit"]
    print(f"  tracekit / floor                    {t / whole['floor']:8.2f}x   (target <= 2.0; after imports "
          f"{inner['tracekit'] / inner['floor']:.2f}x)")
    print(f"  tracekit / lean floor               {t / whole['lean floor']:8.2f}x   (target <= 4.0)")
    largest = median(mem["tracekit"], "largest_mb")
    print(f"  tracekit largest process            {largest:8.0f} MB (target <= 300); all processes "
          f"{median(mem['tracekit'], 'peak_mb'):.0f} MB")
    if with_hta:
        print(f"  HTA / tracekit                      {whole['HTA'] / t:8.2f}x faster; HTA's largest process "
              f"{median(mem['HTA'], 'largest_mb'):.0f} MB, all {median(mem['HTA'], 'peak_mb'):.0f} MB")
    return {"wall_s": inner["tracekit"], "peak_mb": median(mem["tracekit"], "peak_mb")}


def cache_speedup(work: Path, repeat: int, mb: float, source: Path = SOURCE) -> None:
    folder = _folder(work, f"ranks8-{mb:g}mb", source)
    write_rank_set(source, folder, 8, mb)
    print(f"\n== cache: {folder} summarized twice with an empty cache folder, {repeat} times, medians")
    cold, warm = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="tracekit-cache-") as store:
            cold.append(measure(TRACEKIT, {"dir": str(folder), "kwargs": {"cache_dir": store}}))
            warm.append(measure(TRACEKIT, {"dir": str(folder), "kwargs": {"cache_dir": store}}))
    t_cold, t_warm = median(cold, "wall_s"), median(warm, "wall_s")
    print(f"  first (parse + write cache): {t_cold:6.2f} s   second (from cache): {t_warm:6.3f} s"
          f"   speed-up {t_cold / t_warm:5.1f}x")


def ranks64(work: Path, mb: float, base: dict | None, source: Path = SOURCE) -> None:
    folder = _folder(work, f"ranks64-{mb:g}mb", source)
    write_rank_set(source, folder, 64, mb)
    print(f"\n== 64 ranks: {folder} ({64 * mb:.0f} MB of JSON), one run, memory sampled")
    run = measure(TRACEKIT, {"dir": str(folder), "kwargs": {"cache": False}}, memory=True)
    print(f"  tracekit summarize      : {run['wall_s']:7.2f} s wall   peak {run['peak_mb']:6.0f} MB")
    if base:
        print(f"  against 8 ranks         : {run['peak_mb'] / base['peak_mb']:7.2f}x the peak memory "
              f"({run['peak_mb'] - base['peak_mb']:+.0f} MB), {run['wall_s'] / base['wall_s']:.1f}x the time")


def large(work: Path, sizes: list[float], repeat: int = 1, single: bool = False, source: Path = SOURCE) -> None:
    """One plain-JSON trace per size (one rank: one process, with chunk-decoding helpers and the operator tables
    beside it on spare cores): its peak memory (summed PSS; the largest process) against the JSON size and against
    the first size's peak, and its time against the decode floor of the same file. ``repeat`` alternating runs of
    each, medians (a run that allocates gigabytes varies by tens of % on a virtual machine); ``single``: also
    tracekit in one process (``workers=1``: no helpers, nothing beside), the least memory it takes."""
    first = None
    for mb in sizes:
        folder = _folder(work, f"large-{mb:g}mb", source)
        path = write_large(source, folder, mb)
        size = path.stat().st_size / 1e6
        print(f"\n== one large trace: {path} ({size:.0f} MB of JSON), {repeat} alternating run(s), medians, memory "
              f"sampled")
        # A whole 10 GB document and its structs passed 24 GB (killed for memory): past a third of the free memory,
        # the floor streams.
        streamed = size * 1e6 > psutil.virtual_memory().available / 3
        runs: dict[str, list[dict]] = {"tracekit": [], "floor": [], "one process": []}
        for _ in range(repeat):
            # Sampled every 0.25 s: its transients last seconds at these sizes, and 20 ms samples slowed it by a third.
            runs["tracekit"].append(measure(TRACEKIT, {"dir": str(folder), "kwargs": {"cache": False}}, memory=True,
                                            interval=0.25))
            runs["floor"].append(measure(STREAMED_FLOOR if streamed else FLOOR, {"dir": str(folder)}))
            if single:
                runs["one process"].append(measure(TRACEKIT, {"dir": str(folder),
                                                              "kwargs": {"cache": False, "workers": 1}},
                                                   memory=True, interval=0.25))
        med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in runs.items() if v}
        run, floor = med["tracekit"], med["floor"]
        print("  each run (whole process, s): " + "; ".join(
            f"{k} " + ", ".join(f"{r['process_s']:.2f}" for r in v) for k, v in runs.items() if v))
        print(f"  tracekit summarize      : {run['process_s']:7.2f} s whole process   peak {run['peak_mb']:6.0f} MB"
              f" = {run['peak_mb'] / size:.2f} B per B of JSON (target <= 0.4 at 4 GB, <= 0.35 at 10 GB); largest "
              f"process {run['largest_mb']:6.0f} MB", flush=True)
        how = "streamed, a chunk of events at a time" if streamed else "whole document"
        print(f"  decode floor, same file : {floor['process_s']:7.2f} s whole process ({how}); tracekit / floor "
              f"{run['process_s'] / floor['process_s']:.2f}x (target <= 3.0)")
        if single:
            one = med["one process"]
            print(f"  tracekit, one process   : {one['process_s']:7.2f} s whole process   peak {one['peak_mb']:6.0f} MB"
                  f" = {one['peak_mb'] / size:.2f} B per B of JSON; tracekit / floor "
                  f"{one['process_s'] / floor['process_s']:.2f}x")
        if first is None:
            first = (size, run)
        else:
            print(f"  against {first[0]:.0f} MB of JSON  : {run['peak_mb'] / first[1]['peak_mb']:7.2f}x the peak memory "
                  f"for {size / first[0]:.1f}x the JSON, {run['wall_s'] / first[1]['wall_s']:.1f}x the time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=["ranks8", "cache", "ranks64", "large"],
                        default=["ranks8", "cache", "ranks64", "large"])
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "tracekit-bench",
                        help="where the generated traces are kept between runs")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mb", type=float, default=54.0, help="MB of JSON per rank")
    parser.add_argument("--large-mb", type=float, nargs="+", default=[1000.0, 4000.0],
                        help="sizes of the single large traces, MB of JSON; the first is the reference")
    parser.add_argument("--large-repeat", type=int, default=1, help="alternating runs of each large trace")
    parser.add_argument("--large-single", action="store_true",
                        help="also time each large trace with tracekit in one process (workers=1)")
    parser.add_argument("--no-hta", action="store_true")
    parser.add_argument("--source", type=Path, default=SOURCE,
                        help="the real trace (a file, or a folder whose first trace is used) the sets are made from; "
                             "the default has no collectives, nccl_a100_2rank beside it has NCCL all-reduces")
    args = parser.parse_args()
    print(f"machine: {psutil.cpu_count()} cores, {psutil.virtual_memory().total / 1e9:.0f} GB; "
          f"load average {psutil.getloadavg()[0]:.1f}; source trace {args.source}")
    print("each run a fresh interpreter with Python's default bytecode cache (PYTHONDONTWRITEBYTECODE unset)")
    base = None
    if "ranks8" in args.only:
        base = ranks8(args.work, args.repeat, args.mb, not args.no_hta, args.source)
    if "cache" in args.only:
        cache_speedup(args.work, args.repeat, args.mb, args.source)
    if "ranks64" in args.only:
        ranks64(args.work, args.mb, base, args.source)
    if "large" in args.only:
        large(args.work, args.large_mb, args.large_repeat, args.large_single, args.source)


if __name__ == "__main__":
    main()
