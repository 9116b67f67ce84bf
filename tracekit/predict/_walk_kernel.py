"""The compiled walk of ``tracekit.predict.critical_path`` (numba, cached on disk).

``walk`` follows one step's path back from its end node and returns its pieces as arrays, latest piece first:
(node, start ns, end ns, kind, category). ``kind`` is the node's graph category code (>= 0), ``DELAY`` (unrecorded
time before a node starts) or ``UNLINKED`` (time before the first node the trace links to nothing earlier);
``category`` indexes ``critical_path.CATEGORIES``. ``error`` is ``NO_CATEGORY`` when a node on the path has a graph
category with no path category (``own_category`` -1).
"""

import numpy as np
from numba import njit

DELAY, UNLINKED = -1, -2
COMPUTE, COMM_TRANSFER, LAUNCH, HOST, DATA, SYNC, OTHER, UNKNOWN = range(8)  # critical_path.CATEGORIES
NO_CATEGORY = 1


@njit(cache=True)
def _grown(a, n):  # pragma: no cover (compiled)
    out = np.empty(2 * len(a), dtype=a.dtype)
    out[:n] = a[:n]
    return out


@njit(cache=True)
def walk(node, t0, from_end, start, end, first, ps, pe, busy, start_by, end_by, end_kind, cat_code, own_category,
         comm_code, in_data, host):  # pragma: no cover (compiled)
    """The pieces of the path from ``node``'s start (its end when ``from_end``) back to ``t0``, and an error code
    (0: none). Ties and comparisons follow Python's ``min``/``max``: the first argument wins a tie."""
    cap = 256
    nodes = np.empty(cap, dtype=np.int64)
    los = np.empty(cap, dtype=np.float64)
    his = np.empty(cap, dtype=np.float64)
    kinds = np.empty(cap, dtype=np.int64)
    cats = np.empty(cap, dtype=np.int64)
    n = 0
    ceiling = end[node] if from_end else start[node]
    i = node
    at_end = from_end
    for _ in range(len(start) * 2 + 1):
        # Up to two pieces per turn of the walk: room for both first.
        if n + 2 > len(nodes):
            nodes, los, his = _grown(nodes, n), _grown(los, n), _grown(his, n)
            kinds, cats = _grown(kinds, n), _grown(cats, n)
        if at_end:
            by = end_by[i]
            if by < 0:
                lo = start[i]
            elif end_kind[i] == 1:
                lo = start[by]
            else:
                lo = end[by]
            code = cat_code[i]
            if by < 0:
                if in_data[i]:
                    category = DATA
                else:
                    category = own_category[code]
                    if category < 0:
                        return nodes[:0], los[:0], his[:0], kinds[:0], cats[:0], NO_CATEGORY
            elif end_kind[i] == 1 or code == comm_code:
                category = COMM_TRANSFER
            else:
                category = SYNC
            hi = end[i]
            hi = ceiling if ceiling < hi else hi
            lo = t0 if t0 > lo else lo
            if hi > lo:
                nodes[n], los[n], his[n], kinds[n], cats[n] = i, lo, hi, code, category
                n += 1
                ceiling = lo
            if by < 0:
                at_end = False
            elif end_kind[i] == 1:
                i, at_end = by, False
            else:
                i = by
        else:
            by = start_by[i]
            if by == 3:
                break
            if by == 0:
                if first[i]:
                    break
                src, src_end = i - 1, True
            elif by == 1:
                src, src_end = ps[i], False
            else:
                src, src_end = pe[i], True
            lo = end[src] if src_end else start[src]
            if start[i] > lo:  # unrecorded time; on CPU-only ranks partly enclosing ops' own time
                cut = start[i] - busy[i]  # busy is measured from the lane's last end
                cut = lo if lo > cut else cut
                if by == 1:
                    delay = LAUNCH
                elif by == 2:
                    delay = OTHER
                elif in_data[i]:
                    delay = DATA
                elif host[i]:
                    delay = HOST
                else:
                    delay = OTHER
                hi = start[i]  # the enclosing ops' part, then the rest
                hi = ceiling if ceiling < hi else hi
                p_lo = t0 if t0 > cut else cut
                if hi > p_lo:
                    nodes[n], los[n], his[n], kinds[n], cats[n] = i, p_lo, hi, DELAY, COMPUTE
                    n += 1
                    ceiling = p_lo
                hi = ceiling if ceiling < cut else cut
                p_lo = t0 if t0 > lo else lo
                if hi > p_lo:
                    nodes[n], los[n], his[n], kinds[n], cats[n] = i, p_lo, hi, DELAY, delay
                    n += 1
                    ceiling = p_lo
            i, at_end = src, src_end
        if (end[i] if at_end else start[i]) <= t0:
            break
    now = end[i] if at_end else start[i]
    reached = ceiling if ceiling < now else now
    if reached > t0:  # the walk stopped at an event with no recorded input, after the step began
        if n + 1 > len(nodes):
            nodes, los, his = _grown(nodes, n), _grown(los, n), _grown(his, n)
            kinds, cats = _grown(kinds, n), _grown(cats, n)
        nodes[n], los[n], his[n], kinds[n], cats[n] = i, t0, reached, UNLINKED, UNKNOWN
        n += 1
    return nodes[:n], los[:n], his[:n], kinds[:n], cats[:n], 0
