"""tracekit viewer: ``streamlit run app/main.py -- runs/quickstart`` opens that run first; with no run named it opens
the newest run under ``runs/`` (else a bundled sample). Other root folders: ``-- --root DIR`` (repeatable).

The sidebar picks a run under the root folders (default: ``sample_traces/`` and ``runs/``) or takes an upload;
the pages show it. The run, page and rank live in the URL, so a link can be shared.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `streamlit run` puts app/ on the path, not the repository
    sys.path.insert(0, str(REPO))

import streamlit as st  # noqa: E402

from app import loader, paths, state  # noqa: E402
from app.uploads import UploadLimits, UploadRefused, save_upload  # noqa: E402
from tracekit.errors import TracekitError  # noqa: E402
from tracekit.summary.facts import one_or_all  # noqa: E402

VIEWS = REPO / "app" / "views"
PAGES = (("overview", "Overview", ":material/dashboard:"), ("ranks", "Ranks", ":material/bar_chart:"),
         ("communication", "Communication", ":material/swap_horiz:"), ("idle", "Idle", ":material/hourglass_empty:"),
         ("timeline", "Timeline", ":material/view_timeline:"), ("allranks", "All ranks", ":material/view_agenda:"),
         ("whatif", "What if", ":material/science:"), ("compare", "Compare", ":material/compare_arrows:"),
         ("ops", "Operators & kernels", ":material/developer_board:"), ("memory", "Memory", ":material/memory_alt:"),
         ("fsdp", "FSDP", ":material/view_module:"), ("pipeline", "Pipeline", ":material/view_week:"))
HAS_FSDP = "tracekit.has_fsdp"  # whether the open run has FSDP units: the FSDP page is listed only then
HAS_PIPELINE = "tracekit.has_pipeline"  # the same for pipeline stages and the Pipeline page
LISTED_ONLY_WHEN = {"fsdp": HAS_FSDP, "pipeline": HAS_PIPELINE}
UPLOAD_LABEL = "upload"
LIMITS = UploadLimits()
PREFERRED = "resnet-gloo-2rank"
# The sidebar's width in px: the Run box then shows a run id of about 40 characters whole (the bundled runs' longest,
# "sample_traces/fsdp-gloo-2rank-prefetch0", is 39); Streamlit's default cuts it after 32. Each page's caption
# writes the id in full.
SIDEBAR_PX = 360


def main() -> None:
    st.set_page_config(page_title="tracekit", page_icon=":material/timeline:", layout="wide",
                       initial_sidebar_state=SIDEBAR_PX)
    state.url_once()
    listed = {key: st.session_state.get(key, False) for key in LISTED_ONLY_WHEN.values()}
    pages = {slug: st.Page(VIEWS / f"{slug}.py", title=title, icon=icon, url_path=slug, default=slug == "overview",
                           visibility="visible" if listed.get(LISTED_ONLY_WHEN.get(slug), True) else "hidden")
             for slug, title, icon in PAGES}
    page = st.navigation(list(pages.values()))
    wanted = state.take_from_url("page")
    if wanted in pages and wanted != (page.url_path or "overview") and page.url_path in ("", "overview"):
        st.switch_page(pages[wanted])  # a shared link that names its page with ?page=

    try:
        roots, named = paths.parse_args(sys.argv[1:], reserved=(UPLOAD_LABEL,))
    except paths.PathRefused as err:
        st.sidebar.error(f"The run named on the command line is not opened: {err}")
        roots, named = paths.parse_roots(sys.argv[1:], reserved=(UPLOAD_LABEL,)), None
    roots += _upload_root()
    st.session_state.pop(state.CONTEXT, None)
    with st.sidebar:
        run_id, runs = _pick_run(roots, named)
        _upload_box()
    if run_id is not None:
        ctx = _open(roots, tuple(runs), run_id)
        if ctx is not None:
            st.session_state[state.CONTEXT] = ctx
            st.session_state[HAS_FSDP] = len(ctx.summary.fsdp) > 0
            st.session_state[HAS_PIPELINE] = len(ctx.summary.pipeline) > 0
            if any(st.session_state[key] != was for key, was in listed.items()):
                st.rerun()  # list (or unlist) the FSDP and Pipeline pages for this run
    current = st.session_state.get(state.CONTEXT)
    st.query_params.from_dict({k: v for k, v in {
        "run": run_id, "page": page.url_path or "overview", "rank": None if current is None else current.rank,
    }.items() if v is not None})
    page.run()


def _upload_root() -> tuple[paths.Root, ...]:
    """This session's private folder of uploads, as one more root (made on first use, removed at exit)."""
    folder = st.session_state.get("tracekit.upload_dir")
    if folder is None or not Path(folder).is_dir():
        return ()
    return (paths.Root(UPLOAD_LABEL, Path(folder)),)


def _pick_run(roots: tuple[paths.Root, ...], named: str | None) -> tuple[str | None, list[str]]:
    st.header("tracekit")
    runs = paths.list_runs(roots)
    for source, asked in (("the link", state.take_from_url("run")),
                          ("", st.session_state.pop("tracekit.open_next", None)),
                          ("", st.session_state.pop("tracekit.typed_run", None))):
        if not asked:
            continue
        try:
            paths.resolve_run(asked, roots)
        except paths.PathRefused as err:
            st.error(f"Refused the run in {source or 'the box'}: {err}")
            continue
        if asked not in runs:
            runs.append(asked)
        st.session_state["run"] = asked
    if not runs:
        st.info("No runs under " + ", ".join(f"`{r.path}`" for r in roots if r.label != UPLOAD_LABEL)
                + ". Make one with `python -m workloads.resnet --profile`, or upload traces below.")
        return None, runs
    if st.session_state.get("run") not in runs:  # first: the run named on the command line, the newest, a sample
        st.session_state["run"] = (named if named in runs else None) or paths.newest_run(runs, roots) or next(
            (r for r in runs if r.endswith("/" + PREFERRED)), runs[0])
    run_id = st.selectbox("Run", runs, key="run", help="folders with traces under: "
                          + ", ".join(str(r.path) for r in roots))
    st.text_input("Open a run by its id", key="tracekit.typed_run", placeholder="sample_traces/<run>",
                  help="a folder under one of the root folders, named from the root's folder name; "
                       "paths that leave the roots are refused")
    return run_id, runs


def _open(roots, runs: tuple[str, ...], run_id: str) -> state.Context | None:
    try:
        folder = paths.resolve_run(run_id, roots)
        key = paths.fingerprint(folder)
        summary = loader.summary(str(folder), key)
    except paths.PathRefused as err:
        st.error(f"Refused: {err}")
        return None
    except TracekitError as err:
        st.error(f"Could not read {run_id}: {err}")
        return None
    ranks = [int(r) for r in summary.ranks["rank"]]
    asked = state.take_from_url("rank")
    if asked is not None and asked.lstrip("-").isdigit() and int(asked) in ranks:
        st.session_state["rank"] = int(asked)
    if st.session_state.get("rank") not in ranks:
        st.session_state["rank"] = ranks[0]
    rank = st.sidebar.selectbox("Rank", ranks, key="rank", help="the rank the Timeline shows")
    st.sidebar.caption(f"{len(ranks)} rank(s) · backend {one_or_all(summary.run.backends) or 'unknown'}")
    return state.Context(roots=roots, runs=runs, run_id=run_id, folder=folder, key=key,
                         summary=summary, rank=int(rank))


def _upload_box() -> None:
    with st.expander("Upload traces"):
        files = st.file_uploader("Trace files (.json, .json.gz) or a .zip of a run", type=["json", "gz", "zip"],
                                 accept_multiple_files=True, key="tracekit.upload")
        name = st.text_input("Name", value="run", key="tracekit.upload_name")
        if files and st.button("Open the upload", key="tracekit.upload_go"):
            parent = st.session_state.get("tracekit.upload_dir")
            if parent is None or not Path(parent).is_dir():
                parent = tempfile.mkdtemp(prefix="tracekit-uploads-")
                atexit.register(shutil.rmtree, parent, True)
                st.session_state["tracekit.upload_dir"] = parent
            try:
                folder = save_upload([(f.name, f.getvalue()) for f in files], Path(parent), name, LIMITS)
            except UploadRefused as err:
                st.error(f"Upload refused: {err}")
                return
            st.session_state["tracekit.open_next"] = f"{UPLOAD_LABEL}/{folder.name}"
            st.rerun()


main()
