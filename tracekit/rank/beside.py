"""A stage of one rank's analysis run beside the others, in a forked process, where the rank has cores to spare.

A single large trace is analysed by one process: once it is read, its stages run one after another and the other
cores idle. ``start(fn, *args)`` forks a process that runs ``fn(*args)`` while this one goes on, and returns a
function that waits for the result. The child sees the arguments through the fork (no copy is sent); only the
result comes back, pickled. Where no fork can be made (another thread runs, or the platform has none), ``fn`` runs
here when the result is asked for; where the child dies without a result (killed), it runs here then too. Either
way the result is the one ``fn`` gives: where it ran changes no number. A child whose result is never asked for (the
caller failed first) is ended when the function returned is dropped, so it holds no memory after.
"""

from __future__ import annotations

import os
import pickle
import traceback
import weakref
from typing import Any, Callable

from tracekit import stageclock
from tracekit.read.parallel import context

_JOB: list = []  # the job of the child about to be forked: set just before the fork, cleared just after


def memory_allows(need_bytes: float) -> bool:
    """Whether ``need_bytes`` are to spare twice over: a child's working memory comes on top of this process's. What
    is to spare: the machine's ``MemAvailable`` (Linux), or less where this process's cgroup (a container) has a
    lower limit left. Unknown (no /proc/meminfo) counts as none."""
    available = _meminfo_available()
    if available is None:
        return False
    left = _cgroup_left()
    return min(available, left if left is not None else available) >= 2 * need_bytes


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_left(root: str = "/sys/fs/cgroup") -> int | None:
    """Bytes this process's cgroup (a container) may still use: its limit less its usage, from cgroup v2
    (``memory.max``, ``memory.current``) or v1 (``memory/.../memory.limit_in_bytes``, ``memory.usage_in_bytes``);
    None where it has no limit or none can be read."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = [line.strip().split(":", 2) for line in f if line.count(":") >= 2]
    except OSError:
        return None
    for hierarchy, controllers, path in lines:
        if hierarchy == "0" and controllers == "":
            files = (os.path.join(root, path.lstrip("/")), "memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            files = (os.path.join(root, "memory", path.lstrip("/")), "memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        try:
            with open(os.path.join(files[0], files[1])) as f:
                limit = f.read().strip()
            if limit == "max" or int(limit) >= 2**62:  # v1 writes no limit as a number near 2**63
                continue
            with open(os.path.join(files[0], files[2])) as f:
                return max(int(limit) - int(f.read().strip()), 0)
        except (OSError, ValueError):
            continue
    return None


def start(fn: Callable[..., Any], *args) -> Callable[[], Any]:
    """Run ``fn(*args)`` in a forked process; the returned function waits for its result (or raises its error)."""
    fork = context()
    if fork is None:
        return lambda: fn(*args)
    receive, send = fork.Pipe(duplex=False)
    _JOB.append((fn, args, send, receive))
    try:
        child = fork.Process(target=_child, name="tracekit-beside", daemon=True)
        child.start()
    except OSError:  # no fork to be had (no memory for it, the process limit): the stage runs here
        receive.close()
        return lambda: fn(*args)
    finally:
        _JOB.clear()
        send.close()
    return _Pending(child, receive, fn, args)


class _Pending:
    """The result of a forked ``fn(*args)``, waited for when called."""

    def __init__(self, child, receive, fn, args) -> None:
        self.child, self.receive, self.fn, self.args = child, receive, fn, args
        self._end = weakref.finalize(self, _end, child, receive)

    def __call__(self):
        fn, args, self.fn, self.args = self.fn, self.args, None, None  # the arguments go with this call
        try:
            status, value, records = self.receive.recv()
        except (EOFError, OSError):  # the child ended without a whole result (killed, out of memory): run here
            self._end()
            return fn(*args)
        self._end()
        stageclock.add(records)
        if status == "error":
            raise value
        return value


def _end(child, receive) -> None:
    """Close the pipe and reap the child; one still running (its result no longer wanted) is killed first."""
    receive.close()
    if child.is_alive():
        child.kill()
    child.join()


def _child() -> None:
    fn, args, send, receive = _JOB[0]
    receive.close()  # the parent's end: with it closed here, a send to a parent that died fails instead of waiting
    stageclock.take()  # the parent's records, copied by the fork, are the parent's to report
    try:
        message = ("ok", fn(*args))
    except BaseException as err:  # noqa: BLE001 - every error goes back to the parent, which raises it
        err.add_note("raised in the process beside the rank's analysis:\n" + "".join(traceback.format_tb(
            err.__traceback__)))
        message = ("error", err if _round_trips(err) else RuntimeError(
            "a stage run beside the analysis failed: " + "".join(traceback.format_exception(err))))
    try:
        send.send((*message, stageclock.take()))
    except BrokenPipeError:  # the parent is gone
        pass
    except Exception:  # noqa: BLE001 - a result that does not pickle: what it was goes back instead
        send.send(("error", RuntimeError(f"a stage run beside the analysis could not send back its result "
                                         f"({type(message[1]).__name__})"), ()))
    send.close()
    os._exit(0)  # no exit handlers: they belong to the parent (its temporary folders, its pools)


def _round_trips(err: BaseException) -> bool:
    """Whether ``err`` pickles and unpickles (an exception whose ``__init__`` takes other arguments than its
    ``args`` does not, unless it says how: ``tracekit.errors``' do)."""
    try:
        pickle.loads(pickle.dumps(err))
    except Exception:  # noqa: BLE001 - any failure means it cannot go back as itself
        return False
    return True
