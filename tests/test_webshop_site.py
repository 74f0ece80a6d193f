"""The Flask site: served on 127.0.0.1, same shop as the env, replays, and a real browser."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest

from tests.conftest import require

require("flask", extra="webshop")
require("Stemmer", extra="webshop")

from werkzeug.serving import make_server  # noqa: E402

from envs.webshop.config import WebShopConfig  # noqa: E402
from envs.webshop.env import build_shop  # noqa: E402
from envs.webshop.policies import run_oracle  # noqa: E402
from envs.webshop.site import build_parser, create_app  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    config = WebShopConfig()
    shop = build_shop(config)
    replay_dir = tmp_path_factory.mktemp("replays")
    from envs.webshop.env import WebShopEnv

    episode = run_oracle(WebShopEnv(config, shop=shop), "valid", 2)
    (replay_dir / "oracle2.json").write_text(json.dumps({"split": "valid", "index": 2, "actions": episode.actions}))
    srv = make_server("127.0.0.1", 0, create_app(shop, config, replay_dir), threaded=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv, shop, episode
    srv.shutdown()
    thread.join(timeout=5)


def _url(srv, path):
    return f"http://127.0.0.1:{srv.server_port}{path}"


def _get(url, data=None):
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    with urllib.request.urlopen(url, data=body, timeout=10) as resp:
        return resp.geturl(), resp.read().decode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _external_ip() -> str | None:
    """A non-loopback address of this machine, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent; picks the outgoing interface
            ip = s.getsockname()[0]
        except OSError:
            return None
    return None if ip.startswith("127.") else ip


def test_cli_serves_on_localhost_only():
    assert build_parser().parse_args([]).host == "127.0.0.1"
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "envs.webshop.site", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                _, html = _get(f"http://127.0.0.1:{port}/")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "site did not start"
                time.sleep(0.2)
        assert "valid goal 0" in html
        ip = _external_ip()
        if ip is not None:
            with pytest.raises(OSError):
                socket.create_connection((ip, port), timeout=2).close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_fetch_search_and_item_pages(server):
    srv, shop, _ = server
    url, html = _get(_url(srv, "/start/valid/5"))
    assert 'id="search_input"' in html
    goal = shop.catalog.goals[5]
    assert goal.instruction_text in html
    act = url + "/act"
    _, html = _get(act, {"search_query": goal.name})
    assert "Page 1 (Total results: 50)" in html and goal.asin in html
    _, html = _get(act, {"action": f"click[{goal.asin.lower()}]"})
    product = shop.product(goal.asin)
    assert product.title in html and "Buy Now" in html and f"Price: {product.price_tag}" in html


def test_replay_walks_a_recorded_episode(server):
    srv, _, episode = server
    _, first = _get(_url(srv, "/replay/oracle2"))
    assert "step 0 of" in first and 'id="search_input"' in first and "disabled" in first
    _, last = _get(_url(srv, f"/replay/oracle2?step={len(episode.actions)}"))
    assert "Thank you for shopping with us!" in last and "<p>1.0</p>" in last
    with pytest.raises(urllib.error.HTTPError):
        _get(_url(srv, "/replay/..%2Fetc"))


def _chromium():
    path = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if path is None or driver is None:
        message = "needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path, driver


@pytest.mark.slow
def test_headless_browser_search_item_buy(server):
    chromium, driver_path = _chromium()
    webdriver = require("selenium.webdriver", extra="dev")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    srv, shop, _ = server
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver_path), options=options)
    browser.implicitly_wait(10)  # find_element waits for the page a click led to

    def wait_for(text):
        WebDriverWait(browser, 10).until(lambda b: text in b.page_source)

    try:
        browser.get(_url(srv, "/start/valid/9"))
        goal = shop.catalog.goals[9]
        browser.find_element(By.ID, "search_input").send_keys(goal.name)
        browser.find_element(By.ID, "search_button").click()
        wait_for("Total results")
        browser.find_element(By.CSS_SELECTOR, f'button.product-link[value="click[{goal.asin.lower()}]"]').click()
        for value in goal.goal_options:
            browser.find_element(By.CSS_SELECTOR, f'button.option[value="click[{value}]"]').click()
            assert browser.find_element(By.CSS_SELECTOR, f'button.option.chosen[value="click[{value}]"]')
        browser.find_element(By.XPATH, "//button[text()='Buy Now']").click()
        wait_for("Thank you for shopping with us!")
        assert re.search(r"<p>1\.0</p>", browser.page_source)
    finally:
        browser.quit()
