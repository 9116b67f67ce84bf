"""tracekit.events.grouping: groups found once, reduced a column at a time, exactly as a DataFrame groupby of the
same keys (the op tables' numbers depend on it to the last bit)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.events.grouping import Groups, group_numbers
from frame_equal import assert_frame_equal


def _keys():
    return pd.DataFrame({"rank": np.zeros(5, dtype=np.int32),
                         "name": pd.Categorical(["b", "a", "b", None, "a"])})


def test_groups_by_hand_in_first_appearance_order_with_missing_keys_kept():
    g = Groups(_keys(), sort=False, dropna=False)
    assert g.keys["name"].astype(object).tolist()[:2] == ["b", "a"] and pd.isna(g.keys["name"].iloc[2])
    assert g.keys["rank"].dtype == np.int32 and len(g) == 3
    assert g.sum(np.array([1.0, 2.0, 3.0, 4.0, 5.0])).tolist() == [4.0, 7.0, 4.0]
    assert g.first(np.array(["x", None, "y", "z", "w"], dtype=object)).tolist() == ["x", "w", "z"]
    first = g.first(np.array(["x", None, "y", "z", "w"], dtype=object), skipna=False)  # a's first call has none
    assert first[0] == "x" and pd.isna(first[1]) and first[2] == "z"
    # b: x and y (two values); a: none known; the missing key's group: z alone
    assert g.at_most_one_value(np.array(["x", None, "y", "z", None], dtype=object)).tolist() == [False, True, True]
    assert g.at_most_one_value(np.array(["x", np.nan, "x", "z", "q"], dtype=object)).tolist() == [True, True, True]
    assert g.all(np.array([True, True, False, True, True])).tolist() == [False, True, True]


def test_groups_by_hand_sorted_with_missing_keys_dropped():
    g = Groups(_keys(), sort=True, dropna=True)
    assert g.keys["name"].astype(str).tolist() == ["a", "b"]
    values = np.array([1.0, np.nan, 3.0, 4.0, 5.0])  # a: NaN and 5; b: 1 and 3; the missing key's 4 is dropped
    assert g.sum(values).tolist() == [5.0, 4.0]
    assert np.isnan(g.sum(np.array([1.0, np.nan, 3.0, 4.0, np.nan]), min_count=1)[0])  # a: no known value
    strict = g.strict_sum(values)
    assert np.isnan(strict[0]) and strict[1] == 4.0  # one unknown makes a's sum unknown



def test_sums_are_compensated_as_pandas_adds():
    # 1e16's neighbours are 2 apart: added one at a time, each 1.0 rounds away (1e16); pandas' compensated sum keeps
    # them (1e16 + 4). The other group (2 + 3) has no rounding to recover.
    values = np.array([1e16, 1.0, 2.0, 1.0, 1.0, 3.0, 1.0])
    g = Groups(pd.DataFrame({"k": np.array([0, 0, 1, 0, 0, 1, 0], dtype=np.int64)}), sort=True, dropna=True)
    assert g.sum(values).tolist() == [1e16 + 4, 5.0]
    assert g.strict_sum(values).tolist() == [1e16 + 4, 5.0]
    assert sum(values[[0, 1, 3, 4, 6]].tolist()) == 1e16  # what a plain running sum gives
    calls = g.sum(np.array([3, 4, 5, 6, 7, 8, 9], dtype=np.int64))
    assert calls.dtype == np.int64 and calls.tolist() == [29, 13]  # integers stay integers


def test_sorted_groups_sum_as_pandas_does_with_numpy_and_overflow_stays_infinite():
    # Groups in sorted runs with no NaN: pandas sums each run with numpy's add.reduceat, not its compensated kernel,
    # so the 1.0s after 1e16 round away (1e16, where compensation gives 1e16 + 2). A NaN sends it to the kernel.
    one = Groups(pd.DataFrame({"k": np.zeros(4, dtype=np.int64)}), sort=True, dropna=True)
    assert one.sum(np.array([0.0, 1e16, 1.0, 1.0])).tolist() == [1e16]
    assert np.isnan(one.sum(np.array([0.0, 1e16, 1.0, 1.0]), min_count=5)[0])  # 4 values: fewer than 5
    with_nan = Groups(pd.DataFrame({"k": np.zeros(5, dtype=np.int64)}), sort=True, dropna=True)
    assert with_nan.sum(np.array([0.0, 1e16, 1.0, 1.0, np.nan])).tolist() == [1e16 + 2]
    # A total that overflows stays infinite: the compensation of an infinite total is reset, not carried as NaN.
    mixed = Groups(pd.DataFrame({"k": np.array([0, 1, 0, 0], dtype=np.int64)}), sort=True, dropna=True)
    assert mixed.sum(np.array([1e308, 5.0, 1e308, 1.0])).tolist() == [np.inf, 5.0]
    with pytest.raises(ValueError, match="3 values for a table of 4 rows"):
        mixed.sum(np.ones(3))

@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["mm", "add", None]), st.sampled_from(["[[2]]", "[[3]]", None]),
                          st.one_of(st.floats(-1e18, 1e18), st.just(float("nan"))), st.booleans(),
                          st.sampled_from(["bf16", "float", None, float("nan")])), min_size=1, max_size=60),
       st.booleans(), st.booleans())
def test_every_reduction_equals_the_dataframe_groupby_to_the_last_bit(rows, sort, dropna):
    frame = pd.DataFrame({"rank": np.zeros(len(rows), dtype=np.int32),
                          "name": pd.Categorical([r[0] for r in rows]),
                          "dims": pd.Categorical([r[1] for r in rows]),
                          "v": np.array([r[2] for r in rows], dtype=np.float64),
                          "kind": np.array([r[0] for r in rows], dtype=object),
                          "ok": np.array([r[3] for r in rows]),
                          "dtype": np.array([r[4] for r in rows], dtype=object)})
    key = ["rank", "name", "dims"]
    # The groupby of the kept rows: with rows of a missing key among them, pandas would choose how to add by where
    # they lie (they break the sorted runs it sums with numpy), a choice Groups, which drops them first, never sees.
    kept = frame.dropna(subset=key) if dropna else frame
    grouped = kept.groupby(key, observed=True, sort=sort, dropna=dropna)
    expected = grouped["v"].sum(min_count=1).reset_index()
    g = Groups(frame[key], sort=sort, dropna=dropna)
    assert_frame_equal(g.keys, expected[key])
    np.testing.assert_array_equal(g.sum(frame["v"].to_numpy(), min_count=1), expected["v"].to_numpy())
    np.testing.assert_array_equal(g.sum(frame["v"].to_numpy()), grouped["v"].sum().to_numpy())
    np.testing.assert_array_equal(g.all(frame["ok"].to_numpy()), grouped["ok"].all().to_numpy())
    for skipna in (True, False):  # object columns: missing values compared as missing
        pd.testing.assert_series_equal(pd.Series(g.first(frame["kind"].to_numpy(), skipna=skipna)),
                                       pd.Series(grouped["kind"].first(skipna=skipna).to_numpy()))
    np.testing.assert_array_equal(g.at_most_one_value(frame["dtype"].to_numpy()),
                                  grouped["dtype"].nunique().to_numpy() <= 1)
    strict = grouped["v"].sum().where(~kept.assign(nan=kept["v"].isna()).groupby(
        key, observed=True, sort=sort, dropna=dropna)["nan"].any())
    np.testing.assert_array_equal(g.strict_sum(frame["v"].to_numpy()), strict.to_numpy())


def test_group_numbers_by_hand():
    keys = pd.DataFrame({"step": np.array([7, -2, 7, 7, -2], dtype=np.int64),
                         "name": pd.Categorical(["b", "a", None, "b", "b"], categories=["b", "a"])})
    # first row of each (step, name): (7, b) (-2, a) (7, NaN) (-2, b)
    assert group_numbers(keys, sort=False, dropna=False).tolist() == [0, 1, 2, 0, 3]
    # sorted: step -2 before 7; in category order b before a; the missing name last
    assert group_numbers(keys, sort=True, dropna=False).tolist() == [2, 1, 3, 2, 0]
    assert group_numbers(keys, sort=True, dropna=True).tolist() == [2, 1, -1, 2, 0]
    assert group_numbers(keys, sort=False, dropna=True).tolist() == [0, 1, -1, 0, 2]


def test_group_numbers_leave_other_columns_to_pandas():
    assert group_numbers(pd.DataFrame({"x": [1.0, 2.0]}), sort=False, dropna=False) is None
    assert group_numbers(pd.DataFrame({"x": np.array(["a", "b"], dtype=object)}), sort=True, dropna=True) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.sampled_from(["z", "a", "m", None]), st.sampled_from(["p", "q", None]),
                          st.integers(-(2**40), 2**40)), min_size=1, max_size=50),
       st.booleans(), st.booleans(), st.permutations(["z", "a", "m", "unused"]))
def test_group_numbers_equal_pandas_ngroup(rows, sort, dropna, order):
    keys = pd.DataFrame({"rank": np.array([r[0] for r in rows], dtype=np.int32),
                         "name": pd.Categorical([r[1] for r in rows], categories=order),
                         "dims": pd.Categorical([r[2] for r in rows]),
                         "big": np.array([r[3] for r in rows], dtype=np.int64)})
    for columns in (["rank"], ["name"], ["rank", "name", "dims"], ["big", "name"], ["dims", "big", "rank"]):
        expected = keys[columns].groupby(columns, observed=True, sort=sort, dropna=dropna).ngroup()
        np.testing.assert_array_equal(group_numbers(keys[columns], sort, dropna), expected.fillna(-1).to_numpy())


def test_keys_whose_codes_pass_one_int64_are_left_to_pandas():
    # Five keys of 65,536 categories: 65,537**5 combinations do not fit one int64 (sorted, the joined number would
    # wrap and put the groups out of order).
    rng = np.random.default_rng(0)
    keys = pd.DataFrame({f"k{i}": pd.Categorical.from_codes(rng.integers(0, 2**16, 3), categories=pd.RangeIndex(2**16))
                         for i in range(5)})
    assert group_numbers(keys, sort=True, dropna=False) is None
    expected = keys.groupby(list(keys), observed=True, sort=True, dropna=False).ngroup().to_numpy()
    np.testing.assert_array_equal(Groups(keys, sort=True, dropna=False).gid, expected)
