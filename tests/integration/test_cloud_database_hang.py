"""A database that stops answering (issue 12, row 7): a proxy in front of PostgreSQL forwards nothing
any more, with every connection left open. ``/healthz`` never waits on the database, ``/readyz`` answers
503 within its own deadline, API calls answer 503 + ``Retry-After`` within the configured timeouts
instead of holding their threads, and everything works again once the database answers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from support.cloud import DEVICES, CloudServer

from edgedrift_harness.tcp_proxy import TcpProxy

A = DEVICES["dev-a"]
#: Statement timeout of the server under test; the client gives up 2 s after it (ANSWER_MARGIN_S).
STATEMENT_S = 2.0


def through(proxy: TcpProxy, url: str) -> str:
    parts = urlsplit(url)
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}"))


@pytest.fixture
def hung(postgres_url_fresh: str, tmp_path: Path) -> Iterator[tuple[CloudServer, TcpProxy]]:
    parts = urlsplit(postgres_url_fresh)
    with TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        server = CloudServer(
            through(proxy, postgres_url_fresh),
            tmp_path,
            EDGEDRIFT_CLOUD_DATABASE_CONNECT_TIMEOUT_S="1",
            EDGEDRIFT_CLOUD_DATABASE_STATEMENT_TIMEOUT_S=str(STATEMENT_S),
            EDGEDRIFT_CLOUD_READINESS_TIMEOUT_S="1",
            EDGEDRIFT_CLOUD_TRAINING_PROCESSES="false",
        ).start()
        try:
            yield server, proxy
        finally:
            proxy.resume()
            server.stop()


def timed(call: httpx.Client, path: str) -> tuple[httpx.Response, float]:
    start = time.monotonic()
    response = call.get(path)
    return response, time.monotonic() - start


def own_client_get(server: CloudServer, path: str) -> tuple[httpx.Response, float]:
    with server.client(A) as c:
        return timed(c, path)


def test_a_hung_database_is_answered_503_and_health_stays_up(hung: tuple[CloudServer, TcpProxy]) -> None:
    server, proxy = hung
    with ThreadPoolExecutor(16) as pool:  # several pooled connections, which will hang mid-use
        warm = list(pool.map(lambda _: own_client_get(server, "/v1/devices/dev-a/models"), range(64)))
    assert all(r.status_code == 200 for r, _ in warm)
    proxy.hang()
    with ThreadPoolExecutor(48) as pool, server.client(A) as probe:
        # more API calls than the server has worker threads, all waiting on the silent database
        calls = [pool.submit(own_client_get, server, "/v1/devices/dev-a/models") for _ in range(48)]
        time.sleep(1.0)
        health = [timed(probe, "/healthz") for _ in range(5)]
        ready, ready_s = timed(probe, "/readyz")
        replies = [f.result() for f in calls]
    assert all(r.status_code == 200 for r, _ in health)
    assert max(s for _, s in health) < 1.0, [s for _, s in health]
    assert ready.status_code == 503 and ready_s < 3.0, (ready.text, ready_s)
    assert "unavailable" in ready.text
    codes = sorted({r.status_code for r, _ in replies})
    assert codes == [503], [(r.status_code, r.text[:200]) for r, _ in replies]
    assert all(int(r.headers["Retry-After"]) >= 1 for r, _ in replies)
    assert all("database" in r.json()["detail"] for r, _ in replies)
    # connect 1 s + answer (statement 2 s + 2 s), thread-pool queueing aside: well under a minute
    assert max(s for _, s in replies) < 30.0, sorted(s for _, s in replies)[-5:]
    proxy.resume()
    deadline = time.monotonic() + 30
    with server.client(A) as c:
        while c.get("/v1/devices/dev-a/models").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert c.get("/v1/devices/dev-a/models").status_code == 200
        while c.get("/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert c.get("/readyz").status_code == 200
