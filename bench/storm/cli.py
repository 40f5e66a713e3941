"""The command line of ``bench/fleet_storm.py``: start the registry and the server, run the fleet, write
the figures."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from sqlalchemy import create_engine, text

from edgedrift_harness.cloud import CloudProcess, TrainerWorkerProcess
from edgedrift_harness.options import key_values
from edgedrift_harness.postgres import PG_ADMIN_URL, fresh_database, postgres_server
from edgedrift_harness.proc import cpu_seconds, load_average
from edgedrift_harness.redis_server import RedisServer
from edgedrift_harness.results import write_json
from storm.fleet import (
    Probes,
    RemoteHeartbeats,
    Storm,
    binary_bodies,
    device_ids,
    post_histories,
    register,
    storm,
)

OPERATOR = "storm-operator-token-0123456789abcdef"


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--devices", type=int, default=1000, help="fleet size N")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers")
    parser.add_argument("--burst", type=float, default=10.0, help="seconds in which every device asks")
    parser.add_argument("--heartbeat-period", type=float, default=5.0, help="seconds between heartbeats")
    parser.add_argument(
        "--budget-per-min", type=int, default=6000, help="fleet recompute budget per minute (0: none)"
    )
    parser.add_argument("--connections", type=int, default=256, help="client connection pool size")
    parser.add_argument("--timeout", type=float, default=30.0, help="client timeout per attempt (s)")
    parser.add_argument("--deadline", type=float, default=900.0, help="give up on the storm after (s)")
    parser.add_argument("--settle", type=float, default=5.0, help="heartbeats before the storm (s)")
    parser.add_argument("--pg-admin-url", default=PG_ADMIN_URL, help="where the fresh database is created")
    parser.add_argument(
        "--server-pythonpath",
        help="PYTHONPATH of the server (e.g. an older checkout's cloud_trainer and shared folders)",
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the server (repeatable), e.g. EDGEDRIFT_CLOUD_REQUEST_THREADS=8",
    )
    parser.add_argument(
        "--retune-history",
        type=int,
        default=0,
        metavar="LABELS",
        help="re-tuning recomputes (druid-tune) after each device stored LABELS labels (0: off)",
    )
    parser.add_argument(
        "--heartbeats-only",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="no storm: heartbeats (and the probes) for SECONDS, to measure the heartbeat rate alone",
    )
    parser.add_argument(
        "--training-workers",
        type=int,
        default=0,
        metavar="N",
        help="train on the job queue (EDGEDRIFT_CLOUD_TRAINING=queue, a Redis of its own) with N "
        "edgedrift-cloud trainer-worker processes (0: in the API's own pool)",
    )
    parser.add_argument("--label", default="", help="a name for this run in the output")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 50 devices, 3 s burst")
    args = parser.parse_args()
    if args.quick:
        args.devices, args.burst, args.settle, args.deadline = 50, 3.0, 1.0, 120.0
    return args


def pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


def per_minute_max(database_url: str) -> int:
    """The most versions stored in one wall-clock minute, counted from the registry itself."""
    engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.connect() as conn:
        times = [row[0] for row in conn.execute(text("SELECT created_at FROM models"))]
    engine.dispose()
    minutes = Counter(int(t.timestamp() // 60) for t in times)
    return max(minutes.values(), default=0)


async def run_fleet(args: argparse.Namespace, server: CloudProcess, database_url: str) -> dict[str, Any]:
    ids = device_ids(args.devices)
    limits = httpx.Limits(max_connections=args.connections, max_keepalive_connections=args.connections)
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=args.timeout) as client:
        start = time.monotonic()
        registration = await register(client, ids, OPERATOR)
        register_s = time.monotonic() - start
        print(f"registered {len(ids)} devices ({registration}) in {register_s:.1f} s", flush=True)
        histories = 0
        if args.retune_history:
            start = time.monotonic()
            histories = await post_histories(client, ids, args.retune_history, 5, seed=2)
            print(f"stored {histories} histories in {time.monotonic() - start:.1f} s", flush=True)
        beats = RemoteHeartbeats()
        probes = Probes()
        beats_from = time.monotonic()
        background = [
            asyncio.create_task(beats.run(server.url, ids, OPERATOR, args.heartbeat_period)),
            asyncio.create_task(probes.memory(server.pid)),
        ]
        await asyncio.sleep(args.settle)
        watchers = [asyncio.create_task(probes.watch(server.url, OPERATOR, 5.0))]
        bodies = binary_bodies(32, 200, 5, seed=0, request_id="storm-1", retune=bool(args.retune_history))
        t0 = time.monotonic()
        if args.heartbeats_only:
            await asyncio.sleep(args.heartbeats_only)
            result = Storm()
        else:
            result = await storm(
                client,
                ids,
                bodies,
                args.burst,
                args.deadline,
                args.timeout,
                seed=1,
                connections=args.connections,
            )
        storm_s = time.monotonic() - t0
        beats_s = time.monotonic() - beats_from
        probes.stopped.set()
        beats.stopped.set()
        await asyncio.gather(*watchers, *background)
    requested = 0 if args.heartbeats_only else len(ids)
    last = max(result.done_at, default=0.0)
    return {
        "label": args.label,
        "devices": len(ids),
        "requested": requested,
        "completed": result.completed,
        "rejected_429": result.rejected_429,
        "rejected_by_reason": result.reasons,
        "retune_history": args.retune_history,
        "retuned": result.retuned,
        "retune_share": round(result.retuned / result.completed, 4)
        if args.retune_history and result.completed
        else None,
        "training_workers": args.training_workers,
        "accepted_202": result.accepted_202,
        "job_polls": result.polls,
        "jobs_gone": result.jobs_gone,
        "errors_5xx": result.errors_5xx,
        "client_timeouts": result.timeouts,
        "final_4xx": result.final_4xx,
        "lost": requested - result.completed,
        "p50_ms": pct(result.latencies_ms, 50),
        "p99_ms": pct(result.latencies_ms, 99),
        "time_to_model_p50_s": pct(result.time_to_model_s, 50),
        "time_to_model_p99_s": pct(result.time_to_model_s, 99),
        "drain_s": round(max(0.0, last - args.burst), 1),
        "storm_s": round(storm_s, 1),
        "goodput_per_s": round(result.completed / last, 1) if last else None,
        "healthz_p50_ms": pct(probes.healthz_ms, 50),
        "healthz_p99_ms": pct(probes.healthz_ms, 99),
        "healthz_failures": probes.healthz_failures,
        "budget_per_min": args.budget_per_min or None,
        "max_per_min_observed": per_minute_max(database_url),
        "fleet_summary_ms": pct(probes.summary_ms, 50),
        "fleet_summary_max_ms": pct(probes.summary_ms, 100),
        "fleet_page_ms": pct(probes.page_ms, 50),
        "fleet_page_max_ms": pct(probes.page_ms, 100),
        "server_rss_mb": round(probes.rss_mb, 1),
        "registration": registration,
        "register_s": round(register_s, 1),
        "heartbeats": beats.mode,
        "heartbeats_sent": beats.sent,
        "heartbeats_offered_per_s": round(len(ids) / args.heartbeat_period, 1),
        "heartbeats_per_s": round(beats.sent / beats_s, 1),
        "heartbeats_failed": beats.failed,
        "heartbeat_request_p50_ms": pct(beats.latencies_ms, 50),
        "heartbeat_request_p99_ms": pct(beats.latencies_ms, 99),
        "workers": args.workers,
        "server_env": args.server_env,
        "load_average": load_average(),
    }


def main(description: str) -> None:
    args = parse_args(description)
    env = {"EDGEDRIFT_CLOUD_LOG_LEVEL": "WARNING"}
    if args.budget_per_min:
        env["EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_MINUTE"] = str(args.budget_per_min)
    env |= key_values("--server-env", args.server_env)
    if args.server_pythonpath:
        env["PYTHONPATH"] = args.server_pythonpath + os.pathsep + os.environ.get("PYTHONPATH", "")
    with (
        tempfile.TemporaryDirectory(prefix="edgedrift-storm-") as tmp,
        postgres_server(args.pg_admin_url) as admin,
        fresh_database(admin, "edgedrift_storm_") as database_url,
    ):
        redis = RedisServer(Path(tmp)).start() if args.training_workers else None
        trainers: list[TrainerWorkerProcess] = []
        if redis is not None:
            env |= {"EDGEDRIFT_CLOUD_TRAINING": "queue", "EDGEDRIFT_CLOUD_JOBS_REDIS_URL": redis.url}
        server = CloudProcess(
            database_url, Path(tmp), operator_token=OPERATOR, workers=args.workers, env=env
        ).start(timeout=120)
        try:
            if redis is not None:
                trainers = [
                    TrainerWorkerProcess(database_url, redis.url, Path(tmp), env).start(timeout=120)
                    for _ in range(args.training_workers)
                ]
            figures = asyncio.run(run_fleet(args, server, database_url))
            figures["training_worker_cpu_s"] = [round(cpu_seconds(t.pid), 1) for t in trainers]
        finally:
            for trainer in trainers:
                trainer.stop()
            server.stop()
            if redis is not None:
                redis.stop()
            errors = server.logs().count('"level": "error"')
    figures["server_error_lines"] = errors
    print(json.dumps(figures, indent=2))
    print(
        f"\nN={figures['devices']}: completed {figures['completed']}/{figures['requested']}, lost "
        f"{figures['lost']}, 5xx {figures['errors_5xx']}, 429 {figures['rejected_429']}, "
        f"p50/p99 {figures['p50_ms']}/{figures['p99_ms']} ms, drain {figures['drain_s']} s, "
        f"healthz p99 {figures['healthz_p99_ms']} ms, per-minute max {figures['max_per_min_observed']} "
        f"(budget {figures['budget_per_min']}), fleet summary/page {figures['fleet_summary_ms']}/"
        f"{figures['fleet_page_ms']} ms, heartbeats {figures['heartbeats_per_s']}/s of "
        f"{figures['heartbeats_offered_per_s']} (request p99 {figures['heartbeat_request_p99_ms']} ms), "
        f"server RSS {figures['server_rss_mb']} MB"
    )
    if args.retune_history:
        print(
            f"re-tuning searches {figures['retuned']}/{figures['completed']} "
            f"(share {figures['retune_share']}) "
            f"with {args.training_workers or 'no'} training worker processes, drain {figures['drain_s']} s"
        )
    if args.json:
        write_json(args.json, figures)
    if args.quick and (figures["lost"] or figures["errors_5xx"]):
        raise SystemExit("the quick storm lost requests or saw 5xx")
