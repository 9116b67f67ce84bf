"""Operators & kernels: what ran on one rank (pick it in the sidebar): its kernels and its ops, sortable; the ops on
the device's roofline; and the top ops' self time per step. Everything comes from the Summary's tables."""

import math

import streamlit as st

from app import fmt, state
from tracekit import fmt as fmt_num
from tracekit.render import charts_ops, charts_roofline

GROUPS = {"name": False, "name + input shapes": True}

ctx = state.context()
s = ctx.summary
state.header("Operators & kernels", ctx)
rank = ctx.rank
device = charts_ops.is_device_rank(s, rank)
peaks, why = charts_ops.device_peaks(s, rank)
row = s.ranks[s.ranks["rank"] == rank]


def rank_value(column: str) -> float:
    return float(row[column].iloc[0]) if len(row) and column in row else math.nan


flops, mfu = rank_value("matmul_flops_per_step"), rank_value("mfu_pct")
# The device's name in full on a line of its own: a metric card cuts a long name ("NVIDIA A100 SX...").
named = (peaks.name if peaks is not None else "CPU only" if not device  # a device outside the datasheet: its name
         else f"{row['device'].iloc[0]} (no known peak)" if len(row) else "unknown")
st.markdown(f"**Device:** {named}",
            help="the datasheet entry (tracekit.devices) the device matched" if peaks is not None else why)
cards = st.columns(2)
cards[0].metric("Matmul GFLOP per step", fmt_num.gflop(flops), border=True,
                help="counted matmul-class FLOPs from the recorded shapes, mean over the window's steps")
cards[1].metric("MFU", fmt.pct(mfu) if peaks is not None and not math.isnan(mfu)
                else fmt_num.mfu(mfu, peaks.name if peaks is not None else ""), border=True,
                help="the time those FLOPs take at the device's dense peak, over the step time (n/a where the device "
                     "has no known peak, the CPU among them)")
st.caption(f"Rank {rank} (pick another in the sidebar). Times are "
           + ("device times." if device else "host times: this rank ran on the CPU only.")
           + " Click a column header to sort; 'unknown' where the trace does not give a number.")

st.subheader("Kernels")
kernels = charts_ops.kernel_table(s, rank)
if kernels.empty:
    st.info(kernels.attrs["note"])
else:
    st.caption("Over the window's steps (as HolisticTraceAnalysis' kernel breakdown); trace_calls counts the whole "
               "trace. kind_share_pct: share of the rank's time of that kind; rank_spread_pct: (largest - smallest) "
               "/ mean of the name's total over the ranks.")
    fmt.table(kernels, key="ops_kernels")

st.subheader("Operators")
group = st.radio("Group ops by", list(GROUPS), horizontal=True, key="ops_group")
by_shape = GROUPS[group]
ops = charts_ops.op_table(s, rank, by_shape)
if ops.empty:
    st.info(ops.attrs["note"])
else:
    st.caption("Over the whole trace, as torch.profiler's key_averages(): self time leaves out the ops an op "
               "encloses. GFLOP and MB from the recorded shapes; achieved rates over "
               + ("the op's device time" if device else "its host time")
               + ("; roofline_ms: its time at the device's roofs." if peaks is not None else f"; {why}."))
    fmt.table(ops, key=f"ops_table_{by_shape}")

left, right = st.columns(2)
left.plotly_chart(charts_roofline.roofline(s, rank, by_shape), key=f"ops_roofline_{rank}_{by_shape}")
right.plotly_chart(charts_ops.op_time_per_step(s, rank), key=f"ops_per_step_{rank}")
