"""Group a table's rows once, then reduce one column at a time: each per-row column can be made, reduced and let go
before the next, so a table of millions of rows never holds all its per-row columns at once.

``Groups(keys, sort, dropna)`` numbers the groups as ``keys.groupby(list(keys), observed=True, sort=sort,
dropna=dropna)`` would, and each reduction runs pandas' own grouped kernel over the rows in table order, so the
results are those of the DataFrame groupby, to the last bit (pandas sums with compensated summation, row by row).

    groups = Groups(ops[["name"]], sort=False, dropna=False)
    table = groups.keys.assign(host_us=groups.sum(host_ns / 1e3, min_count=1))
"""

from __future__ import annotations

import numpy as np
import pandas as pd


class Groups:
    """The groups of ``keys``' rows: ``keys`` (one row per group, in group order) and the reductions below, each
    taking one array with a value per row of the table (dropped rows included) and giving one per group."""

    def __init__(self, keys: pd.DataFrame, sort: bool, dropna: bool) -> None:
        number = group_numbers(keys, sort, dropna)
        if number is None:
            number = keys.groupby(list(keys.columns), observed=True, sort=sort, dropna=dropna).ngroup()
            number = number.fillna(-1).to_numpy()
        # -1: a row with a missing key, dropped (dropna). 4 bytes a row: several Groups of millions of ops coexist.
        gid = number.astype(np.int32 if len(keys) < 2**31 else np.int64)
        self.kept = None if (gid >= 0).all() else gid >= 0
        self.gid = gid if self.kept is None else gid[self.kept]
        _, first = np.unique(self.gid, return_index=True)
        rows = np.arange(len(keys)) if self.kept is None else np.flatnonzero(self.kept)
        self.keys = keys.iloc[rows[first]].reset_index(drop=True)
        # The group numbers as the codes of a categorical of every group: pandas groups by its codes as they are,
        # where an integer key is hashed again by every reduction. (All groups occur, so observed=False adds none.)
        self._key = pd.Categorical.from_codes(self.gid, categories=pd.RangeIndex(len(self.keys)))

    def __len__(self) -> int:
        return len(self.keys)

    def _by(self, values) -> pd.core.groupby.SeriesGroupBy:
        values = np.asarray(values) if self.kept is None else np.asarray(values)[self.kept]
        return pd.Series(values).groupby(self._key, observed=False, sort=True)

    def sum(self, values, min_count: int = 0) -> np.ndarray:
        """Per group: the sum (NaN skipped; NaN where fewer than ``min_count`` values are known)."""
        return self._by(values).sum(min_count=min_count).to_numpy()

    def strict_sum(self, values) -> np.ndarray:
        """Per group: the sum, NaN where any value is NaN (one unknown makes the sum unknown)."""
        values = np.asarray(values)
        return np.where(self._by(np.isnan(values)).any().to_numpy(), np.nan, self.sum(values))

    def all(self, values) -> np.ndarray:
        return self._by(values).all().to_numpy()

    def first(self, values, skipna: bool = True) -> np.ndarray:
        return self._by(values).first(skipna=skipna).to_numpy()

    def at_most_one_value(self, values) -> np.ndarray:
        """Per group: whether its values, missing ones not counted, are all one (``nunique <= 1``). Each value's code
        (NaN: missing) is compared at the group's least and greatest: no sort of every row, as nunique makes."""
        codes = pd.factorize(np.asarray(values))[0]  # -1: missing
        coded = codes.astype(np.float64)
        coded[codes < 0] = np.nan
        del codes
        grouped = self._by(coded)  # grouped once, reduced twice
        return ~(grouped.max().to_numpy() > grouped.min().to_numpy())


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
