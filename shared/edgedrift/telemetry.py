"""OpenTelemetry's tracer provider for an EdgeDrift process (the edge agent, the cloud trainer): installed
only when an OTLP endpoint is configured.

The standard variables decide: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``
turns tracing on, ``OTEL_SDK_DISABLED=true`` keeps it off, ``OTEL_SERVICE_NAME`` names the service (else
the part's own name). OpenTelemetry is imported here only when called: the core depends on none of it;
the parts that trace depend on its API and carry the SDK and exporter in their ``tracing`` extra.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("edgedrift.telemetry")


def endpoint_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces: an OTLP endpoint set and the SDK not disabled."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def tracing_active() -> bool:
    """Whether spans are recorded: a real tracer provider is installed (by :func:`configure_tracing` or
    by an application embedding the part), not the API's default proxy. Without OpenTelemetry's API
    imported yet and no provider named by ``OTEL_PYTHON_TRACER_PROVIDER``, nobody installed one: the API
    is not imported for the question (a process that does not trace does not hold it)."""
    if "opentelemetry.trace" not in sys.modules and not os.environ.get("OTEL_PYTHON_TRACER_PROVIDER"):
        return False
    try:
        from opentelemetry import trace
    except ImportError:
        return False
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def configure_tracing(
    service: str, package: str, *, roots: bool = True, environ: Mapping[str, str] | None = None
) -> Any | None:
    """Install the SDK with the OTLP/HTTP exporter when an endpoint is configured and no provider is
    installed yet; the provider (to shut down at the end) or None. ``roots=False``: a parent-based
    sampler that records only traces a caller started (unless ``OTEL_TRACES_SAMPLER`` says otherwise).
    Without the SDK this logs one error naming ``pip install '<package>[tracing]'`` and leaves tracing
    off: telemetry never stops a process."""
    env = os.environ if environ is None else environ
    if not endpoint_configured(env) or tracing_active():
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, Sampler
    except ImportError as exc:
        log.error(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry's SDK is missing (%s): "
            "pip install '%s[tracing]'; no traces",
            exc,
            package,
        )
        return None
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", service)})
    # Without a sampler the SDK reads OTEL_TRACES_SAMPLER (default: parent-based, always on).
    sampler: Sampler | None = None if roots or env.get("OTEL_TRACES_SAMPLER") else ParentBased(ALWAYS_OFF)
    provider = TracerProvider(resource=resource, sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider
