"""How the viewer writes numbers: one place, so pages agree with each other and tests can check them.

Every table a page shows goes through ``table``: numbers by the unit their column's name ends with, and an empty cell
as tracekit's text report writes it: ``unknown`` for a number the trace cannot give, ``n/a`` for a share that has no
meaning (``tracekit.fmt.pct``) and for a ratio of nothing (``tracekit compare``). The values, and so the sorting, stay
numbers, except in a column that holds an ``n/a`` (see ``shown``).
"""

from __future__ import annotations

import pandas as pd

from tracekit import fmt as _fmt

display_units = _fmt.display_units  # a table in ms and MB, as the CLI and the HTML report show them
UNKNOWN, NOT_APPLICABLE = _fmt.UNKNOWN, _fmt.NOT_APPLICABLE
MAX_STYLED_CELLS = 60_000  # above this, a pandas Styler takes seconds: column formats instead
# A column is as wide as its header's or its longest cell's text (``widths``): CHAR_PX per character (the table's
# 14 px font draws 6-7, up to 9 in a word of m's), CELL_PAD_PX for the padding either side, at most MAX_COLUMN_PX; a longer text is cut, and
# read whole in the cell's overlay or the CSV. MEASURED_ROWS: the rows measured.
CHAR_PX, CELL_PAD_PX, MAX_COLUMN_PX, MEASURED_ROWS = 9, 20, 480, 2000
NOT_APPLICABLE_COLUMNS = ("ratio",)  # besides the shares ('_pct'), as tracekit.fmt.pct and Comparison write them
UNKNOWN_SHARES = ("saving_pct",)  # a share the CLI writes 'unknown' (``tracekit whatif``): its run was not replayed


def ms(us) -> str:
    """Microseconds shown as milliseconds: ``ms(1234.5) == '1.23 ms'``."""
    return _fmt.ms(us, unit=True)


def pct(value) -> str:
    """A percentage with one decimal; ``n/a`` when it has no meaning (no communication, no span)."""
    return _fmt.pct(value, unit=True)


def rate(samples_per_s) -> str:
    """Throughput in samples per second (the unit is in the label)."""
    return _fmt.rate(samples_per_s)


def gbps(value) -> str:
    """A bandwidth in GB/s as every number is written (``tracekit.fmt.figure``).

    >>> gbps(0.00062612), gbps(26.66), gbps(1234.4), gbps(float("nan"))
    ('0.000626', '26.66', '1,234.40', 'unknown')
    """
    return _fmt.figure(value)


def _format_of(name) -> object:
    """How a column's numbers are written: by the unit its name ends with (``tracekit.fmt.by_column``)."""
    return _fmt.by_column(name)


def not_applicable(frame: pd.DataFrame) -> pd.DataFrame:
    """Which empty cells read ``n/a`` rather than ``unknown``: those of the shares and ratios."""
    cols = [c for c in frame.columns if (str(c).endswith("_pct") and str(c) not in UNKNOWN_SHARES)
            or str(c) in NOT_APPLICABLE_COLUMNS]
    out = pd.DataFrame(False, index=frame.index, columns=frame.columns)
    out[cols] = True
    return out


def ranks_na(ranks: pd.DataFrame, data_quality: pd.DataFrame) -> pd.DataFrame:
    """``not_applicable`` of a ranks table, with MFU as ``tracekit.fmt.mfu`` writes it: ``n/a`` where the rank's device
    has no known peak (a CPU among them), ``unknown`` where the peak is known and the FLOPs are not."""
    na = not_applicable(ranks)
    if "mfu_pct" in ranks:
        na["mfu_pct"] = [not p or p.startswith(UNKNOWN) for p in _fmt.peaks_of(ranks, data_quality)]
    return na


def comparison_na(table: pd.DataFrame) -> pd.DataFrame:
    """The ``n/a`` cells of a ``tracekit.compare`` table, as ``tracekit compare`` writes it: the median bandwidth of
    an op a run never calls, and every empty ratio (a ratio of nothing)."""
    metric = table["metric"].astype(str)
    counts = table.set_index(metric)[["a", "b"]].reindex(metric.str.replace(
        "_median_busbw_gbps", "_calls_per_step", regex=False)).to_numpy()
    return pd.DataFrame({"a": counts[:, 0] == 0, "b": counts[:, 1] == 0, "ratio": True}, index=table.index)


def _mask(frame: pd.DataFrame, na: pd.DataFrame | None) -> pd.DataFrame:
    if na is None:
        return not_applicable(frame)
    given, out = na.reset_index(drop=True), pd.DataFrame(False, index=frame.index, columns=frame.columns)
    for col in given.columns.intersection(frame.columns):  # the columns ``na`` names, the others False
        out[col] = given[col].fillna(False).astype(bool).to_numpy()
    return out


def text(values: pd.Series, name, na_cells=None) -> pd.Series:
    """A column as text, each number by its column's unit; an empty cell ``n/a`` where ``na_cells``, else ``unknown``."""
    f = _format_of(name)
    write = f
    na_cells = [False] * len(values) if na_cells is None else list(na_cells)
    return pd.Series([(NOT_APPLICABLE if n else UNKNOWN) if _fmt.is_unknown(v) else write(v)
                      for v, n in zip(values, na_cells)], index=values.index, dtype=object)


def shown(frame: pd.DataFrame, na: pd.DataFrame | None = None) -> pd.DataFrame:
    """A table as the page shows it (index dropped). Streamlit draws every empty cell with the table's one placeholder
    (``unknown``), so a column with an empty cell that reads ``n/a`` (``na``, by default ``not_applicable``) becomes
    text; every other column keeps its numbers, and so its sorting."""
    frame = frame.reset_index(drop=True)
    mask = _mask(frame, na)
    written = {c: text(frame[c], c, mask[c]) for c in frame.columns
               if frame[c].dtype.kind in "fiuO" and (mask[c].to_numpy() & frame[c].isna().to_numpy()).any()}
    return frame.assign(**written) if written else frame


def placeholder(frame: pd.DataFrame, na: pd.DataFrame | None = None) -> str:
    """The one text Streamlit draws for every empty cell of a table whose numbers are kept (``table(...,
    numbers=True)``): ``n/a`` when each empty cell is an n/a one, else ``unknown``."""
    frame = frame.reset_index(drop=True)
    empty = frame.isna().to_numpy()
    return NOT_APPLICABLE if empty.any() and not (empty & ~_mask(frame, na).to_numpy()).any() else UNKNOWN


def styled(frame: pd.DataFrame, na: pd.DataFrame | None = None, numbers: bool = False):
    """``shown(frame, na)`` (``frame`` itself when ``numbers``) as a pandas Styler: numbers by their column's unit,
    empty cells as Streamlit draws them (``unknown``, or ``placeholder`` when ``numbers``)."""
    empty = placeholder(frame, na) if numbers else UNKNOWN
    frame = frame.reset_index(drop=True) if numbers else shown(frame, na)
    formats = {c: _format_of(c) for c in frame.columns if frame[c].dtype.kind == "f"}
    return frame.style.format(formats, na_rep=empty)


def widths(frame: pd.DataFrame, empty: str = UNKNOWN) -> dict[str, int]:
    """Each column's width in px, wide enough for its header and its longest cell as drawn (numbers by their column's
    unit, an empty cell as ``empty``), at most ``MAX_COLUMN_PX``. Streamlit sizes a column by the cells it samples
    and an empty one as empty: a longer cell further down, or the placeholder ``unknown``, was cut.

    >>> widths(pd.DataFrame({"cause": ["host", "host_unrecorded"], "wait_us": [float("nan"), 2.0]}))
    {'cause': 155, 'wait_us': 83}
    """
    rows = frame.head(MEASURED_ROWS)
    out = {}
    for name in frame.columns:
        values = rows[name]
        if values.dtype.kind == "f":
            write = _format_of(name)
            texts = [empty if _fmt.is_unknown(v) else write(v) for v in values]
        else:
            texts = [empty if _fmt.is_unknown(v) else str(v) for v in values]
        chars = max([len(str(name)), *map(len, texts)])
        out[str(name)] = min(MAX_COLUMN_PX, CELL_PAD_PX + CHAR_PX * chars)
    return out


def _sized(frame: pd.DataFrame, empty: str, given: dict | None) -> dict:
    """``given`` column configs, each column's width (``widths``) added where it sets none."""
    import streamlit as st

    config = dict(given or {})
    for name, px in widths(frame, empty).items():
        mine = config.get(name)
        if mine is None and name in config:  # a hidden column
            continue
        if isinstance(mine, dict):
            config[name] = mine if mine.get("width") is not None else {**mine, "width": px}
        elif isinstance(mine, str):
            config[name] = st.column_config.Column(mine, width=px)
        else:
            config[name] = st.column_config.Column(width=px)
    return config


def table(frame, na: pd.DataFrame | None = None, column_config: dict | None = None, numbers: bool = False,
          **kwargs):
    """``st.dataframe`` of a table, every page's one way to show one (``styled``; ``kwargs`` go to st.dataframe), with
    ``unknown`` for an empty cell. ``numbers``: keep every column's numbers, a table others read back as it is (the
    Compare page's), with one text for its empty cells (``placeholder``). A table of more than ``MAX_STYLED_CELLS``
    cells is formatted by column formats (styling each cell would take seconds)."""
    import streamlit as st

    frame = frame if isinstance(frame, pd.DataFrame) else pd.DataFrame(frame)
    kwargs.setdefault("hide_index", True)
    empty = placeholder(frame, na) if numbers else UNKNOWN
    if frame.size > MAX_STYLED_CELLS:
        frame = frame if numbers else shown(frame, na)
        return st.dataframe(frame, column_config=_sized(frame, empty, columns(frame) | (column_config or {})),
                            placeholder=empty, **kwargs)
    config = _sized(frame.reset_index(drop=True) if numbers else shown(frame, na), empty, column_config)
    return st.dataframe(styled(frame, na, numbers), column_config=config, placeholder=empty, **kwargs)


def columns(frame) -> dict:
    """``st.dataframe`` column formats for tracekit's unit-named columns, for a table too large to style."""
    import streamlit as st

    printf = {"_us": "%.1f", "_ms": "%.2f", "_pct": "%.1f", "_gbps": "%.3g", "bytes": "%.4g", "MB": "%.2f",
              "_share": "%.2f"}
    config = {}
    for name in frame.columns:
        pattern = next((f for suffix, f in printf.items() if str(name).endswith(suffix)), None)
        if pattern is not None and frame[name].dtype.kind == "f":
            config[name] = st.column_config.NumberColumn(format=pattern)
    return config
