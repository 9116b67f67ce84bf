"""Idle: how long the device gaps are, why the device idles per rank, and the longest gaps with a link to them."""

from urllib.parse import urlencode

import streamlit as st

from app import fmt, state
from tracekit.render import charts

ctx = state.context()
s = ctx.summary
state.header("Idle", ctx)
left, right = st.columns(2)
left.plotly_chart(charts.gap_histogram(s), key="idle_hist")
right.plotly_chart(charts.idle_by_cause(s), key="idle_causes")
st.subheader("Longest gaps")
st.caption("Each gap's time split by what the thread that launches the next device work did over it (idle_<cause> "
           "columns; host_unrecorded: that thread recorded nothing); cause is the largest part.")
gaps = charts.largest_gaps(s, 20)
links = [f"timeline?{urlencode({'run': ctx.run_id, 'page': 'timeline', 'rank': int(r), 'at': f'{t:.3f}'})}"
         for r, t in zip(gaps["rank"], gaps["start_us"])]
gaps = fmt.display_units(gaps)
fmt.table(gaps.assign(timeline=links), key="idle_gaps",
          column_config={"timeline": st.column_config.LinkColumn("timeline", display_text="open")})
