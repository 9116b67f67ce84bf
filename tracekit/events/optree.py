"""The call tree of a rank's host ops: each op's parent (the innermost op of its thread that encloses it) and depth.

Ops of one thread nest (the profiler records a stack per thread). Sorted by thread, start, then longer first, a
single pass with a stack finds every parent: the op on top of the stack encloses the next one, unless it ended
before that one starts (popped). An op that overlaps its would-be parent without fitting inside it is not its child.
The same pass measures how much of each op its children cover: the union of their spans, so that children that
overlap each other (ops recorded out of nesting, as async work can be) are not counted twice in its self time.
Compiled with numba, like the replay: a Python loop over a few hundred thousand ops would take seconds.
"""

from __future__ import annotations

import numpy as np


def op_tree(tid_codes: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(parent index or -1, depth from 0, ns covered by its children) of every op; equal spans nest in the order
    they are given."""
    n = len(start)
    if n == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    from tracekit.events._optree_kernel import stack_pass  # numba: imported on first use

    order = np.lexsort((np.arange(n), -end, start, tid_codes)).astype(np.int64)
    return stack_pass(order, np.ascontiguousarray(tid_codes, dtype=np.int64),
                      np.ascontiguousarray(start, dtype=np.int64), np.ascontiguousarray(end, dtype=np.int64))


def subtree_sums(values: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Each op's value plus those of all its descendants."""
    total = np.asarray(values, dtype=np.float64).copy()
    for d in range(int(depth.max(initial=0)), 0, -1):
        at = np.flatnonzero((depth == d) & (parent >= 0))
        np.add.at(total, parent[at], total[at])
    return total


def has_marked_descendant(marked: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Whether some strict descendant of each op is marked."""
    below = np.zeros(len(marked), dtype=bool)
    up = np.asarray(marked, dtype=bool) | below
    for d in range(int(depth.max(initial=0)), 0, -1):
        at = np.flatnonzero((depth == d) & (parent >= 0) & up)
        below[parent[at]] = True
        up[parent[at]] = True
    return below
