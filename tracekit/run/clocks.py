"""Clock offsets between hosts, read from the collectives they share, and bounded by causality.

Ranks on one host share its clock, so there is one offset per host, from all its ranks' calls, relative to the host
of the lowest rank (the reference). A rank whose trace names no host (``host_name``) is taken as its own clock.

Two things are known about a matched synchronising collective (all_reduce, all_gather, reduce_scatter, all_to_all,
barrier). Causality: no member leaves it before the last member entered it. And, roughly, members leave together.

- **Bounds.** With ``d`` = host H's clock minus the reference clock, every call that both hosts took part in gives
  ``max start on H - min end on ref <= d <= min end on H - max start on ref``. Their intersection,
  ``[lower_us, upper_us]``, holds the true offset however late a rank was scheduled: delays only widen a call's
  interval. Calls whose ranks disagree on the op or the size (all_to_all: the op) are left out (a wrong match
  gives false bounds).
- **Ends.** ``median`` over calls of (first end on H - first end on ref), with ``noise_us`` = 1.4826 x their median
  absolute deviation. A rank leaves when the call completes plus its own delay (a descheduled gloo thread, the
  rank's own compute competing for the CPU: a straggler that wakes up late ends late too), and delays are never
  negative, so each host's first end is its least delayed reading of the completion. A host's mean end carries its
  ranks' delays: on real 4-rank gloo runs it was up to 3 ms off where the first end was 0.65 ms off.
- **Estimate** (``offset_us``): the ends' median, moved to the nearer bound where it lies outside ``[lower, upper]``.
  Not the middle of the bounds: when one host always arrives last (a straggler), only one side is informative
  (the lower bound, from its late starts against the reference's first ends, where the last arrival's own wait is
  0); the other is as loose as the straggler's lateness, and any middle would be pulled towards it.
- **Empty bounds** (lower > upper: a wrong match, or clocks that drift during the trace) are never hidden:
  ``bounds = "inconsistent"``, ``lower_us``/``upper_us`` are NaN, ``conflicts`` counts the calls whose own interval
  excludes the estimate, and the estimate is the ends' median alone.
- **Correction**: a host other than the reference's, with at least 3 calls, whose offset is at least 5 us and either
  above 3x its noise or proven by the bounds (0 outside them).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SYNCHRONISING_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")
MIN_OFFSET_NS = 5_000  # below this an offset is not worth correcting
NOISE_FACTOR = 3.0     # an offset above this many noise widths is clear (corrected)
MIN_SAMPLES = 3        # calls shared with the reference before an offset is corrected
COLUMNS = ["rank", "host", "offset_us", "lower_us", "upper_us", "noise_us", "samples", "bounds", "conflicts"]


def clock_offsets(coll: pd.DataFrame, group: np.ndarray, hosts: dict[int, str | None]) -> pd.DataFrame:
    """One row per rank of ``hosts`` (rank -> host_name or None): its host's clock offset from the reference host's
    (us), causal bounds, noise, the calls it rests on, and ``bounds``: reference / ok / inconsistent / none (no call
    shared with the reference: everything NaN)."""
    if not hosts:
        return pd.DataFrame(columns=COLUMNS)
    domain = {r: str(("host", h) if h is not None else ("rank", r)) for r, h in hosts.items()}
    ref = domain[min(hosts)]
    calls = call_bounds(coll, group, domain, ref)
    rows = pd.DataFrame({"rank": list(hosts), "host": list(hosts.values()), "domain": list(domain.values())})
    table = rows.join(_per_domain(calls), on="domain")
    is_ref = (table["domain"] == ref).to_numpy()
    own_calls = int(calls["g"].nunique())
    table["bounds"] = table["bounds"].astype(object)
    table.loc[is_ref, ["offset_us", "lower_us", "upper_us", "noise_us"]] = 0.0
    table.loc[is_ref, ["samples", "bounds", "conflicts"]] = [own_calls, "reference", 0]
    table["samples"] = table["samples"].fillna(0).astype(int)
    table["conflicts"] = table["conflicts"].fillna(0).astype(int)
    table["bounds"] = table["bounds"].fillna("none")
    return table[COLUMNS].sort_values("rank", ignore_index=True)


def call_bounds(coll: pd.DataFrame, group: np.ndarray, domain_of: dict[int, str], ref: str) -> pd.DataFrame:
    """One row per (matched synchronising call, clock domain other than ``ref``) where both took part: the causal
    ``lower``/``upper`` bounds on the domain's offset and the difference of first ends ``diff`` (all ns)."""
    if set(domain_of.values()) <= {ref}:  # one clock domain: nothing to bound
        ns = np.empty(0, dtype=np.int64)
        return _bounds_of(pd.DataFrame({"g": np.asarray(group)[:0], "dom": pd.Series([], dtype=str), "first_end": ns,
                                        "last_start": ns, "first_end_ref": ns, "last_start_ref": ns}))
    start = coll["start_ns"].to_numpy(dtype=np.int64)
    end = start + np.rint(coll["dur_us"].to_numpy() * 1e3).astype(np.int64)
    frame = pd.DataFrame({"g": group, "dom": coll["rank"].map(domain_of).to_numpy(), "start": start, "end": end,
                          "op": coll["op"].astype(str).to_numpy(), "bytes": coll["bytes"].to_numpy()})
    frame = frame[frame["op"].isin(SYNCHRONISING_OPS).to_numpy() & frame["dom"].notna().to_numpy()]
    # Ranks of one all_to_all send different amounts (split sizes): only its op must agree.
    frame = frame.assign(bytes=frame["bytes"].where(frame["op"] != "all_to_all"))
    agree = frame.groupby("g").agg(ops=("op", "nunique"), sizes=("bytes", "nunique"))
    frame = frame[frame["g"].isin(agree.index[(agree["ops"] == 1) & (agree["sizes"] <= 1)])]
    per = frame.groupby(["g", "dom"], sort=False).agg(first_end=("end", "min"), last_start=("start", "max")).reset_index()
    mine, theirs = per[per["dom"] != ref], per[per["dom"] == ref].drop(columns="dom")
    return _bounds_of(mine.merge(theirs, on="g", suffixes=("", "_ref")))


def _bounds_of(both: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"g": both["g"], "dom": both["dom"],
                         "lower": (both["last_start"] - both["first_end_ref"]).astype(float),
                         "upper": (both["first_end"] - both["last_start_ref"]).astype(float),
                         "diff": (both["first_end"] - both["first_end_ref"]).astype(float)})


def _per_domain(calls: pd.DataFrame) -> pd.DataFrame:
    """Per clock domain: bounds (intersection), the ends' median and noise, the estimate, and its conflicts (us)."""
    if calls.empty:
        return pd.DataFrame(columns=COLUMNS[2:], index=pd.Index([], dtype=object))
    by = calls.groupby("dom")
    out = by.agg(lower=("lower", "max"), upper=("upper", "min"), median=("diff", "median"), samples=("g", "size"))
    deviation = (calls["diff"] - calls["dom"].map(out["median"])).abs()
    out["noise"] = 1.4826 * deviation.groupby(calls["dom"]).median()
    consistent = out["lower"] <= out["upper"]
    inside = np.minimum(np.maximum(out["median"], out["lower"]), out["upper"])
    out["estimate"] = np.where(consistent, inside, out["median"])
    at = calls["dom"].map(out["estimate"])
    out["conflicts"] = ((at < calls["lower"]) | (at > calls["upper"])).groupby(calls["dom"]).sum()
    return pd.DataFrame({
        "offset_us": out["estimate"] / 1e3,
        "lower_us": out["lower"].where(consistent) / 1e3,
        "upper_us": out["upper"].where(consistent) / 1e3,
        "noise_us": out["noise"] / 1e3,
        "samples": out["samples"],
        "bounds": np.where(consistent, "ok", "inconsistent"),
        "conflicts": out["conflicts"],
    }, index=out.index)


def offsets_to_correct(offsets: pd.DataFrame) -> dict[int, int]:
    """rank -> ns to subtract from its times: ranks of hosts other than the reference's whose offset is clear."""
    if offsets.empty:
        return {}
    other = offsets["bounds"].isin(("ok", "inconsistent"))
    size_ns = offsets["offset_us"].abs() * 1e3
    above_noise = size_ns > NOISE_FACTOR * offsets["noise_us"] * 1e3
    proven = (offsets["lower_us"] > 0) | (offsets["upper_us"] < 0)  # NaN bounds prove nothing
    clear = other & (offsets["samples"] >= MIN_SAMPLES) & (size_ns >= MIN_OFFSET_NS) & (above_noise | proven)
    return {int(r): int(round(o * 1e3)) for r, o in zip(offsets.loc[clear, "rank"], offsets.loc[clear, "offset_us"])}
