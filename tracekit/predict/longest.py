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
    """(start, end, complete) of every node; ``complete`` is False when a cycle left some times unvisited."""
    n = len(delay)
    S, E, G = 0, n, 2 * n
    total = 2 * n + n_groups
    out_deg = np.zeros(total + 1, dtype=np.int64)
    in_deg = np.zeros(total, dtype=np.int64)
    for i in range(n):
        if not first[i]:
            out_deg[E + i - 1] += 1
            in_deg[S + i] += 1
        if ps[i] >= 0:
            out_deg[S + ps[i]] += 1
            in_deg[S + i] += 1
        if pe[i] >= 0:
            out_deg[E + pe[i]] += 1
            in_deg[S + i] += 1
        out_deg[S + i] += 1
        in_deg[E + i] += 1
        if group[i] >= 0:
            out_deg[S + i] += 1
            in_deg[G + group[i]] += 1
            out_deg[G + group[i]] += 1
            in_deg[E + i] += 1
        if dr[i] >= 0:
            out_deg[E + dr[i]] += 1
            in_deg[E + i] += 1
        if src[i] >= 0:
            out_deg[S + src[i]] += 1
            in_deg[E + i] += 1
    indptr = np.zeros(total + 1, dtype=np.int64)
    for v in range(total):
        indptr[v + 1] = indptr[v] + out_deg[v]
    fill = indptr[:-1].copy()
    succ = np.empty(indptr[total], dtype=np.int64)
    for i in range(n):
        if not first[i]:
            succ[fill[E + i - 1]] = S + i
            fill[E + i - 1] += 1
        if ps[i] >= 0:
            succ[fill[S + ps[i]]] = S + i
            fill[S + ps[i]] += 1
        if pe[i] >= 0:
            succ[fill[E + pe[i]]] = S + i
            fill[E + pe[i]] += 1
        succ[fill[S + i]] = E + i
        fill[S + i] += 1
        if group[i] >= 0:
            succ[fill[S + i]] = G + group[i]
            fill[S + i] += 1
            succ[fill[G + group[i]]] = E + i
            fill[G + group[i]] += 1
        if dr[i] >= 0:
            succ[fill[E + dr[i]]] = E + i
            fill[E + dr[i]] += 1
        if src[i] >= 0:
            succ[fill[S + src[i]]] = E + i
            fill[S + src[i]] += 1
    acc = np.full(total, -np.inf)
    add = np.zeros(total)
    for i in range(n):
        acc[S + i] = anchor[i]
        add[S + i] = delay[i]
        add[E + i] = tail[i]
    value = np.full(total, -np.inf)
    stack = np.empty(total, dtype=np.int64)
    top = 0
    for v in range(total):
        if in_deg[v] == 0:
            stack[top] = v
            top += 1
    done = 0
    while top > 0:
        top -= 1
        v = stack[top]
        t = acc[v] + add[v]
        value[v] = t
        done += 1
        for k in range(indptr[v], indptr[v + 1]):
            w = succ[k]
            if t > acc[w]:
                acc[w] = t
            in_deg[w] -= 1
            if in_deg[w] == 0:
                stack[top] = w
                top += 1
    return value[:n], value[n:2 * n], done == total
