"""The agent's Prometheus metrics (``metrics_port``): what a scrape of a gateway or a single-device agent
shows, read from the counters the sessions and the transport keep already (the same numbers as the
status message and the heartbeats: nothing is counted twice), plus one histogram of message latency.

Series stay bounded whatever the gateway's size: the first ``metrics_device_labels`` devices served have
series of their own (``device`` label); the others are summed under ``device="_other"`` (their
checkpoint age is the oldest of them), so ``sum without (device)`` is always the gateway's total.
Off by default: without a port no server runs and nothing is observed per message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from edgedrift import __version__, kernels
from edgedrift_edge.metrics_server import serve

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from edgedrift_edge.device import DeviceRuntime
    from edgedrift_edge.transport.sessions import Transport

#: The label of the devices past ``metrics_device_labels``.
OTHER = "_other"
#: Per-device counters exported, with their help text (the ledger: samples = predictions + rejected +
#: duplicates; the transport's drops come on top).
DEVICE_COUNTERS: dict[str, str] = {
    "messages": "MQTT messages handled (samples and labels).",
    "samples": "Samples received.",
    "labeled": "Labels joined to a sample.",
    "predictions": "Predictions published.",
    "rejected": "Samples rejected (invalid, out of service), each with an event.",
    "dropped": "Items dropped: QoS-0 messages of a full inbox, overloaded ones, the broker's (seq gaps).",
    "overloaded": "Items refused because the device was past its share of a gateway's worker.",
    "broker_dropped": "Samples the broker dropped before they reached the agent (seq gaps).",
    "duplicates": "Redelivered samples, predicted again.",
    "outliers": "Samples the range guard kept out of learning.",
    "label_misses": "Labels whose sample was not found.",
    "recomputes_requested": "Recomputes asked of the cloud.",
    "recomputes_completed": "Recomputes whose model was installed.",
    "recompute_failures": "Recomputes that failed.",
    "heartbeats": "Heartbeats the cloud stored.",
    "heartbeat_failures": "Heartbeats that failed.",
    "checkpoints": "Checkpoints written.",
    "checkpoint_failures": "Checkpoints that failed (retried with backoff).",
    "history_dropped": "Label batches for the cloud's history dropped (outbox full).",
}
#: Counters of the gateway's one MQTT connection (no device label).
TRANSPORT_COUNTERS: dict[str, str] = {
    "reconnects": "Reconnections to the broker.",
    "publish_failures": "Publishes that could not be queued (retried).",
    "backpressure_waits": "Times the inbox was full and reading from the broker paused.",
}
#: Message latency: from the inbox to the end of its handling (its publishes queued).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Scraped(Protocol):
    """What the metrics read of the agent (:class:`~edgedrift_edge.agent.EdgeAgent`)."""

    gateway_id: str | None
    devices: dict[str, DeviceRuntime]
    transport: Transport
    fatal: str | None
    degraded: str | None

    @property
    def waiting(self) -> int: ...


class AgentMetrics:
    """The registry of one agent, its device labels and (once :meth:`start` ran) its HTTP server."""

    def __init__(self, agent: Scraped, device_labels: int) -> None:
        self.agent = agent
        self.device_labels = device_labels
        self._labels: dict[str, str] = {}
        self._own = 0
        self._lock = threading.Lock()
        self.registry = CollectorRegistry(auto_describe=False)
        self.latency = Histogram(
            "edgedrift_edge_message_latency_seconds",
            "From a message's arrival in the inbox to the end of its handling.",
            ["device"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._children: dict[str, Histogram] = {}
        self.registry.register(_AgentCollector(self))
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def label(self, device_id: str) -> str:
        """The device's label: its id for the first ``device_labels`` devices in the order the agent
        serves them (whichever sends first), else ``_other``; a label never changes."""
        found = self._labels.get(device_id)
        if found is not None:
            return found
        with self._lock:
            for known in [*self.agent.devices, device_id]:
                if known not in self._labels:
                    own = self._own < self.device_labels
                    self._own += own
                    self._labels[known] = known if own else OTHER
            return self._labels[device_id]

    def observe(self, device_id: str, seconds: float) -> None:
        """One message's latency (on the worker thread)."""
        child = self._children.get(device_id)
        if child is None:
            child = self._children[device_id] = self.latency.labels(self.label(device_id))
        child.observe(seconds)

    def start(self, port: int, addr: str) -> int:
        """Serve ``/metrics`` on a thread of its own, each render reused for a second
        (:mod:`~edgedrift_edge.metrics_server`); returns the port (0 picks a free one)."""
        self._server, self._thread = serve(self.registry, port, addr)
        return int(self._server.server_port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _AgentCollector(Collector):
    """The counters and gauges, read at scrape time from the sessions and the transport."""

    def __init__(self, metrics: AgentMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        agent = self.metrics.agent
        devices = list(agent.devices.values())
        totals: dict[str, dict[str, int]] = {}
        ages: dict[str, float] = {}
        silents: dict[str, int] = {}
        now = time.time()
        for device in devices:
            label = self.metrics.label(device.device_id)
            sums = totals.setdefault(label, dict.fromkeys(DEVICE_COUNTERS, 0))
            counters = device.session.counters
            for name in DEVICE_COUNTERS:
                sums[name] += getattr(counters, name)
            ages[label] = max(ages.get(label, 0.0), now - device.checkpointed_at)
            silents[label] = silents.get(label, 0) + device.silent
        families: list[Metric] = []
        for name, text in DEVICE_COUNTERS.items():
            family = CounterMetricFamily(f"edgedrift_edge_{name}", text, labels=["device"])
            for label, sums in totals.items():
                family.add_metric([label], sums[name])
            families.append(family)
        for name, text in TRANSPORT_COUNTERS.items():
            families.append(
                CounterMetricFamily(
                    f"edgedrift_edge_{name}", text, value=getattr(agent.transport.counters, name)
                )
            )
        age = GaugeMetricFamily(
            "edgedrift_edge_checkpoint_age_seconds",
            "Seconds since the device's last checkpoint (or its start, before the first one).",
            labels=["device"],
        )
        for label, seconds in ages.items():
            age.add_metric([label], seconds)
        silent = GaugeMetricFamily(
            "edgedrift_edge_devices_silent",
            "Devices that received no message for silent_after_s while connected (the broker's ACL?).",
            labels=["device"],
        )
        for label, count in silents.items():
            silent.add_metric([label], count)
        state = "error" if agent.fatal else "degraded" if agent.degraded else "online"
        states = GaugeMetricFamily("edgedrift_edge_state", "1 for the agent's state.", labels=["state"])
        for name in ("online", "degraded", "error"):
            states.add_metric([name], float(name == state))
        info = GaugeMetricFamily(
            "edgedrift_edge_info",
            "The agent's version and kernel path.",
            labels=["version", "kernels", "gateway"],
        )
        info.add_metric([__version__, kernels.path(), agent.gateway_id or ""], 1)
        families += [
            age,
            states,
            info,
            GaugeMetricFamily(
                "edgedrift_edge_inbox_messages", "Messages received and not handled yet.", value=agent.waiting
            ),
            GaugeMetricFamily("edgedrift_edge_devices", "Devices served.", value=len(devices)),
            GaugeMetricFamily(
                "edgedrift_edge_devices_failed",
                "Devices taken out of service (a systematic error).",
                value=sum(1 for d in devices if d.failed is not None),
            ),
            silent,
        ]
        return families
