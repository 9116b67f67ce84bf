"""The op of a device event by External id, when its launch call is unknown: the last op holding that id (an id a
trace repeats names its latest op), found by a stable sort and a binary search; checked by hand and against the
pandas groupby it replaced."""

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.events.ops import _last_row_with_id


def test_last_row_with_id_by_hand():
    own = np.array([5, -1, 7, 5, 9, 7])  # rows 0..5; -1: the op has no id
    wanted = np.array([5, 7, 9, 8, -1, 5])
    # 5: rows 0 and 3 -> 3; 7: rows 2 and 5 -> 5; 9: row 4; 8: none; -1 (no id): none, though row 1 holds -1
    assert _last_row_with_id(own, wanted).tolist() == [3, 5, 4, -1, -1, 3]
    assert _last_row_with_id(np.array([], dtype=np.int64), np.array([1])).tolist() == [-1]
    assert _last_row_with_id(np.array([1]), np.array([], dtype=np.int64)).tolist() == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2, 8), max_size=40), st.lists(st.integers(-2, 10), max_size=40))
def test_last_row_with_id_equals_the_groupby_it_replaced(own, wanted):
    own, wanted = np.array(own, dtype=np.int64), np.array(wanted, dtype=np.int64)
    row_of = pd.Series(np.arange(len(own)))[own >= 0].groupby(own[own >= 0]).last()
    expected = np.nan_to_num(row_of.reindex(wanted).to_numpy(dtype=float), nan=-1).astype(np.int64)
    np.testing.assert_array_equal(_last_row_with_id(own, wanted), expected)
