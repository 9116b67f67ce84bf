"""Compare: this run against another one, side by side."""

import streamlit as st

from app import fmt, loader, paths, state
from app.pairing import second_run
from tracekit.render import charts
from tracekit.errors import TracekitError

ctx = state.context()
state.header("Compare", ctx)
others = [r for r in ctx.runs if r != ctx.run_id]
if not others:
    st.info("Only one run is available: add another under a root folder, or upload one.")
    st.stop()
asked = state.take_from_url("b")
if asked in others:
    st.session_state["compare_b"] = asked


def _workload(run_id: str):
    try:
        return loader.workload_of(paths.resolve_run(run_id, ctx.roots))
    except paths.PathRefused:
        return None


if st.session_state.get("compare_b") not in others:  # a run of the same workload, else the next one
    st.session_state["compare_b"] = second_run(ctx.run_id, list(ctx.runs), _workload) or others[0]
other = st.selectbox("Compare with", others, key="compare_b")
st.query_params["b"] = other
try:
    folder_b = paths.resolve_run(other, ctx.roots)
    key_b = paths.fingerprint(folder_b)
    b = loader.summary(str(folder_b), key_b)
    result = loader.comparison(str(ctx.folder), ctx.key, str(folder_b), key_b)
except paths.PathRefused as err:
    st.error(f"Refused: {err}")
    st.stop()
except TracekitError as err:
    st.error(f"Could not read {other}: {err}")
    st.stop()
st.caption(f"**a** = `{ctx.run_id}`, **b** = `{other}`; ratio = b / a")
for name, run_summary in (("a", ctx.summary), ("b", b)):
    head = charts.headline(run_summary)
    cols = st.columns(4)
    cols[0].metric(f"{name}: step time", fmt.ms(head["step_time_us"]))
    cols[1].metric(f"{name}: exposed comm", fmt.pct(head["exposed_comm_pct"]))
    cols[2].metric(f"{name}: comm overlapped", fmt.pct(head["overlap_pct"]))
    cols[3].metric(f"{name}: idle", fmt.pct(head["idle_pct"]))
# The numbers stay numbers (the table is tracekit.compare's, as it is); its empty cells read n/a where each is a ratio
# of nothing or the bandwidth of an op a run never calls, as `tracekit compare` writes them, else unknown.
table = result.table
fmt.table(table, na=fmt.comparison_na(table), numbers=True, key="compare_table")
for note in result.notes:  # the two sources of a pair disagree in direction
    st.warning(note)
st.plotly_chart(charts.compare_bars(table, "a", "b"), key="compare_chart")
