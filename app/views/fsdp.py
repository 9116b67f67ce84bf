"""FSDP: per unit, forward and backward bars of compute, all-gather and exposed all-gather; the prefetch verdict per
unit; the per-rank totals; and the FSDP findings. Shown in the navigation when the run has FSDP units."""

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app import fmt, state
from tracekit.render.charts import TITLE, TOP

BARS = (("compute_us", "compute"), ("allgather_us", "all-gather"), ("allgather_exposed_us", "exposed all-gather"))

ctx = state.context()
s = ctx.summary
state.header("FSDP", ctx)
table = s.fsdp
if table.empty:
    st.info("This run has no FSDP units: no `FSDP::*` (fully_shard) or `FullyShardedDataParallel.*` annotations in "
            "its traces.")
    st.stop()

rows = table[table["in_window"].astype(bool) & (table["rank"] == ctx.rank)]
st.caption(f"Rank {ctx.rank} (pick another in the sidebar), mean per step over the window's "
           f"{rows['step'].nunique()} step(s). Compute is what the unit runs between its pre- and post-hook; "
           "exposed all-gather has no compute under it.")
rows = rows.assign(prefetched=(rows["prefetch"] == "prefetched").astype(int),
                   on_demand=(rows["prefetch"] == "on_demand").astype(int))
per_unit = (rows.groupby(["phase", "unit"], observed=True, sort=False)
            .agg(order=("order", "min"), steps=("step", "nunique"), compute_us=("compute_us", "mean"),
                 allgather_us=("allgather_us", "mean"), allgather_exposed_us=("allgather_exposed_us", "mean"),
                 wait_us=("wait_us", "mean"), allgather_bytes=("allgather_bytes", "mean"),
                 reduce_us=("reduce_us", "mean"), reduce_exposed_us=("reduce_exposed_us", "mean"),
                 prefetched=("prefetched", "sum"), on_demand=("on_demand", "sum"))
            .reset_index().sort_values(["phase", "order"], kind="stable"))
verdict = pd.Series("no gather", index=per_unit.index)
verdict[per_unit["prefetched"] > 0] = "prefetched"
verdict[per_unit["on_demand"] > 0] = "on demand"
verdict[(per_unit["prefetched"] > 0) & (per_unit["on_demand"] > 0)] = "mixed"
per_unit = per_unit.assign(prefetch=verdict)

columns = st.columns(2)
for column, phase in zip(columns, ("forward", "backward")):
    part = per_unit[per_unit["phase"] == phase]
    fig = go.Figure([go.Bar(name=label, x=part["unit"].astype(str), y=part[col] / 1e3) for col, label in BARS])
    fig.update_layout(title=dict(text=f"{phase} (ms per step)", **TITLE), barmode="group", yaxis_title="ms",
                      xaxis_title="unit, in order", height=390, margin=dict(t=TOP, b=40))
    column.plotly_chart(fig, key=f"fsdp_{phase}")

st.subheader("Per unit")
st.caption("prefetch: 'prefetched' when the unit's all-gather was issued before it asked for its parameters, "
           "'on demand' when issued at that moment, 'no gather' when its parameters stayed unsharded.")
shown = fmt.display_units(per_unit.drop(columns=["prefetched", "on_demand"]))
fmt.table(shown, key="fsdp_units")

st.subheader("Per rank")
st.caption("Per step: the mean over the window's steps (their count is the table's steps column) of the exposed all-gather, exposed reduction, the "
           "units' wait for their gathers and the step time; the % columns are shares of the step time.")
totals = fmt.display_units(s.fsdp_totals())
fmt.table(totals, key="fsdp_totals")

st.subheader("Findings for sharded training")
mine = [f for f in s.findings if str(f.kind).startswith("fsdp_")]
if not mine:
    st.success("None: units' waits for all-gathers, float32 gathers, the last reduce-scatter and unit sizes are all "
               "under their thresholds (tracekit/findings/fsdp_findings.py).")
state.show_findings(mine)
