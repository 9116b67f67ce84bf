"""Group a table's rows once, then reduce one column at a time: each per-row column can be made, reduced and let go
before the next, so a table of millions of rows never holds all its per-row columns at once.

``Groups(keys, sort, dropna)`` numbers the groups as ``keys.groupby(list(keys), observed=True, sort=sort,
dropna=dropna)`` would, and each reduction adds the kept rows (a missing key's are dropped first) as pandas' grouped
reductions of them do, to the last bit: groups in sorted runs with no NaN with numpy's ``add.reduceat``, the others
with compensated summation row by row (a compiled pass, ``_group_kernel``), anything else through pandas itself.

    groups = Groups(ops[["name"]], sort=False, dropna=False)
    table = groups.keys.assign(host_us=groups.sum(host_ns / 1e3, min_count=1))
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from tracekit.events import _group_kernel as kernel


class Groups:
    """The groups of ``keys``' rows: ``keys`` (one row per group, in group order) and the reductions below, each
    taking one array with a value per row of the table (dropped rows included) and giving one per group.

    Float and int64 sums, ``any`` and ``all`` of flags and ``at_most_one_value`` run as one compiled pass over the
    rows (``_group_kernel``); ``first`` and another dtype go to pandas' grouped kernels. Either way the
    result is pandas' groupby of the kept rows (``tests/test_grouping.py`` holds each to it on random tables)."""

    def __init__(self, keys: pd.DataFrame, sort: bool, dropna: bool) -> None:
        number = group_numbers(keys, sort, dropna)
        if number is None:
            number = keys.groupby(list(keys.columns), observed=True, sort=sort, dropna=dropna).ngroup()
            number = number.fillna(-1).to_numpy()
        # Per row: its group, -1 for a row with a missing key, dropped (dropna). 4 bytes a row: several Groups of
        # millions of ops coexist.
        self.rows = number.astype(np.int32 if len(keys) < 2**31 else np.int64)
        self.kept = None if (self.rows >= 0).all() else self.rows >= 0
        _, first = np.unique(self.gid, return_index=True)
        rows = np.arange(len(keys)) if self.kept is None else np.flatnonzero(self.kept)
        self.keys = keys.iloc[rows[first]].reset_index(drop=True)

    def __len__(self) -> int:
        return len(self.keys)

    @functools.cached_property
    def gid(self) -> np.ndarray:
        """The group of each kept row."""
        return self.rows if self.kept is None else self.rows[self.kept]

    @functools.cached_property
    def _key(self) -> pd.Categorical:
        # The group numbers as the codes of a categorical of every group: pandas groups by its codes as they are,
        # where an integer key is hashed again by every reduction. (All groups occur, so observed=False adds none.)
        return pd.Categorical.from_codes(self.gid, categories=pd.RangeIndex(len(self.keys)))

    def _by(self, values) -> pd.core.groupby.SeriesGroupBy:
        values = np.asarray(values) if self.kept is None else np.asarray(values)[self.kept]
        return pd.Series(values).groupby(self._key, observed=False, sort=True)

    @functools.cached_property
    def _runs(self) -> np.ndarray | None:
        """Where each group's run of kept rows begins, when the groups never go down (pandas then sums floats with
        numpy, not its own kernel); None otherwise."""
        gid = self.gid
        if not len(gid) or not (gid[1:] >= gid[:-1]).all():
            return None
        return np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]])

    def sum(self, values, min_count: int = 0) -> np.ndarray:
        """Per group: the sum (NaN skipped; NaN where fewer than ``min_count`` values are known)."""
        values = self._per_row(values)
        if values.dtype == np.float64:
            kept = values if self.kept is None else values[self.kept]
            if self._runs is not None and not np.isnan(kept).any():  # what pandas does: numpy's sum per run
                total = np.add.reduceat(kept, self._runs)
                return np.where(np.diff(self._runs, append=len(kept)) < min_count, np.nan, total)
            return kernel.group_sum(self.rows, values, len(self), min_count)
        if values.dtype == np.int64 and min_count <= 1:  # every group has a row, and an integer is never missing
            return kernel.group_int_sum(self.rows, values, len(self))
        return self._by(values).sum(min_count=min_count).to_numpy()

    def _per_row(self, values) -> np.ndarray:
        values = np.asarray(values)
        if len(values) != len(self.rows):
            raise ValueError(f"{len(values)} values for a table of {len(self.rows)} rows")
        return values

    def strict_sum(self, values) -> np.ndarray:
        """Per group: the sum, NaN where any value is NaN (one unknown makes the sum unknown)."""
        values = self._per_row(values)
        return np.where(self.any(np.isnan(values)), np.nan, self.sum(values))

    def any(self, values) -> np.ndarray:
        values = self._per_row(values)
        if values.dtype == np.bool_:
            return kernel.group_any(self.rows, values, len(self))
        return self._by(values).any().to_numpy()

    def all(self, values) -> np.ndarray:
        values = self._per_row(values)
        if values.dtype == np.bool_:
            return ~kernel.group_any(self.rows, ~values, len(self))
        return self._by(values).all().to_numpy()

    def first(self, values, skipna: bool = True) -> np.ndarray:
        # pandas' own: which missing value (None or NaN) a group without a known one gets depends on what the others
        # hold, by pandas' inference of the result.
        return self._by(values).first(skipna=skipna).to_numpy()

    def at_most_one_value(self, values) -> np.ndarray:
        """Per group: whether its values, missing ones not counted, are all one (``nunique <= 1``): each value's
        code compared at the group's least and greatest, with no sort of every row, as nunique makes."""
        codes = pd.factorize(self._per_row(values))[0]  # -1: missing
        return ~kernel.group_code_spread(self.rows, codes.astype(np.int64, copy=False), len(self))


def group_numbers(keys: pd.DataFrame, sort: bool, dropna: bool) -> np.ndarray | None:
    """The group of each row (-1: dropped for a missing key) as ``keys.groupby(list(keys), observed=True,
    sort=sort, dropna=dropna).ngroup()`` numbers them, from one int64 per row: each column's codes (a categorical's
    own, in category order; an integer column's values in sorted order; a missing value after every other, as pandas
    sorts it) joined into one number, most significant first, whose order is the rows' order by their keys. Groups
    are numbered by that order (``sort``) or by their first row, as pandas does. None where a column is neither a
    categorical nor a NumPy integer, or the codes do not fit one int64: pandas numbers those."""
    joined = np.zeros(len(keys), dtype=np.int64)
    missing = np.zeros(len(keys), dtype=bool)
    span = 1
    for name in keys.columns:
        column = keys[name]
        if isinstance(column.dtype, pd.CategoricalDtype):
            codes, size = column.cat.codes.to_numpy().astype(np.int64), len(column.cat.categories)
        elif isinstance(column.dtype, np.dtype) and column.dtype.kind in "iu":
            codes, uniques = pd.factorize(column.to_numpy(), sort=True)
            codes, size = codes.astype(np.int64), len(uniques)
        else:
            return None
        missing |= codes < 0
        codes[codes < 0] = size  # after every value
        size += 1
        if span > (2**62) // size:
            return None
        joined = joined * size + codes
        span *= size
    number = np.full(len(keys), -1, dtype=np.int64)
    kept = ~missing if dropna else np.ones(len(keys), dtype=bool)
    number[kept] = pd.factorize(joined[kept], sort=sort)[0]
    return number
