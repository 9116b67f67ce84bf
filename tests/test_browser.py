"""The viewer in a real browser: ``streamlit run`` on a free local port, Debian's headless Chromium through
Selenium and Debian's chromedriver (nothing is downloaded). Every page must render its charts with no
Streamlit exception; a screenshot of each page is saved under ``build/screenshots/``."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import pytest

from test_charts_ops import write_memory_run
from viewer_runs import REPO, make_root
from workloads.ports import free_port

webdriver = pytest.importorskip("selenium.webdriver")
pytest.importorskip("streamlit")
from selenium.webdriver.common.by import By  # noqa: E402

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SHOTS = REPO / "build" / "screenshots"
PAGES = {"overview": ("Overview", 0), "ranks": ("Ranks", 2), "communication": ("Communication", 2),
         "idle": ("Idle", 2), "timeline": ("Timeline", 1), "allranks": ("All ranks", 1), "whatif": ("What if", 1),
         "compare": ("Compare", 1), "ops": ("Operators & kernels", 2), "memory": ("Memory", 0)}
# On a GPU run with [memory] events (the sample runs have none): the roofline and the time per step; memory over time.
MEMORY_RUN, MEMORY_PAGES = "a100-memory", {"ops": ("Operators & kernels", 2), "memory": ("Memory", 1)}
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1500,1100"]

pytestmark = pytest.mark.skipif(not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
                                reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")


def start_app(root: Path, port: int) -> subprocess.Popen:
    """``streamlit run app/main.py -- --root ROOT`` on 127.0.0.1:port; returns once its health check answers."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(REPO / "app" / "main.py"), "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none", "--", "--root", str(root)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as answer:
                if answer.read().decode().strip() == "ok":
                    return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"streamlit exited: {proc.stdout.read()}")
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("streamlit did not answer its health check within 60 s")


def chromium(profile: Path):
    """Headless Debian Chromium with a fresh profile, driven by Debian's chromedriver."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=str(CHROMEDRIVER)))


def script_state(driver) -> str:
    """Streamlit's own word for the script: ``running``, ``notRunning``, ``initial``, ..."""
    apps = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stApp"]')
    return apps[0].get_attribute("data-test-script-state") if apps else "initial"


# Each chart's box and how many elements it holds: the same on two looks in a row, its layout is done.
LAYOUT = """
return Array.from(document.querySelectorAll('.js-plotly-plot')).map(p => {
    const r = p.getBoundingClientRect(); return [r.left, r.top, r.width, r.height, p.querySelectorAll('*').length]; });
"""
POLL, SETTLE = 0.05, 0.3  # seconds between looks; the longest wait for a layout to stop changing


def settled(look, done=lambda seen: True, longest: float = SETTLE):
    """``look()`` once two looks ``POLL`` apart agree and ``done`` holds, or after ``longest`` seconds."""
    deadline = time.monotonic() + longest
    seen = look()
    while time.monotonic() < deadline:
        time.sleep(POLL)
        again = look()
        if again == seen and done(again):
            break
        seen = again
    return seen


def wait_for_page(driver, title: str, charts: int, timeout: float = 45) -> None:
    """Until the script has stopped, the page's title shows and at least ``charts`` plotly charts have drawn."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]'):
            return
        titles = [h.text for h in driver.find_elements(By.CSS_SELECTOR, "h1")]
        drawn = driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg")
        if script_state(driver) == "notRunning" and title in titles and len(drawn) >= charts:
            settled(lambda: driver.execute_script(LAYOUT))  # the last chart's layout done before the screenshot
            return
        time.sleep(0.1)
    raise AssertionError(f"page {title!r} did not show {charts} chart(s) within {timeout} s")


# The viewer's server and the browser, one of each per test process: test_browser_bounds imports these fixtures,
# and its tests open pages on the same server in the same browser.
_shared: dict = {}


@contextlib.contextmanager
def _once(name: str, start):
    """``start()``'s value (a context manager's), started by the first fixture that asks and ended with it."""
    if name in _shared:
        yield _shared[name]
        return
    with start() as value:
        _shared[name] = value
        try:
            yield value
        finally:
            del _shared[name]


@contextlib.contextmanager
def _viewer(tmp_path_factory):
    root = make_root(tmp_path_factory.mktemp("runs") / "runs")
    write_memory_run(root / MEMORY_RUN)
    port = free_port()
    proc = start_app(root, port)
    try:
        yield f"http://127.0.0.1:{port}", root.name
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def _browser(tmp_path_factory):
    browser = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture(scope="session")
def app_url(tmp_path_factory):
    """The viewer (``streamlit run``) on the runs of ``make_root`` and the memory run: its URL and root label."""
    with _once("app_url", lambda: _viewer(tmp_path_factory)) as value:
        yield value


@pytest.fixture(scope="session")
def driver(tmp_path_factory):
    """Headless Chromium; each test opens its page by URL."""
    with _once("driver", lambda: _browser(tmp_path_factory)) as browser:
        yield browser


def run_under_test(root_label: str) -> str:
    samples = REPO / "sample_traces" / "resnet-gloo-2rank"
    return f"{root_label}/resnet-gloo-2rank" if samples.is_dir() else f"{root_label}/tiny"


@pytest.mark.parametrize("slug", list(PAGES))
def test_every_page_renders_in_chromium(app_url, driver, slug):
    base, label = app_url
    title, charts = PAGES[slug]
    run = run_under_test(label)
    path = "" if slug == "overview" else slug  # the default page lives at the root URL
    driver.get(f"{base}/{path}?{urlencode({'run': run, 'rank': 1})}")
    wait_for_page(driver, title, charts)
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{slug}.png"))
    exceptions = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
    assert not exceptions, exceptions[0].text
    assert len(driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")) >= charts
    assert f"run={run.replace('/', '%2F')}" in driver.current_url and "rank=1" in driver.current_url


@pytest.mark.parametrize("slug", list(MEMORY_PAGES))
def test_the_ops_and_memory_pages_draw_a_gpu_run_with_memory_events(app_url, driver, slug):
    base, label = app_url
    title, charts = MEMORY_PAGES[slug]
    driver.get(f"{base}/{slug}?{urlencode({'run': f'{label}/{MEMORY_RUN}', 'rank': 0})}")
    wait_for_page(driver, title, charts)
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{slug}-{MEMORY_RUN}.png"))
    exceptions = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
    assert not exceptions, exceptions[0].text
    assert len(driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")) >= charts


def test_a_link_with_page_and_a_refused_run(app_url, driver):
    base, label = app_url
    driver.get(f"{base}/?{urlencode({'page': 'idle', 'run': f'{label}/../../etc'})}")
    wait_for_page(driver, "Idle", 2)
    errors = " ".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stAlert"]'))
    assert "Refused" in errors and "'..'" in errors
    assert not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')


# ------------------------------------------------------------------------------------- viewer polish (issue 22)

RECTS = """
const box = e => { if (!e) return null; const r = e.getBoundingClientRect();
                   return r.width > 0 && r.height > 0 ? [r.left, r.top, r.right, r.bottom] : null; };
const p = arguments[0];
return {title: box(p.querySelector('.gtitle')), modebar: box(p.querySelector('.modebar')),
        legend: box(p.querySelector('.legend')),
        yticks: Array.from(p.querySelectorAll('.yaxislayer-above .ytick text')).map(t => t.textContent),
        xticks: Array.from(p.querySelectorAll('.xaxislayer-above .xtick text')).map(t => t.textContent)};
"""


def overlap(a, b) -> bool:
    return a is not None and b is not None and a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def open_page(driver, base: str, slug: str, run: str, rank: int = 0) -> None:
    title, charts = PAGES[slug]
    driver.get(f"{base}/{'' if slug == 'overview' else slug}?{urlencode({'run': run, 'rank': rank})}")
    wait_for_page(driver, title, charts)


def plots(driver) -> list[dict]:
    """Each drawn chart's title, toolbar (shown by hovering the chart) and legend boxes, and its tick labels."""
    from selenium.webdriver.common.action_chains import ActionChains

    found = []
    for plot in driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot"):
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", plot)
        ActionChains(driver).move_to_element(plot).perform()
        found.append(settled(lambda plot=plot: driver.execute_script(RECTS, plot),
                             lambda seen: seen["title"] is not None and seen["modebar"] is not None))
    return found


@pytest.mark.parametrize("slug", [s for s in PAGES if PAGES[s][1]])
def test_chart_titles_and_legends_are_clear_of_the_toolbar(app_url, driver, slug):
    base, label = app_url
    open_page(driver, base, slug, run_under_test(label))
    drawn = plots(driver)
    assert len(drawn) >= PAGES[slug][1]
    for chart in drawn:
        assert chart["title"] is not None and chart["modebar"] is not None, chart
        assert not overlap(chart["title"], chart["modebar"]), (slug, chart)
        assert not overlap(chart["legend"], chart["modebar"]), (slug, chart)


def test_bandwidth_ticks_are_plain_numbers(app_url, driver):
    """No SI prefixes on the log axes of the bandwidth chart (plotly's default writes 0.0001 as '100μ')."""
    base, label = app_url
    open_page(driver, base, "communication", run_under_test(label))
    busbw = plots(driver)[0]
    ticks = busbw["yticks"] + busbw["xticks"]
    assert ticks and all(re.fullmatch(r"[0-9][0-9,]*(\.[0-9]+)?", t) for t in ticks), ticks


def test_timeline_lanes_are_named_by_thread(app_url, driver):
    base, label = app_url
    run = run_under_test(label)
    open_page(driver, base, "timeline", run)
    lanes = plots(driver)[0]["yticks"]
    if run.endswith("/tiny"):  # a GPU run: its lanes are streams
        assert "stream 7" in lanes
    else:
        assert "main thread" in lanes and not [t for t in lanes if re.fullmatch(r"thread \d+", t)], lanes


def test_overview_lists_no_skipped_file_and_compare_pairs_the_workload(app_url, driver):
    base, label = app_url
    run = run_under_test(label)
    open_page(driver, base, "overview", run)
    assert "skipped" not in driver.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text
    open_page(driver, base, "compare", run)
    proposed = f"{label}/resnet-gloo-2rank-accum2" if run.endswith("resnet-gloo-2rank") else f"{label}/tiny-copy"
    assert f"b={proposed.replace('/', '%2F')}" in driver.current_url
