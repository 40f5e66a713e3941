"""The harness's wait for a starting server (``edgedrift_harness.processes.wait_answering``), which the
cloud, Prometheus and so the demo, the benchmarks and most integration tests go through: it returns once
the server answers 200, gives up when the process exits, and polls through one HTTP client."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from edgedrift_harness.processes import wait_answering


class _ReadyAfterThree(BaseHTTPRequestHandler):
    """503 for the first three requests, then 200, as a server that is still starting."""

    seen = 0

    def do_GET(self) -> None:
        type(self).seen += 1
        self.send_response(200 if self.seen > 3 else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_the_wait_ends_when_the_server_answers_and_uses_one_client(
    sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    _ReadyAfterThree.seen = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ReadyAfterThree)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    clients: list[httpx.Client] = []

    class Counted(httpx.Client):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            clients.append(self)

    monkeypatch.setattr(httpx, "Client", Counted)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/readyz"
        assert wait_answering(url, sleeper, timeout=30)
    finally:
        server.shutdown()
        server.server_close()
    assert _ReadyAfterThree.seen == 4
    assert len(clients) == 1


def test_the_wait_gives_up_when_the_process_exits_or_time_runs_out(sleeper: subprocess.Popen[bytes]) -> None:
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    started = time.monotonic()
    assert not wait_answering("http://127.0.0.1:9/readyz", exited, timeout=30)
    assert time.monotonic() - started < 5
    started = time.monotonic()
    assert not wait_answering("http://127.0.0.1:9/readyz", sleeper, timeout=0.5)
    assert 0.5 <= time.monotonic() - started < 5
