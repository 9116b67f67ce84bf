"""Overview: the headline numbers of the run, the findings, and one row per rank."""

import streamlit as st

from app import fmt, state
from tracekit import charts, quality
from tracekit.render import checked
from tracekit.report import throughput

ctx = state.context()
s = ctx.summary
head = charts.headline(s)
st.title("Overview")
st.caption(f"`{ctx.run_id}` · world size {s.run.get('world_size')} · backend {s.run.get('backend') or 'unknown'}"
           f" · devices: {', '.join(s.run.get('device_names') or []) or 'cpu'} · window: {s.run.get('window')}")

rates = throughput(s.run.get("workload_run"))
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
             "Most often last" if head.get("worst_is_last") else "Slowest rank")
    cards.append((label, f"rank {head['worst_rank']}", f"step time {fmt.ms(head['worst_step_time_us'])}"))
for row in range(0, len(cards), 4):
    for column, (label, value, help_) in zip(st.columns(4), cards[row:row + 4]):
        column.metric(label, value, help=help_, border=True)

findings = getattr(s, "findings", None)
st.subheader("Findings")
if findings is None:
    st.caption("This version of tracekit gives no findings.")
elif not findings:
    st.success("None: no check fired. Checked: " + "; ".join(checked()) + ".")
else:
    for f in findings:
        severity = str(getattr(f, "severity", ""))
        box = st.error if severity in ("high", "critical") else st.warning if severity in ("medium", "warning") else st.info
        box(f"**{getattr(f, 'message', f)}**  \n{getattr(f, 'recommendation', '')}")

st.subheader("Per rank")
ranks = fmt.display_units(s.ranks)
st.dataframe(ranks, hide_index=True, column_config=fmt.columns(ranks))
skipped = s.run.get("skipped") or []
if skipped:
    with st.expander(f"{len(skipped)} file(s) skipped"):
        st.dataframe(skipped, hide_index=True)

quality_table = getattr(s, "data_quality", None)
quality_notes = quality.notes(quality_table) if quality_table is not None else []
if quality_notes:
    st.subheader("Data quality")
    st.caption("What the numbers rest on: the notes that apply to this run's traces.")
    for note in quality_notes:
        st.info(note)
    with st.expander("Per rank"):
        st.dataframe(quality_table, hide_index=True)
