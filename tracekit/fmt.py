"""How tracekit writes numbers for people: one convention for the text report, ``compare``, the HTML report and
the viewer. Times in milliseconds, sizes in MB (1e6 bytes), bandwidth in GB/s, shares in percent; a number the
trace cannot give is ``unknown``, a share that has no meaning (overlap without communication) is ``n/a``.

Every measured quantity (ms, MB, GB/s, GFLOP, TFLOPS/s, a ratio) is written by ``figure``: two decimals from 1 up,
three significant digits below 1, never an exponent. Shares (``pct``), MFU and throughputs keep one decimal.

The tables keep their own units (``_us``, ``bytes``); ``display_units`` turns a table into these for showing.

>>> ms(1234.5), ms(698.8), mb(2.5e6), pct(float("nan")), num(float("nan"))
('1.23', '0.699', '2.50', 'n/a', 'unknown')
>>> ms(1234.5, unit=True)
'1.23 ms'
"""

from __future__ import annotations

import math

import pandas as pd

UNKNOWN = "unknown"
NOT_APPLICABLE = "n/a"


def is_unknown(value) -> bool:
    """None, NaN and pandas' NA: a number the trace does not give."""
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def num(value, digits: int = 2, unit: str = "") -> str:
    """A number with thousands separators and ``digits`` decimals, then `` unit`` if given."""
    if is_unknown(value):
        return UNKNOWN
    return f"{value:,.{digits}f}" + (f" {unit}" if unit else "")


def figure(value, unit: str = "") -> str:
    """A measured quantity as tracekit writes it: two decimals from 1 up (thousands separated), three significant
    digits below 1, with no exponent; then `` unit`` if given. 0 is ``0.00``.

    >>> figure(125.018), figure(0.6988), figure(0.09782), figure(1.651e-05), figure(0.000883), figure(-0.5)
    ('125.02', '0.699', '0.0978', '0.0000165', '0.000883', '-0.500')
    >>> figure(1234.5, "ms"), figure(float("nan")), figure(0.0)
    ('1,234.50 ms', 'unknown', '0.00')
    """
    if is_unknown(value):
        return UNKNOWN
    value = float(value)
    if value == 0 or not math.isfinite(value) or abs(value) >= 1:
        return num(value, 2, unit)
    digits = 2 - math.floor(math.log10(abs(value)))
    if round(abs(value), digits) >= 1:  # 0.9996 rounds up to 1.00: written as from 1 up
        return num(value, 2, unit)
    return num(value, digits, unit)


def ratio(value) -> str:
    """A ratio (b / a, a speed-up) as ``figure`` writes it, then ``x``; ``n/a`` when there is none (a ratio of nothing).

    >>> ratio(0.6988), ratio(1.2), ratio(float("nan"))
    ('0.699x', '1.20x', 'n/a')
    """
    return NOT_APPLICABLE if is_unknown(value) else figure(value) + "x"


def ms(us, unit: bool = False) -> str:
    """Microseconds shown as milliseconds (``figure``): ``ms(1234.5) == '1.23'``, ``ms(1234.5, unit=True) == '1.23 ms'``."""
    return UNKNOWN if is_unknown(us) else figure(us / 1e3, "ms" if unit else "")


def mb(nbytes, unit: bool = False) -> str:
    """Bytes shown as MB (1e6 bytes; ``figure``)."""
    return UNKNOWN if is_unknown(nbytes) else figure(nbytes / 1e6, "MB" if unit else "")


def gflop(flops) -> str:
    """FLOPs shown as GFLOP (``figure``): ``gflop(16510.0) == '0.0000165'``."""
    return UNKNOWN if is_unknown(flops) else figure(flops / 1e9)


def tflops(flops, us) -> str:
    """FLOPs over microseconds, shown as TFLOPS/s (``figure``); unknown when either is unknown or the time is not > 0.

    >>> tflops(883.0, 1.0), tflops(1e9, 0.0)
    ('0.000883', 'unknown')
    """
    if is_unknown(flops) or is_unknown(us) or us <= 0:
        return UNKNOWN
    return figure(flops / us / 1e6)


def pct(value, unit: bool = False) -> str:
    """A percentage with one decimal; ``n/a`` when it has no meaning (no communication, no span)."""
    return NOT_APPLICABLE if is_unknown(value) else f"{value:.1f}" + (" %" if unit else "")


def mfu(value, device_peaks: str | None) -> str:
    """MFU in % (one decimal): ``n/a`` where the device has no known peak (a CPU-only rank, ``device_peaks`` '', or a
    device outside tracekit's datasheet table, ``'unknown: <name>'``), ``unknown`` where the peak is known but the
    FLOPs are not.

    >>> mfu(41.26, "NVIDIA A100-SXM4-80GB"), mfu(float("nan"), ""), mfu(float("nan"), "unknown: Radeon")
    ('41.3', 'n/a', 'n/a')
    """
    if not device_peaks or str(device_peaks).startswith("unknown"):
        return NOT_APPLICABLE
    return num(value, 1)


def peaks_of(ranks: pd.DataFrame, data_quality: pd.DataFrame) -> list:
    """Each row's ``device_peaks`` entry from the data quality ('' where it has none: no known peak), the second
    argument of ``mfu``.

    >>> peaks_of(pd.DataFrame({"rank": [1, 0]}), pd.DataFrame({"rank": [0], "device_peaks": ["NVIDIA H100"]}))
    ['', 'NVIDIA H100']
    """
    if "device_peaks" not in data_quality or "rank" not in ranks:
        return [""] * len(ranks)
    by_rank = data_quality.drop_duplicates("rank").set_index("rank")["device_peaks"]
    return by_rank.reindex(ranks["rank"]).fillna("").astype(str).tolist()


def _one_decimal(value) -> str:
    return num(value, 1)


def _whole_or_figure(value) -> str:
    """A number with no unit in its column's name: a count (whole) as it is, anything else by ``figure``."""
    return num(value, 0) if float(value).is_integer() else figure(value)


# (end of a column's name, how its numbers are written): shares in percent with one decimal, every measured quantity
# by ``figure``; the first that matches is used. ``a``, ``b`` and ``ratio`` are ``tracekit.compare``'s columns.
COLUMN_FORMATS = (("_pct", _one_decimal), ("pct_of_roofline", _one_decimal), ("_us", figure), ("_ms", figure),
                  ("_ms_per_step", figure), ("_share", figure), ("MB", figure), ("_gbps", figure),
                  ("tflops", figure), ("GFLOP", figure))
QUANTITY_COLUMNS = ("a", "b", "ratio")


def by_column(name):
    """How a number in a table column named ``name`` is written (``COLUMN_FORMATS``): a function of the number.

    >>> by_column("step_time_ms")(125.018), by_column("overlap_pct")(0.6988), by_column("b")(0.09782)
    ('125.02', '0.7', '0.0978')
    >>> by_column("calls")(3.0), by_column("calls")(2.5)
    ('3', '2.50')
    """
    name = str(name)
    if name in QUANTITY_COLUMNS:
        return figure
    return next((f for suffix, f in COLUMN_FORMATS if name.endswith(suffix)), _whole_or_figure)


def rate(samples_per_s) -> str:
    """Throughput in samples per second, one decimal (the unit is in the label)."""
    return num(samples_per_s, 1)


def share(part_us, whole_us) -> str:
    """A time in ms (``figure``) with its share of a whole: ``'1.20 (40%)'``; unknown when either is unknown or the whole is 0."""
    if is_unknown(part_us) or is_unknown(whole_us) or whole_us <= 0:
        return UNKNOWN
    return f"{figure(part_us / 1e3)} ({part_us / whole_us * 100:.0f}%)"


def ranks(values) -> str:
    """``rank 3`` or ``ranks 0, 1 and 2`` (the first eight, then how many more)."""
    listed = [int(r) for r in values]
    text = ", ".join(map(str, listed[:8])) + (f" and {len(listed) - 8} more" if len(listed) > 8 else "")
    return ("rank " if len(listed) == 1 else "ranks ") + text


_DISPLAY = (("_us", "_ms", 1e3), ("_us_per_step", "_ms_per_step", 1e3), ("bytes", "MB", 1e6))


def display_units(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of a Summary table in the display units: ``*_us`` (and ``*_us_per_step``) columns become ``*_ms``
    (values / 1e3) and ``*bytes`` columns ``*MB`` (values / 1e6). Other columns are unchanged.

    >>> display_units(pd.DataFrame({"rank": [0], "step_time_us": [1500.0], "allreduce_bytes": [4e6]})).to_dict("records")
    [{'rank': 0, 'step_time_ms': 1.5, 'allreduce_MB': 4.0}]
    """
    renamed, values = {}, {}
    for col in frame.columns:
        name = str(col)
        for suffix, shown, divisor in _DISPLAY:
            if name.endswith(suffix) and pd.api.types.is_numeric_dtype(frame[col]) \
                    and not pd.api.types.is_bool_dtype(frame[col]):
                renamed[col] = name[: -len(suffix)] + shown
                values[col] = frame[col].astype(float) / divisor
                break
    return frame.assign(**values).rename(columns=renamed) if renamed else frame.copy()
