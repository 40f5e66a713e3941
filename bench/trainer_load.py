"""Cloud trainer under load: K concurrent devices retraining, against an in-process train_window loop.

Starts the service with the documented ``edgedrift-cloud serve`` (uvicorn, ``--workers W``) on a free
port with a fresh PostgreSQL registry (``edgedrift_bench_<hex>``, dropped at the end; ``--database-url``
to use another one, e.g. SQLite), provisions K devices, and lets K simulated devices (one
``httpx.AsyncClient`` each, one asyncio loop) post 200-label windows back to back to
``POST /v1/devices/{id}/models``: seeded synthetic classification data with d = 5 and d = 54, as JSON
and as the binary body of ``edgedrift.wire.encode_window``, for ``--seconds`` (or ``--requests``) per
setting. Logistic learner with C = 1 by default (``--C auto``, ``--learner shrub``).

Reported per (d, body, K, workers): retrains per second, p50 / p99 request latency as the device sees
it, mean bytes in / out per recompute, the pure training time measured two ways in the same run --
(a) ``train_window`` called in-process on the very same decoded windows (p50) and (b) the service's
own ``train_ms`` (p50) -- and the overhead ratio p50 latency / p50 (a). Peer: a plain in-process loop
of ``train_window`` on one core (retrains/s), so the throughput ratio is service / in-process. CPU
ms per request of the service's processes, of this client process, of PostgreSQL and of the rest of
the machine (anything else running: check the load average column) come from /proc. At the end every
device's registry counter (``GET /v1/devices/{id}/counters``) must equal its number of 2xx responses,
and every non-2xx is listed.

A second table times the sections of one request in-process with the service's own functions (auth,
body parse + checks, training, registry insert + commit, response build, log lines, thread hops), so
the remainder of the K = 1 latency is HTTP + ASGI/FastAPI + the client. ``--profile DIR`` samples the
service with py-spy during each timed phase and prints where its Python CPU time goes.

    python bench/trainer_load.py [--workers 2] [--clients 8] [--seconds 10] [--quick]
    python bench/trainer_load.py --workers 1,2 --clients 1,8        # the grid, one server per W
    python bench/trainer_load.py --seconds 5 --profile out/pyspy     # needs py-spy (pip install py-spy)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import secrets
import shlex
import shutil
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import numpy as np
from pydantic import SecretStr

from edgedrift.models.losses import FloatArray
from edgedrift.wire import WINDOW_CONTENT_TYPE, WindowHeader, encode_window
from edgedrift_harness.cloud_process import CloudProcess
from edgedrift_harness.profiling import py_spy_record

PG_ADMIN_URL = os.environ.get("EDGEDRIFT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
ENCODINGS = ("json", "binary")
CONTENT_TYPES = {"json": "application/json", "binary": WINDOW_CONTENT_TYPE}
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Window:
    """One pre-encoded window: the exact body a device sends, and what the service decodes from it."""

    body: bytes
    header: WindowHeader
    X: FloatArray
    y: FloatArray


def make_header(learner: str, C: str) -> WindowHeader:
    params: dict[str, Any] = {} if learner == "shrub" else {"C": C if C == "auto" else float(C)}
    return WindowHeader.model_validate(
        {"task": "classification", "learner": learner, "params": params, "reason": "bench"}
    )


def synthetic_windows(d: int, count: int, n: int, seed: int) -> list[tuple[FloatArray, FloatArray]]:
    """Seeded windows of a noisy linear concept (labels ±1, both classes present), drifting slowly."""
    rng = np.random.default_rng([seed, d])
    beta = rng.normal(size=d)
    windows = []
    for _ in range(count):
        beta = beta + 0.2 * rng.normal(size=d)
        X = rng.normal(size=(n, d)) * rng.uniform(0.5, 2.0, size=d) + rng.normal(size=d)
        margin = (X - X.mean(axis=0)) @ beta
        y = np.where(margin + rng.normal(scale=0.5 * margin.std(), size=n) > 0, 1.0, -1.0)
        y[:2] = (1.0, -1.0)
        windows.append((X, y))
    return windows


def encode(header: WindowHeader, X: FloatArray, y: FloatArray, encoding: str) -> bytes:
    """The body a device sends: JSON as a plain client writes it, or the compact float32 binary body."""
    if encoding == "binary":
        return encode_window(header, X, y)
    doc = header.model_dump(mode="json", exclude_defaults=True)
    doc.update(task=header.task, learner=header.learner, X=X.tolist(), y=y.tolist())
    return json.dumps(doc, separators=(",", ":")).encode()


def build_windows(header: WindowHeader, d: int, encoding: str, count: int, n: int, seed: int) -> list[Window]:
    """Bodies plus the arrays the service's own parser gets out of them (float32 for binary bodies)."""
    from edgedrift_cloud.routers.training import parse_window
    from edgedrift_cloud.settings import CloudSettings

    settings = CloudSettings(mode="development")
    state: Any = SimpleNamespace(settings=settings)
    out = []
    for X, y in synthetic_windows(d, count, n, seed):
        body = encode(header, X, y, encoding)
        h, Xs, ys, _ = parse_window(body, CONTENT_TYPES[encoding], state)
        out.append(Window(body, h, Xs, ys))
    return out


# ------------------------------------------------------------------------------------------- helpers


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of one process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def process_tree(pid: int) -> list[int]:
    pids, stack = [], [pid]
    while stack:
        p = stack.pop()
        pids.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with suppress(FileNotFoundError, ProcessLookupError):
                stack.extend(int(c) for c in (task / "children").read_text().split())
    return pids


def machine_busy_seconds() -> float:
    """CPU seconds spent not idle by the whole machine (all cores), from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / CLK_TCK


def postgres_cpu_seconds() -> float:
    """CPU seconds of every PostgreSQL server process on the machine (backends, WAL writer, ...)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if text[text.find("(") + 1 : text.rfind(")")] == "postgres":
            fields = text.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def self_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@contextmanager
def fresh_postgres(admin_url: str) -> Iterator[str]:
    """A new, empty PostgreSQL database for the run; dropped (WITH FORCE) afterwards."""
    import psycopg

    name = "edgedrift_bench_" + secrets.token_hex(4)
    admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{admin_url.rsplit('/', 1)[0]}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


class Server(CloudProcess):
    """The service under test; its CPU time is summed over the uvicorn supervisor and workers."""

    def __init__(
        self,
        database_url: str,
        workers: int,
        devices: dict[str, str],
        operator: str,
        workdir: Path,
        log_level: str,
    ) -> None:
        super().__init__(
            database_url,
            workdir,
            operator_token=operator,
            devices=devices,
            workers=workers,
            env={"EDGEDRIFT_CLOUD_LOG_LEVEL": log_level},
        )

    def cpu_seconds(self) -> float:
        return sum(proc_cpu_seconds(p) for p in process_tree(self.pid))


# ------------------------------------------------------------------------------------------ in-process


@dataclass
class InProcess:
    """train_window on the same decoded windows, one core: per-call times and the loop's rate."""

    p50_ms: float
    retrains_per_s: float
    calls: int


def in_process(windows: list[Window], seconds: float) -> InProcess:
    from edgedrift.training.window import train_window

    for w in windows[:3]:
        train_window(w.header, w.X, w.y)
    times: list[float] = []
    start = time.perf_counter()
    deadline = start + seconds
    i = 0
    while time.perf_counter() < deadline or i < len(windows):
        w = windows[i % len(windows)]
        t = time.perf_counter()
        train_window(w.header, w.X, w.y)
        times.append(time.perf_counter() - t)
        i += 1
    total = time.perf_counter() - start
    return InProcess(1e3 * statistics.median(times), i / total, i)


# ------------------------------------------------------------------------------------------- profile

#: The service's own sections, in priority order: a py-spy stack goes to the first one with a frame
#: containing one of its substrings (frames are "function (path:line)").
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("training (train_window)", ("train_window (",)),
    ("JSON parse (pydantic model_validate_json)", ("model_validate_json",)),
    ("numpy conversion (window_arrays)", ("window_arrays (",)),
    ("binary decode (decode_window)", ("decode_window (",)),
    ("window checks (check_window)", ("check_window (",)),
    ("parse: header model", ("parse_window (",)),
    ("DB: store + commit (_store)", ("_store (",)),
    ("DB: other", ("sqlalchemy/", "psycopg/")),
    ("auth (get_principal, device_access)", ("get_principal (", "device_access (", "auth.py")),
    ("response build (_reply: model_version, pydantic, JSON)", ("_reply (", "_response (")),
    ("logging (JsonFormatter, stderr)", ("logging/__init__.py", "JsonFormatter")),
    ("metrics (prometheus_client)", ("prometheus_client/",)),
)
#: Framework sections for the remaining stacks: the frame nearest the leaf that matches decides.
FRAMEWORK: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "thread pool hop (anyio to_thread, queue, locks)",
        ("anyio/", "queue.py", "threading.py", "concurrent/"),
    ),
    ("FastAPI: dependencies, routing, param validation", ("fastapi/", "pydantic/")),
    ("Starlette + the service's middleware", ("starlette/", "edgedrift_cloud/")),
    ("HTTP server (uvicorn, httptools, socket writes)", ("uvicorn/", "httptools", "asyncio/", "uvloop")),
)


def classify(stack: str) -> str:
    """The section of one ``frame;frame;...`` stack (root first)."""
    for name, keys in SECTIONS:
        if any(k in stack for k in keys):
            return name
    for frame in reversed(stack.split(";")):
        for name, keys in FRAMEWORK:
            if any(k in frame for k in keys):
                return name
    return "other"


#: Leaf frames of a thread that waits (py-spy does not always flag them idle): an idle worker thread,
#: the event loop in epoll, the uvicorn supervisor.
IDLE_LEAVES = ("Condition.wait (", "Runner.run (", "Queue.get (", "select (", "Event.wait (", "_recv (")


def profile_sections(raw: Path) -> dict[str, float]:
    """Share of the service's non-idle samples per section (see SECTIONS)."""
    counts: Counter[str] = Counter()
    if not raw.exists():
        return {}
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit() or stack.rsplit(";", 1)[-1].startswith(IDLE_LEAVES):
            continue
        counts[classify(stack)] += int(n)
    total = sum(counts.values())
    return (
        {name: counts[name] / total for name, _ in (*SECTIONS, *FRAMEWORK, ("other", ())) if counts[name]}
        if total
        else {}
    )


# ------------------------------------------------------------------------------------------------ load


@dataclass
class Tally:
    """What the clients saw during one timed setting."""

    latencies_ms: list[float] = field(default_factory=list)
    train_ms: list[float] = field(default_factory=list)
    bytes_in: list[int] = field(default_factory=list)
    bytes_out: list[int] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    issued: int = 0


async def device_client(
    client: httpx.AsyncClient,
    device: str,
    windows: list[Window],
    encoding: str,
    offset: int,
    deadline: float,
    limit: int | None,
    tally: Tally | None,
    ok: Counter[str],
) -> None:
    """One device posting windows back to back until the deadline (or the shared request budget)."""
    headers = {"Content-Type": CONTENT_TYPES[encoding]}
    url = f"/v1/devices/{device}/models"
    i = offset
    while time.perf_counter() < deadline:
        if tally is not None and limit is not None:
            if tally.issued >= limit:
                break
            tally.issued += 1
        body = windows[i % len(windows)].body
        i += 1
        t = time.perf_counter()
        try:
            response = await client.post(url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            if tally is not None:
                tally.statuses[-1] += 1
                tally.errors.append(f"{device}: {type(exc).__name__}: {exc}")
            continue
        elapsed = time.perf_counter() - t
        if response.is_success:
            ok[device] += 1
        if tally is None:
            continue
        tally.statuses[response.status_code] += 1
        if response.is_success:
            reply = response.json()
            tally.latencies_ms.append(1e3 * elapsed)
            tally.train_ms.append(float(reply["train_ms"]))
            tally.bytes_in.append(int(reply["bytes_in"]))
            tally.bytes_out.append(int(reply["bytes_out"]))
        elif len(tally.errors) < 20:
            tally.errors.append(f"{device}: HTTP {response.status_code}: {response.text[:300]}")


@dataclass(frozen=True)
class Cpu:
    """CPU seconds during a timed phase: the service's processes, this client, PostgreSQL, the rest."""

    service: float
    client: float
    postgres: float
    rest: float


@dataclass
class LoadResult:
    d: int
    encoding: str
    clients: int
    workers: int
    seconds: float
    tally: Tally
    cpu: Cpu
    inproc: InProcess
    load: str
    profile: dict[str, float] | None

    @property
    def ok(self) -> int:
        return len(self.tally.latencies_ms)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds

    def per_request_ms(self, cpu_s: float) -> float:
        return 1e3 * cpu_s / max(self.ok, 1)


async def run_load(
    server: Server,
    devices: dict[str, str],
    windows: list[Window],
    encoding: str,
    seconds: float,
    warmup: float,
    limit: int | None,
    ok: Counter[str],
    profiler: Callable[[], Callable[[], None]] | None = None,
) -> tuple[Tally, float, Cpu]:
    """Warm up, then one timed phase; returns the tally, wall seconds and the CPU seconds spent."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    clients = {
        device: httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {secret}"}, timeout=60, limits=limits
        )
        for device, secret in devices.items()
    }
    try:
        start = time.perf_counter()
        await asyncio.gather(
            *(
                device_client(c, dev, windows, encoding, 7 * k, start + warmup, None, None, ok)
                for k, (dev, c) in enumerate(clients.items())
            )
        )
        tally = Tally()
        stop_profiler = profiler() if profiler is not None else None
        cpu0 = (server.cpu_seconds(), self_cpu_seconds(), postgres_cpu_seconds(), machine_busy_seconds())
        start = time.perf_counter()
        deadline = start + (seconds if limit is None else 3600.0)
        await asyncio.gather(
            *(
                device_client(c, dev, windows, encoding, 7 * k + 3, deadline, limit, tally, ok)
                for k, (dev, c) in enumerate(clients.items())
            )
        )
        wall = time.perf_counter() - start
        cpu1 = (server.cpu_seconds(), self_cpu_seconds(), postgres_cpu_seconds(), machine_busy_seconds())
        if stop_profiler is not None:
            stop_profiler()
    finally:
        for c in clients.values():
            await c.aclose()
    service, client, postgres, machine = (b - a for a, b in zip(cpu0, cpu1, strict=True))
    return tally, wall, Cpu(service, client, postgres, machine - service - client - postgres)


def verify_counters(server: Server, devices: dict[str, str], ok: Counter[str]) -> list[str]:
    """Every device's registry counter against its 2xx responses; the mismatches."""
    problems = []
    for device, secret in devices.items():
        r = httpx.get(
            f"{server.url}/v1/devices/{device}/counters",
            headers={"Authorization": f"Bearer {secret}"},
            timeout=30,
        )
        if r.status_code != 200:
            problems.append(f"{device}: counters answered HTTP {r.status_code}")
            continue
        stored = int(r.json()["recomputes"])
        if stored != ok[device]:
            problems.append(f"{device}: registry counts {stored} recomputes, clients saw {ok[device]} 2xx")
    return problems


# ------------------------------------------------------------------------------------------ breakdown


@dataclass
class Breakdown:
    """Median ms of each section of one request, timed in-process with the service's own functions."""

    d: int
    encoding: str
    sections: dict[str, float]


def time_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median ms per call."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


#: Thread-pool round trips of one POST /v1/devices/{id}/models with a cached credential: the
#: dependencies are async and the endpoint trains and stores in one call (7 before that change,
#: counted by patching anyio.to_thread.run_sync).
THREAD_HOPS = 1


def breakdown(
    database_url: str, operator: str, windows: dict[tuple[int, str], list[Window]], repeat: int
) -> list[Breakdown]:
    """auth, parse, train, store, reply, logs and thread hops of one recompute, on a separate device."""
    from fastapi.security import HTTPAuthorizationCredentials

    from edgedrift.training.window import train_window
    from edgedrift_cloud import registry
    from edgedrift_cloud.dependencies import get_principal
    from edgedrift_cloud.main import create_app
    from edgedrift_cloud.observability import JsonFormatter
    from edgedrift_cloud.routers.training import _reply, _store, parse_window
    from edgedrift_cloud.settings import CloudSettings

    settings = CloudSettings(
        database_url=database_url, operator_token=SecretStr(operator), mode="production", auto_migrate=False
    )
    state = create_app(settings, configure_logs=False).state.edgedrift
    device, secret = "bench-breakdown", "breakdown-secret-" + secrets.token_hex(8)
    with state.sessions() as session:
        registry.upsert_device(session, device, secret)
        session.commit()
    credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=secret)
    asyncio.run(get_principal(state, credentials))  # fills the token cache, as in a burst
    sink = logging.getLogger("edgedrift_bench.sink")
    handler = logging.StreamHandler(open(os.devnull, "w"))  # noqa: SIM115 (lives as long as the run)
    handler.setFormatter(JsonFormatter())
    sink.handlers[:] = [handler]
    sink.propagate = False
    sink.setLevel(logging.INFO)

    async def hops() -> float:
        times = []
        for _ in range(repeat + 10):
            t = time.perf_counter()
            await anyio.to_thread.run_sync(lambda: None)
            times.append(time.perf_counter() - t)
        return THREAD_HOPS * 1e3 * statistics.median(times[10:])

    thread_hop = asyncio.run(hops())

    async def auth_ms() -> float:
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            await get_principal(state, credentials)
            times.append(time.perf_counter() - t)
        return 1e3 * statistics.median(times)

    auth = asyncio.run(auth_ms())
    state.tokens._entries.clear()
    t = time.perf_counter()
    asyncio.run(get_principal(state, credentials))
    auth_miss = 1e3 * (time.perf_counter() - t)

    results = []
    for (d, encoding), ws in windows.items():
        w = ws[0]
        media = CONTENT_TYPES[encoding]
        outcome = train_window(w.header, w.X, w.y)
        new = registry.NewModel(
            device_id=device,
            document=outcome.document,
            kind=outcome.kind,
            learner=w.header.learner,
            task=w.header.task,
            rebalance=w.header.rebalance,
            chosen=outcome.chosen,
            scores=outcome.scores,
            n=int(w.X.shape[0]),
            d=int(w.X.shape[1]),
            train_ms=outcome.train_ms,
            bytes_in=len(w.body),
            encoding=encoding,
            reason=w.header.reason,
            requested_by=f"device:{device}",
            monitor=dict(w.header.monitor),
            request_id=None,
        )
        record, _ = _store(state, new)

        recompute_line = {
            "device": device,
            "version": record.version,
            "learner": w.header.learner,
            "reason": w.header.reason,
            "n": new.n,
            "d": new.d,
            "train_ms": round(outcome.train_ms, 3),
            "bytes_in": new.bytes_in,
            "encoding": encoding,
        }
        request_line = {
            "method": "POST",
            "path": f"/v1/devices/{device}/models",
            "route": "/v1/devices/{device_id}/models",
            "status": 201,
            "ms": 1.234,
        }

        def log_lines(
            recompute: dict[str, Any] = recompute_line, request: dict[str, Any] = request_line
        ) -> None:
            sink.info("recompute", extra=recompute)
            sink.info("request", extra=request)

        sections = {
            "auth (cached)": auth,
            "parse + checks": time_ms(partial(parse_window, w.body, media, state), repeat),
            "train_window": time_ms(partial(train_window, w.header, w.X, w.y), repeat),
            "store + commit": time_ms(partial(_store, state, new), max(20, repeat // 5)),
            "reply (build + JSON)": time_ms(partial(_reply, record, replayed=False), repeat),
            "2 log lines": time_ms(log_lines, repeat),
            f"{THREAD_HOPS} thread hops (uncontended)": thread_hop,
        }
        results.append(Breakdown(d, encoding, sections))
    results[0].sections["auth (cache miss, DB)"] = auth_miss
    state.engine.dispose()
    return results


# ----------------------------------------------------------------------------------------------- main


def parse_ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=parse_ints, default=[2], help="uvicorn workers (list: 1,2)")
    parser.add_argument("--clients", type=parse_ints, default=[8], help="concurrent devices K (list: 1,8)")
    parser.add_argument("--seconds", type=float, default=10.0, help="timed seconds per setting")
    parser.add_argument("--requests", type=int, help="a request count per setting instead of --seconds")
    parser.add_argument("--warmup", type=float, default=1.0, help="untimed seconds before each setting")
    parser.add_argument("--dims", type=parse_ints, default=[5, 54], help="feature counts d")
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
        default=f"{shutil.which('py-spy') or 'py-spy'} record --gil --rate 250",
        help="the py-spy record command (default samples only GIL holders: Python CPU time)",
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run (about 30 s)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.warmup, args.inproc_seconds, args.pool = 1.5, 0.3, 0.3, 8
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
        (
            fresh_postgres(args.pg_admin_url) if args.database_url is None else _given(args.database_url)
        ) as database_url,
    ):
        workdir = Path(tmp)
        print(f"registry: {database_url}", flush=True)
        for workers in args.workers:
            server = Server(database_url, workers, devices, operator, workdir, args.log_level).start()
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


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url


def print_report(
    results: list[LoadResult],
    breakdowns: list[Breakdown],
    problems: list[str],
    ok: Counter[str],
    args: argparse.Namespace,
) -> None:
    print()
    print(
        "| d | body | K | workers | retrains/s | p50 ms | p99 ms | bytes in | bytes out "
        "| train p50 ms in-proc (a) | train_ms p50 service (b) | overhead p50/(a) "
        "| in-proc retrains/s (1 core) | service / in-proc "
        "| CPU ms/req: service / client / PostgreSQL / rest | non-2xx | load avg |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for r in results:
        t = r.tally
        p50 = pct(t.latencies_ms, 50)
        bad = sum(v for s, v in t.statuses.items() if not 200 <= s < 300)
        print(
            f"| {r.d} | {r.encoding} | {r.clients} | {r.workers} | {r.rate:.1f} | {p50:.2f} "
            f"| {pct(t.latencies_ms, 99):.2f} | {np.mean(t.bytes_in):,.0f} | {np.mean(t.bytes_out):,.0f} "
            f"| {r.inproc.p50_ms:.3f} | {pct(t.train_ms, 50):.3f} | {p50 / r.inproc.p50_ms:.1f}x "
            f"| {r.inproc.retrains_per_s:,.0f} | {r.rate / r.inproc.retrains_per_s:.3f} "
            f"| {r.per_request_ms(r.cpu.service):.2f} / {r.per_request_ms(r.cpu.client):.2f} / "
            f"{r.per_request_ms(r.cpu.postgres):.2f} / {r.per_request_ms(r.cpu.rest):.2f} "
            f"| {bad} | {r.load.split()[0]} |"
        )
    print()
    print(
        "(b) is wall time in the service's worker thread: under load it includes waiting for the GIL that "
        "the event loop holds (switch interval 5 ms), so (b) > (a) there."
    )
    if breakdowns:
        k1 = {(r.d, r.encoding, r.workers): pct(r.tally.latencies_ms, 50) for r in results if r.clients == 1}
        names = list(dict.fromkeys(n for b in breakdowns for n in b.sections))
        print()
        print("In-process time of each request section (median ms, the service's own functions):")
        print()
        w1 = min(args.workers)
        print(
            "| d | body | "
            + " | ".join(names)
            + f" | sum | K=1 W={w1} p50 latency | rest: HTTP, ASGI, FastAPI, client, GIL |"
        )
        print("|---:|---|" + "---:|" * (len(names) + 3))
        for b in breakdowns:
            total = sum(v for k, v in b.sections.items() if "miss" not in k)
            lat = k1.get((b.d, b.encoding, w1))
            cells = " | ".join(f"{b.sections[n]:.3f}" if n in b.sections else "" for n in names)
            tail = "– | –" if lat is None else f"{lat:.2f} | {lat - total:.2f}"
            print(f"| {b.d} | {b.encoding} | {cells} | {total:.3f} | {tail} |")
        print()
        print(
            "(the K=1 columns need --clients 1 in the run; 'store + commit' includes PostgreSQL round trips)"
        )
    profiled = [r for r in results if r.profile]
    if profiled:
        names = list(dict.fromkeys(n for r in profiled for n in r.profile or {}))
        print()
        print("Where the service's CPU goes (py-spy, share of non-idle samples of all service processes):")
        print()
        print(
            "| section | "
            + " | ".join(f"d={r.d} {r.encoding} K={r.clients} W={r.workers}" for r in profiled)
            + " |"
        )
        print("|---|" + "---:|" * len(profiled))
        for n in names:
            cells = " | ".join(f"{100 * (r.profile or {}).get(n, 0.0):.1f}%" for r in profiled)
            print(f"| {n} | {cells} |")
        print(
            "| = service CPU ms per request | "
            + " | ".join(f"{r.per_request_ms(r.cpu.service):.2f}" for r in profiled)
            + " |"
        )
    print()
    for d in (5,):
        rows = [r for r in results if r.d == d]
        if not rows:
            continue
        best = max(rows, key=lambda r: r.rate)
        ratio = min(pct(r.tally.latencies_ms, 50) / r.inproc.p50_ms for r in rows)
        print(
            f"target d={d}: >= 100 retrains/s -> best {best.rate:.1f} ({best.encoding}, K={best.clients}, "
            f"W={best.workers}): {'MET' if best.rate >= 100 else 'NOT MET'}"
        )
        print(
            f"target d={d}: p50 latency <= 2x pure training -> best {ratio:.1f}x: "
            f"{'MET' if ratio <= 2 else 'NOT MET'}"
        )
    total = sum(ok.values())
    lost = [p for p in problems if "registry" in p or "counters" in p]
    verdict = "MISMATCH" if lost else "all equal to the 2xx responses"
    print(f"registry counters: {verdict} ({total} retrains stored over {len(ok)} devices, warm-up included)")
    if problems:
        print(f"problems ({len(problems)}):")
        for p in problems[:40]:
            print(f"  {p}")
    else:
        print("no non-2xx responses, nothing lost")


if __name__ == "__main__":
    main()
