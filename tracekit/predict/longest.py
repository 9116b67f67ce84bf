"""The longest-path pass the replay runs: every node's start and end in one visit of the DAG, in topological order.

Times are nodes of a DAG: ``S[i]`` (node i's start), ``E[i]`` (its end) and ``G[g]`` (collective g's latest
arrival). Their edges are the replay's rules (``tracekit.predict.replay``):

    E[i-1] -> S[i] (same lane), S[ps[i]] -> S[i], E[pe[i]] -> S[i];  S[i] = max(inputs, anchor[i]) + delay[i]
    S[i] -> E[i], G[group[i]] -> E[i], E[dr[i]] -> E[i],
    S[src[i]] -> E[i] (a send/recv after its other half started);             E[i] = max(inputs) + tail[i]
    S[m] -> G[group[m]] for every member m;                          G[g] = max(inputs)

Kahn's algorithm visits each time once, after all its inputs, so the pass is linear in nodes plus edges; a time
never visited lies on a cycle. Compiled with numba (cached on disk): a loop over a million nodes in Python would
take seconds, and no numpy or scipy routine computes a longest path.
"""

import numpy as np
from numba import njit


@njit(cache=True)
def longest_paths(first, ps, pe, dr, group, n_groups, anchor, delay, tail, src):  # pragma: no cover (compiled)
    """(start, end, complete) of every node; ``complete`` is False when a cycle left some times unvisited.

    The times' ids (``2 * n + n_groups`` of them) must fit an int32 (``MAX_TIMES``): the edge lists, in-degrees and
    the stack hold them in 4 bytes. The pass holds 24 bytes per time and 4 per edge: ``indptr`` (8; each time's
    out-edges counted, then where they begin), ``in_deg`` (4), ``acc`` (8; a time's latest input so far, then, once
    visited, its value, which the returned start and end are views of), ``stack`` (4) and ``succ`` (4 per edge)."""
    n = len(delay)
    S, E, G = 0, n, 2 * n
    total = 2 * n + n_groups
    indptr = np.zeros(total + 1, dtype=np.int64)
    in_deg = np.zeros(total, dtype=np.int32)
    for i in range(n):
        if not first[i]:
            indptr[E + i - 1 + 1] += 1
            in_deg[S + i] += 1
        if ps[i] >= 0:
            indptr[S + ps[i] + 1] += 1
            in_deg[S + i] += 1
        if pe[i] >= 0:
            indptr[E + pe[i] + 1] += 1
            in_deg[S + i] += 1
        indptr[S + i + 1] += 1
        in_deg[E + i] += 1
        if group[i] >= 0:
            indptr[S + i + 1] += 1
            in_deg[G + group[i]] += 1
            indptr[G + group[i] + 1] += 1
            in_deg[E + i] += 1
        if dr[i] >= 0:
            indptr[E + dr[i] + 1] += 1
            in_deg[E + i] += 1
        if src[i] >= 0:
            indptr[S + src[i] + 1] += 1
            in_deg[E + i] += 1
    for v in range(total):
        indptr[v + 1] += indptr[v]
    # Each edge goes to indptr[its source], which then moves on: after the fill, indptr[v] is where v+1's begin.
    succ = np.empty(indptr[total], dtype=np.int32)
    for i in range(n):
        if not first[i]:
            succ[indptr[E + i - 1]] = S + i
            indptr[E + i - 1] += 1
        if ps[i] >= 0:
            succ[indptr[S + ps[i]]] = S + i
            indptr[S + ps[i]] += 1
        if pe[i] >= 0:
            succ[indptr[E + pe[i]]] = S + i
            indptr[E + pe[i]] += 1
        succ[indptr[S + i]] = E + i
        indptr[S + i] += 1
        if group[i] >= 0:
            succ[indptr[S + i]] = G + group[i]
            indptr[S + i] += 1
            succ[indptr[G + group[i]]] = E + i
            indptr[G + group[i]] += 1
        if dr[i] >= 0:
            succ[indptr[E + dr[i]]] = E + i
            indptr[E + dr[i]] += 1
        if src[i] >= 0:
            succ[indptr[S + src[i]]] = E + i
            indptr[S + src[i]] += 1
    for v in range(total, 0, -1):
        indptr[v] = indptr[v - 1]
    indptr[0] = 0
    acc = np.full(total, -np.inf)
    acc[:n] = anchor
    stack = np.empty(total, dtype=np.int32)
    top = 0
    for v in range(total):
        if in_deg[v] == 0:
            stack[top] = v
            top += 1
    done = 0
    while top > 0:
        top -= 1
        v = stack[top]
        t = acc[v] + (delay[v] if v < E else tail[v - E] if v < G else 0.0)
        acc[v] = t  # visited: its inputs are all in, and it is never an input of itself again
        done += 1
        for k in range(indptr[v], indptr[v + 1]):
            w = succ[k]
            if t > acc[w]:
                acc[w] = t
            in_deg[w] -= 1
            if in_deg[w] == 0:
                stack[top] = w
                top += 1
    return acc[:n], acc[n:2 * n], done == total


MAX_TIMES = 2**31 - 1  # the ids of the pass's times are int32
