"""The cloud trainer's client: recomputes, label batches and heartbeats on a thread of their own, with
deadlines.

Every call runs on one asyncio event loop in a background thread (never on the worker that predicts),
and every attempt has an overall deadline (``asyncio.timeout``), so a cloud that accepts the connection
and then trickles a byte every few seconds cannot hang a device: httpx's own timeouts apply per read.

Retries: transport errors, 5xx and 408 back off exponentially with full jitter (AWS architecture blog,
"Exponential Backoff And Jitter"), so a fleet that lost the cloud together does not come back together;
429 and 503 wait the server's ``Retry-After`` plus jitter; 401/403 mean the device's credential is wrong
or revoked: reported as *unauthorized* and retried slowly (capped at ``unauthorized_retry_s``), since
an operator may fix it; any other 4xx is final. Every retry of a request carries its ``request_id``, so
the cloud never trains or counts one recompute twice.

The module is a little over 500 lines: it is the one client of every call the edge makes to the cloud
(recomputes, label batches, heartbeats, a gateway's list and the steps of its hand-overs), which share
one event loop, one connection pool and one deadline rule.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from edgedrift.models.document import model_from_document
from edgedrift.wire import (
    WINDOW_CONTENT_TYPE,
    GatewayHeartbeatsStored,
    Heartbeat,
    WindowHeader,
    encode_window,
    history_rows,
)
from edgedrift_edge import tracing
from edgedrift_edge.session.trainer import LabelBatch, RecomputeFailure, RecomputeRequest, TrainedModel

if TYPE_CHECKING:
    from opentelemetry.context import Context

log = logging.getLogger("edgedrift_edge.cloud.client")
T = TypeVar("T")
#: A gateway's devices from the cloud: id -> secret (None: held already), and id -> hand-over flag.
GatewayList = tuple[dict[str, str | None], dict[str, str]]
#: Heartbeats per request of a gateway's batch (the cloud takes up to 10,000).
HEARTBEAT_CHUNK = 1000


class CloudError(RuntimeError):
    """A failed attempt; ``retryable`` False for refusals a retry cannot fix, ``unauthorized`` for
    401/403, ``retry_after`` the server's Retry-After in seconds."""

    def __init__(
        self,
        message: str,
        retryable: bool,
        *,
        unauthorized: bool = False,
        retry_after: float | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.unauthorized = unauthorized
        self.retry_after = retry_after
        self.status = status


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base·2^attempt)]."""
    return rng.uniform(0.0, min(cap, base * 2.0**attempt))


def retry_after_seconds(value: str | None) -> float | None:
    """The delay of a ``Retry-After`` header given in seconds (None when absent or not a number)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0.0 <= seconds < 86_400 else None


def release(response: httpx.Response) -> None:
    """Break ``response``'s reference cycle: httpx 0.28 binds a read response's stream back to the
    response (``BoundAsyncStream._response``, encode/httpx#3733), so every request left 43 objects (its
    request, headers, the pool's request and events) for the cyclic collector: about 7,500 objects a
    second in a gateway of a thousand devices (docs/benchmarks.md, section 6; its memory stayed within
    the runs' spread). The body is read whole here, so the stream
    becomes a plain one of its bytes and the rest is freed by reference counting."""
    response.stream = httpx.ByteStream(response.content)


def error_from_response(response: httpx.Response) -> CloudError:
    code = response.status_code
    text = f"HTTP {code}: {response.text[:300]}"
    if code in (401, 403):
        return CloudError(text, True, unauthorized=True, status=code)
    retry_after = retry_after_seconds(response.headers.get("Retry-After"))
    retryable = code >= 500 or code in (408, 429)
    return CloudError(text, retryable, retry_after=retry_after, status=code)


def _check_class_names(document: dict[str, Any], sent: tuple[str, ...] | None) -> None:
    """A model document that names its classes must name the device's, in the same code order: a model
    trained for other classes would decode its predictions to the wrong names."""
    names = document.get("class_names")
    if sent is not None and names is not None and [str(n) for n in names] != list(sent):
        raise ValueError(f"the model's class_names {names!r} are not the device's classes {list(sent)!r}")


class CloudClient:
    """HTTP client of the cloud trainer for one or more devices (each call names its device)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 10.0,
        deadline_s: float = 60.0,
        retry_base_s: float = 0.5,
        retry_max_s: float = 30.0,
        unauthorized_retry_s: float = 300.0,
        encoding: str = "binary-float64",
        seed: int | None = None,
        concurrency: int = 16,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        #: Requests on the wire at once; the rest wait their turn (a gateway's devices share one client).
        self.concurrency = concurrency
        self.peak_in_flight = 0
        self._on_wire = 0
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self.retry_base_s = retry_base_s
        self.retry_max_s = retry_max_s
        self.unauthorized_retry_s = unauthorized_retry_s
        self.encoding = encoding
        self.rng = random.Random(seed)
        #: Label batches per device handed over and not yet answered (bounded by ``outbox``).
        self._in_flight: dict[str, int] = {}
        self._in_flight_lock = threading.Lock()
        self._history_locks: dict[str, asyncio.Lock] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="edgedrift-cloud", daemon=True)
        self._thread.start()
        self._http = self._run(self._open())
        self._closed = threading.Event()

    async def _open(self) -> httpx.AsyncClient:
        """The connection pool, and the semaphore in front of it: a gateway's thousand devices asking at
        once wait on the semaphore (constant cost each), not in httpx's pool queue, whose cost per
        request grows with the number of waiters until the client itself stalls."""
        self._gate = asyncio.Semaphore(self.concurrency)
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        return httpx.AsyncClient(base_url=self.base_url, timeout=self.timeout_s, limits=limits)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _spawn(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def close(self, timeout: float = 5.0) -> None:
        """Cancel what is running, close the connections, stop the thread."""
        if self._closed.is_set():
            return
        self._closed.set()

        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._http.aclose()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout)
        except (concurrent.futures.TimeoutError, RuntimeError):
            log.warning("cloud client did not shut down within %.0f s", timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._loop.close()  # the loop's self-pipe sockets; a stopped loop that is not closed leaks them

    # --- recomputes -------------------------------------------------------------------------------------

    def submit(
        self,
        device_id: str,
        secret: str | None,
        request: RecomputeRequest,
        on_failure: Callable[[RecomputeFailure], None],
        trace_context: Context | None = None,
    ) -> concurrent.futures.Future[TrainedModel | None]:
        """Train ``request`` with retries in the background; the future holds the model, or None when
        the cloud refused it for good or the client closed. Each failed attempt goes to ``on_failure``
        (called on the client's thread). ``trace_context``: the recompute's span, parent of each attempt's
        (:mod:`edgedrift_edge.tracing`)."""
        return self._spawn(self._train_with_retries(device_id, secret, request, on_failure, trace_context))

    async def _train_with_retries(
        self,
        device_id: str,
        secret: str | None,
        request: RecomputeRequest,
        on_failure: Callable[[RecomputeFailure], None],
        trace_context: Context | None,
    ) -> TrainedModel | None:
        if request.retune is None:
            return await self._train_attempts(device_id, secret, request, on_failure, trace_context)
        async with self._history_lock(device_id):  # after every label batch handed over before it
            return await self._train_attempts(device_id, secret, request, on_failure, trace_context)

    async def _train_attempts(
        self,
        device_id: str,
        secret: str | None,
        request: RecomputeRequest,
        on_failure: Callable[[RecomputeFailure], None],
        trace_context: Context | None,
    ) -> TrainedModel | None:
        attempt = 0
        unauthorized_streak = 0
        while not self._closed.is_set():
            try:
                return await self.train(device_id, secret, request, trace_context)
            except CloudError as exc:
                if exc.unauthorized:
                    delay = backoff_delay(
                        unauthorized_streak, self.retry_max_s, self.unauthorized_retry_s, self.rng
                    )
                    delay = max(delay, self.retry_base_s)
                    unauthorized_streak += 1
                elif exc.retry_after is not None:
                    delay = exc.retry_after + self.rng.uniform(
                        0.0, max(self.retry_base_s, 0.1 * exc.retry_after)
                    )
                else:
                    delay = backoff_delay(attempt + 1, self.retry_base_s, self.retry_max_s, self.rng)
                final = not exc.retryable
                on_failure(
                    RecomputeFailure(
                        request.request_id,
                        attempt,
                        str(exc),
                        final=final,
                        unauthorized=exc.unauthorized,
                        retry_in_s=None if final else round(delay, 3),
                    )
                )
                if final:
                    log.error("recompute %s refused by the cloud: %s", request.request_id, exc)
                    return None
            attempt += 1
            await asyncio.sleep(delay)
        return None

    async def train(
        self,
        device_id: str,
        secret: str | None,
        request: RecomputeRequest,
        trace_context: Context | None = None,
    ) -> TrainedModel:
        """One attempt within the overall deadline (raises :class:`CloudError`); a re-tuning request
        posts its label batches first (each stored once, whatever the retries). With ``trace_context``
        the POST is a client span of that trace, its ``traceparent`` on the request."""
        header = request.header()
        url = f"/v1/devices/{device_id}/models"
        headers = {} if secret is None else {"Authorization": f"Bearer {secret}"}
        history_bytes = 0
        for batch in request.history:
            history_bytes += await self._post_batch(device_id, headers, batch, request.task)
        if self.encoding == "json":
            body = json.dumps(
                {**header.model_dump(mode="json"), "X": request.X.tolist(), "y": request.y.tolist()}
            ).encode()
            headers["Content-Type"] = "application/json"
        else:
            dtype = "float32" if self.encoding == "binary-float32" else "float64"
            body = encode_window(header, request.X, request.y, dtype=dtype)
            headers["Content-Type"] = WINDOW_CONTENT_TYPE
        if trace_context is None:
            response = await self._post(url, headers, content=body)
        else:
            with tracing.client_span(
                "POST", "/v1/devices/{device_id}/models", trace_context, headers
            ) as span:
                response = await self._post(url, headers, content=body)
                span.set_attribute("http.response.status_code", response.status_code)
        response = await self._until_trained(response, headers)
        try:
            data = response.json()
            doc = data["model"]
            _check_class_names(doc, request.class_names)
            return TrainedModel(
                request_id=request.request_id,
                version=int(data["version"]),
                model=model_from_document(doc),
                document=doc,
                train_ms=float(data["train_ms"]),
                bytes_up=len(body) + history_bytes,
                bytes_down=len(response.content),
                replayed=bool(data.get("replayed", False)),
                edge=data.get("edge"),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CloudError(f"unusable answer from the cloud: {exc}", True) from None

    async def _until_trained(self, response: httpx.Response, headers: dict[str, str]) -> httpx.Response:
        """Follow a 202 (the cloud queued the training: ``EDGEDRIFT_CLOUD_TRAINING=queue``) to the
        model: GET the job it names until it answers with the version. Each GET waits at the cloud for a
        while and keeps the job alive; an error (the job expired or was cancelled) fails the attempt,
        whose retry sends the request again under its request_id."""
        auth = {k: v for k, v in headers.items() if k == "Authorization"}
        while response.status_code == 202:
            location = response.headers.get("Location")
            if not location:
                raise CloudError("a 202 from the cloud without a Location to poll", True)
            response = await self._post(location, auth, method="GET")
        return response

    # --- the device's labeled history (re-tuning strategies) --------------------------------------------

    def post_history(
        self, device_id: str, secret: str | None, batch: LabelBatch, task: str, outbox: int = 64
    ) -> concurrent.futures.Future[tuple[str, int]]:
        """Forward a label batch with retries, in order with the device's other batches and re-tuning
        requests. The future holds the outcome and the bytes sent: ``stored``, ``refused`` (a final 4xx),
        ``dropped`` (the device already has ``outbox`` batches on the way: they keep their place) or
        ``closed``."""
        with self._in_flight_lock:
            if self._in_flight.get(device_id, 0) >= outbox:
                dropped: concurrent.futures.Future[tuple[str, int]] = concurrent.futures.Future()
                dropped.set_result(("dropped", 0))
                return dropped
            self._in_flight[device_id] = self._in_flight.get(device_id, 0) + 1
        return self._spawn(self._history_with_retries(device_id, secret, batch, task))

    def _history_lock(self, device_id: str) -> asyncio.Lock:
        """Per device, FIFO: label batches and re-tuning requests reach the cloud in the order given."""
        return self._history_locks.setdefault(device_id, asyncio.Lock())

    async def _history_with_retries(
        self, device_id: str, secret: str | None, batch: LabelBatch, task: str
    ) -> tuple[str, int]:
        headers = {} if secret is None else {"Authorization": f"Bearer {secret}"}
        try:
            async with self._history_lock(device_id):
                attempt = 0
                while not self._closed.is_set():
                    try:
                        return "stored", await self._post_batch(device_id, headers, batch, task)
                    except CloudError as exc:
                        if not exc.retryable:
                            log.error("history batch %s refused by the cloud: %s", batch.batch_id, exc)
                            return "refused", 0
                        wait = exc.retry_after if exc.retry_after is not None else 0.0
                        delay = wait + backoff_delay(
                            attempt + 1, self.retry_base_s, self.retry_max_s, self.rng
                        )
                    attempt += 1
                    await asyncio.sleep(delay)
                return "closed", 0
        finally:
            with self._in_flight_lock:
                self._in_flight[device_id] -= 1

    async def _post_batch(self, device_id: str, headers: dict[str, str], batch: LabelBatch, task: str) -> int:
        """POST a label batch (float64: the search sees what the edge learned) in parts of at most
        :data:`~edgedrift.wire.HISTORY_BODY_BYTES`, the cloud's cap; the bytes sent. A batch that fits is
        one part under its own id; a larger one is split the same way on every attempt, part k under
        ``<batch id>.k``, so a retry stores nothing twice."""
        learner = "logistic" if task == "classification" else "ridge"
        content = {**headers, "Content-Type": WINDOW_CONTENT_TYPE}
        rows = history_rows(batch.X.shape[1])
        parts = range(0, max(1, len(batch.y)), rows)
        sent = 0
        for k, start in enumerate(parts):
            part_id = batch.batch_id if len(parts) == 1 else f"{batch.batch_id}.{k}"
            header = WindowHeader.model_validate({"task": task, "learner": learner, "request_id": part_id})
            part = slice(start, start + rows)
            body = encode_window(header, batch.X[part], batch.y[part], dtype="float64")
            await self._post(f"/v1/devices/{device_id}/history", content, content=body)
            sent += len(body)
        return sent

    # --- heartbeats ----------------------------------------------------------------------------------------

    def heartbeat(
        self, device_id: str, secret: str | None, beat: Heartbeat
    ) -> concurrent.futures.Future[None]:
        """Post one heartbeat in the background (the future raises :class:`CloudError` on failure)."""
        return self._spawn(self._heartbeat(device_id, secret, beat))

    async def _heartbeat(self, device_id: str, secret: str | None, beat: Heartbeat) -> None:
        headers = {} if secret is None else {"Authorization": f"Bearer {secret}"}
        beat_json = beat.model_dump(mode="json")
        await self._post(f"/v1/devices/{device_id}/stats", headers, wait_s=self.deadline_s, json=beat_json)

    def gateway_heartbeats(
        self, gateway_id: str, secret: str, beats: list[tuple[str, Heartbeat]]
    ) -> concurrent.futures.Future[set[str]]:
        """Post many devices' heartbeats with the gateway's credential, one request per
        :data:`HEARTBEAT_CHUNK`; the future holds the devices the cloud says the gateway no longer serves
        (their beats were not stored) or raises :class:`CloudError`."""
        return self._spawn(self._gateway_heartbeats(gateway_id, secret, beats))

    async def _gateway_heartbeats(
        self, gateway_id: str, secret: str, beats: list[tuple[str, Heartbeat]]
    ) -> set[str]:
        headers = {"Authorization": f"Bearer {secret}"}
        refused: set[str] = set()
        for start in range(0, len(beats), HEARTBEAT_CHUNK):
            chunk = beats[start : start + HEARTBEAT_CHUNK]
            body = [{"device_id": d, "heartbeat": b.model_dump(mode="json")} for d, b in chunk]
            url = f"/v1/gateways/{gateway_id}/heartbeats"
            response = await self._post(url, headers, json={"heartbeats": body})
            refused.update(GatewayHeartbeatsStored.model_validate_json(response.content).refused)
        return refused

    # --- a gateway's devices --------------------------------------------------------------------------

    def gateway_devices(
        self, gateway_id: str, secret: str, known: list[str]
    ) -> concurrent.futures.Future[GatewayList]:
        """The devices the cloud assigns to ``gateway_id``: id -> secret, a fresh secret for each device
        not in ``known`` (the gateway holds those already), None for the others; and each device's
        hand-over flag (``edgedrift_cloud.gateway_registry``)."""
        return self._spawn(self._gateway_devices(gateway_id, secret, known))

    def first_gateway_devices(
        self, gateway_id: str, secret: str, known: list[str], timeout: float
    ) -> GatewayList:
        """The gateway's list at its start (blocking): asked again with backoff while the cloud is busy
        or unreachable, until ``timeout``; a refused credential raises :class:`CloudError` at once."""
        deadline = time.monotonic() + timeout
        delay = self.retry_base_s
        while True:
            try:
                return self.gateway_devices(gateway_id, secret, known).result(
                    max(1.0, deadline - time.monotonic())
                )
            except CloudError as exc:
                if not exc.retryable or exc.unauthorized or time.monotonic() + delay > deadline:
                    raise
                log.warning(
                    "gateway %s: device list not fetched (%s); again in %.1f s", gateway_id, exc, delay
                )
            time.sleep(delay)
            delay = min(2 * delay, self.retry_max_s)

    async def _gateway_devices(self, gateway_id: str, secret: str, known: list[str]) -> GatewayList:
        headers = {"Authorization": f"Bearer {secret}"}
        response = await self._post(f"/v1/gateways/{gateway_id}/sync", headers, json={"known": known})
        try:
            rows = response.json()["devices"]
            secrets = {str(row["device_id"]): row.get("secret") for row in rows}
            flags = {str(row["device_id"]): str(row["handover"]) for row in rows if row.get("handover")}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CloudError(f"unusable answer from the cloud: {exc}", True) from None
        return secrets, flags

    # --- hand-overs between gateways (edgedrift_edge.handover.moves) --------------------------------------

    def handover_phase(
        self, gateway_id: str, secret: str, device_id: str, phase: str
    ) -> concurrent.futures.Future[None]:
        """Tell the cloud this gateway records the device's messages (source) or subscribed (target)."""
        url = f"/v1/gateways/{gateway_id}/handovers/{device_id}/phase"
        return self._spawn(self._gateway_post(url, secret, json={"phase": phase}))

    def handover_release(
        self, gateway_id: str, secret: str, device_id: str, state: bytes
    ) -> concurrent.futures.Future[None]:
        """Leave the device's state at the cloud for the target (the source's last step)."""
        url = f"/v1/gateways/{gateway_id}/handovers/{device_id}/state"
        content = {"Content-Type": "application/octet-stream"}
        return self._spawn(self._gateway_post(url, secret, headers=content, content=state))

    def handover_take(
        self, gateway_id: str, secret: str, device_id: str
    ) -> concurrent.futures.Future[tuple[bytes, str]]:
        """The state the source left and the device's fresh secret (the target's last step)."""
        return self._spawn(self._handover_take(gateway_id, secret, device_id))

    async def _gateway_post(
        self, url: str, secret: str, headers: dict[str, str] | None = None, **body: Any
    ) -> None:
        await self._post(url, {**(headers or {}), "Authorization": f"Bearer {secret}"}, **body)

    async def _handover_take(self, gateway_id: str, secret: str, device_id: str) -> tuple[bytes, str]:
        url = f"/v1/gateways/{gateway_id}/handovers/{device_id}/take"
        response = await self._post(url, {"Authorization": f"Bearer {secret}"})
        try:
            body = response.json()
            return base64.b64decode(body["state"], validate=True), str(body["secret"])
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise CloudError(f"unusable answer from the cloud: {exc}", True) from None

    async def _post(
        self,
        url: str,
        headers: dict[str, str],
        wait_s: float | None = None,
        method: str = "POST",
        **body: Any,
    ) -> httpx.Response:
        """One POST within the overall deadline; :class:`CloudError` for a transport error or a 4xx/5xx.

        The deadline starts when the call has a slot: a gateway's thousand devices queue for the
        ``concurrency`` slots, and a call whose wait ate its deadline went out with a fraction of a
        second left and timed out at the cloud, again and again. ``wait_s`` bounds the wait (heartbeats:
        best effort). The request runs under httpx's own timeouts, each phase (connect, write, read)
        within the deadline, never cancelled from outside: that can leave httpx's pool with a slot it
        never reclaims (httpcore 1.0.9, encode/httpcore#1093), and a gateway's pool then refused every
        request for good (gateways wedged in the 10,000-device fleet simulation)."""
        try:
            async with asyncio.timeout(wait_s):
                await self._gate.acquire()
        except TimeoutError:
            raise CloudError(f"no free connection within {wait_s:g} s", True) from None
        self._on_wire += 1
        self.peak_in_flight = max(self.peak_in_flight, self._on_wire)
        try:
            phase = httpx.Timeout(min(self.timeout_s, self.deadline_s))
            response = await self._http.request(method, url, headers=headers, timeout=phase, **body)
        except httpx.TimeoutException:
            raise CloudError(f"no answer within the {self.deadline_s:g} s deadline", True) from None
        except httpx.HTTPError as exc:
            raise CloudError(f"{type(exc).__name__}: {exc}", True) from None
        finally:
            self._on_wire -= 1
            self._gate.release()
        release(response)
        if response.status_code >= 400:
            raise error_from_response(response)
        return response
