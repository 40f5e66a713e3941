"""The edge's cloud client against a real cloud: a gateway's devices share one client, so a thousand
calls at once wait on its semaphore, never more than ``concurrency`` on the wire, and all arrive."""

from __future__ import annotations

import gc
import importlib.abc
import sys
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from support.cloud import DEVICES, CloudServer

from edgedrift.wire import Heartbeat
from edgedrift_edge.cloud.client import CloudClient, CloudError


def test_many_calls_at_once_keep_to_the_concurrency_and_all_arrive(tmp_path: Path) -> None:
    server = CloudServer(f"sqlite:///{tmp_path / 'registry.db'}", tmp_path).start()
    client = CloudClient(server.url, concurrency=4, deadline_s=120)
    try:
        beats = [
            client.heartbeat(device, DEVICES[device], Heartbeat(samples=i))
            for i in range(300)
            for device in ("dev-a", "dev-b")
        ]
        for beat in beats:
            beat.result(timeout=180)
        assert client.peak_in_flight == 4
        assert server.counters("dev-a")["heartbeats"] == 300
        assert server.counters("dev-b")["heartbeats"] == 300
    finally:
        client.close()
        server.stop()


class _SlowForSome(BaseHTTPRequestHandler):
    """Answers 201 at once, or after 1.5 s for a device whose id starts with ``slow``."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path.startswith("/v1/devices/slow"):
            time.sleep(1.5)
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_: object) -> None:
        pass


def test_calls_past_their_deadline_fail_and_the_client_stays_usable() -> None:
    """A heartbeat that waits for a slot longer than the deadline, or for its answer, ends with a
    retryable error naming the limit; requests are never cancelled from outside httpx (that leaks pool
    slots), so the client still reaches the server afterwards."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowForSome)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = CloudClient(f"http://127.0.0.1:{server.server_address[1]}", concurrency=2, deadline_s=0.5)
    try:
        started = time.monotonic()
        slow = [client.heartbeat(f"slow-{i}", None, Heartbeat(samples=i)) for i in range(12)]
        for call in slow:
            limit = r"(no free connection within|no answer within the) 0\.5 s"
            with pytest.raises(CloudError, match=limit) as caught:
                call.result(timeout=30)
            assert caught.value.retryable
        assert time.monotonic() - started < 10
        fast = [client.heartbeat(f"fast-{i}", None, Heartbeat(samples=i)) for i in range(8)]
        for call in fast:
            call.result(timeout=30)
        assert client.peak_in_flight == 2
    finally:
        client.close()
        server.shutdown()
        server.server_close()


def test_a_closed_client_leaves_no_socket_open() -> None:
    """Closing the client closes its event loop too: a stopped loop that is not closed keeps its self-pipe
    sockets until the garbage collector warns about them, in whatever test happens to run then."""
    client = CloudClient("http://127.0.0.1:9")
    client.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del client
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


class _ImportRecorder(importlib.abc.MetaPathFinder):
    """Records every import of the client's thread that reaches the finders (a module not in
    ``sys.modules``); other threads of the test process are not the client's."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if threading.current_thread().name == "edgedrift-cloud":
            self.names.append(fullname)


def test_requests_import_nothing_once_the_client_is_warm() -> None:
    """httpcore asks ``import sniffio`` in every async request and lock it sets up; without sniffio
    installed each of those imports fails anew and walks ``sys.path`` (a quarter of a 1,000-device
    gateway's cloud thread), so the edge depends on it and a warm client's requests import nothing."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowForSome)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = CloudClient(f"http://127.0.0.1:{server.server_address[1]}", concurrency=2, deadline_s=30)
    recorder = _ImportRecorder()
    try:
        client.heartbeat("fast-0", None, Heartbeat(samples=0)).result(timeout=30)
        sys.meta_path.insert(0, recorder)
        for call in [client.heartbeat(f"fast-{i}", None, Heartbeat(samples=i)) for i in range(1, 21)]:
            call.result(timeout=30)
    finally:
        if recorder in sys.meta_path:
            sys.meta_path.remove(recorder)
        client.close()
        server.shutdown()
        server.server_close()
    assert recorder.names == []


def test_requests_leave_nothing_for_the_cycle_collector() -> None:
    """httpx 0.28 binds each response's stream back to the response (encode/httpx#3733), a cycle that
    kept every request's objects until a collection of the oldest generation: a gateway's thousand
    devices' requests held its memory up between two of them. The client releases each response, so
    reference counting frees it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowForSome)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = CloudClient(f"http://127.0.0.1:{server.server_address[1]}", concurrency=2, deadline_s=30)
    try:
        client.heartbeat("fast-0", None, Heartbeat(samples=0)).result(timeout=30)
        gc.collect()
        gc.disable()
        for call in [client.heartbeat(f"fast-{i}", None, Heartbeat(samples=i)) for i in range(1, 21)]:
            call.result(timeout=30)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, (httpx.Response, httpx.Request))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        client.close()
        server.shutdown()
        server.server_close()
    assert left == []
