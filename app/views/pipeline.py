"""Pipeline: the schedule that ran (a stage x time grid of F/B/I/W blocks per microbatch, the bubble marked), the
compute and bubble per stage against the schedule's theory, and the pipeline findings. Listed in the navigation
when the run has pipeline stages; opened on another run, it says why it is empty."""

import streamlit as st

from app import fmt, state
from tracekit.render import charts_pipeline

ctx = state.context()
s = ctx.summary
state.header("Pipeline", ctx)
if s.pipeline.empty:
    st.info("This run has no pipeline stages: no `PP:` schedule actions, no `Forward i` / `Backward i` annotations "
            "with stage-to-stage transfers, and no compute between `c10d::send` / `c10d::recv_` calls in its traces.")
    st.stop()

first = s.pipeline.iloc[0]
theory = first["theory_bubble_pct"]
st.caption(f"{first['schedule']} schedule read from the blocks' order, "
           f"{int(first['stages']) * int(first['stages_per_rank'])} stages on {int(first['stages'])} pipeline ranks "
           f"({int(first['stages_per_rank'])} per rank). A block is the compute one stage runs for one microbatch; "
           "a receive's wait is not in it. The bubble is the time a rank runs nothing but stage-to-stage transfers: "
           f"fill before its first forward, wait between, drain after its last block. The schedule's own bubble: "
           f"{fmt.pct(theory)}%.")
steps = charts_pipeline.pipeline_steps(s)
step = st.selectbox("Step", steps, key="pipeline_step", help="window steps first")
st.plotly_chart(charts_pipeline.schedule_grid(s, step, p2p=getattr(s, "p2p", None)), key="pipeline_grid")
st.plotly_chart(charts_pipeline.stage_bars(s), key="pipeline_bars")

st.subheader("Per stage")
st.caption("Mean per window step; on a rank with several stages the bubble columns are the rank's. "
           "imbalance_ratio: what a microbatch costs the stage (the lower quartile of its blocks per phase) over the median of the other stages'.")
fmt.table(fmt.display_units(charts_pipeline.stage_parts(s)), key="pipeline_stages")
notes = sorted({n for n in s.pipeline["note"].astype(str) if n})
for note in notes:
    st.warning(note)

st.subheader("Findings for the pipeline")
mine = [f for f in s.findings if f.kind in ("pipeline_bubble", "stage_imbalance")]
if not mine:
    st.success("None: the bubble and the stages' compute are under their thresholds "
               "(tracekit/findings/pipeline_findings.py).")
state.show_findings(mine)
