"""What-if: the step time the replay predicts for each scenario (``tracekit.whatif``), side by side, against the
measured one."""

import streamlit as st

from app import fmt, loader, state
from tracekit import quality
from tracekit.render import charts
from tracekit.render import charts_run

ctx = state.context()
s = ctx.summary
state.header("What if", ctx)
if s.graph.empty:
    st.info("This run has no dependency graph to replay (no events that take time), so there is nothing to predict.")
    st.stop()
table = loader.whatif(str(ctx.folder), ctx.key)
measured = charts.headline(s)["step_time_us"]
st.plotly_chart(charts_run.whatif_bars(table, measured), key="whatif_bars")
shown = charts_run.whatif_table(table)
fmt.table(shown, key="whatif_table")
if table["step_time_us"].isna().any():  # why a prediction is unknown, as the CLI says it under its table
    for line in quality.whatif_notes(s.data_quality):
        st.warning(f"unknown: {line}")
st.caption(
    "Each scenario replays the run's dependency graph with measured times changed, so the critical path may move: "
    "baseline (nothing changed; should match the measured step time, the dashed line), no_straggler (the last "
    "rank's extra time before each collective cut to the median rank's), comm_x2 (transfers twice as fast), "
    "perfect_overlap (transfers take no time), no_host_gaps (launch-bound host time removed), no_data_wait "
    "(DataLoader waits removed). Step time: mean over ranks of each rank's mean window step.")
