"""The operator dashboard in a real headless Chromium against a real cloud trainer.

Chromium is driven over the Chrome DevTools Protocol (CDP) with the ``websockets`` client (in
requirements-dev.txt; ``uvicorn[standard]`` installs it anyway): no browser download, no
chromedriver, and CDP shows every request the page makes, so the test can prove the page stays
offline (only 127.0.0.1).

Needs Debian's ``chromium`` package (``apt-get install chromium``; ``.ci/run`` installs it) or a
Chromium named by ``EDGEDRIFT_CHROMIUM``; without one the tests fail, they do not skip.
Screenshots go to ``test-artifacts/dashboard.png`` and ``test-artifacts/dashboard-refused.png``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
from support.cloud import DEVICES, OPERATOR, CloudServer
from websockets.sync.client import connect
from websockets.sync.connection import Connection

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("EDGEDRIFT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--window-size=1280,900",
    # Any host but the test server resolves to nothing: a CDN dependency would break the page.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]

#: dev-a's history, oldest first: a heartbeat's accuracy, or a recompute's reason.
DEV_A_HISTORY: list[float | str] = [0.92, 0.90, "druid", 0.64, "ddm", 0.88, "manual", 0.93]
DEV_A_ACCURACIES = [h for h in DEV_A_HISTORY if isinstance(h, float)]
DEV_A_REASONS = [h for h in DEV_A_HISTORY if isinstance(h, str)]

#: What the tests read from the page: totals, and per card its points, markers and tooltips.
SNAPSHOT_JS = """(() => {
  const error = document.querySelector("[data-error]");
  if (error === null) return null;  // not the dashboard (yet)
  const value = (node) => (node ? node.dataset.value : null);
  const totals = {};
  for (const node of document.querySelectorAll("[data-total]")) totals[node.dataset.total] = value(node);
  const devices = {};
  for (const card of document.querySelectorAll("article[data-device]")) {
    const chart = (series) => card.querySelector(`svg[data-series="${series}"]`);
    const points = (series) => [...(chart(series)?.querySelectorAll("circle.point") ?? [])];
    devices[card.dataset.device] = {
      title: card.querySelector("h2").textContent,
      counters: Object.fromEntries(
        [...card.querySelectorAll("[data-counter]")].map((n) => [n.dataset.counter, value(n)])),
      recomputes: points("recomputes").map((c) => ({cy: +c.getAttribute("cy"), title: c.textContent})),
      accuracy: points("accuracy").map((c) => ({cy: +c.getAttribute("cy"), title: c.textContent,
                                                accuracy: +c.dataset.accuracy})),
      events: [...(chart("accuracy")?.querySelectorAll("line.event") ?? [])].map((l) => l.textContent),
      empty: [...card.querySelectorAll("svg text.empty")].map((t) => t.textContent),
    };
  }
  return {
    totals, devices,
    updated: document.querySelector("[data-updated]").getAttribute("datetime"),
    error: error.hidden ? null : error.textContent,
    login: !document.querySelector("[data-login]").hidden,
    hash: location.hash,
    stored: sessionStorage.getItem("edgedrift.operatorToken"),
  };
})()"""


# ---------------------------------------------------------------------------- a minimal CDP client


class Page:
    """One browser tab over CDP: commands, buffered events, JavaScript evaluation."""

    def __init__(self, ws: Connection) -> None:
        self.ws = ws
        self.last_id = 0
        self.events: list[dict[str, Any]] = []

    def _receive(self, deadline: float) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        if "method" in message:
            self.events.append(message)
        return message

    def send(self, method: str, timeout: float = 30, **params: Any) -> dict[str, Any]:
        self.last_id += 1
        self.ws.send(json.dumps({"id": self.last_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = self._receive(deadline)
            if message.get("id") == self.last_id:
                if "error" in message:
                    raise RuntimeError(f"CDP {method} failed: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def snapshot(self) -> dict[str, Any] | None:
        """The dashboard's state as SNAPSHOT_JS reads it, None while the dashboard is not loaded."""
        snap: dict[str, Any] | None = self.evaluate(SNAPSHOT_JS)
        return snap

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], what: str, timeout: float = 15
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            snap = self.snapshot()
            if snap is not None and predicate(snap):
                return snap
            if time.monotonic() > deadline:
                raise AssertionError(f"page never showed {what} within {timeout} s; last state:\n{snap}")
            time.sleep(0.1)

    def goto(self, url: str, timeout: float = 15) -> None:
        """Navigate and wait for the load event of the new document."""
        seen = len(self.events)
        self.send("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while not any(e["method"] == "Page.loadEventFired" for e in self.events[seen:]):
            self._receive(deadline)

    def requests(self) -> list[dict[str, Any]]:
        return [e["params"]["request"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def errors(self) -> list[str]:
        """Uncaught exceptions, console.error calls and browser log errors (CSP, failed loads)."""
        found = []
        for e in self.events:
            p = e["params"]
            if e["method"] == "Runtime.exceptionThrown":
                found.append(f"exception: {p['exceptionDetails']}")
            elif e["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                found.append(f"console.{p['type']}: {p['args']}")
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
                found.append(
                    f"log ({p['entry']['source']}): {p['entry']['text']} {p['entry'].get('url', '')}"
                )
        return found

    def screenshot(self, path: Path) -> None:
        height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
        self.send(
            "Emulation.setDeviceMetricsOverride", width=1280, height=height, deviceScaleFactor=1, mobile=False
        )
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))


class Browser:
    """Headless Chromium with the DevTools endpoint on a free port (read from DevToolsActivePort)."""

    def __init__(self) -> None:
        if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
            pytest.fail(
                f"Chromium not found at {CHROMIUM}: the dashboard test needs a real browser. "
                "Install Debian's package: sudo apt-get install -y chromium",
                pytrace=False,
            )
        self.profile = Path(tempfile.mkdtemp(prefix="edgedrift-chromium-"))
        self.log = self.profile / "chromium.log"
        cmd = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-port=0"]
        with self.log.open("wb") as out:
            # A session of its own, so that stop() ends Chromium's helper processes with it.
            self.proc = subprocess.Popen(
                [*cmd, "about:blank"], stdout=out, stderr=out, start_new_session=True
            )
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Chromium did not start:\n{self.log.read_text(errors='replace')}")
            time.sleep(0.05)
        self.http = httpx.Client(
            base_url=f"http://127.0.0.1:{port_file.read_text().split()[0]}", trust_env=False
        )

    @contextmanager
    def new_page(self) -> Iterator[Page]:
        """A new tab, closed afterwards; it has its own sessionStorage."""
        target = self.http.put("/json/new?about:blank").raise_for_status().json()
        try:
            with connect(target["webSocketDebuggerUrl"], max_size=None, proxy=None, open_timeout=10) as ws:
                page = Page(ws)
                for domain in ("Page", "Network", "Runtime", "Log"):
                    page.send(f"{domain}.enable")
                yield page
        finally:
            self.http.get(f"/json/close/{target['id']}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if hasattr(self, "http"):
            self.http.close()
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = Browser()
    try:
        yield chromium
    finally:
        chromium.stop()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh tab (so a fresh sessionStorage) for each test."""
    with browser.new_page() as tab:
        yield tab


# ---------------------------------------------------------------------------- data


def recompute(cloud: CloudServer, device: str, reason: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, 3))
    y = np.where(X @ np.array([1.0, -0.5, 0.25]) > 0, 1.0, -1.0)
    body = {
        "task": "classification",
        "learner": "logistic",
        "X": X.tolist(),
        "y": y.tolist(),
        "reason": reason,
    }
    with cloud.client(DEVICES[device]) as c:
        r = c.post(f"/v1/devices/{device}/models", json=body)
    assert r.status_code == 201, r.text


def heartbeat(cloud: CloudServer, device: str, accuracy: float, i: int) -> None:
    beat = {
        "samples": 500 * (i + 1),
        "accuracy": accuracy,
        "warnings": int(accuracy < 0.8),
        "model_version": None,
    }
    with cloud.client(DEVICES[device]) as c:
        r = c.post(f"/v1/devices/{device}/stats", json=beat)
    assert r.status_code == 201, r.text


def only_local(requests: list[dict[str, Any]]) -> list[str]:
    """URLs the page asked for on a host other than 127.0.0.1 (data: URLs need no network)."""
    return [
        r["url"]
        for r in requests
        if not r["url"].startswith("data:") and urlsplit(r["url"]).hostname != "127.0.0.1"
    ]


# ---------------------------------------------------------------------------- tests


def test_without_token_asks_for_it_and_explains_refusals(sqlite_cloud: CloudServer, page: Page) -> None:
    page.goto(f"{sqlite_cloud.url}/dashboard")
    snap = page.wait_for(lambda s: s["login"], "the token form")
    assert snap["login"] and snap["devices"] == {} and snap["error"] is None
    assert not [r for r in page.requests() if "/v1/fleet" in r["url"]], (
        "no token, so no request for the fleet"
    )

    def submit(token: str) -> None:
        page.evaluate(
            "(() => { const f = document.querySelector('[data-login]');"
            f" f.elements.token.value = {json.dumps(token)}; f.requestSubmit(); }})()"
        )

    submit("not-the-operator-token-0123456789")
    snap = page.wait_for(lambda s: s["error"] is not None, "the 401 message")
    assert "401" in snap["error"] and "operator token was rejected" in snap["error"], snap["error"]
    assert snap["login"] and snap["stored"] is None

    submit(DEVICES["dev-a"])  # a valid credential, but a device's, not the operator's
    snap = page.wait_for(lambda s: s["error"] is not None and "403" in s["error"], "the 403 message")
    assert "not the operator's" in snap["error"] and snap["login"]
    page.screenshot(ARTIFACTS / "dashboard-refused.png")

    submit(OPERATOR)
    snap = page.wait_for(lambda s: set(s["devices"]) == set(DEVICES), "the device cards")
    assert not snap["login"] and snap["error"] is None and snap["stored"] == OPERATOR

    page.evaluate("document.querySelector('[data-action=forget]').click()")
    snap = page.wait_for(lambda s: s["login"], "the token form after 'Forget token'")
    assert snap["stored"] is None and snap["devices"] == {}
    assert only_local(page.requests()) == []


def test_dashboard_renders_fleet_and_refreshes_itself(sqlite_cloud: CloudServer, page: Page) -> None:
    for i, item in enumerate(DEV_A_HISTORY):
        if isinstance(item, str):
            recompute(sqlite_cloud, "dev-a", item, seed=i)
        else:
            heartbeat(sqlite_cloud, "dev-a", item, i)
        time.sleep(0.05)  # distinct, ordered server timestamps
    recompute(sqlite_cloud, "dev-b", "ddm", seed=100)

    started = time.monotonic()
    page.goto(f"{sqlite_cloud.url}/dashboard?refresh=1#token={OPERATOR}")
    snap = page.wait_for(lambda s: s["totals"].get("recomputes") == "4", "4 recomputes in the totals")
    first_render = time.monotonic() - started

    # The token moved from the address bar to sessionStorage.
    assert snap["hash"] == "" and snap["stored"] == OPERATOR
    assert snap["totals"]["devices"] == "2" and snap["totals"]["heartbeats"] == "5"
    a, b = snap["devices"]["dev-a"], snap["devices"]["dev-b"]
    assert (
        a["title"] == "dev-a"
        and a["counters"]["recomputes"] == "3"
        and a["counters"]["last_reason"] == "manual"
    )

    # Cumulative recomputes: one point per recompute, each higher than the one before, reason in the tooltip.
    assert len(a["recomputes"]) == 3 and len(b["recomputes"]) == 1
    assert [p["cy"] for p in a["recomputes"]] == sorted((p["cy"] for p in a["recomputes"]), reverse=True)
    for point, reason in zip(a["recomputes"], DEV_A_REASONS, strict=True):
        assert f"reason: {reason}" in point["title"]

    # Accuracy: one point per heartbeat, higher accuracy drawn higher; one marker per recompute.
    assert [p["accuracy"] for p in a["accuracy"]] == DEV_A_ACCURACIES
    order_by_height = sorted(a["accuracy"], key=lambda p: p["cy"])
    assert [p["accuracy"] for p in order_by_height] == sorted(DEV_A_ACCURACIES, reverse=True)
    assert "64.0%" in a["accuracy"][2]["title"]
    assert len(a["events"]) == 3 and all(
        f"reason: {r}" in e for r, e in zip(DEV_A_REASONS, a["events"], strict=True)
    )

    # dev-b has no heartbeats: an empty accuracy chart that still marks its recompute.
    assert b["accuracy"] == [] and len(b["events"]) == 1 and "No heartbeats yet" in b["empty"]

    page.screenshot(ARTIFACTS / "dashboard.png")

    # One more recompute: the page shows it by itself within the refresh period (1 s).
    updated_before = snap["updated"]
    recompute(sqlite_cloud, "dev-a", "druid", seed=99)
    posted = time.monotonic()
    snap = page.wait_for(
        lambda s: len(s["devices"]["dev-a"]["recomputes"]) == 4,
        "the 4th recompute after a refresh",
        timeout=10,
    )
    refreshed_after = time.monotonic() - posted
    assert snap["updated"] != updated_before
    assert snap["totals"]["recomputes"] == "5" and len(snap["devices"]["dev-a"]["events"]) == 4
    assert refreshed_after < 1 + 4, f"refresh took {refreshed_after:.1f} s with ?refresh=1"

    # Offline: every request went to the test server, and the fleet was read with the bearer token.
    requests = page.requests()
    assert only_local(requests) == [], only_local(requests)
    fleet = [r for r in requests if urlsplit(r["url"]).path == "/v1/fleet"]
    assert len(fleet) >= 2
    assert all(r["headers"].get("Authorization") == f"Bearer {OPERATOR}" for r in fleet)
    assert not [r for r in requests if OPERATOR in r["url"]], "the token must never be in a URL"
    assert page.errors() == []
    print(f"first render {first_render:.2f} s, refresh seen {refreshed_after:.2f} s after the post")
