"""The sections of one request timed in-process with the service's own functions (auth, body parse +
checks, training, registry insert + commit, response build, log lines, thread hops), so the remainder of
the K = 1 latency is HTTP + ASGI/FastAPI + the client.

Storing and replying go through the public registry and wire APIs (``registry.store_model`` in one
transaction; the ``TrainResponse`` of the stored record as a 201 JSON response): the same work as the
training route's own helpers, which are private to the route."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
from fastapi.responses import JSONResponse
from pydantic import SecretStr

from edgedrift.wire import TrainResponse
from loadtest.data import CONTENT_TYPES, Window

if TYPE_CHECKING:
    from edgedrift_cloud import registry
    from edgedrift_cloud.db.tables import ModelRecord
    from edgedrift_cloud.dependencies import AppState

#: The fields of a stored version that the training route returns (with the model document).
RESPONSE_FIELDS = ("device_id", "version", "sha256", "learner", "rebalance", "chosen", "scores", "reason",
                   "n", "d", "train_ms", "bytes_in", "bytes_out", "encoding", "created_at")  # fmt: skip


def store(state: AppState, new: registry.NewModel) -> ModelRecord:
    """Insert a new version and commit, in one transaction (what the route does for a fresh request)."""
    from edgedrift_cloud import registry

    with state.sessions() as session:
        record = registry.store_model(session, new)
        session.commit()
        return record


def reply(record: ModelRecord) -> JSONResponse:
    """The 201 response of a new version: its ``TrainResponse`` as JSON, with ETag and Location."""
    values: dict[str, Any] = {name: getattr(record, name) for name in RESPONSE_FIELDS}
    values.update(model=json.loads(record.document), replayed=False)
    return JSONResponse(
        TrainResponse.model_validate(values).model_dump(mode="json"),
        status_code=201,
        headers={
            "ETag": f'"{record.sha256}"',
            "Location": f"/v1/devices/{record.device_id}/models/{record.version}",
        },
    )


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
    from edgedrift_cloud.routers.window_body import parse_window
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
    state.tokens.forget_device(device)
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
        record = store(state, new)

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
            "store + commit": time_ms(partial(store, state, new), max(20, repeat // 5)),
            "reply (build + JSON)": time_ms(partial(reply, record), repeat),
            "2 log lines": time_ms(log_lines, repeat),
            f"{THREAD_HOPS} thread hops (uncontended)": thread_hop,
        }
        results.append(Breakdown(d, encoding, sections))
    results[0].sections["auth (cache miss, DB)"] = auth_miss
    state.engine.dispose()
    return results
