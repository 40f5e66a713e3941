"""OpenTelemetry's SDK with an in-memory exporter as the process's tracer provider, for one test.

OpenTelemetry lets a process set its global provider once; the test resets that afterwards the way
OpenTelemetry's own test utilities do (``opentelemetry.test.globals_test``), so the tests after it run
untraced, as the agent and the cloud do without an OTLP endpoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


@contextmanager
def in_memory_spans() -> Iterator[InMemorySpanExporter]:
    """Spans of everything traced inside the block, finished ones in the exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider, "a tracer provider was installed before this test"
    with reset_after():
        try:
            yield exporter
        finally:
            provider.shutdown()


@contextmanager
def reset_after() -> Iterator[None]:
    """Forget the global tracer provider installed inside the block."""
    try:
        yield
    finally:
        trace._TRACER_PROVIDER = None
        trace._TRACER_PROVIDER_SET_ONCE = Once()
