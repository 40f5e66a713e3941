"""Fault scenarios of an unattended device, run on real processes: the shipped Mosquitto configuration,
the cloud trainer under uvicorn, edge agents as ``edgedrift-edge run`` subprocesses (in process only
where a bug has to be injected into the worker).

Each scenario publishes samples, provokes one fault, and returns the **ledger**: every sample the
publisher got acknowledged is either predicted, counted as rejected, or counted as dropped, so
``lost = published − predicted − rejected − dropped`` must be 0. Predictions are counted per sample id
(a sample processed twice after a crash counts once, a reused id with new content counts twice; answers
to exact redeliveries are marked ``repeat`` and not counted). Rejections are counted from the agents'
``rejected`` events, one per message, deduplicated by the message digest they carry (a message
processed again after a crash is not counted twice). Drops come from the ``dropped`` events.

:mod:`.lab` holds the lab and the ledger; the scenarios are grouped by what fails: the device itself
(:mod:`.agent_faults`), its input (:mod:`.input_faults`), the cloud and the broker (:mod:`.network_faults`).
``bench/faults.py`` runs every scenario once and writes the table; ``tests/integration/test_faults.py``
runs each one and asserts its ledger and its specific checks.
"""

from __future__ import annotations

from collections.abc import Callable

from edgedrift_harness.faults.agent_faults import (
    agent_sigkill,
    checkpoint_unwritable,
    crafted_checkpoint,
    disk_full,
    qos0_overflow,
    queue_overflow,
)
from edgedrift_harness.faults.input_faults import (
    bad_items_100k,
    id_reused,
    outlier,
    oversized_batch_400k,
    wrong_width_first,
)
from edgedrift_harness.faults.lab import (
    BROKERS,
    PASSWORD,
    TRANSPORTS,
    FaultLab,
    Ledger,
    Publisher,
    ledger,
    samples_topic,
    single_payloads,
    stream,
)
from edgedrift_harness.faults.network_faults import (
    broker_kill9_offline_agent,
    broker_restart,
    cloud_down,
    cloud_trickle,
    cloud_unauthorized,
)

__all__ = [
    "BROKERS",
    "PASSWORD",
    "SCENARIOS",
    "TRANSPORTS",
    "FaultLab",
    "Ledger",
    "Publisher",
    "ledger",
    "samples_topic",
    "single_payloads",
    "stream",
]

SCENARIOS: dict[str, Callable[[FaultLab], Ledger]] = {
    "agent_sigkill": agent_sigkill,
    "queue_overflow": queue_overflow,
    "qos0_overflow": qos0_overflow,
    "bad_items_100k": bad_items_100k,
    "oversized_batch_400k": oversized_batch_400k,
    "outlier_1e6": outlier,
    "outlier_1e308": lambda lab: outlier(lab, 1e308),
    "wrong_width_first": wrong_width_first,
    "id_reused": id_reused,
    "checkpoint_unwritable": checkpoint_unwritable,
    "disk_full": disk_full,
    "cloud_unauthorized": cloud_unauthorized,
    "cloud_trickle": cloud_trickle,
    "cloud_down": cloud_down,
    "crafted_checkpoint": crafted_checkpoint,
    "broker_restart": broker_restart,
    "broker_kill9_offline_agent": broker_kill9_offline_agent,
}
