"""How fast the viewer answers: first render of a sample run, opening another, switching back, and the Timeline on
a rank of 150k+ events. The issue's targets: first render under 3 s, switching back to an opened run under 1 s.

Two views of the same thing:
  browser  ``streamlit run`` on a free local port, Debian's headless Chromium (Selenium + /usr/bin/chromedriver):
           wall time from the navigation or the sidebar choice until Streamlit reports the script done and the
           page's charts have drawn. Skipped when Chromium is missing.
  script   Streamlit's AppTest: the script's own run time, no browser.

    python benchmarks/app_speed.py                                   # sample_traces/resnet-gloo-2rank vs gpt-gloo-2rank
    python benchmarks/app_speed.py --a sample_traces/X --b sample_traces/Y --repeat 5
    python benchmarks/app_speed.py --screenshot docs/ranks.png       # also save the Ranks page of run A
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from workloads.ports import free_port

REPO = Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1500,1100"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", default="sample_traces/resnet-gloo-2rank", help="run id of the first run (root/name)")
    parser.add_argument("--b", default="sample_traces/gpt-gloo-2rank", help="run id of the run opened in between")
    parser.add_argument("--repeat", type=int, default=5, help="switch-backs to time (the median is printed)")
    parser.add_argument("--events", type=int, default=150_000, help="device events of the synthetic Timeline rank")
    parser.add_argument("--screenshot", type=Path, help="save the Ranks page of run A here (PNG)")
    args = parser.parse_args()
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        browser(args)
    else:
        print("browser: skipped (no /usr/bin/chromium or /usr/bin/chromedriver)")
    script(args)


# ------------------------------------------------------------------------------------------------ browser

def browser(args) -> None:
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(REPO / "app" / "main.py"), "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    profile = tempfile.TemporaryDirectory(prefix="chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in [*FLAGS, f"--user-data-dir={profile.name}"]:
        options.add_argument(flag)
    driver = None
    try:
        _wait_healthy(port)
        driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=str(CHROMEDRIVER)))
        base = f"http://127.0.0.1:{port}"

        def done(run: str, charts: int, timeout: float = 60) -> None:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                app = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stApp"]')
                state = app[0].get_attribute("data-test-script-state") if app else ""
                if driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]'):
                    raise RuntimeError("the page shows a Streamlit exception")
                if (state == "notRunning" and f"run={run.replace('/', '%2F')}" in driver.current_url
                        and len(driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg")) >= charts
                        and not driver.find_elements(By.CSS_SELECTOR, '[data-stale="true"]')):
                    return
                time.sleep(0.02)
            raise TimeoutError(f"{run} did not render within {timeout} s")

        def choose(run: str) -> float:
            box = driver.find_element(By.CSS_SELECTOR, 'input[aria-label="Run"]')
            box.click()
            box.send_keys(Keys.CONTROL, "a")
            box.send_keys(run)
            t = time.perf_counter()
            box.send_keys(Keys.ENTER)
            done(run, 2)
            return time.perf_counter() - t

        def load(run: str) -> float:
            t = time.perf_counter()
            driver.get(f"{base}/ranks?run={run}")
            done(run, 2)
            return time.perf_counter() - t

        cold = load(args.b)   # a fresh Chromium compiles Streamlit's and plotly's JavaScript here
        first = load(args.a)  # a new session on a run not opened before: the server reads and summarizes it
        if args.screenshot:
            args.screenshot.parent.mkdir(parents=True, exist_ok=True)
            driver.set_window_size(1500, 1250)  # tall enough for both charts of the Ranks page
            time.sleep(1.5)
            driver.save_screenshot(str(args.screenshot))
        back = []
        for _ in range(args.repeat):
            choose(args.b)
            back.append(choose(args.a))
        print(f"browser  cold start (new server, new Chromium), {args.b}, Ranks page: {cold:.2f} s")
        print(f"browser  first render of {args.a}, Ranks page (new session, run not opened before): {first:.2f} s")
        print(f"browser  switching back to {args.a} from the sidebar: median {statistics.median(back):.2f} s, "
              f"max {max(back):.2f} s of {args.repeat}")
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=10)
        profile.cleanup()


def _wait_healthy(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as answer:
                if answer.read().strip() == b"ok":
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError("streamlit did not start")


# ------------------------------------------------------------------------------------------------- script

def script(args) -> None:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    main_py = str(REPO / "app" / "main.py")

    def run(query: dict, argv: list[str] | None = None, page: str | None = None, at: AppTest | None = None):
        sys.argv = ["main.py", *(argv or [])]
        at = at or AppTest.from_file(main_py, default_timeout=120)
        at.query_params.update(query)
        if page:
            at.switch_page(page)
        t = time.perf_counter()
        at.run()
        if at.exception:
            raise RuntimeError(at.exception[0].value)
        return time.perf_counter() - t, at

    st.cache_resource.clear()
    cold, at = run({"run": args.a, "page": "ranks"})
    _, at = run({}, page="views/ranks.py", at=at)
    at.selectbox(key="run").set_value(args.b)
    t = time.perf_counter()
    at.run()
    open_b = time.perf_counter() - t
    back = []
    for _ in range(args.repeat):
        for target in (args.a, args.b):
            at.selectbox(key="run").set_value(target)
            t = time.perf_counter()
            at.run()
            if target == args.a:
                back.append(time.perf_counter() - t)
    print(f"script   first run of {args.a}, Ranks page (cold cache): {cold:.2f} s")
    print(f"script   opening {args.b}: {open_b:.2f} s")
    print(f"script   switching back to {args.a}: median {statistics.median(back):.3f} s of {args.repeat}")

    with tempfile.TemporaryDirectory(prefix="tracekit-big-") as tmp:
        root = Path(tmp) / "big"
        n = _big_rank(root / "run", args.events)
        argv = ["--root", str(root)]
        first, at = run({"run": "big/run", "page": "timeline"}, argv)
        again, at = run({}, argv, at=at)
        caption = next(c.value for c in at.caption if "events of" in c.value)
        print(f"script   Timeline of a rank with {n:,} device events: first {first:.2f} s (read + classify + draw), "
              f"again {again:.2f} s; {caption.split('. Box')[0]}")


def _big_rank(folder: Path, n: int) -> int:
    """One rank, 3 steps, ``n`` short kernels on two streams plus NCCL all-reduces: a Timeline stress test."""
    folder.mkdir(parents=True)
    events, t, step_us = [], 0.0, n / 3 * 2.0
    for s in range(3):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 1}", "pid": 1, "tid": 1,
                       "ts": s * step_us, "dur": step_us})
    for i in range(n):
        comm = i % 500 == 499
        events.append({"ph": "X", "cat": "kernel", "pid": 0, "tid": 20 if comm else 7, "ts": round(t, 3),
                       "dur": 40.0 if comm else 1.2,
                       "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL" if comm else f"gemm_{i % 7}",
                       "args": {"stream": 20 if comm else 7, "device": 0}})
        t += 1.9
    doc = {"traceEvents": events, "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"}}
    (folder / "rank-0.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    return n


if __name__ == "__main__":
    main()
