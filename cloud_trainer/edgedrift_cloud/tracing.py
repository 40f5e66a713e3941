"""Traces (OpenTelemetry): the cloud's part of a recompute's trace.

FastAPI traces every request natively through OpenTelemetry's global providers (``fastapi.telemetry``): a
server span per request, continuing the caller's trace from its W3C ``traceparent`` header, with spans of
the dependencies and the endpoint below it. This module adds what FastAPI cannot know:

* :func:`configure`: off unless configured. With ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set it installs the SDK with the OTLP/HTTP exporter (``pip install
  'edgedrift-cloud[tracing]'``); without, nothing is recorded or exported. Its sampler is
  ``parentbased_always_off`` unless ``OTEL_TRACES_SAMPLER`` says otherwise: the cloud continues the traces
  its callers started (a device's recompute) and starts none of its own, so heartbeats, the dashboard's
  polls and scrapes make no trace and a recompute is one trace.
* :func:`child_span`: ``edgedrift.train`` around the training itself, in the training router.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span

from edgedrift.telemetry import configure_tracing

tracer = trace.get_tracer("edgedrift_cloud")


def configure(service: str, environ: Mapping[str, str] | None = None) -> Any | None:
    """OpenTelemetry's SDK with the OTLP/HTTP exporter when an endpoint is configured, sampling only the
    traces callers started (:func:`edgedrift.telemetry.configure_tracing`; each worker process its own,
    before FastAPI's app is built); the provider or None."""
    return configure_tracing(service, "edgedrift-cloud", roots=False, environ=environ)


@contextmanager
def child_span(name: str, attributes: Mapping[str, str | int | float]) -> Iterator[Span]:
    """A span under the current one when that one records (a traced request), else a no-op span."""
    if not trace.get_current_span().is_recording():
        yield trace.INVALID_SPAN
        return
    with tracer.start_as_current_span(name, attributes=attributes) as span:
        yield span
