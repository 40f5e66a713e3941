"""What a device's session is configured with and what it counts and returns: its ledger.

Every sample of every message ends up in exactly one of ``predictions``, ``rejected`` or ``duplicates``
(a redelivery, predicted again); the transport and a gateway's fair queues add ``dropped``. A gateway
keeps one of each per device.
A retained message on an input topic is rejected whole (``rejected``, and ``retained``); the broker's
copies of it at later subscribes are counted in ``retained_repeats`` only (they were published once).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from edgedrift.models.losses import Task
from edgedrift_edge.session.trainer import LabelBatch

Event = dict[str, Any]
Prediction = dict[str, Any]


@dataclass(frozen=True)
class SessionConfig:
    """What one device's session needs to know (a subset of the agent's settings)."""

    device_id: str
    task: Task = "classification"
    #: The class names in code order (labels and predictions by name); None: labels are ±1.
    classes: tuple[str | int, ...] | None = None
    strategy: str = "druid"
    strategy_param: float | None = None
    n_features: int | None = None
    warmup_samples: int = 2000
    window_labels: int = 200
    C: float | Literal["auto"] = "auto"
    batch_mode: Literal["exact", "vectorised"] = "exact"
    #: Newest samples whose ids are remembered (redeliveries, late labels' joins).
    recent_samples: int = 50_000
    #: Bytes those samples may take at the device's width (None: no bound beyond ``recent_samples``).
    recent_bytes: int | None = None
    accuracy_window: int = 1000
    max_items: int = 10_000
    outlier_threshold: float = 100.0
    retry_cooldown_s: float = 30.0
    #: Labels per batch forwarded to the cloud's history (re-tuning strategies).
    history_batch: int = 200
    #: Whether gaps in the publisher's ``seq`` count as the broker's drops (not under QoS 0, whose inbox
    #: drops the transport counts already: :mod:`~edgedrift_edge.session.seq`).
    check_seq: bool = True
    #: Seconds a gap in ``seq`` waits for its samples (a broker may deliver out of order) before they
    #: count as the broker's drops.
    seq_grace_s: float = 30.0


@dataclass(slots=True)
class Counters:
    """Everything a device counts; published in its status and heartbeats. Slots: with more than 30
    attributes CPython (3.11) gives each instance a whole dict of its own (1.6 kB, against 0.3 kB), and a
    gateway holds one per device."""

    messages: int = 0
    samples: int = 0
    labeled: int = 0
    predictions: int = 0
    rejected: int = 0
    #: Of ``rejected``: samples and labels refused for their label (not in the task's encoding, ...).
    rejected_labels: int = 0
    dropped: int = 0
    #: Of ``dropped``: items of messages a gateway refused because their device was past its share of
    #: the worker's queue while the broker's window was full (:mod:`~edgedrift_edge.buffers.fair_queue`).
    overloaded: int = 0
    #: Of ``dropped``: samples the broker dropped before they reached the agent, told from the gaps in
    #: the publisher's ``seq`` (:mod:`~edgedrift_edge.session.seq`).
    broker_dropped: int = 0
    #: Messages a gateway refused again that it had accounted for already (told by their ``seq``: sent
    #: again after a reconnect); not in the ledger, they were published once.
    refused_repeats: int = 0
    duplicates: int = 0
    #: Items of retained messages on the samples or labels topic (ignored: counted in ``rejected`` too),
    #: and the broker's later copies of those messages (not in the ledger: published once).
    retained: int = 0
    retained_repeats: int = 0
    id_reused: int = 0
    outliers: int = 0
    label_misses: int = 0
    join_evictions: int = 0
    recomputes_requested: int = 0
    recomputes_completed: int = 0
    recompute_failures: int = 0
    http_bytes_up: int = 0
    http_bytes_down: int = 0
    heartbeats: int = 0
    heartbeat_failures: int = 0
    checkpoints: int = 0
    checkpoint_failures: int = 0
    reconnects: int = 0
    publish_failures: int = 0
    backpressure_waits: int = 0
    #: Re-tuning strategies: label batches (and their labels) handed to the cloud client for the device's
    #: history, and how those ended: stored (a replay included), refused for good, dropped (outbox full).
    history_batches: int = 0
    history_labels: int = 0
    history_stored: int = 0
    history_refused: int = 0
    history_dropped: int = 0


@dataclass
class Output:
    """What handling one message produced: predictions (one payload, or a batch) and events."""

    predictions: list[Prediction] = field(default_factory=list)
    batch: bool = False
    events: list[Event] = field(default_factory=list)
    #: Label batches to forward to the device's history (re-tuning strategies).
    history: list[LabelBatch] = field(default_factory=list)
