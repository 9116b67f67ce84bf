"""Communication: every collective call, bandwidth against size, and waiting against transferring; communication by
parallelism dimension, and the send/recv pairs of a pipeline."""

import streamlit as st

from app import fmt, state
from tracekit.render import charts

ctx = state.context()
s = ctx.summary
state.header("Communication", ctx)
calls, pairs, by_dim = s.collectives, s.p2p, s.comm_by_dim
if calls.empty and pairs.empty:
    st.info("No collectives in this run.")
    st.stop()
if len(pairs) or by_dim["dim"].isin(["pp", "tp", "ep", "cp"]).any():
    st.subheader("By parallelism dimension (in the window)")
    st.caption("Per rank: communication time, the part no compute covers, and bytes, per dimension (dp, fsdp, tp, pp, "
               "...). Send/recv count their transfer only: their waiting for the neighbour stage is the pipeline's "
               "bubble (p2p_wait_us on the Ranks page).")
    fmt.table(fmt.display_units(by_dim), key="comm_by_dim")
    state.show_findings([f for f in s.findings if f.kind == "exposed_tp_comm"])
if len(pairs):
    st.subheader("Send/recv pairs")
    st.caption("Each send paired with its recv: transfer after both posted, the receiver waiting for a late sender, "
               "the sender waiting for a late receiver; cut: the other half lies outside the trace.")
    fmt.table(fmt.display_units(pairs.drop(columns=["send_op", "recv_op"])), key="comm_p2p")
if calls.empty:
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
