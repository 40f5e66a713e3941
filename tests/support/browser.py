"""Headless Chromium for the tests, driven over the Chrome DevTools Protocol (CDP) with the ``websockets``
client (in requirements-dev.txt): no browser download, no chromedriver, and CDP shows every request a
page makes, so a test can prove a page stays offline (only 127.0.0.1).

Needs Debian's ``chromium`` package (``apt-get install chromium``; ``.ci/run`` installs it) or a Chromium
named by ``EDGEDRIFT_CHROMIUM``; without one the tests fail, they do not skip.
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from websockets.sync.client import connect
from websockets.sync.connection import Connection

__all__ = ["Browser", "Page", "only_local"]

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

    def wait_js(self, expression: str, what: str, timeout: float = 15) -> Any:
        """Poll a JavaScript expression until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"page never showed {what} within {timeout} s")
            time.sleep(0.05)

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

    def set_width(self, width: int, height: int = 800) -> None:
        """Lay the page out at ``width`` CSS pixels (as a window of that width would)."""
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def screenshot(self, path: Path, width: int = 1280) -> None:
        """The whole page at ``width`` pixels (laid out at that width first) as a PNG."""
        self.set_width(width)
        height = int(self.evaluate("Math.ceil(document.documentElement.scrollHeight)"))
        self.set_width(width, height)
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


def only_local(requests: list[dict[str, Any]]) -> list[str]:
    """URLs a page asked for on a host other than 127.0.0.1 (data: URLs need no network)."""
    return [
        r["url"]
        for r in requests
        if not r["url"].startswith("data:") and urlsplit(r["url"]).hostname != "127.0.0.1"
    ]
