"""Overview: the headline numbers of the run, the findings, and one row per rank."""

import streamlit as st

from app import fmt, state
from tracekit import quality
from tracekit.render import charts
from tracekit.summary.facts import one_or_all
from tracekit.summary.text import checked

ctx = state.context()
s = ctx.summary
head = charts.headline(s)
st.title("Overview")
st.caption(f"`{ctx.run_id}` · world size {one_or_all(s.run.world_sizes)}"
           f" · backend {one_or_all(s.run.backends) or 'unknown'}"
           f" · devices: {', '.join(s.run.device_names) or 'cpu'} · window: {s.run.window}")

rates = {} if s.run.workload is None else s.run.workload.throughputs()
cards = [("Step time", fmt.ms(head["step_time_us"]), "mean over ranks of the mean step time in the window")]
cards += [(f"Samples/s ({kind})", fmt.rate(value), "throughput, from the workload's run.json")
          for kind, value in rates.items()]
cards += [
    ("Exposed comm", fmt.pct(head["exposed_comm_pct"]), "communication with no compute under it, share of the span"),
    ("Comm overlapped", fmt.pct(head["overlap_pct"]), "share of communication time hidden under compute"),
    ("Idle", fmt.pct(head["idle_pct"]), "device idle, share of the span"),
]
if head["worst_rank"] is not None:
    label = ("Straggler" if head["worst_is_straggler"] else
             "Most often last" if head["worst_is_last"] else "Slowest rank")
    cards.append((label, f"rank {head['worst_rank']}", f"step time {fmt.ms(head['worst_step_time_us'])}"))
for row in range(0, len(cards), 4):
    for column, (label, value, help_) in zip(st.columns(4), cards[row:row + 4]):
        column.metric(label, value, help=help_, border=True)

st.subheader("Findings")
if not s.findings:
    st.success("None: no check fired. Checked: " + "; ".join(checked()) + ".")
state.show_findings(s.findings)

st.subheader("Per rank")
ranks = fmt.display_units(s.ranks)
fmt.table(ranks, na=fmt.ranks_na(ranks, s.data_quality), key="overview_ranks")
if s.run.skipped:
    with st.expander(f"{len(s.run.skipped)} file(s) skipped"):
        fmt.table([{"path": f.path, "reason": f.reason} for f in s.run.skipped], key="overview_skipped")

quality_notes = quality.notes(s.data_quality)
if quality_notes:
    st.subheader("Data quality")
    st.caption("What the numbers rest on: the notes that apply to this run's traces.")
    for note in quality_notes:
        st.info(note)
    with st.expander("Per rank"):
        fmt.table(s.data_quality, key="overview_quality")
