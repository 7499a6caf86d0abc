"""The dashboard in a real browser: Debian's headless Chromium driven by selenium, against
the app served by uvicorn on loopback and a real redis-server. Also takes the README's
screenshots (docs/dashboard-overview.png, docs/dashboard-queue.png) and the sharding
page's (docs/dashboard-shards.png)."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import redis

from keyqueue import Queue
from keyqueue.core.shards import shard_for
from keyqueue.server import RedisServer
from keyqueue.web import create_app
from keyqueue.web.present import number

from ..support.helpers import ROOT
from ..support.web_support import Served

DOCS = ROOT / "docs"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
#: One browser (and one served site) for the module: its tests on one xdist worker.
pytestmark = pytest.mark.xdist_group("browser")


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
    for arg in (
        "--headless=new",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1360,900",
        "--force-device-scale-factor=1",
        "--hide-scrollbars",
    ):
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


def wait_for(driver: Any, condition: Callable[[Any], Any], timeout: float = 20.0) -> Any:
    """Poll ``condition(driver)`` until it is truthy and return that: every wait on the page
    goes through here. The condition looks its elements up itself, and a stale or missing
    element is "not yet", never a failure: the page swaps its refreshed parts in every 2 s
    and an action loads a new document, so an element found a moment ago may be gone."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    end = time.monotonic() + timeout
    while True:
        try:
            value = last = condition(driver)
        except (NoSuchElementException, StaleElementReferenceException) as e:
            value, last = None, e
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout}s (last: {last!r})")
        time.sleep(0.1)


def click(driver: Any, selector: str, timeout: float = 20.0) -> None:
    """Click what ``selector`` finds at the moment of the click (found again when a refresh
    replaced it; a click that raised stale never happened, so trying again is safe)."""
    from selenium.webdriver.common.by import By

    wait_for(driver, lambda d: d.find_element(By.CSS_SELECTOR, selector).click() or True, timeout)


def dialog_open(driver: Any) -> bool:
    from selenium.webdriver.common.by import By

    return bool(driver.find_element(By.ID, "confirm-dialog").is_displayed())


@contextlib.contextmanager
def new_document(driver: Any, timeout: float = 20.0) -> Iterator[None]:
    """Around what loads a new page (an action's redirect): on exit, wait until the page it
    began on is gone and the new one has loaded. Without it a wait could pass on the old
    page, which keeps refreshing (and shows the same notice after a second requeue)."""
    driver.execute_script("window.kqOldDocument = true;")
    yield
    wait_for(
        driver,
        lambda d: d.execute_script("return window.kqOldDocument === undefined && document.readyState === 'complete';"),
        timeout,
    )


def read_all(driver: Any, selector: str, attribute: str | None = None) -> list[str]:
    """The text (or ``attribute``) of every element ``selector`` finds, read in one script
    call: found first and read after, an element may already have been replaced (stale)."""
    return [
        str(v)
        for v in driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]), e => arguments[1] === null"
            " ? (e.innerText ?? e.textContent).trim() : e.getAttribute(arguments[1]) ?? '');",
            selector,
            attribute,
        )
    ]


def text_of(driver: Any, selector: str) -> str:
    """The first element's text ("" when there is none yet)."""
    return next(iter(read_all(driver, selector)), "")


def cell(driver: Any, queue: str, key: str) -> str:
    return text_of(driver, f'tr[data-queue="{queue}"] td[data-k="{key}"]')


def tile(driver: Any, key: str) -> str:
    return text_of(driver, f'#tiles [data-k="{key}"]')


def shoot(driver: Any, path: Path) -> None:
    """A PNG of the page, as tall as its content."""
    bottom, chrome = driver.execute_script(
        "return [document.querySelector('main').getBoundingClientRect()"
        ".bottom, window.outerHeight - window.innerHeight];"
    )
    driver.set_window_size(1360, int(bottom + chrome) + 8)
    driver.save_screenshot(str(path))


def test_overview_shows_every_queue_with_its_numbers(page: Any, site: Served, r: redis.Redis) -> None:
    qs = fill(r)
    page.get(site.url + "/")
    assert read_all(page, "#overview-rows tr[data-queue]", "data-queue") == ["emails", "reports", "thumbnails"]
    for name, q in qs.items():
        s = q.stats()
        for key in ("waiting", "processing", "delayed", "dead"):
            assert cell(page, name, key) == number(getattr(s, key)), (name, key)
        assert cell(page, name, "oldest_age").endswith(("ms", "s"))
    wait_for(page, lambda d: read_all(d, 'tr[data-queue="emails"] svg.spark'))  # (there is one)


def test_overview_refreshes_itself_without_a_reload(page: Any, site: Served, r: redis.Redis) -> None:
    qs = fill(r)
    page.get(site.url + "/")
    page.execute_script("window.kqMarker = 42;")
    assert cell(page, "reports", "waiting") == "1"
    qs["reports"].enqueue_many(["a", "b", "c", "d"])
    Queue("zebra", client=r).enqueue("new queue")
    wait_for(
        page,
        lambda d: (
            cell(d, "reports", "waiting") == "5"
            and cell(d, "zebra", "waiting") == "1"
            and text_of(d, "#queue-count") == "4"
        ),
        timeout=30,
    )
    assert page.execute_script("return window.kqMarker;") == 42  # the same page: no reload
    # the enqueue rate is read from the counters: 4 new messages since the first sample
    wait_for(page, lambda d: cell(d, "reports", "enqueue_rate") not in ("\u2013", "0/s"), timeout=30)


def test_queue_page_shows_dead_letters_with_their_errors(page: Any, site: Served, r: redis.Redis) -> None:
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
    with new_document(page):
        click(page, 'tr[data-queue="emails"] td.name a')  # (a row the overview's refresh replaces)
    assert text_of(page, "#queue-name") == "emails"
    with new_document(page):
        click(page, '.tabs a[data-source="dead"]')  # (a tab the queue page's refresh replaces)
    assert "source=dead" in page.current_url
    errors = read_all(page, "#messages td.error")
    assert errors == [
        "SMTPRecipientsRefused: user0@example.com",
        "TimeoutError: smtp.example.com:587",
        '<b onmouseover="window.kqXss=3">bold</b>',
    ]
    bodies = read_all(page, "#messages td.body")
    assert bodies[-1].startswith('<img src=x onerror="window.kqXss=1">')
    assert page.execute_script("return window.kqXss === undefined;")
    assert tile(page, "dead") == "3"


def test_queue_page_counts_tabs_and_buttons_follow_the_queue(page: Any, site: Served, r: redis.Redis) -> None:
    q = Queue("fresh", client=r, max_receives=1)
    q.enqueue_many(["a", "b"])
    page.get(f"{site.url}/queues/fresh")
    state = (
        "return [document.getElementById('requeue-all').disabled, document.querySelector("
        "'.tabs a[data-source=\"dead\"] .pill').textContent, document.querySelector('.tabs a.on').dataset.source];"
    )
    assert page.execute_script(state) == [True, "0", "waiting"]
    m = q.claim()
    assert m is not None and m.dead_letter("RuntimeError: late")
    wait_for(page, lambda d: d.execute_script(state) == [False, "1", "waiting"] and tile(d, "dead") == "1", timeout=30)


def test_requeue_by_clicking_through_the_ui(page: Any, site: Served, r: redis.Redis) -> None:
    emails = fill(r)["emails"]
    page.get(f"{site.url}/queues/emails?source=dead")
    first = read_all(page, "#messages tbody tr[data-id]", "data-id")[0]
    requeue_first = f'#messages tr[data-id="{first}"] button'
    click(page, requeue_first)
    wait_for(page, dialog_open, timeout=10)
    assert text_of(page, "#confirm-title") == f"Requeue dead letter {first}?"
    click(page, "#confirm-dialog button[value=cancel]")
    wait_for(page, lambda d: not dialog_open(d), timeout=10)
    assert emails.stats().dead == 2  # cancelled: nothing changed
    click(page, requeue_first)
    wait_for(page, dialog_open, timeout=10)
    with new_document(page):
        click(page, "#confirm-ok")
    assert text_of(page, "#notice") == "Requeued 1 dead letter."
    s = emails.stats()
    assert (s.dead, s.waiting) == (1, 5)
    assert (tile(page, "dead"), tile(page, "waiting")) == ("1", "5")
    assert first not in read_all(page, "#messages tr[data-id]", "data-id")
    assert first not in [m.id for m in emails.peek(10, source="dead")]
    click(page, "#requeue-all")
    wait_for(page, dialog_open, timeout=10)
    with new_document(page):  # the page it leaves says "Requeued 1 dead letter." too
        click(page, "#confirm-ok")
    assert text_of(page, "#notice") == "Requeued 1 dead letter." and tile(page, "dead") == "0"
    assert emails.stats().dead == 0 and emails.stats().waiting == 6


def test_schedules_pause_resume_and_fire_by_clicking(page: Any, site: Served, r: redis.Redis) -> None:
    """The schedule buttons are plain forms: no dialog, the page reloads with a notice."""
    q = Queue("reports", client=r)
    q.schedule("nightly", cron="0 3 * * *", tz="Europe/Berlin", body="report")
    page.get(f"{site.url}/queues/reports")
    row = '#schedules tr[data-schedule="nightly"]'
    assert read_all(page, f"{row} td")[:3] == ["nightly", "0 3 * * *", "Europe/Berlin"]
    with new_document(page):
        click(page, f"{row} form[action$='/pause'] button")
    assert text_of(page, "#notice") == "Paused schedule nightly." and q.schedules()[0].paused
    assert "paused" in text_of(page, f"{row} td:nth-child(8)")
    with new_document(page):
        click(page, f"{row} form[action$='/resume'] button")
    assert text_of(page, "#notice") == "Resumed schedule nightly." and not q.schedules()[0].paused
    with new_document(page):
        click(page, f"{row} form[action$='/fire'] button")
    (msg,) = q.peek(5)
    assert text_of(page, "#notice") == f"Fired schedule nightly: message {msg.id}."
    assert msg.body == b"report" and q.schedules()[0].fired == 1


def test_the_schedules_table_refreshes_itself_without_a_reload(page: Any, site: Served, r: redis.Redis) -> None:
    """Schedules changed by another process (paused, fired, added) show up in the open page."""
    q = Queue("reports", client=r)
    q.schedule("nightly", cron="0 3 * * *", tz="Europe/Berlin", body="report")
    page.get(f"{site.url}/queues/reports")
    page.execute_script("window.kqMarker = 42;")
    row = '#schedules tr[data-schedule="nightly"]'
    assert text_of(page, f"{row} td:nth-child(8)") == "active"
    assert q.pause_schedule("nightly")
    q.fire_schedule("nightly")
    q.schedule("hourly", every=3600, body="tick")
    wait_for(
        page,
        lambda d: (
            text_of(d, f"{row} td:nth-child(8)") == "paused"
            and text_of(d, f"{row} td:nth-child(6)") == "1"
            and read_all(d, f"{row} form button") == ["Resume", "Fire now"]
            and read_all(d, "#schedules tr[data-schedule]", "data-schedule") == ["hourly", "nightly"]
        ),
        timeout=30,
    )
    assert page.execute_script("return window.kqMarker;") == 42  # the same page: no reload
    with new_document(page):  # the refreshed buttons work
        click(page, f"{row} form[action$='/resume'] button")
    assert text_of(page, "#notice") == "Resumed schedule nightly." and not q.schedules()[1].paused


def test_the_busiest_groups_refresh_themselves_without_a_reload(page: Any, site: Served, r: redis.Redis) -> None:
    """Message groups worked by another process show their new counts in the open page."""
    q = Queue("orders", client=r)
    q.enqueue_many([f"bob {i}" for i in range(4)], group="bob")
    q.enqueue("alice 0", group="alice")
    page.get(f"{site.url}/queues/orders")
    page.execute_script("window.kqMarker = 42;")
    assert read_all(page, "#groups tr[data-group]", "data-group") == ["bob", "alice"]
    assert text_of(page, '#groups tr[data-group="bob"] td[data-k="held"]') == "3"
    for _ in range(2):  # bob's first and alice's (then bob's second is released)
        m = q.claim()
        assert m is not None and m.ack()
    q.enqueue_many([f"carol {i}" for i in range(6)], group="carol")
    wait_for(
        page,
        lambda d: (
            read_all(d, "#groups tr[data-group]", "data-group")[:2] == ["carol", "bob"]
            and text_of(d, '#groups tr[data-group="bob"] td[data-k="held"]') == "2"
            and text_of(d, '#tiles [data-k="held"]') == "7"
        ),
        timeout=30,
    )
    assert page.execute_script("return window.kqMarker;") == 42  # the same page: no reload


def test_a_sharded_queues_page_shows_each_shard_and_refreshes_them(page: Any, site: Served, r: redis.Redis) -> None:
    """A row per shard beside the totals; work done by another process on one shard shows
    in its row and in the totals, in the open page."""
    q = Queue("fanout", client=r, shards=3, max_receives=1)
    keys = [next(k for k in map(str, range(100)) if shard_for(k, 3) == s) for s in range(3)]
    for shard, n in enumerate((4, 2)):  # none on shard 2
        q.enqueue_many([f"{shard}-{i}" for i in range(n)], shard_keys=[keys[shard]] * n)
    page.get(f"{site.url}/queues/fanout")
    page.execute_script("window.kqMarker = 42;")
    assert text_of(page, "#shard-count") == "3 shards"

    def column(d: Any, key: str) -> list[str]:
        return read_all(d, f'#shards tbody tr[data-shard] td[data-k="{key}"]')

    assert read_all(page, "#shards tbody tr[data-shard]", "data-shard") == ["0", "1", "2"]
    assert column(page, "waiting") == ["4", "2", "0"] and tile(page, "waiting") == "6"
    m = q.claim_many(10)
    assert len(m) == 6
    for one in m:
        if one.id.startswith("1#"):
            assert one.dead_letter("ValueError: shard one")
    q.enqueue_many(["a", "b", "c"], shard_keys=[keys[2]] * 3)
    q.enqueue("d", shard_key=keys[2], delay=3600)
    wait_for(
        page,
        lambda d: (
            column(d, "waiting") == ["0", "0", "3"]
            and column(d, "processing") == ["4", "0", "0"]
            and column(d, "dead") == ["0", "2", "0"]
            and column(d, "delayed") == ["0", "0", "1"]
            and [tile(d, k) for k in ("waiting", "processing", "delayed", "dead")] == ["3", "4", "1", "2"]
            and read_all(d, "#shards tfoot td[data-k]")[:4] == ["3", "4", "1", "2"]
        ),
        timeout=30,
    )
    assert page.execute_script("return window.kqMarker;") == 42  # the same page: no reload
    try:
        shoot(page, DOCS / "dashboard-shards.png")  # (the sharding page's picture)
    finally:
        page.set_window_size(1360, 900)
    s = q.stats()
    assert (s.waiting, s.processing, s.delayed, s.dead) == (3, 4, 1, 2)
    # a dead letter's own buttons take its sharded id
    with new_document(page):
        click(page, '.tabs a[data-source="dead"]')
    dead = read_all(page, "#messages tbody tr[data-id]", "data-id")
    assert sorted(dead) == sorted(x.id for x in q.peek(10, source="dead")) and all(i.startswith("1#") for i in dead)
    click(page, f'#messages tr[data-id="{dead[0]}"] button')
    wait_for(page, dialog_open, timeout=10)
    with new_document(page):
        click(page, "#confirm-ok")
    assert text_of(page, "#notice") == "Requeued 1 dead letter."
    wait_for(
        page, lambda d: column(d, "dead") == ["0", "1", "0"] and column(d, "waiting") == ["0", "1", "3"], timeout=30
    )


def test_long_names_and_errors_fit_a_narrow_window(page: Any, site: Served, r: redis.Redis) -> None:
    """800 px wide, a 200-character queue name (the longest allowed) and a 5,000-character
    error: every count stays in view, nothing scrolls sideways, the error is cut."""
    long_name = "orders." + "x" * 193
    q = Queue(long_name, client=r, max_receives=1)
    q.enqueue("order 1")
    m = q.claim()
    assert m is not None and m.dead_letter("ValidationError: " + "field is invalid; " * 280)
    fill(r)
    overflow = (
        "return [document.documentElement.scrollWidth, window.innerWidth, Math.max(...Array.from("
        "document.querySelectorAll(arguments[0]), e => e.getBoundingClientRect().right))];"
    )
    page.set_window_size(800, 900)
    try:
        page.get(site.url + "/")
        page_width, window, rightmost = page.execute_script(overflow, "#overview td[data-k]")
        assert page_width <= window and rightmost <= window, (page_width, window, rightmost)
        page.get(f"{site.url}/queues/{long_name}?source=dead")
        page_width, window, rightmost = page.execute_script(overflow, "#tiles .tile, #messages td")
        assert page_width <= window and rightmost <= window, (page_width, window, rightmost)
        clipped = page.execute_script(
            "return Array.from(document.querySelectorAll('#tiles .tile > *'))"
            ".filter(e => e.scrollWidth > e.clientWidth).map(e => e.textContent);"
        )
        assert clipped == []
        chart, line = page.execute_script(
            "return ['#tiles svg.spark', '#tiles svg.spark line.base'].map("
            "s => document.querySelector(s).getBoundingClientRect().width);"
        )
        assert line > 0.95 * chart  # the rate chart spans its tile (it was drawn 300 px wide, centred)
        shown = text_of(page, "#messages td.error")
        assert shown.startswith("ValidationError: field is invalid;") and len(shown) < 400
        fits = (
            "const t = document.querySelector('#tiles [data-k=oldest_age]'); t.textContent = '23 h 59 m';"
            "const h = document.querySelector('#tiles [data-k=waiting]').getBoundingClientRect().height;"
            "return t.scrollWidth <= t.clientWidth && t.getBoundingClientRect().height === h;"
        )
        for width in (1300, 1100, 800):  # the longest duration on one line, at every layout
            page.set_window_size(width, 900)
            assert page.execute_script(fits), width
    finally:
        page.set_window_size(1360, 900)


def test_an_open_page_says_when_redis_goes_away_and_comes_back(browser: Any) -> None:
    with RedisServer() as own:
        Queue("jobs", client=redis.Redis(port=own.port)).enqueue("x")
        served = Served(create_app(url=own.url))
        try:
            browser.get(served.url + "/")
            assert text_of(browser, "#live") == "live" and cell(browser, "jobs", "waiting") == "1"
            own.stop()
            wait_for(browser, lambda d: text_of(d, "#live") == "Redis unreachable", timeout=30)
            own.start()  # (empty: no persistence)
            Queue("jobs", client=redis.Redis(port=own.port)).enqueue_many(["a", "b"])
            wait_for(browser, lambda d: text_of(d, "#live") == "live" and cell(d, "jobs", "waiting") == "2", timeout=30)
        finally:
            served.stop()
            browser.get_log("browser")  # the 503s fetched meanwhile are logged as errors: expected here


def test_screenshots_for_the_readme(page: Any, site: Served, r: redis.Redis) -> None:
    """Live traffic for about 24 seconds (a sparkline's worth of samples), then the two
    pages as PNGs in docs/."""
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
    wait_for(page, lambda d: cell(d, "webhooks", "ack_rate") not in ("\u2013", "0/s"), timeout=20)
    DOCS.mkdir(exist_ok=True)
    shoot(page, DOCS / "dashboard-overview.png")
    page.get(f"{site.url}/queues/emails?source=dead")
    wait_for(page, lambda d: read_all(d, "#messages td.error"))  # (there is one)
    shoot(page, DOCS / "dashboard-queue.png")
    page.set_window_size(1360, 900)
    for name in ("dashboard-overview.png", "dashboard-queue.png"):
        assert (DOCS / name).stat().st_size > 10_000
