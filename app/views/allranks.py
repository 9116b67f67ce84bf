"""All ranks: one step of every rank on the corrected clock, with each collective's wait apart from its transfer
and linked across ranks, idle gaps by cause, and the critical path on top. Drawn from the Summary's tables only."""

import streamlit as st

from app import state
from tracekit.render import charts_run

ctx = state.context()
s = ctx.summary
state.header("All ranks", ctx)
first = charts_run.default_step(s)
if first is None:
    st.info("This run has no steps (the Overview's data quality says why): there is no step to draw.")
    st.stop()
numbers = sorted(int(n) for n in s.steps["step"].unique())
if st.session_state.get("allranks_step") not in numbers:
    st.session_state["allranks_step"] = first
step = st.select_slider("Step", numbers, key="allranks_step") if len(numbers) > 1 else numbers[0]
st.plotly_chart(charts_run.allranks_timeline(s, step), key=f"allranks_{step}")
calls = charts_run.collective_bars(s, step)
on_path = s.critical_path_events[s.critical_path_events["step"] == step]
st.caption(
    f"{int(calls['matched'].sum())} matched collective call(s) on {calls['rank'].nunique()} rank(s) in step {step}; "
    f"{len(on_path):,} critical-path segment(s)"
    + ("" if len(on_path) else " (none: the path needs a next step to end this one, and a step in the window)")
    + ". Hatched: waiting for the last rank; solid: transferring; the thin line joins one call across ranks at "
      "the last arrival. Idle gaps narrower than a pixel are binned.")
