"""How the viewer writes numbers: one place, so pages agree with each other and tests can check them."""

from __future__ import annotations

import math


def _unknown(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def ms(us) -> str:
    """Microseconds shown as milliseconds: ``ms(1234.5) == '1.23 ms'``."""
    return "unknown" if _unknown(us) else f"{us / 1e3:,.2f} ms"


def pct(value) -> str:
    """A percentage with one decimal; ``n/a`` when it has no meaning (no communication, no span)."""
    return "n/a" if _unknown(value) else f"{value:.1f} %"


def rate(samples_per_s) -> str:
    """Throughput in samples per second (the unit is in the label)."""
    return "unknown" if _unknown(samples_per_s) else f"{samples_per_s:,.1f}"


def columns(frame) -> dict:
    """``st.dataframe`` column formats for tracekit's unit-named columns; the values themselves are not changed."""
    import streamlit as st

    formats = {"_us": "%.1f", "_pct": "%.1f", "_gbps": "%.3g", "bytes": "%.4g", "_share": "%.2f"}
    config = {}
    for name in frame.columns:
        pattern = next((f for suffix, f in formats.items() if str(name).endswith(suffix)), None)
        if pattern is not None and frame[name].dtype.kind == "f":
            config[name] = st.column_config.NumberColumn(format=pattern)
    return config
