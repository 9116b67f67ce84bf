"""The suite's ``assert_frame_equal`` (tests/frame_equal.py) passes and fails as pandas' own does: categorical
columns compared by their codes only where categories, their order and codes all agree."""

import pandas as pd
import pytest

from frame_equal import assert_frame_equal


def frame(values, categories, other=(1.0, 2.0)):
    return pd.DataFrame({"name": pd.Categorical(values, categories=categories), "x": list(other)})


def test_equal_frames_pass():
    assert_frame_equal(frame(["a", "b"], ["a", "b"]), frame(["a", "b"], ["a", "b"]))
    assert_frame_equal(frame(["a", None], ["a", "b"]), frame(["a", None], ["a", "b"]))  # a missing value too


@pytest.mark.parametrize("right", [
    frame(["a", "a"], ["b", "a"]),  # the same codes (0, 0) under categories in another order: other values
    frame(["b", "b"], ["a", "b"]),  # the same categories, other codes
    frame(["a", "b"], ["a", "b", "c"]),  # the same values, other categories (another dtype)
    frame(["b", "a"], ["b", "a"], other=(1.0, 2.5)),  # equal categorical values, another number
])
def test_any_difference_fails_as_in_pandas(right):
    left = frame(["b", "a"], ["b", "a"])
    with pytest.raises(AssertionError):
        pd.testing.assert_frame_equal(left, right)
    with pytest.raises(AssertionError):
        assert_frame_equal(left, right)


def test_unequal_values_under_equal_categories_and_codes_cannot_pass():
    # Categories ["b", "a"] and codes [0, 0] are ["b", "b"]; ["a", "b"] with codes [0, 0] are ["a", "a"].
    left, right = frame(["b", "b"], ["b", "a"]), frame(["a", "a"], ["a", "b"])
    assert left["name"].cat.codes.tolist() == right["name"].cat.codes.tolist() == [0, 0]
    with pytest.raises(AssertionError):
        assert_frame_equal(left, right)


@pytest.mark.parametrize("other", [1.0, True])
def test_object_categories_equal_in_value_but_not_in_type_fail_as_in_pandas(other):
    left = pd.DataFrame({"c": pd.Categorical([1, "a"], categories=pd.Index([1, "a"], dtype=object))})
    right = pd.DataFrame({"c": pd.Categorical([other, "a"], categories=pd.Index([other, "a"], dtype=object))})
    with pytest.raises(AssertionError):
        pd.testing.assert_frame_equal(left, right)
    with pytest.raises(AssertionError):
        assert_frame_equal(left, right)
