"""A recompute's trace across the edge and the cloud (OpenTelemetry, issue 31 item 3).

The real agent (a real Mosquitto, a drifting Sine1+ stream) asks the cloud trainer served by uvicorn in
this process over real HTTP; OpenTelemetry's SDK with an in-memory exporter collects both sides' spans
(:func:`support.tracing.in_memory_spans`). The parent links must run from the drift decision on the edge
through the HTTP request (W3C ``traceparent``, remote on the cloud's side) to the cloud's training, and
from the decision to the model's installation on the edge: one trace per recompute. Without a tracer
provider nothing is traced and the cloud adds no middleware.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, set_span_in_context
from pydantic import SecretStr
from support.cloud import OPERATOR
from support.tracing import in_memory_spans, reset_after

from edgedrift.data.generators import sine1plus
from edgedrift.protocol import Protocol
from edgedrift.telemetry import endpoint_configured, tracing_active
from edgedrift_cloud import tracing as cloud_tracing
from edgedrift_cloud.main import create_app
from edgedrift_cloud.settings import CloudSettings
from edgedrift_edge import tracing as edge_tracing
from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.replay import ReplayPlan, replay
from edgedrift_edge.settings import AgentSettings
from edgedrift_harness.mosquitto import MosquittoProcess, local_mosquitto
from edgedrift_harness.mqtt import DeviceWatcher
from edgedrift_harness.ports import free_port

pytestmark = pytest.mark.kernel_agnostic

MODELS_ROUTE = "POST /v1/devices/{device_id}/models"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoProcess]:
    with local_mosquitto(tmp_path / "broker") as server:
        yield server


class ThreadedCloud:
    """The cloud trainer's app under a real uvicorn server on a thread of this process."""

    def __init__(self, settings: CloudSettings) -> None:
        self.port = free_port()
        self.app = create_app(settings, configure_logs=False)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ThreadedCloud:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def by_name(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[int]:
    """The span ids above ``span`` (FastAPI puts its endpoint's span between the request's and ours)."""
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    found: list[int] = []
    parent = span.parent
    while parent is not None:
        found.append(parent.span_id)
        above = by_id.get(parent.span_id)
        parent = None if above is None else above.parent
    return found


def test_a_recompute_is_one_trace_from_the_drift_decision_to_the_installation(
    broker: MosquittoProcess, tmp_path: Path
) -> None:
    device, secret = f"traced-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
    settings = CloudSettings(
        database_url=f"sqlite:///{tmp_path / 'registry.db'}",
        operator_token=SecretStr(OPERATOR),
        mode="development",
        devices={device: SecretStr(secret)},
    )
    with in_memory_spans() as exporter, ThreadedCloud(settings) as cloud:
        agent_settings = {
            "device_id": device,
            "device_secret": secret,
            "broker_url": broker.url,
            "cloud_url": cloud.url,
            "warmup_samples": 300,
            "window_labels": 30,
            "checkpoint_dir": str(tmp_path / "state"),
            "heartbeat_every_s": 0.5,
            "strategy_param": 0.99,
            "retry_base_s": 0.05,
            "retry_max_s": 0.5,
        }
        agent = EdgeAgent(AgentSettings.model_validate(agent_settings)).start()
        watch = DeviceWatcher(broker.url, device)
        try:
            stream = sine1plus(d=2, n_concepts=2, concept_length=1500, seed=1)
            replay(ReplayPlan(stream, (device,), Protocol(every=5)), broker.url, progress=False)
            watch.wait_predictions(len(stream.y), timeout=90)
            watch.wait_events("recompute_finished", timeout=90)
            requested = watch.events("recompute_requested")
        finally:
            watch.close()
            agent.stop()
        spans = list(exporter.get_finished_spans())

    roots = by_name(spans, "edgedrift.recompute")
    installed = [r for r in roots if r.attributes and "edgedrift.version" in r.attributes]
    drift = [r for r in installed if r.attributes and r.attributes["edgedrift.initial"] is False]
    assert drift, f"no drift recompute traced: {sorted({s.name for s in spans})}"
    assert len(roots) <= len(requested), "a recompute opened more than one trace"
    ids = {e["request_id"] for e in requested}
    assert {r.attributes["edgedrift.request_id"] for r in roots if r.attributes} <= ids
    for root in installed:
        assert root.parent is None and root.context is not None and root.attributes is not None
        trace_id = root.context.trace_id
        mine = [s for s in spans if s.context is not None and s.context.trace_id == trace_id]
        assert [e.name for e in root.events] == [
            "first window" if root.attributes["edgedrift.initial"] else "drift"
        ]
        (client,) = [s for s in mine if s.kind is SpanKind.CLIENT]
        assert client.name == MODELS_ROUTE and client.parent is not None
        assert client.parent.span_id == root.context.span_id
        assert client.attributes and client.attributes["http.response.status_code"] == 201
        (server,) = [s for s in mine if s.kind is SpanKind.SERVER]  # FastAPI's own (fastapi.telemetry)
        assert server.name == MODELS_ROUTE and server.parent is not None and server.parent.is_remote
        assert client.context is not None and server.parent.span_id == client.context.span_id
        (train,) = by_name(mine, "edgedrift.train")
        assert server.context is not None and server.context.span_id in ancestors(train, mine)
        assert train.attributes and train.attributes["edgedrift.device_id"] == device
        (install,) = by_name(mine, "edgedrift.install")
        assert install.parent is not None and install.parent.span_id == root.context.span_id
        assert (
            install.attributes
            and install.attributes["edgedrift.version"] == root.attributes["edgedrift.version"]
        )
        assert root.start_time is not None and client.start_time is not None and install.end_time is not None
        assert root.start_time <= client.start_time <= server.start_time <= install.start_time  # type: ignore[operator]
        # One tree: every span of the trace descends from the decision's span.
        known = {s.context.span_id for s in mine if s.context is not None}
        assert all(s.parent is not None and s.parent.span_id in known for s in mine if s is not root)


def test_nothing_is_traced_without_a_provider() -> None:
    assert not tracing_active()
    assert not endpoint_configured({})
    assert endpoint_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert not endpoint_configured(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}
    )
    assert edge_tracing.configure("edgedrift-edge", {}) is None and not tracing_active()
    assert edge_tracing.RecomputeTraces().enabled is False


def test_the_cloud_continues_traces_and_starts_none() -> None:
    """configure()'s sampler: a span under a sampled remote parent records, a root does not."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}  # nothing listens; nothing is exported
    with reset_after():
        provider = cloud_tracing.configure("edgedrift-cloud", env)
        assert provider is not None and tracing_active()
        tracer = provider.get_tracer("test")
        assert not tracer.start_span("heartbeat").is_recording()
        parent = SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        traced = tracer.start_span("recompute", context=set_span_in_context(NonRecordingSpan(parent)))
        assert traced.is_recording() and traced.get_span_context().trace_id == 0x1234
        traced.end()
        provider.shutdown()
