"""The compiled stack pass of ``tracekit.events.optree`` (numba, cached on disk)."""

import numpy as np
from numba import njit


@njit(cache=True)
def stack_pass(order, tid, start, end):  # pragma: no cover (compiled)
    n = len(order)
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    covered = np.zeros(n, dtype=np.int64)  # the union of each op's children's spans
    stack = np.empty(n, dtype=np.int64)
    reached = np.empty(n, dtype=np.int64)  # per stack slot: how far its op's children cover it so far (pages
    # touched only as deep as the stack goes; children come in start order)
    top = 0
    for k in range(n):
        i = order[k]
        while top > 0:
            j = stack[top - 1]
            if tid[j] != tid[i] or end[j] <= start[i] or end[j] < end[i]:  # j cannot hold i, nor what follows
                top -= 1
            else:
                break
        if top > 0:
            p = stack[top - 1]
            parent[i] = p
            depth[i] = depth[p] + 1
            if end[i] > reached[top - 1]:  # the part of i that no earlier sibling covered
                covered[p] += end[i] - max(start[i], reached[top - 1])
                reached[top - 1] = end[i]
        stack[top] = i
        reached[top] = start[i]
        top += 1
    return parent, depth, covered
