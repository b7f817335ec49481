"""The docs page in a real headless Chromium, with no network beyond the extender itself.

Swagger UI must come from the package: the machines this runs on have no internet, and a CDN script
would leave a blank page (ReDoc is not served: its bundle fetches its logo from a CDN). Every request the
browser makes is checked to stay on the extender.
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from ballast.extender.main import create_app
from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE, missing_part, wait_for

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")


def _need_browser() -> None:
    if CHROMIUM and CHROMEDRIVER:
        return
    missing_part("Debian packages chromium and chromium-driver are not installed (.ci/run installs them)")


@pytest.fixture
def server() -> Iterator[str]:
    """A real uvicorn server on a free loopback port, with a clock three hours after start: examples
    generated once at start-up would be stale by then."""
    app = create_app(load_policy(POLICY_FILE), policy_poll_seconds=0, clock=lambda: time.time() + 3 * 3600)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for(lambda: srv.started, timeout=30, what="uvicorn start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=30)
        sock.close()


@pytest.fixture
def browser() -> Iterator[object]:
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="ballast-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,2400",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _requested_urls(driver) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def _foreign(driver, server: str) -> list[str]:
    """Network requests (not the browser's own chrome:// pages or data: URLs) that left the extender."""
    urls = _requested_urls(driver)
    assert any(u.startswith(server) for u in urls), "no request to the extender was recorded"
    return [
        u for u in urls if u.split(":", 1)[0] in ("http", "https", "ws", "wss") and not u.startswith(server)
    ]


def test_swagger_ui_renders_offline_and_try_it_out_works(server: str, browser, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 120)
    browser.get(f"{server}/docs")
    wait.until(
        ec.presence_of_element_located(
            (By.CSS_SELECTOR, "#operations-extender_verbs-filter_nodes_filter_post")
        )
    )
    assert "Ballast scheduler extender" in browser.find_element(By.CSS_SELECTOR, ".info .title").text

    op = browser.find_element(By.CSS_SELECTOR, "#operations-extender_verbs-filter_nodes_filter_post")
    op.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
    wait.until(lambda d: op.find_elements(By.CSS_SELECTOR, ".try-out__btn"))
    op.find_element(By.CSS_SELECTOR, ".try-out__btn").click()
    wait.until(lambda d: op.find_elements(By.CSS_SELECTOR, ".execute"))
    op.find_element(By.CSS_SELECTOR, ".execute").click()
    wait.until(
        lambda d: op.find_elements(By.CSS_SELECTOR, ".live-responses-table tbody .response-col_status")
    )
    status = op.find_element(By.CSS_SELECTOR, ".live-responses-table tbody .response-col_status").text.strip()
    body = op.find_element(By.CSS_SELECTOR, ".live-responses-table tbody .response-col_description pre").text
    shot = tmp_path / "swagger-filter.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    assert status == "200", body
    answer = json.loads(body)
    # The example's first node is lightly loaded and dated by the server's clock: it passes.
    assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["node-a"], answer
    assert "node-b" in answer["FailedNodes"]

    foreign = _foreign(browser, server)
    assert foreign == [], f"the docs page reached outside the extender: {foreign}"
