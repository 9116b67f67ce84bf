"""A pipeline schedule, simulated: each rank runs its actions in the schedule's order, each as soon as its rank is
free and its input has arrived.

An action is (stage, phase, microbatch), phase F (forward) or B (backward). Its inputs:

  F(s, i)  needs F(s-1, i) finished, plus the transfer from s-1's rank to s's (none for stage 0)
  B(s, i)  needs F(s, i) finished, and B(s+1, i) plus the transfer back (none for the last stage)

The orders are the ones torch.distributed.pipelining runs (``rank_orders``): GPipe (every forward, then every
backward), 1F1B (p - s forwards, then a backward and a forward in turn, then the rest of the backwards) and
interleaved 1F1B (v stages per rank, stage s on rank s mod p; warm-up and stage order as torch's
``ScheduleInterleaved1F1B``). Zero-bubble schedules (I and W actions) and looped BFS have no order here.
"""

from __future__ import annotations

from collections.abc import Callable

Action = tuple[int, str, int]  # (stage, phase, microbatch)
ORDERED = ("gpipe", "1f1b", "interleaved")


class ScheduleError(ValueError):
    """A schedule whose actions wait on each other in a circle (an order no pipeline can run)."""


def rank_orders(schedule: str, p: int, v: int, m: int) -> dict[int, list[Action]] | None:
    """Each rank's actions in the order ``schedule`` runs them with p ranks, v stages per rank and m microbatches;
    None for a schedule without an order here (``ORDERED``)."""
    if schedule == "gpipe" and v == 1:
        return {r: [(r, "F", i) for i in range(m)] + [(r, "B", i) for i in range(m)] for r in range(p)}
    if schedule == "1f1b" and v == 1:
        return {r: _one_f_one_b(r, p, m) for r in range(p)}
    if schedule == "interleaved" and v >= 1:
        return {r: _interleaved(r, p, v, m) for r in range(p)}
    return None


def _one_f_one_b(stage: int, p: int, m: int) -> list[Action]:
    """torch's Schedule1F1B: min(m, p - s) forwards, then a backward and the next forward in turn."""
    warmup = min(m, p - stage)
    order = [(stage, "F", i) for i in range(warmup)]
    for i in range(m):
        order.append((stage, "B", i))
        if warmup + i < m:
            order.append((stage, "F", warmup + i))
    return order


def _interleaved(rank: int, p: int, v: int, m: int) -> list[Action]:
    """torch's ScheduleInterleaved1F1B on one rank: warm-up forwards ((v-1) x per-round microbatches + 2 per hop
    from the last rank, at most v x m), then a forward and a backward in turn, then the remaining backwards; a
    rank moves to its next local stage every per-round microbatches."""
    rounds = max(1, m // p)
    per_round = m // rounds
    ops = v * m
    warmup = min((v - 1) * per_round + 2 * (p - 1 - rank), ops)

    def forward_stage(k: int) -> int:
        return (k // per_round) % v * p + rank

    def backward_stage(k: int) -> int:
        return (v - 1 - ((k - warmup) // per_round) % v) * p + rank

    next_f: dict[int, int] = {}
    next_b: dict[int, int] = {}
    order: list[Action] = []

    def take(counter: dict[int, int], stage: int, phase: str) -> None:
        counter[stage] = counter.get(stage, 0) + 1
        order.append((stage, phase, counter[stage] - 1))

    for k in range(ops + warmup):  # warm-up forwards, forward-backward pairs, cool-down backwards
        if k < warmup:
            take(next_f, forward_stage(k), "F")
        elif k < ops:
            take(next_f, forward_stage(k), "F")
            take(next_b, backward_stage(k), "B")
        else:
            take(next_b, backward_stage(k), "B")
    return order


def makespan(orders: dict[int, list[Action]], cost: Callable[[int, str], float],
             hop: Callable[[int, int], float], n_stages: int) -> float:
    """Time from the first action's start to the last one's end when every rank runs ``orders`` (``rank_orders``).

    ``cost(stage, phase)``: one action's time; ``hop(src_stage, dst_stage)``: one transfer's time between the
    stages' ranks (0 on one rank). Raises ``ScheduleError`` for an order that cannot run."""
    end: dict[Action, float] = {}
    free = {r: 0.0 for r in orders}
    position = {r: 0 for r in orders}
    left = sum(len(o) for o in orders.values())
    while left:
        moved = False
        for r, order in orders.items():
            while position[r] < len(order):
                stage, phase, i = order[position[r]]
                ready = _ready(stage, phase, i, end, hop, n_stages)
                if ready is None:
                    break
                start = max(free[r], ready)
                end[(stage, phase, i)] = free[r] = start + cost(stage, phase)
                position[r] += 1
                left -= 1
                moved = True
        if not moved:
            waiting = {r: o[position[r]] for r, o in orders.items() if position[r] < len(o)}
            raise ScheduleError(f"the schedule cannot run: every rank waits ({waiting})")
    return max(end.values(), default=0.0)


def _ready(stage: int, phase: str, i: int, end: dict[Action, float], hop, n_stages: int) -> float | None:
    """When the inputs of (stage, phase, i) have arrived; None while one is not finished."""
    if phase == "F":
        if stage == 0:
            return 0.0
        before = end.get((stage - 1, "F", i))
        return None if before is None else before + hop(stage - 1, stage)
    own = end.get((stage, "F", i))
    if own is None:
        return None
    if stage == n_stages - 1:
        return own
    after = end.get((stage + 1, "B", i))
    return None if after is None else max(own, after + hop(stage + 1, stage))
