"""A DataFrame as an Arrow table and back, exactly: the same dtypes, index, column order and values.

What a Summary's event tables hold comes back unchanged: numpy numbers and booleans (NaN kept as NaN),
categoricals (every category, unused ones included, missing values as code -1, the codes' width), pandas strings
(their storage and missing-value marker) and object columns of ``str`` and ``None``, under a RangeIndex with
string column labels. ``to_arrow`` answers None for anything else (a column of lists, an index of labels, a
datetime), so that a caller keeps such a table as it is: a table is only written where it reads back the same.

The restore recipe (each column's pandas dtype, the index, the labels' dtype) travels in the schema's metadata.

    table = to_arrow(frame)      # None: not kept exactly by this module
    pd.testing.assert_frame_equal(from_arrow(table), frame, check_exact=True)
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["to_arrow", "from_arrow"]

RECIPE = b"tracekit.frame"  # the schema metadata key of the restore recipe
_NUMPY_KINDS = "biuf"  # bool, int, uint, float


def to_arrow(frame: pd.DataFrame) -> pa.RecordBatch | None:
    """``frame`` as one Arrow record batch with its restore recipe; None where it would not read back exactly.
    One batch even without rows: a file of no batches would lose a categorical's categories."""
    index, labels = frame.index, list(frame.columns)
    if (not isinstance(index, pd.RangeIndex) or index.name is not None or frame.attrs
            or not frame.flags.allows_duplicate_labels):
        return None
    if not all(isinstance(c, str) for c in labels) or len(set(labels)) != len(labels):
        return None
    labels_dtype = _dtype_spec(frame.columns.dtype)
    if labels_dtype is None or labels_dtype["kind"] == "numpy":
        return None
    arrays, specs = [], []
    for i in range(frame.shape[1]):
        column = _column(frame.iloc[:, i])
        if column is None:
            return None
        arrays.append(column[0])
        specs.append(column[1])
    recipe = {"index": [index.start, index.stop, index.step], "labels": labels_dtype, "columns": specs}
    schema = pa.schema([pa.field(name, a.type) for name, a in zip(labels, arrays)],
                       metadata={RECIPE: json.dumps(recipe).encode()})
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def from_arrow(table: pa.Table | pa.RecordBatch) -> pd.DataFrame:
    """The DataFrame ``to_arrow`` was given. Every column is copied out of the Arrow buffers (which may be a
    memory map that goes away once the table is dropped)."""
    recipe = json.loads(table.schema.metadata[RECIPE])
    start, stop, step = recipe["index"]
    index = pd.RangeIndex(start, stop, step)
    values = {i: _decoded(table.column(i), spec) for i, spec in enumerate(recipe["columns"])}
    values = {i: v.set_axis(index) if isinstance(v, pd.Series) else v for i, v in values.items()}
    frame = pd.DataFrame(values, index=index, copy=False)
    frame.columns = pd.Index(table.schema.names, dtype=_dtype(recipe["labels"]))
    return frame


def _column(column: pd.Series) -> tuple[pa.Array, dict] | None:
    dtype = column.dtype
    if not isinstance(dtype, pd.CategoricalDtype):
        return _values(column)
    categories = _values(dtype.categories)
    if categories is None:
        return None
    codes = column.cat.codes.to_numpy()
    array = pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes < 0), categories[0], ordered=dtype.ordered)
    return array, {"kind": "category", "codes": codes.dtype.str, "categories": categories[1],
                   "ordered": bool(dtype.ordered)}


def _values(values: pd.Series | pd.Index) -> tuple[pa.Array, dict] | None:
    """A column or a categorical's categories (not categorical themselves)."""
    spec = _dtype_spec(values.dtype)
    if spec is None:
        return None
    if spec["kind"] == "numpy":
        return pa.array(values.to_numpy()), spec  # NaN stays a value, not a null
    objects = values.to_numpy(dtype=object, na_value=None) if spec["kind"] == "string" else values.to_numpy()
    if spec["kind"] == "object":
        if pd.api.types.infer_dtype(objects, skipna=True) not in ("string", "empty"):
            return None
        if not all(v is None for v in objects[pd.isna(objects)]):  # NaN or pd.NA would come back as None
            return None
    return pa.array(objects, type=pa.large_string()), spec


def _dtype_spec(dtype) -> dict | None:
    """How to name ``dtype`` in the recipe; None for a dtype this module does not keep."""
    if isinstance(dtype, np.dtype) and dtype.kind in _NUMPY_KINDS:
        return {"kind": "numpy", "dtype": dtype.str}
    if isinstance(dtype, pd.StringDtype):
        return {"kind": "string", "storage": dtype.storage, "na": "NA" if dtype.na_value is pd.NA else "nan"}
    if isinstance(dtype, np.dtype) and dtype == object:
        return {"kind": "object"}
    return None


def _dtype(spec: dict):
    if spec["kind"] == "numpy":
        return np.dtype(spec["dtype"])
    if spec["kind"] == "string":
        return pd.StringDtype(storage=spec["storage"], na_value=pd.NA if spec["na"] == "NA" else np.nan)
    return np.dtype(object)


def _decoded(column: pa.ChunkedArray | pa.Array, spec: dict):
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if spec["kind"] == "category":
        codes = pc.fill_null(array.indices, -1).to_numpy(zero_copy_only=False).astype(spec["codes"])
        categories = pd.Index(_plain(array.dictionary, spec["categories"]), dtype=_dtype(spec["categories"]))
        return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(categories, ordered=spec["ordered"]))
    return _plain(array, spec)


def _plain(array: pa.Array, spec: dict):
    if spec["kind"] == "numpy":
        return np.array(array.to_numpy(zero_copy_only=False), dtype=spec["dtype"], copy=True)
    objects = array.to_numpy(zero_copy_only=False)  # str objects, None for nulls: new Python objects
    # An object column stays one: a bare array of str would be read as pandas strings.
    if spec["kind"] == "object":
        return pd.Series(objects, dtype=object, copy=False)
    return pd.array(objects, dtype=_dtype(spec))
