"""The edge's cloud client against a real cloud: a gateway's devices share one client, so a thousand
calls at once wait on its semaphore, never more than ``concurrency`` on the wire, and all arrive."""

from __future__ import annotations

from pathlib import Path

from support.cloud import DEVICES, CloudServer

from edgedrift.wire import Heartbeat
from edgedrift_edge.cloud import CloudClient


def test_many_calls_at_once_keep_to_the_concurrency_and_all_arrive(tmp_path: Path) -> None:
    server = CloudServer(f"sqlite:///{tmp_path / 'registry.db'}", tmp_path).start()
    client = CloudClient(server.url, concurrency=4, deadline_s=120)
    try:
        beats = [
            client.heartbeat(device, DEVICES[device], Heartbeat(samples=i))
            for i in range(300)
            for device in ("dev-a", "dev-b")
        ]
        for beat in beats:
            beat.result(timeout=180)
        assert client.peak_in_flight == 4
        assert server.counters("dev-a")["heartbeats"] == 300
        assert server.counters("dev-b")["heartbeats"] == 300
    finally:
        client.close()
        server.stop()
