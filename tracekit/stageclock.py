"""Where ``summarize`` spends its time: the wall time, CPU time and memory of each stage (``--profile-stages``).

Off by default, and then free: ``stage(name)`` returns at once. ``enable()`` turns it on in this process and, through
the environment, in the worker processes it starts; each rank's stages travel back in ``RankResult.stage_times``.
Memory is each stage's own peak resident size: Linux's high-water mark (``VmHWM``), reset as the stage begins
(``/proc/self/clear_refs``), so stages do not nest. Where it cannot be reset, the peak is the process's so far
(``getrusage``'s ``ru_maxrss``, which Linux carries over a fork and an exec) and the table says so. Nothing here
changes a result.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import time
from dataclasses import dataclass

ENV = "TRACEKIT_PROFILE_STAGES"


@dataclass(frozen=True)
class StageTime:
    """One stage of one process: ``rank`` is the rank a worker analysed (None: the run-level stages)."""

    stage: str
    wall_s: float
    cpu_s: float
    peak_mb: float        # the stage's peak resident size (``own_peak``), else the process's peak at its end
    own_peak: bool        # whether the peak is the stage's own (the high-water mark was reset as it began)
    rank: int | None = None


_records: list[StageTime] = []


def enable(on: bool = True) -> None:
    """Record stages from now on (an empty record), here and in the worker processes started later; ``on=False``
    stops recording and keeps what was recorded for ``take``."""
    if on:
        os.environ[ENV] = "1"
        _records.clear()
    else:
        os.environ.pop(ENV, None)


def enabled() -> bool:
    return os.environ.get(ENV) == "1"


def _peak_mb() -> float:
    """The high-water mark of resident memory, MB: since the last reset where ``_reset_peak`` succeeded."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1e6 if sys.platform == "darwin" else peak * 1024 / 1e6  # bytes on macOS, KiB on Linux


def _reset_peak() -> bool:
    """Start a new high-water mark of resident memory (Linux 4.0 and later); whether it could."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@contextlib.contextmanager
def stage(name: str, rank: int | None = None):
    """Time the block as stage ``name`` when recording is on."""
    if not enabled():
        yield
        return
    own, wall, cpu = _reset_peak(), time.perf_counter(), time.process_time()
    try:
        yield
    finally:
        _records.append(StageTime(name, time.perf_counter() - wall, time.process_time() - cpu, _peak_mb(), own,
                                  rank))


class Laps:
    """Straight-line code timed in laps: ``laps("name")`` records the stage from the last lap (or the start) to now."""

    def __init__(self) -> None:
        self.on = enabled()
        if self.on:
            self._mark = (_reset_peak(), time.perf_counter(), time.process_time())

    def __call__(self, name: str) -> None:
        if not self.on:
            return
        own, wall, cpu = self._mark
        now_wall, now_cpu = time.perf_counter(), time.process_time()
        _records.append(StageTime(name, now_wall - wall, now_cpu - cpu, _peak_mb(), own))
        self._mark = (_reset_peak(), time.perf_counter(), time.process_time())


def take(rank: int | None = None) -> tuple[StageTime, ...]:
    """The stages recorded since the last ``take``, with ``rank`` set where given; the record is emptied."""
    out = tuple(r if rank is None else StageTime(r.stage, r.wall_s, r.cpu_s, r.peak_mb, r.own_peak, rank)
                for r in _records)
    _records.clear()
    return out


def add(records) -> None:
    """Records made elsewhere (a worker's ``RankResult.stage_times``) join this process's."""
    _records.extend(records)


_W = 44  # the stage column's width


def since_start() -> float | None:
    """Seconds since this process started (interpreter start-up and imports included); None off Linux."""
    try:
        with open("/proc/self/stat", "rb") as f:
            started = int(f.read().rsplit(b")", 1)[1].split()[19])  # field 22: start time, clock ticks after boot
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        return uptime - started / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def table(records) -> str:
    """The stages as text: the rank stages summed over ranks (with the slowest rank's time and the largest rank's
    peak), then the run-level stages in order. A peak marked * is the process's so far, not the stage's own."""
    lines = [f"{'stage':<{_W}}{'wall s':>9}{'cpu s':>9}{'max rank s':>12}{'peak MB':>10}"]
    ranked = [r for r in records if r.rank is not None]
    for name in dict.fromkeys(r.stage for r in ranked):
        rows = [r for r in ranked if r.stage == name]
        lines.append(f"{'rank: ' + name:<{_W}}{sum(r.wall_s for r in rows):9.2f}{sum(r.cpu_s for r in rows):9.2f}"
                     f"{max(r.wall_s for r in rows):12.2f}{max(r.peak_mb for r in rows):10.0f}"
                     + ("" if all(r.own_peak for r in rows) else "*"))
    for r in (r for r in records if r.rank is None):
        lines.append(f"{'run: ' + r.stage:<{_W}}{r.wall_s:9.2f}{r.cpu_s:9.2f}{'':>12}{r.peak_mb:10.0f}"
                     + ("" if r.own_peak else "*"))
    if not all(r.own_peak for r in records):
        lines.append("* the process's peak so far: its high-water mark could not be reset for the stage")
    return "\n".join(lines) + "\n"
