"""The dashboard in a real browser: Debian's headless Chromium driven by selenium, against
the app served by uvicorn on loopback and a real redis-server. Also takes the README's
screenshots (docs/dashboard-overview.png, docs/dashboard-queue.png)."""

from __future__ import annotations

import math
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis

from keyqueue import Queue
from keyqueue.server import RedisServer
from keyqueue.web import create_app
from keyqueue.web.present import number

from .conftest import wait_until
from .web_support import Served

DOCS = Path(__file__).resolve().parent.parent / "docs"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def site(redis_server: RedisServer) -> Iterator[Served]:
    served = Served(create_app(url=redis_server.url))
    yield served
    served.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        assert shutil.which(path), f"{path} is missing: run scripts/setup.sh (installs chromium, chromium-driver)"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1360,900",
                "--force-device-scale-factor=1", "--hide-scrollbars"):
        options.add_argument(arg)
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


@pytest.fixture
def page(browser: Any, site: Served, r: redis.Redis) -> Iterator[Any]:
    """The browser, with no console error allowed during the test."""
    browser.get(f"{site.url}/healthz")
    browser.get_log("browser")  # drain
    yield browser
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors


def fill(r: redis.Redis) -> dict[str, Queue]:
    emails = Queue("emails", client=r, max_receives=1, visibility_timeout=120)
    emails.enqueue_many([f'{{"to": "user{i}@example.com", "template": "welcome"}}' for i in range(7)])
    for reason in ("SMTPRecipientsRefused: user0@example.com", "TimeoutError: smtp.example.com:587"):
        m = emails.claim()
        assert m is not None
        m.dead_letter(reason)
    emails.claim()
    reports = Queue("reports", client=r)
    reports.enqueue_many(["weekly", "monthly"], delay=3600)
    reports.enqueue("daily")
    Queue("thumbnails", client=r).enqueue_many([b"\x89PNG\r\n\x1a\n" + bytes(range(40))] * 3)
    return {"emails": emails, "reports": reports, "thumbnails": Queue("thumbnails", client=r)}


def text_of(driver: Any, selector: str) -> str:
    """The element's text ("" when there is none yet), read in one script call: the page
    swaps refreshed parts in every 2 s, so an element found first and read after may be
    gone (stale) by then."""
    return str(driver.execute_script("const e = document.querySelector(arguments[0]);"
                                     "return e === null ? '' : e.innerText.trim();", selector))


def cell(driver: Any, queue: str, key: str) -> str:
    return text_of(driver, f'tr[data-queue="{queue}"] td[data-k="{key}"]')


def tile(driver: Any, key: str) -> str:
    return text_of(driver, f'#tiles [data-k="{key}"]')


def shoot(driver: Any, path: Path) -> None:
    """A PNG of the page, as tall as its content."""
    bottom, chrome = driver.execute_script("return [document.querySelector('main').getBoundingClientRect()"
                                           ".bottom, window.outerHeight - window.innerHeight];")
    driver.set_window_size(1360, int(bottom + chrome) + 8)
    driver.save_screenshot(str(path))


def test_overview_shows_every_queue_with_its_numbers(page: Any, site: Served, r: redis.Redis) -> None:
    from selenium.webdriver.common.by import By

    qs = fill(r)
    page.get(site.url + "/")
    rows = page.find_elements(By.CSS_SELECTOR, "#overview-rows tr[data-queue]")
    assert [row.get_attribute("data-queue") for row in rows] == ["emails", "reports", "thumbnails"]
    for name, q in qs.items():
        s = q.stats()
        for key in ("waiting", "processing", "delayed", "dead"):
            assert cell(page, name, key) == number(getattr(s, key)), (name, key)
        assert cell(page, name, "oldest_age").endswith(("ms", "s"))
    assert page.find_element(By.CSS_SELECTOR, 'tr[data-queue="emails"] svg.spark') is not None


def test_overview_refreshes_itself_without_a_reload(page: Any, site: Served, r: redis.Redis) -> None:
    qs = fill(r)
    page.get(site.url + "/")
    page.execute_script("window.kqMarker = 42;")
    assert cell(page, "reports", "waiting") == "1"
    qs["reports"].enqueue_many(["a", "b", "c", "d"])
    Queue("zebra", client=r).enqueue("new queue")
    wait_until(lambda: cell(page, "reports", "waiting") == "5" and cell(page, "zebra", "waiting") == "1"
               and text_of(page, "#queue-count") == "4", timeout=30, interval=0.2)
    assert page.execute_script("return window.kqMarker;") == 42  # the same page: no reload
    # the enqueue rate is read from the counters: 4 new messages since the first sample
    wait_until(lambda: cell(page, "reports", "enqueue_rate") not in ("\u2013", "0/s"), timeout=30, interval=0.2)


def test_queue_page_shows_dead_letters_with_their_errors(page: Any, site: Served, r: redis.Redis) -> None:
    from selenium.webdriver.common.by import By

    fill(r)
    evil = Queue("emails", client=r)
    evil.enqueue('<img src=x onerror="window.kqXss=1"><script>window.kqXss=2</script>')
    m = evil.claim()  # the oldest waiting is an ordinary one: claim until the evil one
    while m is not None and "img" not in m.text:
        assert evil.release(m)
        m = evil.claim()
    assert m is not None
    m.dead_letter('<b onmouseover="window.kqXss=3">bold</b>')
    page.get(site.url + "/")
    page.find_element(By.LINK_TEXT, "emails").click()
    wait_until(lambda: text_of(page, "#queue-name") == "emails", timeout=20)
    page.find_element(By.CSS_SELECTOR, '.tabs a[data-source="dead"]').click()
    wait_until(lambda: "source=dead" in page.current_url, timeout=20)
    errors = [e.text for e in page.find_elements(By.CSS_SELECTOR, "#messages td.error")]
    assert errors == ["SMTPRecipientsRefused: user0@example.com", "TimeoutError: smtp.example.com:587",
                      '<b onmouseover="window.kqXss=3">bold</b>']
    bodies = [e.text for e in page.find_elements(By.CSS_SELECTOR, "#messages td.body")]
    assert bodies[-1].startswith('<img src=x onerror="window.kqXss=1">')
    assert page.execute_script("return window.kqXss === undefined;")
    assert tile(page, "dead") == "3"


def test_queue_page_counts_tabs_and_buttons_follow_the_queue(page: Any, site: Served, r: redis.Redis) -> None:
    q = Queue("fresh", client=r, max_receives=1)
    q.enqueue_many(["a", "b"])
    page.get(f"{site.url}/queues/fresh")
    state = ("return [document.getElementById('requeue-all').disabled, document.querySelector("
             "'.tabs a[data-source=\"dead\"] .pill').textContent, document.querySelector('.tabs a.on').dataset.source];")
    assert page.execute_script(state) == [True, "0", "waiting"]
    m = q.claim()
    assert m is not None and m.dead_letter("RuntimeError: late")
    wait_until(lambda: page.execute_script(state) == [False, "1", "waiting"] and tile(page, "dead") == "1",
               timeout=30, interval=0.2)


def test_requeue_by_clicking_through_the_ui(page: Any, site: Served, r: redis.Redis) -> None:
    from selenium.webdriver.common.by import By

    emails = fill(r)["emails"]
    page.get(f"{site.url}/queues/emails?source=dead")
    first = page.find_elements(By.CSS_SELECTOR, "#messages tbody tr[data-id]")[0].get_attribute("data-id")
    page.find_element(By.CSS_SELECTOR, f'#messages tr[data-id="{first}"] button').click()
    dialog = page.find_element(By.ID, "confirm-dialog")
    wait_until(lambda: dialog.is_displayed(), timeout=10)
    assert page.find_element(By.ID, "confirm-title").text == f"Requeue dead letter {first}?"
    page.find_element(By.CSS_SELECTOR, "#confirm-dialog button[value=cancel]").click()
    wait_until(lambda: not dialog.is_displayed(), timeout=10)
    assert emails.stats().dead == 2  # cancelled: nothing changed
    page.find_element(By.CSS_SELECTOR, f'#messages tr[data-id="{first}"] button').click()
    wait_until(lambda: dialog.is_displayed(), timeout=10)
    page.find_element(By.ID, "confirm-ok").click()
    wait_until(lambda: page.find_elements(By.ID, "notice"), timeout=20)
    assert page.find_element(By.ID, "notice").text == "Requeued 1 dead letter."
    s = emails.stats()
    assert (s.dead, s.waiting) == (1, 5)
    assert (tile(page, "dead"), tile(page, "waiting")) == ("1", "5")
    assert [row.get_attribute("data-id") for row in page.find_elements(By.CSS_SELECTOR, "#messages tr[data-id]")] \
        != [first] and first not in [m.id for m in emails.peek(10, source="dead")]
    page.find_element(By.ID, "requeue-all").click()
    wait_until(lambda: page.find_element(By.ID, "confirm-dialog").is_displayed(), timeout=10)
    page.find_element(By.ID, "confirm-ok").click()
    wait_until(lambda: "Requeued 1 dead letter." in page.find_element(By.ID, "notice").text
               and tile(page, "dead") == "0", timeout=20)
    assert emails.stats().dead == 0 and emails.stats().waiting == 6


def test_long_names_and_errors_fit_a_narrow_window(page: Any, site: Served, r: redis.Redis) -> None:
    """800 px wide, a 200-character queue name (the longest allowed) and a 5,000-character
    error: every count stays in view, nothing scrolls sideways, the error is cut."""
    long_name = "orders." + "x" * 193
    q = Queue(long_name, client=r, max_receives=1)
    q.enqueue("order 1")
    m = q.claim()
    assert m is not None and m.dead_letter("ValidationError: " + "field is invalid; " * 280)
    fill(r)
    overflow = ("return [document.documentElement.scrollWidth, window.innerWidth, Math.max(...Array.from("
                "document.querySelectorAll(arguments[0]), e => e.getBoundingClientRect().right))];")
    page.set_window_size(800, 900)
    try:
        page.get(site.url + "/")
        page_width, window, rightmost = page.execute_script(overflow, "#overview td[data-k]")
        assert page_width <= window and rightmost <= window, (page_width, window, rightmost)
        page.get(f"{site.url}/queues/{long_name}?source=dead")
        page_width, window, rightmost = page.execute_script(overflow, "#tiles .tile, #messages td")
        assert page_width <= window and rightmost <= window, (page_width, window, rightmost)
        clipped = page.execute_script("return Array.from(document.querySelectorAll('#tiles .tile > *'))"
                                      ".filter(e => e.scrollWidth > e.clientWidth).map(e => e.textContent);")
        assert clipped == []
        chart, line = page.execute_script("return ['#tiles svg.spark', '#tiles svg.spark line.base'].map("
                                          "s => document.querySelector(s).getBoundingClientRect().width);")
        assert line > 0.95 * chart  # the rate chart spans its tile (it was drawn 300 px wide, centred)
        shown = text_of(page, "#messages td.error")
        assert shown.startswith("ValidationError: field is invalid;") and len(shown) < 400
        fits = ("const t = document.querySelector('#tiles [data-k=oldest_age]'); t.textContent = '23 h 59 m';"
                "const h = document.querySelector('#tiles [data-k=waiting]').getBoundingClientRect().height;"
                "return t.scrollWidth <= t.clientWidth && t.getBoundingClientRect().height === h;")
        for width in (1300, 1100, 800):  # the longest duration on one line, at every layout
            page.set_window_size(width, 900)
            assert page.execute_script(fits), width
    finally:
        page.set_window_size(1360, 900)


def test_an_open_page_says_when_redis_goes_away_and_comes_back(browser: Any) -> None:
    from selenium.webdriver.common.by import By

    with RedisServer() as own:
        Queue("jobs", client=redis.Redis(port=own.port)).enqueue("x")
        served = Served(create_app(url=own.url))
        try:
            browser.get(served.url + "/")

            def live() -> str:
                text: str = browser.find_element(By.ID, "live").text
                return text

            assert live() == "live" and cell(browser, "jobs", "waiting") == "1"
            own.stop()
            wait_until(lambda: live() == "Redis unreachable", timeout=30, interval=0.2)
            own.start()  # (empty: no persistence)
            Queue("jobs", client=redis.Redis(port=own.port)).enqueue_many(["a", "b"])
            wait_until(lambda: live() == "live" and cell(browser, "jobs", "waiting") == "2", timeout=30,
                       interval=0.2)
        finally:
            served.stop()
            browser.get_log("browser")  # the 503s fetched meanwhile are logged as errors: expected here


def test_screenshots_for_the_readme(page: Any, site: Served, r: redis.Redis) -> None:
    """Live traffic for about 24 seconds (a sparkline's worth of samples), then the two
    pages as PNGs in docs/."""
    from selenium.webdriver.common.by import By

    qs = fill(r)
    webhooks = Queue("webhooks", client=r, visibility_timeout=90)
    stop = threading.Event()

    def traffic() -> None:
        t = 0
        while not stop.is_set():
            t += 1
            wave = 1 + math.sin(t / 6)
            webhooks.enqueue_many([f'{{"event": "order.paid", "n": {t}}}'] * int(6 + 5 * wave))
            got = webhooks.claim_many(int(5 + 4 * wave))
            webhooks.ack_many(got[:-1])
            qs["thumbnails"].enqueue_many([b"\x89PNG" + bytes([t % 256]) * 30] * int(3 * wave))
            done = qs["thumbnails"].claim_many(3)
            qs["thumbnails"].ack_many(done)
            qs["emails"].enqueue('{"to": "new@example.com", "template": "receipt"}')
            stop.wait(0.25)

    worker = threading.Thread(target=traffic, daemon=True)
    page.get(site.url + "/")
    worker.start()
    try:
        time.sleep(24)  # (not a wait for a condition: the sparklines need this much history)
    finally:
        stop.set()
        worker.join(10)
    wait_until(lambda: cell(page, "webhooks", "ack_rate") not in ("\u2013", "0/s"), timeout=20, interval=0.2)
    DOCS.mkdir(exist_ok=True)
    shoot(page, DOCS / "dashboard-overview.png")
    page.get(f"{site.url}/queues/emails?source=dead")
    page.find_element(By.CSS_SELECTOR, "#messages td.error")
    shoot(page, DOCS / "dashboard-queue.png")
    page.set_window_size(1360, 900)
    for name in ("dashboard-overview.png", "dashboard-queue.png"):
        assert (DOCS / name).stat().st_size > 10_000
