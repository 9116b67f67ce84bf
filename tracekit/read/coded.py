"""Strings kept compactly while a trace is read: each chunk's values as (codes, distinct values), and the chunks
joined into one ``pd.Categorical`` at the end, so no Python string per event outlives its chunk."""

from __future__ import annotations

import operator

import numpy as np
import pandas as pd
import pyarrow as pa


def factorized(values: list, mixed: bool = False) -> tuple[np.ndarray, list]:
    """(codes, distinct values): every value, None included, has a code. ``mixed``: expect ints and strings."""
    try:  # one type (all strings, or all integers): Arrow's hash table
        if mixed:
            raise pa.ArrowTypeError("pid and tid mix numbers and names in Kineto traces")
        encoded = pa.array(values).dictionary_encode(null_encoding="encode")
        return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False), \
            encoded.dictionary.to_pylist()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        distinct = list(dict.fromkeys(values))
        code_of = {v: i for i, v in enumerate(distinct)}
        return np.fromiter(map(code_of.__getitem__, values), dtype=np.int32, count=len(values)), distinct


def categorical(pieces: list[tuple[np.ndarray, list]], relabel=None) -> pd.Categorical:
    """``pd.Categorical`` of the relabelled values of all pieces; ``relabel`` is called once per distinct value.
    None is a missing value (NaN), as ``pd.Categorical`` of a list with None makes it."""
    labels = [[relabel(u) for u in uniques] if relabel else uniques for _, uniques in pieces]
    categories = sorted({label for piece in labels for label in piece if label is not None})
    code_of = {c: i for i, c in enumerate(categories)}
    code_of[None] = -1
    codes = [np.array([code_of[label] for label in piece], dtype=np.int64)[c] if len(piece) else
             np.empty(0, dtype=np.int64) for (c, _), piece in zip(pieces, labels)]
    return pd.Categorical.from_codes(np.concatenate(codes) if codes else np.empty(0, dtype=np.int64), categories)


def floats_of(events: list, attr: str) -> np.ndarray:
    """Field ``attr`` of every event, int or float, as float64; None -> NaN (as ``np.array(..., dtype=float)``)."""
    get = operator.attrgetter(attr)
    try:
        return np.fromiter(map(get, events), dtype=np.float64, count=len(events))
    except TypeError:  # None among them
        return np.array([np.nan if v is None else v for v in map(get, events)], dtype=np.float64)


MAX_US = 9.2e15  # int64 nanoseconds end here


def to_ns(values) -> np.ndarray:
    """Microseconds (int or float with ns decimals) -> int64 ns, exact: the integer and fraction parts are split."""
    us = np.array(values, dtype=np.float64)  # None becomes NaN
    missing = np.isnan(us) | (np.abs(us) > MAX_US)  # beyond int64 ns: an overflowed value, not a time
    us[missing] = 0.0
    whole = np.floor(us)
    ns = whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)
    ns[missing] = -1
    return ns


def distinct(values: pd.Series) -> list:
    """The distinct values of a column, missing ones left out; a categorical's from its codes, without an object
    per row."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes = values.cat.codes.to_numpy()
        return list(values.cat.categories[np.unique(codes[codes >= 0])])
    return [v for v in pd.unique(values.to_numpy()) if not pd.isna(v)]
