"""A device's copy of the shared transport's counters (``DeviceRuntime.sync_transport_counters``): it skips
the work while nothing it reads or writes changed, and a restore of the counters (a resume, a hand-over's
dropped messages) is copied at the next call without asking: nothing has to remember to reset the skip."""

from __future__ import annotations

from pathlib import Path

from edgedrift_edge.checkpoint_writer import CheckpointWriter
from edgedrift_edge.device import DeviceRuntime
from edgedrift_edge.session.trainer import RecomputeRequest, TrainedModel, Trainer
from edgedrift_edge.settings import AgentSettings
from edgedrift_edge.transport.connection import MqttTransport


def no_cloud(device: DeviceRuntime) -> Trainer:
    def train(request: RecomputeRequest) -> TrainedModel | None:
        return None

    return train


def test_a_copy_after_a_restore_is_the_same_whether_or_not_one_came_before(tmp_path: Path) -> None:
    settings = AgentSettings(device_id="dev-1", checkpoint_dir=str(tmp_path))
    transport = MqttTransport(settings.effective_broker_url, "t-client", [], settings.status_topic)
    transport.counters.reconnects = 2  # the connection was lost twice so far (the I/O thread counts)
    writer = CheckpointWriter()
    early = DeviceRuntime(settings, "dev-1", None, transport, no_cloud, writer)
    late = DeviceRuntime(settings, "dev-1", None, transport, no_cloud, writer)
    early.sync_transport_counters()  # a copy before the restore, which must not pass for the current one
    assert early.session.counters.reconnects == 2

    early.store.save_counters({"reconnects": 5, "dropped": 4, "samples": 9})
    for device in (early, late):
        device.resume()  # no checkpoint: the counters go on from the counters file
        device.sync_transport_counters()
    counts = [(d.session.counters.reconnects, d.session.counters.dropped) for d in (early, late)]
    assert counts == [(7, 4), (7, 4)]

    for device in (early, late):
        device.add_dropped(3)  # a hand-over's held messages beyond its bound
        device.sync_transport_counters()
    assert [d.session.counters.dropped for d in (early, late)] == [7, 7]

    transport.counters.reconnects = 3
    early.sync_transport_counters()
    assert early.session.counters.reconnects == 8
