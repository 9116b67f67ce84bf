"""The viewer and the HTML report in a real browser (as ``test_browser``: Debian's Chromium through Selenium): text
that must be read whole stays inside its container, tick labels do not touch, the timeline's step slider never reads
one step twice, and a GPU run's timeline has its host threads."""

from __future__ import annotations

import time

import pytest

from test_browser import app_url, driver, pytestmark  # noqa: F401 (fixtures; the skip without Chromium)
from test_browser import POLL, open_page, settled
from viewer_runs import SAMPLES
from tracekit.render import report

from selenium.webdriver.common.by import By  # noqa: E402 (test_browser skips the module without selenium)

# Each element's box and its container's (left, top, right, bottom), in CSS pixels.
BOXES = """
const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
return Array.from((arguments[2] || document).querySelectorAll(arguments[0])).map(e => {
    const c = e.closest(arguments[1]); return {text: e.textContent, box: box(e), within: c ? box(c) : null}; });
"""
GAP_PX = 4  # the least space between two tick labels


def boxes(driver, selector: str, container: str, under=None) -> list[dict]:
    """Each element ``selector`` finds (under the element ``under``, else in the page), with its ``container``'s box."""
    return driver.execute_script(BOXES, selector, container, under)


def inside(found: dict) -> bool:
    (l, t, r, b), (cl, ct, cr, cb) = found["box"], found["within"]
    return cl - 0.5 <= l and ct - 0.5 <= t and r <= cr + 0.5 and b <= cb + 0.5


def test_an_empty_roofline_shows_its_message_whole(app_url, driver):  # noqa: F811
    base, label = app_url
    open_page(driver, base, "ops", f"{label}/tiny")  # no shapes recorded: no op on the roofline, a message why
    roofline = [p for p in driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")
                if "Roofline" in p.find_element(By.CSS_SELECTOR, ".gtitle").text][0]
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", roofline)
    said = boxes(driver, ".js-plotly-plot .annotation-text", ".main-svg")
    assert said and all("record_shapes" in s["text"] or "roofline" in s["text"] for s in said[:1])
    for found in said + boxes(driver, ".js-plotly-plot .gtitle", ".main-svg"):
        assert inside(found), found  # within its chart, at both edges
    columns = boxes(driver, ".js-plotly-plot", '[data-testid="stColumn"]')
    assert columns and all(inside(c) for c in columns), columns  # and the chart within its column


def test_the_timeline_slider_shows_one_step_once_and_gpu_host_threads(app_url, driver):  # noqa: F811
    base, label = app_url
    open_page(driver, base, "timeline", f"{label}/tiny")
    values = boxes(driver, '[data-testid="stSliderThumbValue"]', '[data-testid="stSlider"]')
    assert [v["text"] for v in values] == ["1"], values  # one thumb: not "1 1"
    assert all(inside(v) for v in values), values
    lanes = boxes(driver, ".js-plotly-plot .yaxislayer-above .ytick text", ".main-svg")
    assert {"stream 7", "stream 20", "thread 1"} <= {lane["text"] for lane in lanes}  # the host thread beside
    assert all(inside(lane) for lane in lanes), lanes


@pytest.mark.skipif(not (SAMPLES / "resnet-gloo-2rank").is_dir(), reason="needs sample_traces/resnet-gloo-2rank")
def test_the_html_reports_roofline_ticks_do_not_touch(tmp_path, driver, summaries):  # noqa: F811
    """resnet-gloo-2rank's roofline spans two decades of intensity: plotly's own ticks label every digit, and
    0.07, 0.08, 0.09 and 0.1 touch on the report's full-width chart."""
    page = tmp_path / "report.html"
    report.write_report(summaries(SAMPLES / "resnet-gloo-2rank"), page)
    driver.get(page.as_uri())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .xtick"):
        time.sleep(POLL)
    # Every chart drawn with its title, and the layout done: the same ticks, at the same places, on looks in a row.
    settled(lambda: (len(driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")),
                     len(driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .gtitle")),
                     boxes(driver, ".js-plotly-plot .xtick text, .js-plotly-plot .ytick text", ".main-svg")),
            lambda seen: seen[0] == seen[1], longest=1)
    plots = [p for p in driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")
             if "Roofline" in p.find_element(By.CSS_SELECTOR, ".gtitle").text]
    assert len(plots) == 1
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", plots[0])
    rooflines = [t for t in boxes(driver, ".xaxislayer-above .xtick text", ".main-svg", plots[0]) if t["text"]]
    assert len(rooflines) >= 3, rooflines
    assert all(inside(t) for t in rooflines), rooflines
    lefts = sorted((t["box"][0], t["box"][2], t["text"]) for t in rooflines)
    assert all(b[0] - a[1] >= GAP_PX for a, b in zip(lefts, lefts[1:])), lefts
