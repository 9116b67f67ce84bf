"""Communication: every collective call, bandwidth against size, and waiting against transferring."""

import streamlit as st

from app import fmt, state
from tracekit.render import charts

ctx = state.context()
s = ctx.summary
state.header("Communication", ctx)
calls = s.collectives
if calls.empty:
    st.info("No collectives in this run.")
    st.stop()
st.subheader("Per op (in the window)")
ops = fmt.display_units(charts.op_table(s))
fmt.table(ops, key="comm_ops")
left, right = st.columns(2)
left.plotly_chart(charts.busbw_vs_size(s), key="comm_busbw")
right.plotly_chart(charts.wait_vs_transfer(s), key="comm_wait")
st.subheader("Collectives")
st.caption("Click a column header to sort. Sizes and bandwidths are unknown when the trace does not record them; bandwidths in GB/s.")
calls = fmt.display_units(calls)
fmt.table(calls, key="comm_calls")
