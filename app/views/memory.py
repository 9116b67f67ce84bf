"""Memory: one rank's allocated and reserved memory over time per device (from profile_memory's [memory] events),
its peaks per step, and the ops whose allocations were live at the peak."""

import streamlit as st

from app import fmt, state
from tracekit.render import charts_ops

ctx = state.context()
s = ctx.summary
state.header("Memory", ctx)
rank = ctx.rank
note = charts_ops.memory_note(s, rank)
if note:
    st.info(note + " Profile with `torch.profiler.profile(profile_memory=True)` to see memory here.")
    st.stop()
st.caption(f"Rank {rank} (pick another in the sidebar). Sizes in MB (1e6 bytes).")
st.plotly_chart(charts_ops.memory_over_time(s, rank), key=f"memory_over_time_{rank}")
st.caption("Solid: allocated by tensors; dotted: reserved by the caching allocator; dashed: the device's memory; "
           "vertical dotted lines: step starts. Each point is the largest value in its time bin.")

st.subheader("Peaks per step")
st.caption("The window's steps (those every other number covers). A step's peak is the largest Total Allocated in it, or the level it started at if higher; growth is end "
           "minus start (unknown for a step with no event before it).")
fmt.table(charts_ops.memory_peaks(s, rank), key="memory_peaks")

st.subheader("Top allocators at the peak")
top = charts_ops.top_allocators(s, rank)
if top.empty:
    st.info(top.attrs["note"])
else:
    st.caption("Per device, at its largest Total Allocated: the innermost host op around each allocation still live "
               "then, its bytes and their share of the peak.")
    fmt.table(top, key="memory_top")
