"""The agent's metrics without a broker: the device label cap (the first N devices by themselves, the
others summed under ``_other``), counters read from the sessions, and no server unless a port is set."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import httpx
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from edgedrift import kernels
from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.metrics import OTHER, AgentMetrics
from edgedrift_edge.session.ledger import Counters
from edgedrift_edge.settings import AgentSettings
from edgedrift_edge.transport.connection import TransportCounters


def fake_agent(devices: dict[str, Counters], checkpointed: dict[str, float]) -> Any:
    runtimes = {
        d: SimpleNamespace(
            device_id=d,
            session=SimpleNamespace(counters=c),
            checkpointed_at=checkpointed[d],
            failed=None,
            silent=False,
        )
        for d, c in devices.items()
    }
    transport = SimpleNamespace(counters=TransportCounters(reconnects=2))
    return SimpleNamespace(
        gateway_id="gw", devices=runtimes, transport=transport, fatal=None, degraded="stuck", waiting=7
    )


def samples(metrics: AgentMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_devices_past_the_cap_are_summed_under_other() -> None:
    now = time.time()
    counters = {f"d{i}": Counters(samples=10 * (i + 1), predictions=i, dropped=1) for i in range(4)}
    metrics = AgentMetrics(fake_agent(counters, {f"d{i}": now - 100 * i for i in range(4)}), device_labels=2)
    metrics.observe("d3", 0.003)
    metrics.observe("d0", 0.2)
    got = samples(metrics)
    assert got[("edgedrift_edge_samples_total", (("device", "d0"),))] == 10
    assert got[("edgedrift_edge_samples_total", (("device", "d1"),))] == 20
    assert got[("edgedrift_edge_samples_total", (("device", OTHER),))] == 30 + 40
    assert got[("edgedrift_edge_dropped_total", (("device", OTHER),))] == 2
    assert not [k for k in got if ("device", "d2") in k[1] or ("device", "d3") in k[1]]
    age = got[("edgedrift_edge_checkpoint_age_seconds", (("device", OTHER),))]
    assert 300 <= age < 310, "the oldest of the others"
    assert got[("edgedrift_edge_message_latency_seconds_count", (("device", OTHER),))] == 1
    assert got[("edgedrift_edge_message_latency_seconds_bucket", (("device", "d0"), ("le", "0.1")))] == 0
    assert got[("edgedrift_edge_reconnects_total", ())] == 2
    assert got[("edgedrift_edge_inbox_messages", ())] == 7
    assert got[("edgedrift_edge_state", (("state", "degraded"),))] == 1
    assert got[("edgedrift_edge_state", (("state", "online"),))] == 0
    assert kernels.path() in {k[1][1][1] for k in got if k[0] == "edgedrift_edge_info"}


def test_no_metrics_server_without_a_port() -> None:
    settings = AgentSettings.model_validate({"device_id": "m-1"})
    assert settings.metrics_port is None
    assert EdgeAgent(settings).metrics is None


def test_the_server_answers_on_a_free_port() -> None:
    metrics = AgentMetrics(fake_agent({"d0": Counters(samples=3)}, {"d0": time.time()}), device_labels=5)
    port = metrics.start(0, "127.0.0.1")
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    finally:
        metrics.stop()
    assert 'edgedrift_edge_samples_total{device="d0"} 3.0' in text
