"""Traces of a recompute (OpenTelemetry), from the drift decision to the model's installation.

Off unless configured: with no ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)
:func:`configure` installs nothing, OpenTelemetry's API stays a no-op and :class:`RecomputeTraces` does
nothing. Configured (``pip install 'edgedrift-edge[tracing]'``), a recompute is one trace:

* ``edgedrift.recompute`` (the root, on the device's worker): opened when the session hands its request to
  the trainer, which is the moment the monitor decided; the decision's statistics are its event ``drift``;
* ``POST /v1/devices/{device_id}/models`` (client, on the cloud client's thread), one per attempt, with
  the W3C ``traceparent`` header injected, so the cloud's spans join the trace;
* ``edgedrift.install``: from the model's arrival to the session's ``recompute_finished`` (or the first
  model's ``model_installed``) event, after which the root ends; a final refusal ends it as an error.

The session stays pure: the spans live here and in the adapters that call this module (the agent's
trainer, the cloud client). OpenTelemetry is imported on first use, that is only when tracing is on: an
agent without an endpoint (every gateway process of a host) does not hold its modules.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from edgedrift.telemetry import configure_tracing, tracing_active
from edgedrift_edge.session.trainer import RecomputeRequest

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

#: Open recompute spans kept at most (one per device with a pending request; a gateway's devices).
MAX_OPEN = 100_000
#: The events that end a recompute's trace with the model installed.
INSTALLED = ("recompute_finished", "model_installed")


def tracer() -> Tracer:
    """The agent's tracer (OpenTelemetry's API imported here, at the first span)."""
    from opentelemetry import trace

    return trace.get_tracer("edgedrift_edge")


def configure(service: str, environ: Mapping[str, str] | None = None) -> Any | None:
    """OpenTelemetry's SDK with the OTLP/HTTP exporter when an endpoint is configured
    (:func:`edgedrift.telemetry.configure_tracing`); the provider or None."""
    return configure_tracing(service, "edgedrift-edge", environ=environ)


def shutdown(provider: Any | None) -> None:
    """Flush and stop a provider :func:`configure` installed (spans still queued are exported)."""
    if provider is not None:
        provider.shutdown()


@contextmanager
def client_span(method: str, route: str, context: Context | None, headers: dict[str, str]) -> Iterator[Span]:
    """A client span of one HTTP request under ``context`` (a recompute's), its ``traceparent`` written into
    ``headers``; an exception leaving the block marks it as an error."""
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    with tracer().start_as_current_span(
        f"{method} {route}",
        context=context,
        kind=SpanKind.CLIENT,
        attributes={"http.request.method": method, "http.route": route},
    ) as span:
        propagate.inject(headers)
        yield span


class RecomputeTraces:
    """The open ``edgedrift.recompute`` span of each device, on the agent's worker thread."""

    def __init__(self) -> None:
        self.enabled = tracing_active()
        self._open: dict[str, Span] = {}
        self._arrived: dict[str, int] = {}
        self._request: dict[str, str] = {}

    @property
    def open(self) -> bool:
        """Whether a recompute's span is open (the worker checks this before looking at events)."""
        return bool(self._open)

    def start(self, device_id: str, request: RecomputeRequest) -> Context | None:
        """The context the request's HTTP calls run under: a new root span, or the open one of this
        request (a resubmission after a restart opens a new one). None when tracing is off."""
        if not self.enabled:
            return None
        from opentelemetry import trace
        from opentelemetry.context import Context

        span = self._open.get(device_id)
        if span is None or self._request.get(device_id) != request.request_id:
            if span is not None:
                self._close(device_id, span)
            self._arrived.pop(device_id, None)
            if len(self._open) >= MAX_OPEN:
                oldest = next(iter(self._open))
                self._close(oldest, self._open[oldest])
            span = tracer().start_span(
                "edgedrift.recompute",
                context=Context(),  # a root: the drift decision starts the trace
                attributes={
                    "edgedrift.device_id": device_id,
                    "edgedrift.request_id": request.request_id,
                    "edgedrift.reason": request.reason,
                    "edgedrift.rows": len(request.y),
                    "edgedrift.initial": request.initial,
                },
            )
            stats = {f"edgedrift.monitor.{k}": v for k, v in request.stats.items() if _scalar(v)}
            span.add_event("drift" if not request.initial else "first window", attributes=stats)
            self._open[device_id] = span
            self._request[device_id] = request.request_id
        return trace.set_span_in_context(span)

    def arrived(self, device_id: str) -> None:
        """The cloud's answer to the open request reached the agent (the installation starts now)."""
        if device_id in self._open:
            self._arrived[device_id] = time.time_ns()

    def events(self, device_id: str, events: list[dict[str, Any]]) -> None:
        """End the device's recompute on the session's events: its model installed (an install event
        after the model arrived, and after the request's own ``recompute_requested`` when both are in
        this list: a previous recompute's event may precede it), or refused for good."""
        span = self._open.get(device_id)
        if span is None:
            return
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        request_id = self._request.get(device_id)
        mine = [i for i, e in enumerate(events) if e.get("type") == "recompute_requested"]
        mine = [i for i in mine if events[i].get("request_id") == request_id]
        for event in events[mine[-1] + 1 :] if mine else events:
            kind = event.get("type")
            if kind in INSTALLED and device_id in self._arrived:
                now = time.time_ns()
                version = int(event.get("version", 0))
                install = tracer().start_span(
                    "edgedrift.install",
                    context=trace.set_span_in_context(span),
                    start_time=self._arrived[device_id],
                    attributes={"edgedrift.version": version},
                )
                install.end(end_time=now)
                span.set_attribute("edgedrift.version", version)
                self._close(device_id, span)
                return
            if (
                kind == "recompute_failed"
                and event.get("request_id") == request_id
                and not event.get("retrying", True)
            ):
                span.set_status(Status(StatusCode.ERROR, str(event.get("reason", ""))[:200]))
                self._close(device_id, span)
                return

    def close_all(self) -> None:
        """End every open span (the agent stops)."""
        for device_id, span in list(self._open.items()):
            self._close(device_id, span)

    def _close(self, device_id: str, span: Span) -> None:
        span.end()
        self._open.pop(device_id, None)
        self._arrived.pop(device_id, None)
        self._request.pop(device_id, None)


def _scalar(value: Any) -> bool:
    return isinstance(value, bool | int | float | str)
