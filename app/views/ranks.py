"""Ranks: where each rank's time goes, and the step time of every rank and step."""

import streamlit as st

from app import fmt, state
from tracekit.render import charts

ctx = state.context()
s = ctx.summary
state.header("Ranks", ctx)
st.plotly_chart(charts.rank_breakdown(s), key="ranks_breakdown")
st.caption("Compute alone, communication under compute (overlapped), communication with nothing under it "
           "(exposed), memory copies alone, and idle time (by cause where known); together they make the span.")
st.plotly_chart(charts.step_heatmap(s), key="ranks_heatmap")
if len(s.stragglers):
    st.subheader("Stragglers")
    st.caption("Ranks that arrive last at collectives far more often than chance, and the waiting they cause.")
    stragglers = fmt.display_units(s.stragglers)
    fmt.table(stragglers, key="ranks_stragglers")
if len(s.imbalance):
    st.subheader("Imbalance per step")
    st.caption("Slowest over median step time across ranks, per step in the window.")
    imbalance = fmt.display_units(s.imbalance)
    fmt.table(imbalance, key="ranks_imbalance")
st.subheader("Per rank")
st.caption("Times in ms, sizes in MB, as everywhere in tracekit's output.")
ranks = fmt.display_units(s.ranks)
fmt.table(ranks, na=fmt.ranks_na(ranks, s.data_quality), key="ranks_table")
