"""FSDP's hook annotations, read: which unit asks for its parameters when (``requests``), for ``tracekit.events.fsdp``.

A *unit* is one ``fully_shard``-ed module (FSDP2; its annotations carry the module path, ``""`` for the root is shown
as ``(root)``) or one ``FullyShardedDataParallel`` instance (FSDP1, whose annotations carry no path: units are named
``#k`` by the order of their forward pre-hooks in the step; a backward pre-hook is paired with the unit whose forward
ended k-th from last, which holds for a chain of units). A *request* is one pre-hook (``FSDP::pre_forward (u)``,
``FSDP::pre_backward (u)``; FSDP1 ``._pre_forward`` / ``._pre_backward_hook``): the moment the unit needs its
parameters. The unit's compute window runs from there to its post-hook (``FSDP::post_forward``, the first
``FSDP::post_backward_*``; FSDP1 ``._post_forward`` / ``._post_backward_hook``); compute issued in a nested unit's
window is that unit's.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

FSDP2 = re.compile(r"^FSDP::(pre_forward|pre_backward|post_forward|all_gather|post_backward_reduce|"
                   r"post_backward_accumulate|post_backward_reshard)(?: \((.*?)\))?(?: \[pg=\d+\])?$")
FSDP1 = re.compile(r"^FullyShardedDataParallel\.(_pre_forward|_post_forward|_pre_backward_hook|_post_backward_hook|"
                   r"_pre_forward_prefetch|_pre_backward_prefetch|_post_backward_prefetch)$")
# Every FSDP annotation, for the reader's filter of host ops on GPU ranks.
ANNOTATION = re.compile(r"^FSDP::|^FullyShardedDataParallel\.")
ROOT = "(root)"
PHASES = ("forward", "backward")
_REQUEST = {"pre_forward": "forward", "pre_backward": "backward", "_pre_forward": "forward",
            "_pre_backward_hook": "backward"}
_POST = {"post_forward": "forward", "post_backward_reduce": "backward", "post_backward_accumulate": "backward",
         "post_backward_reshard": "backward", "_post_forward": "forward", "_post_backward_hook": "backward"}


def annotations(events: pd.DataFrame) -> pd.DataFrame:
    """FSDP annotations of one rank: row, api, hook, unit (None for FSDP1), tid, start_ns, end_ns."""
    names = pd.Series(events["name"].cat.categories.astype(str))
    two, one = names.str.extract(FSDP2.pattern), names.str.extract(FSDP1.pattern)
    hook = two[0].fillna(one[0])
    codes = events["name"].cat.codes.to_numpy()
    is_fsdp = np.append(hook.notna().to_numpy(), False)[codes]  # code -1 (no name) picks the appended False
    rows = events[is_fsdp & (events["dur_ns"] > 0).to_numpy()]
    codes = rows["name"].cat.codes.to_numpy()
    unit = two[1].fillna("").replace("", ROOT).where(two[0].notna()).to_numpy(dtype=object)[codes]
    return pd.DataFrame({
        "row": rows.index.to_numpy(), "api": np.where(two[0].notna().to_numpy()[codes], "fsdp2", "fsdp1"),
        "hook": hook.to_numpy(dtype=object)[codes], "unit": unit, "tid": rows["tid"].astype(str).to_numpy(),
        "step": rows["step"].to_numpy(), "start_ns": rows["ts_ns"].to_numpy(),
        "end_ns": (rows["ts_ns"] + rows["dur_ns"]).to_numpy(),
    }).sort_values("start_ns", ignore_index=True)


def requests(ann: pd.DataFrame) -> pd.DataFrame:
    """One row per pre-hook: api, unit, phase, start_ns, hook_end_ns (the pre-hook's end), end_ns (the compute
    window's end: the start of the unit's next post-hook of the phase; -1 when none follows)."""
    pre = ann[ann["hook"].isin(list(_REQUEST))].assign(phase=lambda a: a["hook"].map(_REQUEST))
    post = ann[ann["hook"].isin(list(_POST))].assign(phase=lambda a: a["hook"].map(_POST))
    pre = _name_fsdp1_units(pre, post)
    # FSDP2: the unit's own post-hook; FSDP1 post-hooks name no unit: the phase's next one (right for a chain of units)
    left = pre.assign(k=_post_key(pre)).sort_values("start_ns")
    if post.empty:  # no post-hook at all (a cut trace): no pre-hook's window has an end
        ends = left.assign(post_ns=np.nan)
    else:
        right = post.assign(k=_post_key(post), post_ns=post["start_ns"]).sort_values("start_ns")
        ends = pd.merge_asof(left, right[["k", "start_ns", "post_ns"]], on="start_ns", by="k", direction="forward")
    return pd.DataFrame({c: ends[c].to_numpy() for c in ("api", "unit", "phase", "tid", "step", "start_ns")}).assign(
        hook_end_ns=ends["end_ns"].to_numpy(), end_ns=ends["post_ns"].fillna(-1).to_numpy(dtype=np.int64))


def _post_key(hooks: pd.DataFrame) -> pd.Series:
    return hooks["api"] + "|" + hooks["unit"].astype(str).where(hooks["api"] == "fsdp2", "") + "|" + hooks["phase"]


def _name_fsdp1_units(pre: pd.DataFrame, post: pd.DataFrame) -> pd.DataFrame:
    """FSDP1 units by order in each step: forward pre-hooks are #0, #1, ...; the k-th backward pre-hook is the unit
    whose forward post-hook came k-th from last (post-hooks paired with pre-hooks as nested brackets)."""
    one = pre["api"] == "fsdp1"
    if not one.any():
        return pre
    fwd = pre[one & (pre["phase"] == "forward")].sort_values("start_ns")
    fwd = fwd.assign(unit=("#" + fwd.groupby("step").cumcount().astype(str)).to_numpy())
    closes = post[(post["api"] == "fsdp1") & (post["phase"] == "forward")]
    seq = pd.concat([fwd.assign(delta=1), closes.assign(delta=-1)]).sort_values(["start_ns", "delta"],
                                                                               ignore_index=True)
    after = seq["delta"].cumsum().to_numpy()
    level = np.where(seq["delta"] == 1, after, after + 1)
    pos = np.arange(len(seq))
    is_open = (seq["delta"] == 1).to_numpy()
    key = level * (len(seq) + 1) + pos
    by_key = np.argsort(key[is_open], kind="stable")
    open_keys = key[is_open][by_key]
    at = np.searchsorted(open_keys, key[~is_open]) - 1  # the last open bracket of the same level before the close
    ok = (at >= 0) & (open_keys[np.maximum(at, 0)] // (len(seq) + 1) == level[~is_open])
    ended = pd.DataFrame({"step": seq.loc[~is_open, "step"].to_numpy()[ok],
                          "unit": seq.loc[is_open, "unit"].to_numpy()[by_key[at[ok]]]})
    ended["from_last"] = ended.groupby("step").cumcount(ascending=False)
    bwd = pre[one & (pre["phase"] == "backward")].sort_values("start_ns")
    bwd = bwd.assign(from_last=bwd.groupby("step").cumcount())
    named = bwd.drop(columns=["unit"]).merge(ended, on=["step", "from_last"], how="left").set_axis(bwd.index)
    out = pre.copy()
    out.loc[fwd.index, "unit"] = fwd["unit"]
    out.loc[bwd.index, "unit"] = named["unit"].fillna("unknown")
    return out
