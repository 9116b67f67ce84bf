"""How the viewer writes numbers: one place, so pages agree with each other and tests can check them."""

from __future__ import annotations

from tracekit import fmt as _fmt

display_units = _fmt.display_units  # a table in ms and MB, as the CLI and the HTML report show them


def ms(us) -> str:
    """Microseconds shown as milliseconds: ``ms(1234.5) == '1.23 ms'``."""
    return _fmt.ms(us, unit=True)


def pct(value) -> str:
    """A percentage with one decimal; ``n/a`` when it has no meaning (no communication, no span)."""
    return _fmt.pct(value, unit=True)


def rate(samples_per_s) -> str:
    """Throughput in samples per second (the unit is in the label)."""
    return _fmt.rate(samples_per_s)


def columns(frame) -> dict:
    """``st.dataframe`` column formats for tracekit's unit-named columns; the values themselves are not changed."""
    import streamlit as st

    formats = {"_us": "%.1f", "_ms": "%.2f", "_pct": "%.1f", "_gbps": "%.3g", "bytes": "%.4g", "MB": "%.2f",
               "_share": "%.2f"}
    config = {}
    for name in frame.columns:
        pattern = next((f for suffix, f in formats.items() if str(name).endswith(suffix)), None)
        if pattern is not None and frame[name].dtype.kind == "f":
            config[name] = st.column_config.NumberColumn(format=pattern)
    return config
