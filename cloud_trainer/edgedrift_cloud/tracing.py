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

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span

log = logging.getLogger("edgedrift_cloud.tracing")
tracer = trace.get_tracer("edgedrift_cloud")


def endpoint_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces: an OTLP endpoint set and the SDK not disabled."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def active() -> bool:
    """Whether spans are recorded: a real tracer provider is installed, not the API's default proxy."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def configure(service: str, environ: Mapping[str, str] | None = None) -> Any | None:
    """Install OpenTelemetry's SDK with the OTLP/HTTP exporter when an endpoint is configured and no
    provider is installed yet (each worker process its own, before FastAPI's app is built); the provider,
    or None. Without the ``tracing`` extra this logs one error and leaves tracing off."""
    env = os.environ if environ is None else environ
    if not endpoint_configured(env) or active():
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, Sampler
    except ImportError as exc:
        log.error(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry's SDK is missing (%s): "
            "pip install 'edgedrift-cloud[tracing]'; no traces",
            exc,
        )
        return None
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", service)})
    # Without a sampler the SDK reads OTEL_TRACES_SAMPLER; the cloud's own default follows its callers.
    sampler: Sampler | None = None if env.get("OTEL_TRACES_SAMPLER") else ParentBased(ALWAYS_OFF)
    provider = TracerProvider(resource=resource, sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider


@contextmanager
def child_span(name: str, attributes: Mapping[str, str | int | float]) -> Iterator[Span]:
    """A span under the current one when that one records (a traced request), else a no-op span."""
    if not trace.get_current_span().is_recording():
        yield trace.INVALID_SPAN
        return
    with tracer.start_as_current_span(name, attributes=attributes) as span:
        yield span
