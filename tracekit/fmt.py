"""How tracekit writes numbers for people: one convention for the text report, ``compare``, the HTML report and
the viewer. Times in milliseconds, sizes in MB (1e6 bytes), bandwidth in GB/s, shares in percent; a number the
trace cannot give is ``unknown``, a share that has no meaning (overlap without communication) is ``n/a``.

The tables keep their own units (``_us``, ``bytes``); ``display_units`` turns a table into these for showing.

>>> ms(1234.5), mb(2.5e6), pct(float("nan")), num(float("nan"))
('1.23', '2.50', 'n/a', 'unknown')
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


def ms(us, unit: bool = False) -> str:
    """Microseconds shown as milliseconds: ``ms(1234.5) == '1.23'``, ``ms(1234.5, unit=True) == '1.23 ms'``."""
    return UNKNOWN if is_unknown(us) else num(us / 1e3, 2, "ms" if unit else "")


def mb(nbytes, unit: bool = False) -> str:
    """Bytes shown as MB (1e6 bytes)."""
    return UNKNOWN if is_unknown(nbytes) else num(nbytes / 1e6, 2, "MB" if unit else "")


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


def rate(samples_per_s) -> str:
    """Throughput in samples per second, one decimal (the unit is in the label)."""
    return num(samples_per_s, 1)


def share(part_us, whole_us) -> str:
    """A time in ms with its share of a whole: ``'1.20 (40%)'``; unknown when either is unknown or the whole is 0."""
    if is_unknown(part_us) or is_unknown(whole_us) or whole_us <= 0:
        return UNKNOWN
    return f"{part_us / 1e3:,.2f} ({part_us / whole_us * 100:.0f}%)"


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
