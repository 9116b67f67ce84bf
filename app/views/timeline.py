"""Timeline: one rank, a chosen step range, streams/threads as lanes. Box-select on the chart to zoom in with
full detail; what is narrower than a pixel at the current zoom is drawn as binned bars that say how many events
they hold."""

import pandas as pd
import streamlit as st

from app import fmt, loader, state
from tracekit import quality
from tracekit.render import timeline

WIDTH_PX = 1400
WINDOW = "timeline_window"

ctx = state.context()
s = ctx.summary
state.header("Timeline", ctx)
files = {int(f.rank): f.path for f in s.run.files}
if ctx.rank not in files:
    st.info(f"No trace file for rank {ctx.rank}.")
    st.stop()
# The rank's own clock, moved onto the run's like the Summary's steps and gaps (see Summary.clock_shift_ns).
events = loader.rank_lanes(files[ctx.rank], ctx.rank, int(s.run.origin_ns) + s.clock_shift_ns(ctx.rank), ctx.key)
if events.empty:
    st.info(f"Rank {ctx.rank} has no device events to draw.")
    st.stop()
gaps = s.gaps[s.gaps["rank"] == ctx.rank]
steps = s.steps[s.steps["rank"] == ctx.rank].sort_values("start_us")


def _clear_window():
    st.session_state.pop(WINDOW, None)


def _several(numbers: list[int]):
    """Several steps asked for: the range starts as the step shown and the next one (never one step twice)."""
    first, last = st.session_state.get("timeline_steps", (numbers[0], numbers[0]))
    if st.session_state["timeline_several"] and first == last:
        later = [n for n in numbers if n > first]
        st.session_state["timeline_steps"] = (first, later[0]) if later else (numbers[-2], first)
    _clear_window()


def _pick_one():
    """One step picked on the one-thumb slider: the range it stands for is that step alone."""
    step = st.session_state["timeline_step"]
    st.session_state["timeline_steps"] = (step, step)
    _clear_window()


at = state.take_from_url("at")
if at is not None:
    try:
        at_us = float(at)
    except ValueError:
        at_us = None
    if at_us is not None:
        st.session_state["timeline_at"] = at_us
        inside = steps[(steps["start_us"] <= at_us) & (steps["start_us"] + steps["step_us"] > at_us)]
        if len(inside):
            st.session_state["timeline_steps"] = (int(inside["step"].iloc[0]),) * 2
            st.session_state["timeline_several"] = False
        _clear_window()

if len(steps):
    numbers = [int(n) for n in steps["step"]]
    default = [int(n) for n in steps.loc[steps["in_window"].astype(bool), "step"]] or numbers
    chosen = st.session_state.get("timeline_steps")
    if not (isinstance(chosen, tuple) and set(chosen) <= set(numbers)):
        st.session_state["timeline_steps"] = (default[0], default[0])
    first, last = st.session_state["timeline_steps"]
    st.session_state.setdefault("timeline_several", first != last)
    if len(numbers) == 1:
        st.caption(f"Step {numbers[0]}, the only step of rank {ctx.rank}.")
    elif st.toggle("Several steps", key="timeline_several", on_change=_several, args=(numbers,)):
        # A range slider, whose two thumbs would read "3 3" on one step, only where a range is asked for.
        first, last = st.select_slider("Steps", numbers, key="timeline_steps", on_change=_clear_window)
    else:
        st.session_state["timeline_step"] = first
        first = last = st.select_slider("Step", numbers, key="timeline_step", on_change=_pick_one)
    span = steps[(steps["step"] >= first) & (steps["step"] <= last)]
    t0, t1 = float(span["start_us"].min()), float((span["start_us"] + span["step_us"]).max())
else:
    st.caption("This rank has no steps (the Overview's data quality says why): the whole trace is shown.")
    t0, t1 = float(events["start_us"].min()), float((events["start_us"] + events["dur_us"]).max())

t0, t1 = st.session_state.get(WINDOW, (t0, t1))
drawn = timeline.bars(pd.concat([events, timeline.gap_lane(gaps)], ignore_index=True), t0, t1, WIDTH_PX)
if WINDOW in st.session_state or steps.empty:
    measured = "in view"
elif first == last:
    measured = (f"step {first}, rank {ctx.rank}'s step time: from the start of one "
                f"{quality.step_kind(s.data_quality, ctx.rank) or 'step'} to the next")
else:
    measured = f"steps {first}-{last}, rank {ctx.rank}'s: the first one's start to the end of the last"
fig = timeline.figure(drawn, t0, t1, gaps, title=f"rank {ctx.rank}: {fmt.ms(t1 - t0)} ({measured})",
                      threads=loader.thread_names(files[ctx.rank], ctx.key))
marker = st.session_state.get("timeline_at")
if marker is not None and t0 <= marker <= t1:
    fig.add_vline(x=marker / 1e3, line_dash="dot", line_color="#333")
chart_key = f"timeline_{ctx.rank}_{t0:.0f}_{t1:.0f}"


def _zoom():
    boxes = st.session_state[chart_key].selection.get("box") or []
    if boxes and len(boxes[0].get("x", [])) == 2:
        lo, hi = sorted(boxes[0]["x"])
        if hi > lo:
            st.session_state[WINDOW] = (lo * 1e3, hi * 1e3)


st.plotly_chart(fig, key=chart_key, on_select=_zoom, selection_mode="box")
shown = int((events["start_us"] < t1).sum() - ((events["start_us"] + events["dur_us"]) <= t0).sum())
binned = drawn[drawn["n"] > 1]
left, right = st.columns([4, 1])
left.caption(f"{shown:,} events of {len(events):,} in view, drawn as {len(drawn):,} bars "
             f"({len(binned):,} of them bins holding {int(binned['n'].sum()):,} events too small to see at this zoom). "
             "Box-select on the chart to zoom in; idle gaps are shaded. CPU threads are named as the trace names them "
             "(the thread id is in the hover); on a GPU rank they hold the host's ops (host) and runtime calls "
             "(launch), the outermost drawn over what they enclose.")
if WINDOW in st.session_state and right.button("Reset zoom", key="timeline_reset"):
    _clear_window()
    st.rerun()
