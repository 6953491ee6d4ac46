"""Fixtures of the browser suite: the release binary on free ports with a fresh data
directory and test-friendly settings, and headless Chromium driven by Debian's
chromedriver (never a browser or driver downloaded at run time)."""

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "target" / "screenshots"
BINARY = Path(os.environ.get("PIGEONHOLE_BIN", ROOT / "target" / "release" / "pigeonhole"))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def run_server(extra=lambda inbox_port, scheduler_port: []):
    """The binary on free ports with a fresh data directory and test-friendly settings, and
    `extra(inbox_port, scheduler_port)` flags; yields the addresses, stops it afterwards."""
    data = Path(tempfile.mkdtemp(prefix="pigeonhole-browser-"))
    log_path = data.parent / (data.name + ".log")
    for attempt in range(5):
        inbox_port, scheduler_port = free_port(), free_port()
        log = open(log_path, "w")
        process = subprocess.Popen(
            [
                str(BINARY), "serve",
                "--data-dir", str(data / "db"),
                "--host", "127.0.0.1",
                "--inbox-port", str(inbox_port),
                "--scheduler-port", str(scheduler_port),
                "--password-iterations", "1000",
                "--looper-period", "2",
                "--looper-retry-delay-us", "200000",
                "--looper-retry-amount", "2",
                *extra(inbox_port, scheduler_port),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if not k.startswith("PIGEONHOLE_")},
        )
        inbox = f"http://127.0.0.1:{inbox_port}"
        scheduler = f"http://127.0.0.1:{scheduler_port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and process.poll() is None:
            if answers(inbox + "/pricing") and answers(scheduler + "/pricing"):
                break
            time.sleep(0.05)  # poll until the server answers
        if process.poll() is None and answers(inbox + "/pricing"):
            break
        # most likely a port was taken meanwhile: try others
        process.kill()
        process.wait()
    else:
        raise RuntimeError("the server did not start:\n" + log_path.read_text())
    yield {
        "inbox": inbox,
        "scheduler": scheduler,
        "inbox_delivery_url": inbox,
        # e-mails go to <data-dir>/outbox/ as .eml files (no --smtp-url)
        "outbox": data / "db" / "outbox",
    }
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="session")
def server():
    yield from run_server()


def make_driver(*extra):
    """Headless Chromium with the suite's options (and `extra` command-line flags)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,800",
        "--lang=en-GB",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        *extra,
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    browser.set_page_load_timeout(30)
    return browser


@pytest.fixture(scope="session")
def driver():
    browser = make_driver()
    yield browser
    browser.quit()


@pytest.fixture
def own_driver():
    """A browser of this test alone (a fresh profile: its first service worker registration
    has the id "0"), made with extra flags: `own_driver(*flags)`."""
    made = []

    def start(*extra):
        browser = make_driver(*extra)
        made.append(browser)
        return browser

    yield start
    for browser in made:
        browser.quit()


@pytest.fixture(autouse=True)
def signed_out(request):
    """Each browser test starts signed out of both services (the browser is shared)."""
    if "driver" in request.fixturenames:
        browser, urls = request.getfixturevalue("driver"), request.getfixturevalue("server")
        for base in (urls["inbox"], urls["scheduler"]):
            browser.get(base + "/app/config.json")
            browser.execute_script("localStorage.clear()")
    yield
