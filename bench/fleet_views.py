"""Fleet views at fleet scale: the dashboard's requests against a real cloud holding N devices.

Starts ``edgedrift-cloud serve`` (:class:`edgedrift_harness.cloud.CloudProcess`) on SQLite and on
PostgreSQL (the server at ``$EDGEDRIFT_TEST_PG`` or a throwaway one), seeds N devices straight into the
registry (:func:`edgedrift_harness.fleet_seed.seed_fleet`: 9 device kinds, the first ``--history``
devices with ``--beats`` heartbeats and 3 model versions each), then times each request of the
operations dashboard over HTTP, ``--repeat`` times (p50 and max, ms): the fleet summary, the first page,
a deep page, a status filter, a sort by accuracy, a search, a device page, a page of ``/v1/devices``, and
Prometheus' ``/metrics`` with the quality snapshot read on every scrape (``--metrics-max-age 15`` for the
service's default) and its number of series (``--metrics-devices`` adds that many devices' own quality
series).

Peer, in the same run: the per-device way the fleet list was built before (``registry.counters`` for
every device, four statements each), timed in-process on the same database on ``--peer-devices``
devices and scaled to N, so the ratio peer / ``/v1/fleet`` page shows what aggregating in SQL buys.

    python bench/fleet_views.py                       # N = 10,000, 500 devices x 500 heartbeats
    python bench/fleet_views.py --quick               # N = 500 (the smoke run)
    python bench/fleet_views.py --json out/fleet_views.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from edgedrift_cloud import registry
from edgedrift_cloud.db.engine import make_engine, make_sessionmaker
from edgedrift_harness.cloud import CloudProcess
from edgedrift_harness.fleet_seed import device_id, seed_fleet
from edgedrift_harness.postgres import fresh_database, postgres_server
from edgedrift_harness.results import write_json

OPERATOR = "bench-operator-token-" + "x" * 24
REQUESTS = {
    "summary": "/v1/fleet/summary",
    "page 1": "/v1/fleet?limit=50",
    "deep page": "/v1/fleet?offset={deep}&limit=50",
    "status=degraded": "/v1/fleet?status=degraded&limit=50",
    "sort accuracy": "/v1/fleet?sort=accuracy&desc=true&limit=50",
    "drifting + search": "/v1/fleet?drifting=true&q=fleet-01&limit=50",
    "device page": "/v1/fleet/devices/{device}?points=500",
    "/v1/devices page": "/v1/devices?limit=50&offset={deep}",
    # Prometheus' scrape with the quality snapshot read again every time (its cache off: the worst case)
    "/metrics": "/metrics",
}


def time_requests(cloud: CloudProcess, devices: int, repeat: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    with cloud.client(OPERATOR) as c:
        for name, template in REQUESTS.items():
            url = template.format(deep=max(0, devices - 100), device=device_id(1))
            assert c.get(url).status_code == 200  # warm-up
            times = []
            size = 0
            for _ in range(repeat):
                started = time.perf_counter()
                r = c.get(url)
                times.append((time.perf_counter() - started) * 1000)
                assert r.status_code == 200, r.text
                size = len(r.content)
            out[name] = {"p50_ms": statistics.median(times), "max_ms": max(times), "bytes": size}
            if name == "/metrics":
                out[name]["series"] = sum(1 for line in r.text.splitlines() if line and line[0] != "#")
    return out


def per_device_peer(database_url: str, devices: int) -> float:
    """ms to build the list of ``devices`` devices the old way: ``registry.counters`` per device."""
    engine = make_engine(database_url)
    try:
        with make_sessionmaker(engine)() as session:
            started = time.perf_counter()
            for d in registry.list_device_ids(session)[:devices]:
                registry.counters(session, d)
            return (time.perf_counter() - started) * 1000
    finally:
        engine.dispose()


def run(backend: str, database_url: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    quality = {
        "EDGEDRIFT_CLOUD_METRICS_QUALITY_MAX_AGE_S": str(args.metrics_max_age),
        "EDGEDRIFT_CLOUD_METRICS_QUALITY_DEVICES": str(args.metrics_devices),
    }
    cloud = CloudProcess(database_url, workdir, operator_token=OPERATOR, env=quality).start()
    try:
        started = time.perf_counter()
        seeded = seed_fleet(database_url, args.devices, history_devices=args.history, beats_each=args.beats)
        seed_s = time.perf_counter() - started
        timings = time_requests(cloud, args.devices, args.repeat)
    finally:
        cloud.stop()
    peer_devices = min(args.devices, args.peer_devices)
    peer_ms = per_device_peer(database_url, peer_devices) * args.devices / peer_devices
    return {
        "backend": backend,
        "devices": seeded.devices,
        "heartbeats": seeded.heartbeats,
        "models": seeded.models,
        "seed_s": seed_s,
        "requests": timings,
        "peer_timed_devices": peer_devices,
        "peer_fleet_ms": peer_ms,
        "peer_ratio": peer_ms / timings["page 1"]["p50_ms"],
    }


def report(result: dict[str, Any]) -> None:
    print(
        f"\n{result['backend']}: {result['devices']} devices, {result['heartbeats']} heartbeats, "
        f"{result['models']} versions (seeded in {result['seed_s']:.1f} s)"
    )
    print(f"  {'request':<20} {'p50 ms':>8} {'max ms':>8} {'bytes':>9}")
    for name, t in result["requests"].items():
        series = f"  ({t['series']} series)" if "series" in t else ""
        print(f"  {name:<20} {t['p50_ms']:8.1f} {t['max_ms']:8.1f} {t['bytes']:9d}{series}")
    print(
        f"  peer: registry.counters per device, timed on {result['peer_timed_devices']} devices, for the "
        f"whole fleet {result['peer_fleet_ms']:.0f} ms = {result['peer_ratio']:.0f}x one /v1/fleet page"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--history", type=int, default=500, help="devices with --beats heartbeats")
    parser.add_argument("--beats", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--peer-devices", type=int, default=1000, help="devices the peer is timed on")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument(
        "--metrics-devices", type=int, default=0, help="per-device quality series in /metrics (the cap)"
    )
    parser.add_argument(
        "--metrics-max-age",
        type=float,
        default=0.0,
        help="seconds the quality snapshot is reused (0, the default here: read on every scrape)",
    )
    parser.add_argument("--quick", action="store_true", help="500 devices, 50 with 100 heartbeats")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.devices, args.history, args.beats, args.repeat = 500, 50, 100, 3
    results = []
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fleet-views-")))
        for backend in args.backends.split(","):
            if backend == "sqlite":
                url = f"sqlite:///{workdir / 'registry.db'}"
            else:
                url = stack.enter_context(fresh_database(stack.enter_context(postgres_server())))
            results.append(run(backend, url, args, workdir))
            report(results[-1])
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
