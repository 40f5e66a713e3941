"""The command line of ``bench/hostile_device.py``: the registry and the server, the calm phase (the honest
fleet alone), the attacked phase (the same fleet while every attack runs), and the figures."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import multiprocessing
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text
from storm.cli import pct

from edgedrift_harness.cloud import CloudProcess, server_tree_env
from edgedrift_harness.postgres import PG_ADMIN_URL, fresh_database, postgres_server
from edgedrift_harness.proc import load_average, rss_mb
from edgedrift_harness.results import write_json
from hostile.attacks import ATTACKER, ATTACKER_SECRET, attack_process
from hostile.honest import HonestFleet, Tally, device_ids, register, seed_histories

OPERATOR = "hostile-operator-token-0123456789abcdef"
SUMMARY = (
    "honest_requests", "honest_completed", "honest_errors_5xx", "honest_429", "honest_p99_ms",
    "healthz_p99_ms", "worker_rss_max_mb", "db_bytes_attacker", "goodput_ratio",
)  # fmt: skip


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--devices", type=int, default=1000, help="honest devices")
    parser.add_argument("--seconds", type=float, default=120.0, help="length of each phase (calm, attacked)")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers")
    parser.add_argument(
        "--heartbeat-s", type=float, default=5.0, help="seconds between a device's heartbeats"
    )
    parser.add_argument(
        "--recompute-s", type=float, default=300.0, help="mean seconds between a device's recomputes"
    )
    parser.add_argument(
        "--history-s", type=float, default=200.0, help="seconds between a re-tuning device's history batches"
    )
    parser.add_argument(
        "--history-labels", type=int, default=2000, help="labels stored per re-tuning device before the run"
    )
    parser.add_argument(
        "--budget-per-min", type=int, default=600, help="fleet recompute budget (per device: unlimited)"
    )
    parser.add_argument("--no-calm", action="store_true", help="skip the calm phase (no goodput ratio)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--pg-admin-url", default=PG_ADMIN_URL, help="where the fresh database is created")
    parser.add_argument(
        "--server-tree",
        type=Path,
        help="run the server from this checkout (its cloud_trainer and shared folders first on PYTHONPATH), "
        "e.g. a worktree of main before issue 28: today's behaviour",
    )
    parser.add_argument("--label", default="", help="a name for this run in the output")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 40 devices, 8 s phases, small attacks"
    )
    args = parser.parse_args()
    if args.quick:
        args.devices, args.seconds, args.history_labels, args.recompute_s = 40, 8.0, 1000, 20.0
    return args


def workers_of(pid: int) -> list[int]:
    """The uvicorn workers: the supervisor's children (the server itself with one worker)."""
    children = [
        int(c)
        for task in Path(f"/proc/{pid}/task").glob("*")
        for c in (task / "children").read_text().split()
    ]
    workers = [
        c
        for c in children
        if "spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes().decode(errors="replace")
    ]
    return workers or [pid]


def probe_process(url: str, stop: Any, out: Any) -> None:
    """In a child process, as a kubelet's httpGet probe: ``GET /healthz`` every 100 ms on a new connection
    (10 s timeout); the latencies in ms (10,000 for a failure) go to ``out``. A process of its own, so the
    figure is the server's answer time and not the honest fleet's client loop, which shares the bench's
    event loop with 1,000 devices."""
    parts = urllib.parse.urlsplit(url)
    latencies: list[float] = []
    while not stop.is_set():
        start = time.perf_counter()
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10,
                                          source_address=("127.0.0.6", 0))  # fmt: skip
        try:
            conn.request("GET", "/healthz")
            ok = conn.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            ok = False
        finally:
            conn.close()
        latencies.append((time.perf_counter() - start) * 1000.0 if ok else 10_000.0)
        stop.wait(0.1)
    out.put(latencies)


async def watch(pid: int, url: str, stop: asyncio.Event, figures: dict[str, Any]) -> None:
    """/healthz every 100 ms from a process of its own (``healthz_*``) and from the bench's own event loop
    on a kept-alive connection (``healthz_in_client_*``: the figure of the runs before 29 Nov 2026 21:20,
    which counts the client loop's delay too); the workers' RSS every second."""
    context = multiprocessing.get_context("spawn")
    probe_stop, probe_out = context.Event(), context.Queue()
    prober = context.Process(target=probe_process, args=(url, probe_stop, probe_out), daemon=True)
    prober.start()
    healthz: list[float] = []
    rss = 0.0
    transport = httpx.AsyncHTTPTransport(local_address="127.0.0.5")
    async with httpx.AsyncClient(base_url=url, transport=transport, timeout=10) as probe:
        last_rss = 0.0
        while not stop.is_set():
            start = time.perf_counter()
            try:
                ok = (await probe.get("/healthz")).status_code == 200
            except httpx.TransportError:
                ok = False
            healthz.append((time.perf_counter() - start) * 1000.0 if ok else 10_000.0)
            if time.monotonic() - last_rss >= 1.0:
                last_rss = time.monotonic()
                for worker in workers_of(pid):
                    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                        rss = max(rss, rss_mb(worker))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)
    probe_stop.set()
    probed: list[float] = await asyncio.to_thread(probe_out.get, True, 60)
    await asyncio.to_thread(prober.join, 30)
    figures.update(
        healthz_p50_ms=pct(probed, 50),
        healthz_p99_ms=pct(probed, 99),
        healthz_probes=len(probed),
        healthz_in_client_p50_ms=pct(healthz, 50),
        healthz_in_client_p99_ms=pct(healthz, 99),
        worker_rss_max_mb=round(rss, 1),
    )


async def phase(
    args: argparse.Namespace, server: CloudProcess, ids: list[str], attacked: bool
) -> dict[str, Any]:
    fleet = HonestFleet(
        server.url, ids, OPERATOR, args.heartbeat_s, args.recompute_s, args.history_s, seed=int(attacked)
    )
    stop, figures = asyncio.Event(), dict[str, Any]()
    watcher = asyncio.create_task(watch(server.pid, server.url, stop, figures))
    child, out = None, None
    if attacked:
        context = multiprocessing.get_context("spawn")
        out = context.Queue()
        config = {"url": server.url, "host": "127.0.0.1", "port": server.port, "operator": OPERATOR,
                  "seconds": args.seconds, "quick": args.quick}  # fmt: skip
        child = context.Process(target=attack_process, args=(config, out), daemon=True)
        child.start()
    tally: Tally = await fleet.run(args.seconds)
    stop.set()
    await watcher
    attacks: list[dict[str, Any]] = []
    if child is not None and out is not None:
        attacks = await asyncio.to_thread(out.get, True, args.seconds + 120)
        await asyncio.to_thread(child.join, 30)
    return {
        "honest_requests": tally.requests,
        "honest_completed": tally.completed,
        "honest_errors_5xx": tally.errors_5xx,
        "honest_429": tally.rejected_429,
        "honest_refused_4xx": tally.refused_4xx,
        "honest_transport_errors": tally.transport_errors,
        "honest_p50_ms": pct(tally.latencies_ms, 50),
        "honest_p99_ms": pct(tally.latencies_ms, 99),
        "honest_by_kind": tally.by_kind,
        **figures,
        "attacks": attacks,
    }


def attacker_bytes(database_url: str) -> int:
    """What the attacker has stored: its history, model versions and heartbeats (row sizes)."""
    engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    total = 0
    with engine.connect() as conn:
        for table in ("history_chunks", "models", "heartbeats"):
            query = text(f"SELECT COALESCE(SUM(pg_column_size(t.*)), 0) FROM {table} t WHERE device_id = :d")
            total += int(conn.execute(query, {"d": ATTACKER}).scalar_one())
    engine.dispose()
    return total


async def run(args: argparse.Namespace, server: CloudProcess, database_url: str) -> dict[str, Any]:
    ids = device_ids(args.devices)
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        await register(client, ids, OPERATOR)
        auth = {"Authorization": f"Bearer {OPERATOR}"}
        (
            await client.put(f"/v1/devices/{ATTACKER}", json={"secret": ATTACKER_SECRET}, headers=auth)
        ).raise_for_status()
        await seed_histories(client, ids[1::2], args.history_labels)
    calm = None if args.no_calm else await phase(args, server, ids, attacked=False)
    attacked = await phase(args, server, ids, attacked=True)
    attacked["db_bytes_attacker"] = attacker_bytes(database_url)
    if calm is not None:
        attacked["calm"] = {k: v for k, v in calm.items() if k != "attacks"}
        base = calm["honest_completed"] / max(1, calm["honest_requests"])
        got = attacked["honest_completed"] / max(1, attacked["honest_requests"])
        attacked["goodput_ratio"] = round(got / base, 3) if base else None
    return attacked


def main(description: str) -> None:
    args = parse_args(description)
    env = {
        "EDGEDRIFT_CLOUD_LOG_LEVEL": "WARNING",
        "EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_MINUTE": str(args.budget_per_min),
        "EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_DEVICE_PER_MINUTE": "unlimited",
    }
    env.update(server_tree_env(args.server_tree))
    with (
        tempfile.TemporaryDirectory(prefix="edgedrift-hostile-") as tmp,
        postgres_server(args.pg_admin_url) as admin,
        fresh_database(admin, "edgedrift_hostile_") as database_url,
    ):
        server = CloudProcess(database_url, Path(tmp), operator_token=OPERATOR, workers=args.workers, env=env)
        server.start(timeout=180)
        try:
            figures = asyncio.run(run(args, server, database_url))
        finally:
            server.stop()
            figures_errors = server.logs().count('"level": "error"')
    figures.update(
        label=args.label,
        server_tree=str(args.server_tree or ""),
        devices=args.devices,
        seconds=args.seconds,
        workers=args.workers,
        server_error_lines=figures_errors,
        load_average=load_average(),
    )
    print({k: figures.get(k) for k in SUMMARY})
    for a in figures["attacks"]:
        print(
            f"  {a['name']}: {a['requests']} requests, 2xx {a['accepted_2xx']}, 4xx {a['refused_4xx']}, "
            f"5xx {a['errors_5xx']}, transport {a['transport_errors']} {a['notes'] or ''}"
        )
    if args.json:
        write_json(args.json, figures)
