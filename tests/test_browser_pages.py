"""Every page of the viewer on three runs, in a real browser (as ``test_browser``: Debian's Chromium through
Selenium): a GPU trace from ../shared (nccl_a100_2rank, itself rank 0 of a 2-rank run), a CPU sample with a
pipeline (pp-1f1b-4rank-heavy), and a CPU run with one rank's file left out (tp-fsdp-4rank without rank 3, which
has FSDP units). On each page: no exception, no empty chart without a message saying why, and no text cut off.
Each page's screenshot is saved under ``build/screenshots/pages/``.

One JavaScript snippet (``CHECKS``) reads a page in one round trip. What it holds to:

- A chart has data drawn when one of its visible traces has a point: a finite value (a bar's, a non-zero one; a
  heatmap's, a finite cell). An empty chart says why in itself, as the app's empty charts do (an annotation,
  ``tracekit.render.charts._note`` and ``charts_ops._empty``), or in an alert right beside it.
- Text that must be read whole (markdown paragraphs and list items, metric labels and values, captions, headings,
  widget labels, the sidebar's links and boxes, slider values, and in charts the title, annotations, legend and axis
  titles; each table as a whole) lies within its container: the nearest ancestor whose overflow is not visible
  (both ways where it clips, across where it scrolls), else the main block. Nothing in it that clips or ends in an
  ellipsis is wider than its box (a metric value cut to "NVIDIA A100 SX...", a run id in the Run box).
- Table cells: glide-data-grid draws them on a canvas, so the snippet reads the grid's own column widths and cell
  texts (its props, through React's fiber on the canvas; the first 200 rows) and measures each text in the grid's
  font. A text longer than the widest column the app gives (``app.fmt.MAX_COLUMN_PX``, a long kernel name) is cut by
  design; any shorter one must fit its column, header included.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

from test_browser import PAGES, SHOTS, chromium, pytestmark, script_state, start_app  # noqa: F401 (the skip without Chromium)
from viewer_runs import REPO, SAMPLES
from workloads.ports import free_port

if str(REPO) not in sys.path:  # the app is a folder of the repository, not an installed package
    sys.path.insert(0, str(REPO))
from app.fmt import MAX_COLUMN_PX  # noqa: E402

SHARED_HTA = Path(__file__).resolve().parents[2] / "shared" / "traces" / "hta"
# The pages as app/main.py lists them, with the title each shows.
ALL_PAGES = {**PAGES, "fsdp": ("FSDP", 0), "pipeline": ("Pipeline", 0)}
GPU, CPU, ONE_MISSING = "nccl_a100_2rank", "pp-1f1b-4rank-heavy", "tp-fsdp-4rank-no-rank-3"
RUNS = (GPU, CPU, ONE_MISSING)

CHECKS = """
const roots = ['[data-testid="stMain"]', '[data-testid="stSidebar"]']
    .map(s => document.querySelector(s)).filter(Boolean);
const main = document.querySelector('[data-testid="stMain"]');
const shown = e => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0
                     && getComputedStyle(e).visibility !== 'hidden'; };
const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const said = e => ((e.tagName === 'INPUT' ? e.value : e.textContent) || '').trim().replace(/\\s+/g, ' ').slice(0, 90);
const named = e => e.tagName === 'INPUT' ? `box '${e.getAttribute('aria-label')}'`
    : (e.getAttribute('data-testid') || e.getAttribute('class') || e.tagName.toLowerCase()).toString().split(' ')[0];
const out = {exceptions: Array.from(document.querySelectorAll('[data-testid="stException"]')).map(said),
             traceback: main ? main.innerText.includes('Traceback') : false, charts: [], cut: []};

// Charts: drawn, or saying why not.
const finite = v => v !== null && v !== undefined && v !== '' && Number.isFinite(Number(v));
const values = a => {  // plotly's arrays, typed ones and a heatmap's rows of them too, as one flat list
    const flat = [], walk = v => { if (v && typeof v === 'object' && typeof v.length === 'number') {
        for (let i = 0; i < v.length; i++) walk(v[i]); } else flat.push(v); };
    walk(a);
    return flat;
};
const points = t => {
    if (t.visible === false || t.visible === 'legendonly') return 0;
    if (t.type === 'heatmap') return values(t.z).filter(finite).length;
    if (t.type === 'bar') return values(t.orientation === 'h' ? t.x : t.y).filter(v => finite(v) && Number(v) !== 0).length;
    return Math.max(values(t.x).filter(finite).length, values(t.y).filter(finite).length);
};
for (const p of document.querySelectorAll('.js-plotly-plot')) {
    const title = p.querySelector('.gtitle');
    const drawn = (p._fullData || []).reduce((n, t) => n + points(t), 0);
    const notes = Array.from(p.querySelectorAll('.annotation-text')).filter(shown).map(said).filter(Boolean);
    const holder = p.closest('[data-testid="stElementContainer"]');
    const beside = holder ? [holder.previousElementSibling, holder.nextElementSibling] : [];
    const alerts = beside.filter(e => e && e.querySelector('[data-testid="stAlert"]')).map(said);
    out.charts.push({title: title ? said(title) : '(untitled)', points: drawn, notes: notes, alerts: alerts,
                     laid_out: !!p._fullLayout});
}

// Text cut off.
const TEXT = ['[data-testid="stMarkdownContainer"] p', '[data-testid="stMarkdownContainer"] li',
              '[data-testid="stMetricLabel"]', '[data-testid="stMetricValue"]', '[data-testid="stCaptionContainer"]',
              'h1', 'h2', 'h3', 'h4', '[data-testid="stDataFrame"]', '[data-testid="stWidgetLabel"]',
              '[data-testid="stSidebarNavLink"] span', 'input[role="combobox"]',
              '[data-testid="stSliderThumbValue"]', '.js-plotly-plot .gtitle', '.js-plotly-plot .annotation-text',
              '.js-plotly-plot .legendtext', '.js-plotly-plot .xtitle', '.js-plotly-plot .ytitle'];
const overflow = s => [s.overflowX, s.overflowY];
const container = e => {
    for (let a = e.parentElement; a; a = a.parentElement) {
        const [x, y] = overflow(getComputedStyle(a));
        if (x !== 'visible' || y !== 'visible') return a;
        if (a === main) break;
    }
    return document.querySelector('[data-testid="stMainBlockContainer"]') || main;
};
const seen = new Set();
for (const root of roots) for (const e of root.querySelectorAll(TEXT.join(','))) {
    if (seen.has(e) || !shown(e)) continue;
    seen.add(e);
    const c = container(e), s = getComputedStyle(c), [l, t, r, b] = box(e), [cl, ct, cr, cb] = box(c);
    const clips = overflow(s).some(o => o === 'hidden' || o === 'clip');
    const outside = l < cl - 1 || r > cr + 1 || (clips && (t < ct - 1 || b > cb + 1));
    if (outside) out.cut.push({element: named(e), text: said(e), why: 'outside ' + named(c),
                               box: box(e).map(Math.round), container: box(c).map(Math.round)});
    for (const d of [e, ...e.querySelectorAll('*')]) {
        if (!(d instanceof HTMLElement) || !shown(d)) continue;
        const ds = getComputedStyle(d);
        const cuts = d.tagName === 'INPUT' || overflow(ds).some(o => o === 'hidden' || o === 'clip')
                     || ds.textOverflow === 'ellipsis';
        if (cuts && d.scrollWidth > d.clientWidth + 1) {
            out.cut.push({element: named(e), text: said(e), why: `wider than its box (${d.scrollWidth} px text in ${d.clientWidth} px)`});
            break;
        }
    }
}
// Table cells: glide-data-grid draws them on a canvas; its grid's props (found through React's fiber on the canvas)
// give each column's width and each cell's text as drawn, measured here in the grid's font.
const measure = document.createElement('canvas').getContext('2d');
for (const canvas of document.querySelectorAll('[data-testid="stDataFrame"] canvas[data-testid="data-grid-canvas"]')) {
    const fiber = Object.keys(canvas).find(k => k.startsWith('__reactFiber'));
    let f = fiber ? canvas[fiber] : null;
    while (f && !(f.memoizedProps && f.memoizedProps.getCellContent && f.memoizedProps.theme)) f = f.return;
    if (!f) { out.cut.push({element: 'stDataFrame', text: '', why: 'its grid could not be read'}); continue; }
    const grid = f.memoizedProps, theme = grid.theme, pad = 2 * theme.cellHorizontalPadding;
    const table = named(canvas.closest('[data-testid="stElementContainer"]') || canvas);
    grid.columns.forEach((column, i) => {
        measure.font = `${theme.headerFontStyle} ${theme.fontFamily}`;
        const cells = [[String(column.title), measure.measureText(String(column.title)).width]];
        measure.font = `${theme.baseFontStyle} ${theme.fontFamily}`;
        for (let r = 0; r < Math.min(grid.rows, 200); r++) {
            const text = String(grid.getCellContent([i, r]).displayData ?? '');
            cells.push([text, measure.measureText(text).width]);
        }
        const [text, wide] = cells.reduce((a, b) => b[1] > a[1] ? b : a);
        // A text longer than the widest column the app gives (app.fmt.MAX_COLUMN_PX) is cut by design.
        if (wide > column.width - pad + 0.5 && wide <= arguments[0] - pad) out.cut.push({element: `table cell of column '${column.title}'`, text: text,
            why: `wider than its column (${Math.round(wide)} px text in ${Math.round(column.width - pad)} px)`});
    });
}
out.checked = seen.size;
return out;
"""


@pytest.fixture(scope="module")
def pages_app(tmp_path_factory):
    """``streamlit run`` on a root with the three runs; yields the base URL and the root's label."""
    # Named as the bundled runs' root, so the run ids are as long as a user sees them ("sample_traces/...").
    root = tmp_path_factory.mktemp("pages") / "sample_traces"
    root.mkdir()
    if (SHARED_HTA / GPU).is_dir():
        shutil.copytree(SHARED_HTA / GPU, root / GPU)
    for name, source, left_out in ((CPU, CPU, None), (ONE_MISSING, "tp-fsdp-4rank", "rank-3.pt.trace.json.gz")):
        if (SAMPLES / source).is_dir():
            shutil.copytree(SAMPLES / source, root / name, ignore=shutil.ignore_patterns(left_out) if left_out else None)
    port = free_port()
    proc = start_app(root, port)
    yield f"http://127.0.0.1:{port}", root.name, root
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except Exception:
        proc.kill()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


def settle(driver, title: str, timeout: float = 60) -> None:
    """Until the script has stopped, the page shows ``title`` and every chart is laid out, and the page's elements
    have held still for half a second (a table or chart draws after the script ends)."""
    deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
    while time.monotonic() < deadline:
        state = driver.execute_script(
            "return [Array.from(document.querySelectorAll('h1')).map(h => h.textContent),"
            " document.querySelectorAll('.js-plotly-plot').length,"
            " Array.from(document.querySelectorAll('.js-plotly-plot')).every(p => p._fullLayout && p.querySelector('.main-svg')),"
            " document.querySelectorAll('[data-testid=\"stElementContainer\"]').length,"
            " document.querySelectorAll('[data-testid=\"stException\"]').length,"
            " document.querySelectorAll('[data-stale=\"true\"]').length]")
        if state[4]:
            return
        if script_state(driver) != "notRunning" or title not in state[0] or not state[2] or state[5]:
            last = None
        elif state != last:
            last, since = state, time.monotonic()
        elif time.monotonic() - since >= 0.5:
            return
        time.sleep(0.1)
    raise AssertionError(f"page {title!r} did not settle within {timeout} s")


def problems(found: dict, where: str) -> list[str]:
    """What ``CHECKS`` found wrong on a page, each line naming the run and page (``where``) and the element."""
    lines = [f"{where}: exception: {text}" for text in found["exceptions"]]
    if found["traceback"]:
        lines.append(f"{where}: 'Traceback' in the page")
    for chart in found["charts"]:
        if not chart["points"] and not chart["notes"] and not chart["alerts"]:
            lines.append(f"{where}: chart {chart['title']!r} is empty and says nothing about why")
    for cut in found["cut"]:
        lines.append(f"{where}: {cut['element']} {cut['text']!r} is cut off: {cut['why']}"
                     + (f" (box {cut['box']}, container {cut['container']})" if "box" in cut else ""))
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("page", list(ALL_PAGES))
@pytest.mark.parametrize("run", RUNS)
def test_every_page_reads_whole(pages_app, browser, run, page):
    base, label, root = pages_app
    if not (root / run).is_dir():
        pytest.skip(f"{run}: needs ../shared/traces/hta and sample_traces beside this checkout")
    title = ALL_PAGES[page][0]
    browser.get(f"{base}/{'' if page == 'overview' else page}?{urlencode({'run': f'{label}/{run}', 'rank': 0})}")
    settle(browser, title)
    found = browser.execute_script(CHECKS, MAX_COLUMN_PX)
    (SHOTS / "pages").mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SHOTS / "pages" / f"{run}-{page}.png"))
    assert found["checked"] > 2, f"{run} / {page}: the page shows almost no text ({found['checked']} element(s))"
    lines = problems(found, f"{run} / {page}")
    assert not lines, "\n".join(lines)
