"""CPU per request of the cloud's device routes (issue 28's cost): the server on PostgreSQL with
``--workers 2``, ``--devices`` devices registered, then ``--requests`` device requests (the honest agents'
heartbeat, ``POST /v1/devices/{id}/stats``, and one ``GET .../counters`` in ``--reads``) sent from
``--connections`` keep-alive connections, each request with its device's own credential. The figure is the
uvicorn workers' CPU time (utime + stime of every worker process, from ``/proc``) over the requests divided
by their number: it does not depend on how busy the machine is, unlike a latency. PostgreSQL's own CPU is
reported too (every ``postgres`` process on the machine: meaningful only when nothing else uses it), and
the sender's own CPU per request (``client_cpu_ms_per_request``: httpx's ``AsyncClient``, the client the
agents' cloud calls go through, so a change of the client's dependencies shows there).
``--server-tree`` runs the server from another checkout, for a before/after comparison in the same minutes.

    python bench/request_cpu.py --json out/request-cpu.json
    python bench/request_cpu.py --server-tree /tmp/edgedrift-main --json out/request-cpu-main.json
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from edgedrift_harness.cloud import CloudProcess, server_tree_env
from edgedrift_harness.postgres import PG_ADMIN_URL, fresh_database, postgres_server
from edgedrift_harness.proc import cpu_seconds, load_average, named_cpu_seconds, process_tree
from edgedrift_harness.results import write_json

OPERATOR = "request-cpu-operator-token-0123456789abcdef"
UNLIMITED = {
    "EDGEDRIFT_CLOUD_HEARTBEATS_PER_MINUTE": "1000000",
    "EDGEDRIFT_CLOUD_HEARTBEAT_BYTES_PER_MINUTE": str(2**40),
    "EDGEDRIFT_CLOUD_LOG_LEVEL": "WARNING",
}


def secret_of(device_id: str) -> str:
    return f"secret-of-{device_id}-0123456789abcdef"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--requests", type=int, default=6000, help="device requests measured")
    parser.add_argument("--reads", type=float, default=0.2, help="share of GET .../counters among them")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--server-tree", type=Path, help="run the server from this checkout")
    parser.add_argument("--pg-admin-url", default=PG_ADMIN_URL)
    parser.add_argument("--label", default="")
    parser.add_argument("--json", type=Path)
    return parser.parse_args()


def workers_cpu(supervisor: int) -> float:
    """CPU seconds of the supervisor and every process below it (the workers, their pools)."""
    return sum(cpu_seconds(p, 0.0) for p in process_tree(supervisor))


async def send(url: str, ids: list[str], requests: int, reads: float, connections: int) -> dict[str, int]:
    """``requests`` device requests, round robin over the devices, ``connections`` at a time."""
    statuses: dict[int, int] = {}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for k in range(requests):
        queue.put_nowait(k)
    every = max(1, round(1 / reads)) if reads > 0 else 0
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            k = queue.get_nowait()
            device = ids[k % len(ids)]
            auth = {"Authorization": f"Bearer {secret_of(device)}"}
            if every and k % every == 0:
                reply = await client.get(f"/v1/devices/{device}/counters", headers=auth)
            else:
                beat = {"samples": 50 + k, "labeled": 10, "accuracy": 0.85, "warnings": 0}
                reply = await client.post(f"/v1/devices/{device}/stats", json=beat, headers=auth)
            statuses[reply.status_code] = statuses.get(reply.status_code, 0) + 1

    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        await asyncio.gather(*(worker(client) for _ in range(connections)))
    return {str(k): v for k, v in sorted(statuses.items())}


async def register(url: str, ids: list[str]) -> None:
    body = {"devices": [{"device_id": d, "secret": secret_of(d)} for d in ids]}
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        auth = {"Authorization": f"Bearer {OPERATOR}"}
        (await client.post("/v1/bulk/devices", json=body, headers=auth)).raise_for_status()


def measure(args: argparse.Namespace, server: CloudProcess) -> dict[str, Any]:
    ids = [f"cpu-{i:05d}" for i in range(args.devices)]
    asyncio.run(register(server.url, ids))
    asyncio.run(send(server.url, ids, min(args.requests, 2 * args.devices), args.reads, args.connections))
    cpu0, pg0, wall0 = workers_cpu(server.pid), named_cpu_seconds("postgres"), time.monotonic()
    own0 = time.process_time()
    statuses = asyncio.run(send(server.url, ids, args.requests, args.reads, args.connections))
    own = time.process_time() - own0
    cpu, pg = workers_cpu(server.pid) - cpu0, named_cpu_seconds("postgres") - pg0
    wall = time.monotonic() - wall0
    return {
        "requests": args.requests,
        "statuses": statuses,
        "server_cpu_s": round(cpu, 3),
        "server_cpu_ms_per_request": round(1000 * cpu / args.requests, 3),
        "postgres_cpu_ms_per_request": round(1000 * pg / args.requests, 3),
        "client_cpu_ms_per_request": round(1000 * own / args.requests, 3),
        "wall_s": round(wall, 2),
        "requests_per_s": round(args.requests / wall, 1),
    }


def main() -> None:
    args = parse_args()
    env = dict(UNLIMITED)
    env.update(server_tree_env(args.server_tree))
    with (
        tempfile.TemporaryDirectory(prefix="edgedrift-request-cpu-") as tmp,
        postgres_server(args.pg_admin_url) as admin,
        fresh_database(admin, "edgedrift_cpu_") as database_url,
    ):
        server = CloudProcess(database_url, Path(tmp), operator_token=OPERATOR, workers=args.workers, env=env)
        server.start(timeout=180)
        try:
            figures = measure(args, server)
        finally:
            server.stop()
    figures.update(
        label=args.label,
        server_tree=str(args.server_tree or ""),
        devices=args.devices,
        workers=args.workers,
        connections=args.connections,
        load_average=load_average(),
    )
    print(figures)
    if args.json:
        write_json(args.json, figures)


if __name__ == "__main__":
    main()
