"""Authentication before any work, on every route (issue 28, rows 2 and 10), against a real uvicorn
server: a body is never read before its credential is known to be valid for the route's subject (the
gateway routes included), the failed-login limiter covers every route, keys on the presented
credential as well as the peer (a NAT's valid devices and the operator are not locked out), and
``X-Forwarded-For`` counts only from a configured proxy."""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from support.cloud import DEVICES, OPERATOR, CloudServer
from support.raw_http import head_only

from edgedrift_harness.ports import HOST

A, B = DEVICES["dev-a"], DEVICES["dev-b"]
SIXTEEN_MIB = 16 * 1024 * 1024 - 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CloudServer]:
    """One server; each test acts from loopback addresses of its own (the limiter counts per address)."""
    workdir = tmp_path_factory.mktemp("auth-first")
    server = CloudServer(
        f"sqlite:///{workdir / 'r.db'}",
        workdir,
        EDGEDRIFT_CLOUD_TRAINING_PROCESSES="false",
        EDGEDRIFT_CLOUD_AUTH_FAILURES_PER_10S="50",
        EDGEDRIFT_CLOUD_FORWARDED_ALLOW_IPS="127.0.0.2",
    ).start()
    try:
        yield server
    finally:
        server.stop()


def client(server: CloudServer, token: str | None, source: str) -> httpx.Client:
    """An HTTP client from the loopback address ``source``."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    transport = httpx.HTTPTransport(local_address=source)
    return httpx.Client(base_url=server.url, headers=headers, transport=transport, timeout=10)


def test_every_route_refuses_from_the_headers(server: CloudServer) -> None:
    """Row 2: an unknown credential on a gateway route, and a known one on a route that is not its
    own, are refused before a byte of the body is read."""
    for path in ("/v1/gateways/gw-1/heartbeats", "/v1/gateways/gw-1/sync", "/v1/gateways/gw-1/devices"):
        for token in (None, "wrong-token-but-long-enough-0000"):
            answer = head_only(server, path, SIXTEEN_MIB, token)
            assert answer.startswith(b"HTTP/1.1 401"), (path, token, answer[:80])
    for path in ("/v1/gateways/gw-1/heartbeats", "/v1/gateways/gw-1/sync"):
        answer = head_only(server, path, SIXTEEN_MIB, A)  # a device's secret is not the gateway's
        assert answer.startswith(b"HTTP/1.1 401"), (path, answer[:80])
    for path in ("/v1/gateways/gw-1/devices", "/v1/bulk/heartbeats", "/v1/devices/dev-b/history"):
        answer = head_only(server, path, SIXTEEN_MIB, A)
        assert answer.startswith(b"HTTP/1.1 403"), (path, answer[:80])


def _unauthenticated_bodies(server: CloudServer, stop: threading.Event, statuses: list[int]) -> None:
    """One attacker thread: a 16 MiB JSON body to a gateway route without a credential, sent whole
    unless the server answers from the headers alone, again and again."""
    body = b'{"heartbeats": [' + b" " * (SIXTEEN_MIB - 18) + b"]}"
    head = (
        f"POST /v1/gateways/gw-1/heartbeats HTTP/1.1\r\nHost: {HOST}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    while not stop.is_set():
        try:
            with socket.create_connection((HOST, server.port), 10, ("127.0.0.3", 0)) as sock:
                sock.sendall(head)
                sock.settimeout(0.2)
                try:
                    answer = sock.recv(64)
                except TimeoutError:
                    sock.settimeout(10)
                    sock.sendall(body)
                    answer = sock.recv(64)
                statuses.append(int(answer.split(b" ")[1]) if answer.startswith(b"HTTP/1.1") else 0)
        except OSError:
            statuses.append(0)


def test_unauthenticated_16_mib_bodies_cost_the_health_check_nothing(server: CloudServer) -> None:
    """Row 2's attack: 3 clients at a time post 16 MiB bodies to /v1/gateways/* without a credential
    (on today's code each was read and parsed on the event loop: /healthz p50 4 ms -> 5.4 s); the
    limiter covers the gateway routes too (429 past 50 failures in 10 s)."""
    stop, statuses = threading.Event(), list[int]()
    attackers = [
        threading.Thread(target=_unauthenticated_bodies, args=(server, stop, statuses)) for _ in range(3)
    ]
    for t in attackers:
        t.start()
    healthz: list[float] = []
    try:
        with httpx.Client(base_url=server.url, timeout=10) as probe:
            deadline = time.monotonic() + 6.0
            while time.monotonic() < deadline:
                start = time.perf_counter()
                assert probe.get("/healthz").status_code == 200
                healthz.append((time.perf_counter() - start) * 1000)
                time.sleep(0.05)
    finally:
        stop.set()
        for t in attackers:
            t.join(30)
    assert len(statuses) > 50 and set(statuses) <= {401, 429}, sorted(set(statuses))
    assert 429 in statuses, "the failed-login limiter covers the gateway routes"
    assert statistics.median(healthz) < 50, f"/healthz p50 {statistics.median(healthz):.0f} ms"


def test_a_blocked_address_keeps_its_proven_credentials(server: CloudServer) -> None:
    """Row 10: 60 wrong tokens from the address of a NAT (or a gateway host) block wrong and new
    credentials from it, not the devices and the operator that authenticated from it before."""
    nat = "127.0.0.4"
    with client(server, A, nat) as a, client(server, OPERATOR, nat) as op:
        assert a.get("/v1/devices/dev-a/counters").status_code == 200
        assert op.get("/v1/devices").status_code == 200
        with client(server, None, nat) as attacker:
            codes = [
                attacker.get(
                    "/v1/gateways/gw-1/devices", headers={"Authorization": f"Bearer wrong-{i:030d}"}
                ).status_code
                for i in range(60)
            ]
        assert codes[:50] == [401] * 50 and set(codes[50:]) == {429}, codes
        assert a.get("/v1/devices/dev-a/counters").status_code == 200
        assert a.post("/v1/devices/dev-a/stats", json={"samples": 1}).status_code == 201
        assert op.get("/v1/devices").status_code == 200
    with client(server, B, nat) as b:
        assert b.get("/v1/devices/dev-b/counters").status_code == 429, "unproven here: blocked"


def _failures_until_blocked(server: CloudServer, source: str, forwarded: list[str]) -> list[int]:
    with client(server, None, source) as c:
        return [
            c.get(
                "/v1/devices/dev-a/counters",
                headers={"Authorization": f"Bearer wrong-{i:030d}", "X-Forwarded-For": address},
            ).status_code
            for i, address in enumerate(forwarded)
        ]


def test_forwarded_addresses_count_only_from_configured_proxies(server: CloudServer) -> None:
    """Row 10: a rotating X-Forwarded-For no longer escapes the limiter (uvicorn trusted it from
    127.0.0.1 by default); from the configured proxy (127.0.0.2) each forwarded client has its own
    count."""
    rotating = [f"10.9.{i // 250}.{i % 250 + 1}" for i in range(60)]
    codes = _failures_until_blocked(server, "127.0.0.5", rotating)
    assert codes[:50] == [401] * 50 and set(codes[50:]) == {429}, codes
    behind_proxy = _failures_until_blocked(server, "127.0.0.2", ["10.1.1.1"] * 55 + ["10.1.1.2"] * 5)
    assert set(behind_proxy[:50]) == {401} and set(behind_proxy[50:55]) == {429}, behind_proxy
    assert behind_proxy[55:] == [401] * 5, "another client of the proxy is counted apart"


@pytest.mark.parametrize("flag", ["--forwarded-allow-ips"])
def test_serve_takes_the_proxies_from_the_command_line(flag: str) -> None:
    from edgedrift_cloud.cli import build_parser

    args = build_parser().parse_args(["serve", flag, "10.0.0.0/8,127.0.0.2"])
    assert args.forwarded_allow_ips == "10.0.0.0/8,127.0.0.2"
