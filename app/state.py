"""What every page reads: the selected run, its Summary and the selected rank, set up once per script run by main.py.

The URL is the shareable state: ``?run=<run id>&page=<page>&rank=<rank>`` (plus ``b=`` on Compare and ``at=``
on Timeline). A new session starts from the URL; after that, the widgets lead and the URL follows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from app.paths import Root

CONTEXT = "tracekit.context"
FROM_URL = "tracekit.from_url"
URL_KEYS = ("run", "page", "rank", "b", "at")


@dataclass(frozen=True)
class Context:
    """The run a page shows. ``summary`` comes from the cached loader and must not be changed."""

    roots: tuple[Root, ...]
    runs: tuple[str, ...]   # run ids the sidebar offers
    run_id: str
    folder: Path
    key: tuple              # the run folder's fingerprint, the loader's cache key
    summary: object         # tracekit.Summary
    rank: int


def url_once() -> dict[str, str]:
    """The query parameters this session was opened with (read on its first run, kept for the session)."""
    if FROM_URL not in st.session_state:
        st.session_state[FROM_URL] = {k: st.query_params[k] for k in URL_KEYS if k in st.query_params}
    return st.session_state[FROM_URL]


def take_from_url(key: str) -> str | None:
    """A parameter from the opening URL, handed out once (so it sets a default, then the widgets lead)."""
    return url_once().pop(key, None)


def header(title: str, ctx: Context) -> None:
    """A page's title, with the run it shows under it."""
    st.title(title)
    st.caption(f"`{ctx.run_id}`")


def context() -> Context:
    """The current run, or stop the page with a note when there is none."""
    ctx = st.session_state.get(CONTEXT)
    if ctx is None:
        st.info("No run is open. Pick one in the sidebar, upload traces, or make one with "
                "`python -m workloads.resnet --profile` (it writes under `runs/`).")
        st.stop()
    return ctx


def show_findings(findings) -> None:
    """Each finding as a box coloured by its severity: its message in bold, then the recommendation."""
    for f in findings:
        box = st.error if f.severity in ("high", "critical") else st.warning if f.severity in ("medium", "warning") \
            else st.info
        box(f"**{f.message}**  \n{f.recommendation}")
