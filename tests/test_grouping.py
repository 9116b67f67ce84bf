"""tracekit.events.grouping: groups found once, reduced a column at a time, exactly as a DataFrame groupby of the
same keys (the op tables' numbers depend on it to the last bit)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.events.grouping import Groups


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
    grouped = frame.groupby(key, observed=True, sort=sort, dropna=dropna)
    expected = grouped["v"].sum(min_count=1).reset_index()
    g = Groups(frame[key], sort=sort, dropna=dropna)
    pd.testing.assert_frame_equal(g.keys, expected[key])
    np.testing.assert_array_equal(g.sum(frame["v"].to_numpy(), min_count=1), expected["v"].to_numpy())
    np.testing.assert_array_equal(g.sum(frame["v"].to_numpy()), grouped["v"].sum().to_numpy())
    np.testing.assert_array_equal(g.all(frame["ok"].to_numpy()), grouped["ok"].all().to_numpy())
    for skipna in (True, False):  # object columns: missing values compared as missing
        pd.testing.assert_series_equal(pd.Series(g.first(frame["kind"].to_numpy(), skipna=skipna)),
                                       pd.Series(grouped["kind"].first(skipna=skipna).to_numpy()))
    np.testing.assert_array_equal(g.at_most_one_value(frame["dtype"].to_numpy()),
                                  grouped["dtype"].nunique().to_numpy() <= 1)
    strict = grouped["v"].sum().where(~frame.assign(nan=frame["v"].isna()).groupby(
        key, observed=True, sort=sort, dropna=dropna)["nan"].any())
    np.testing.assert_array_equal(g.strict_sum(frame["v"].to_numpy()), strict.to_numpy())
