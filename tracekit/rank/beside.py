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
import traceback
import weakref
from typing import Any, Callable

from tracekit import stageclock
from tracekit.read.parallel import context

_JOB: list = []  # the job of the child about to be forked: set just before the fork, cleared just after


def memory_allows(need_bytes: float) -> bool:
    """Whether the machine has ``need_bytes`` to spare twice over (``MemAvailable``, Linux): a child's working
    memory comes on top of this process's. Unknown (no /proc/meminfo) counts as no."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024 >= 2 * need_bytes
    except (OSError, ValueError, IndexError):
        pass
    return False


def start(fn: Callable[..., Any], *args) -> Callable[[], Any]:
    """Run ``fn(*args)`` in a forked process; the returned function waits for its result (or raises its error)."""
    fork = context()
    if fork is None:
        return lambda: fn(*args)
    receive, send = fork.Pipe(duplex=False)
    _JOB.append((fn, args, send))
    try:
        child = fork.Process(target=_child, name="tracekit-beside", daemon=True)
        child.start()
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
        try:
            status, value, records = self.receive.recv()
        except EOFError:  # the child ended without a result (killed, or out of memory): the stage runs here
            self._end()
            return self.fn(*self.args)
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
    fn, args, send = _JOB[0]
    stageclock.take()  # the parent's records, copied by the fork, are the parent's to report
    try:
        message = ("ok", fn(*args))
    except BaseException as err:  # noqa: BLE001 - every error goes back to the parent, which raises it
        message = ("error", err)
    try:
        send.send((*message, stageclock.take()))
    except Exception:  # noqa: BLE001 - an error (or result) that does not pickle: its text goes back instead
        text = "".join(traceback.format_exception(message[1])) if message[0] == "error" else "its result"
        send.send(("error", RuntimeError(f"a stage run beside the analysis could not send back: {text}"), ()))
    send.close()
    os._exit(0)  # no exit handlers: they belong to the parent (its temporary folders, its pools)
