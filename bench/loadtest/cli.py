"""The command line of ``bench/trainer_load.py``: options, the grid of settings, the report."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shlex
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from edgedrift_harness.cloud import CloudProcess
from edgedrift_harness.postgres import PG_ADMIN_URL, fresh_database, postgres_server
from edgedrift_harness.proc import load_average, py_spy_command, py_spy_record
from loadtest.breakdown import Breakdown, breakdown
from loadtest.data import ENCODINGS, InProcess, build_windows, in_process, make_header
from loadtest.load import LoadResult, pct, run_load, verify_counters
from loadtest.profile import profile_sections
from loadtest.report import print_report


def parse_ints(text: str) -> list[int]:
    """``1,8`` -> [1, 8]."""
    return [int(v) for v in text.split(",") if v.strip()]


@contextmanager
def registry_url(database_url: str | None, admin_url: str) -> Iterator[str]:
    """``database_url`` as given, or a fresh PostgreSQL database (on the server at ``admin_url``, or a
    throwaway server when none answers) dropped at the end."""
    if database_url is not None:
        yield database_url
        return
    with postgres_server(admin_url) as admin, fresh_database(admin, "edgedrift_bench_") as url:
        yield url


def main(description: str) -> None:
    """Parse the options, run every setting, print the report."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=parse_ints, default=[2], help="uvicorn workers (list: 1,2)")
    parser.add_argument("--clients", type=parse_ints, default=[8], help="concurrent devices K (list: 1,8)")
    parser.add_argument("--seconds", type=float, default=10.0, help="timed seconds per setting")
    parser.add_argument("--requests", type=int, help="a request count per setting instead of --seconds")
    parser.add_argument("--warmup", type=float, default=1.0, help="untimed seconds before each setting")
    parser.add_argument("--dims", type=parse_ints, help="feature counts d (default 5,54; quick 5)")
    parser.add_argument("--encodings", default="json,binary", help="request bodies: json, binary")
    parser.add_argument("--n", type=int, default=200, help="labels per window")
    parser.add_argument("--learner", choices=["logistic", "shrub"], default="logistic")
    parser.add_argument("--C", default="1", help="C of the logistic learner, or 'auto' (tuned per window)")
    parser.add_argument("--pool", type=int, default=32, help="distinct windows per d (cycled)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--database-url", help="registry URL (default: a fresh PostgreSQL database)")
    parser.add_argument("--pg-admin-url", default=PG_ADMIN_URL, help="where the fresh database is created")
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="the service's log level (INFO = its default: two log lines per retrain)",
    )
    parser.add_argument("--inproc-seconds", type=float, default=2.0, help="in-process loop per (d, body)")
    parser.add_argument("--no-breakdown", action="store_true", help="skip the in-process section timing")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="py-spy the service during each timed phase, raw stacks into DIR (the "
        "sampling slows the service: such a run's figures are not the benchmark's)",
    )
    parser.add_argument(
        "--py-spy",
        default=py_spy_command("record --gil --rate 250"),
        help="the py-spy record command (default samples only GIL holders: Python CPU time)",
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run (d = 5, 1 s per setting)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.warmup, args.inproc_seconds, args.pool = 1.0, 0.2, 0.3, 8
    args.dims = args.dims or ([5] if args.quick else [5, 54])
    encodings = [e.strip() for e in args.encodings.split(",") if e.strip()]
    if not set(encodings) <= set(ENCODINGS):
        parser.error(f"--encodings takes {', '.join(ENCODINGS)}")
    header = make_header(args.learner, args.C)

    print(
        f"# trainer load: learner={args.learner} C={args.C if args.learner != 'shrub' else '-'} "
        f"n={args.n} pool={args.pool} seconds={args.seconds} requests={args.requests} "
        f"log_level={args.log_level} cores={os.cpu_count()} load={load_average()}"
        f"{' PROFILED' if args.profile else ''}",
        flush=True,
    )
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    windows = {
        (d, e): build_windows(header, d, e, args.pool, args.n, args.seed)
        for d in args.dims
        for e in encodings
    }
    peers: dict[tuple[int, str], InProcess] = {}
    for key, ws in windows.items():
        peers[key] = in_process(ws, args.inproc_seconds)
        print(
            f"in-process d={key[0]} {key[1]}: train_window p50 {peers[key].p50_ms:.3f} ms, "
            f"{peers[key].retrains_per_s:.0f} retrains/s on one core",
            flush=True,
        )

    operator = "bench-operator-" + secrets.token_hex(16)
    k_max = max(args.clients)
    devices = {f"bench-{i:02d}": "bench-secret-" + secrets.token_hex(12) for i in range(k_max)}
    ok: Counter[str] = Counter()
    results: list[LoadResult] = []
    problems: list[str] = []
    breakdowns: list[Breakdown] = []
    with (
        tempfile.TemporaryDirectory(prefix="edgedrift-bench-") as tmp,
        registry_url(args.database_url, args.pg_admin_url) as database_url,
    ):
        workdir = Path(tmp)
        print(f"registry: {database_url}", flush=True)
        for workers in args.workers:
            server = CloudProcess(
                database_url,
                workdir,
                operator_token=operator,
                devices=devices,
                workers=workers,
                # Each simulated device retrains back to back: lift the default per-device rate.
                env={
                    "EDGEDRIFT_CLOUD_LOG_LEVEL": args.log_level,
                    "EDGEDRIFT_CLOUD_RECOMPUTE_BUDGET_PER_DEVICE_PER_MINUTE": "unlimited",
                },
            ).start()
            try:
                for k in args.clients:
                    subset = dict(list(devices.items())[:k])
                    for (d, encoding), ws in windows.items():
                        raw = (
                            None
                            if args.profile is None
                            else args.profile / f"w{workers}-k{k}-d{d}-{encoding}.txt"
                        )
                        profiler = None
                        if raw is not None:
                            pid = server.pid

                            def profiler(raw: Path = raw, pid: int = pid) -> Callable[[], None]:
                                return py_spy_record(shlex.split(args.py_spy), pid, raw, "--subprocesses")

                        tally, wall, cpu = asyncio.run(
                            run_load(
                                server,
                                subset,
                                ws,
                                encoding,
                                args.seconds,
                                args.warmup,
                                args.requests,
                                ok,
                                profiler,
                            )
                        )
                        r = LoadResult(
                            d,
                            encoding,
                            k,
                            workers,
                            wall,
                            tally,
                            cpu,
                            peers[(d, encoding)],
                            load_average(),
                            None if raw is None else profile_sections(raw),
                        )
                        results.append(r)
                        bad = sum(v for s, v in tally.statuses.items() if not 200 <= s < 300)
                        print(
                            f"W={workers} K={k} d={d} {encoding}: {r.rate:.1f} retrains/s, "
                            f"p50 {pct(tally.latencies_ms, 50):.2f} ms, p99 {pct(tally.latencies_ms, 99):.2f}"
                            f" ms, non-2xx {bad}, load {r.load}",
                            flush=True,
                        )
                        problems += tally.errors
                problems += verify_counters(server, devices, ok)
            finally:
                server.stop()
        if not args.no_breakdown:
            breakdowns = breakdown(database_url, operator, windows, 50 if args.quick else 300)
    print_report(results, breakdowns, problems, ok, args)
