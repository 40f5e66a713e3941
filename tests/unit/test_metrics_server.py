"""The agent's ``/metrics`` server renders at most once per ``max_age_s`` however many scrapes arrive, at
once or in a loop (the endpoint has no credential, and a render reads every device with the GIL the
worker needs), keeps a render per form (text, OpenMetrics, gzip), and closes a connection that sends
nothing."""

from __future__ import annotations

import gzip
import socket
import threading
import time

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from edgedrift_edge import metrics_server
from edgedrift_edge.metrics_server import CachedExposition, serve


class Slow(Collector):
    """A collector that counts its reads and takes 20 ms for each (a large gateway's)."""

    def __init__(self) -> None:
        self.reads = 0

    def collect(self):  # type: ignore[no-untyped-def]
        self.reads += 1
        time.sleep(0.02)
        yield CounterMetricFamily("reads", "collections so far", value=self.reads)


def test_scrapes_in_a_loop_and_at_once_cost_one_render_per_interval() -> None:
    registry = CollectorRegistry()
    slow = Slow()
    registry.register(slow)
    server, _thread = serve(registry, 0, "127.0.0.1", max_age_s=0.5)
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    try:
        bodies: list[str] = []

        def scrape_loop() -> None:
            with httpx.Client(timeout=5) as client:
                end = time.monotonic() + 1.2
                while time.monotonic() < end:
                    bodies.append(client.get(url).text)

        threads = [threading.Thread(target=scrape_loop) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(bodies) > 50 and all("reads_total" in b for b in bodies)
        assert slow.reads <= 4, f"{slow.reads} renders for {len(bodies)} scrapes in 1.2 s"  # 0, 0.5, 1.0 s
        time.sleep(0.6)
        assert f"reads_total {slow.reads + 1}.0" in httpx.get(url, timeout=5).text, (
            "a new render after the age"
        )
    finally:
        server.shutdown()
        server.server_close()


def test_each_form_has_its_own_render_and_other_methods_are_answered_as_before() -> None:
    registry = CollectorRegistry()
    Counter("things", "things counted", registry=registry).inc(3)
    app = CachedExposition(registry, max_age_s=60)
    answers: list[tuple[str, list[tuple[str, str]]]] = []

    def call(**environ: str) -> bytes:
        base = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": ""}
        return b"".join(app(base | environ, lambda s, h: answers.append((s, h))))

    text = call(HTTP_ACCEPT="text/plain")
    assert b"things_total 3.0" in text and app.renders == 1
    assert call(HTTP_ACCEPT="*/*") == text and app.renders == 1
    om = call(HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert om.endswith(b"# EOF\n") and app.renders == 2
    zipped = call(HTTP_ACCEPT_ENCODING="gzip, deflate")
    assert gzip.decompress(zipped) == text and ("Content-Encoding", "gzip") in answers[-1][1]
    assert call(REQUEST_METHOD="POST").startswith(b"# HTTP 405") and app.renders == 3


def test_a_connection_that_sends_nothing_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_server._QuietHandler, "timeout", 0.3)
    server, _thread = serve(CollectorRegistry(), 0, "127.0.0.1")
    try:
        with socket.create_connection(("127.0.0.1", server.server_port), timeout=5) as idle:
            start = time.monotonic()
            assert idle.recv(1) == b""  # closed by the server, not by our own timeout
            assert time.monotonic() - start < 3
    finally:
        server.shutdown()
        server.server_close()
