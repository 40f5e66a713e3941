"""A gateway's worker spreads the work that comes in bursts (first models, first checkpoints) over its
rounds and housekeeping turns, at most ``DEFERRABLE_S`` each and at least one item, so that a restart's
devices' samples are not held while 100 models are installed (docs/benchmarks.md section 23); its
checkpoints go on past the budget while no message waits, and a single-device agent does it all at once.
No broker is needed: the agent is built, not started."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgedrift_edge.agent import CHECKPOINTS_AHEAD_BYTES, DEFERRABLE_S, EdgeAgent, _Control
from edgedrift_edge.settings import AgentSettings


def built(tmp_path: Path, devices: list[str]) -> EdgeAgent:
    settings = AgentSettings.model_validate(
        {
            "gateway_id": "gw-budget" if len(devices) > 1 else None,
            "device_id": None if len(devices) > 1 else devices[0],
            "broker_url": "mqtt://127.0.0.1:1",  # never connected: the agent is not started
            "cloud_url": "http://127.0.0.1:1",
            "checkpoint_dir": str(tmp_path / "state"),
            "n_features": 2,
        }
    )
    return EdgeAgent(settings, devices=dict.fromkeys(devices))


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[EdgeAgent]:
    agent = built(tmp_path, [f"d{i}" for i in range(6)])
    yield agent
    agent.checkpoints.close()


def slow_checkpoints(agent: EdgeAgent, seconds: float) -> list[str]:
    """Every device due for a checkpoint that takes ``seconds``; the ids in the order written."""
    written: list[str] = []
    for device in agent.devices.values():
        device.next_checkpoint = 0.0
        device.next_heartbeat = math.inf

        def checkpoint(device_id: str = device.device_id) -> None:
            time.sleep(seconds)
            written.append(device_id)
            agent.devices[device_id].next_checkpoint = math.inf

        device.checkpoint = checkpoint  # type: ignore[method-assign]
    return written


def messages_waiting(agent: EdgeAgent, monkeypatch: pytest.MonkeyPatch, count: int = 1) -> None:
    """``count`` messages received and not handled yet (in the inbox, where the I/O thread puts them)."""
    monkeypatch.setattr(type(agent.transport), "queued", property(lambda _: count))


def test_a_gateways_housekeeping_turn_writes_checkpoints_for_its_budget_and_the_rest_later(
    gateway: EdgeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages_waiting(gateway, monkeypatch)
    written = slow_checkpoints(gateway, 2 * DEFERRABLE_S)
    gateway._periodic()
    assert len(written) == 1  # the first goes whatever it costs; the budget is spent after it
    for _ in range(20):
        gateway._next_periodic = 0.0
        gateway._periodic()
    assert sorted(written) == sorted(gateway.devices)  # the rest stayed due and went at later visits


def test_an_idle_gateway_writes_every_due_checkpoint_in_one_turn_and_stops_once_a_message_waits(
    gateway: EdgeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = slow_checkpoints(gateway, 2 * DEFERRABLE_S)
    gateway._periodic()  # nothing waits: past the budget, on to the last one due
    assert sorted(written) == sorted(gateway.devices)

    for device in gateway.devices.values():
        device.next_checkpoint = 0.0
    written.clear()
    arrived = {"after": 2}  # a message arrives while the second checkpoint is written

    def waiting(_: object) -> int:
        return int(len(written) >= arrived["after"])

    monkeypatch.setattr(type(gateway.transport), "queued", property(waiting))
    gateway._next_periodic = 0.0
    gateway._periodic()
    assert len(written) == 2  # the one in hand finished; the rest stay due for a later turn


def test_an_idle_gateway_stops_past_its_budget_while_the_writer_holds_enough(
    gateway: EdgeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idle is also a writer that keeps up: checkpoints encoded faster than the disk takes them would
    pile up in memory (a gateway's first checkpoints held its heap's high-water up for good)."""
    written = slow_checkpoints(gateway, 2 * DEFERRABLE_S)
    monkeypatch.setattr(type(gateway.checkpoints), "held_bytes", property(lambda _: CHECKPOINTS_AHEAD_BYTES))
    gateway._periodic()
    assert len(written) == 1, "the turn's first goes whatever it costs; the rest wait for the disk"
    monkeypatch.setattr(type(gateway.checkpoints), "held_bytes", property(lambda _: 0))
    gateway._next_periodic = 0.0
    gateway._periodic()
    assert sorted(written) == sorted(gateway.devices)


def test_a_single_device_agent_checkpoints_at_once(tmp_path: Path) -> None:
    agent = built(tmp_path, ["solo"])
    try:
        written = slow_checkpoints(agent, 2 * DEFERRABLE_S)
        agent._periodic()
        assert written == ["solo"]
    finally:
        agent.checkpoints.close()


def test_control_items_go_for_the_budget_at_least_one_and_in_order(
    gateway: EdgeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    handled: list[int] = []

    def on_control(item: _Control) -> None:
        time.sleep(0.002)
        handled.append(item.value)

    monkeypatch.setattr(gateway, "_on_control", on_control)
    for i in range(10):
        gateway.control.put(_Control("failed", i))
    gateway._drain_control(0.0)
    assert handled == [0]
    gateway._drain_control(0.005)
    assert 2 <= len(handled) <= 5 and handled == list(range(len(handled)))
    gateway._drain_control(math.inf)
    assert handled == list(range(10))
    gateway._drain_control(0.0)  # nothing waiting: returns at once
    assert handled == list(range(10))


def test_the_worker_waits_for_no_message_while_control_items_are_left(
    gateway: EdgeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    timeouts: list[float] = []

    def get_batch(timeout: float, limit: int, room: object = None) -> list[object]:
        timeouts.append(timeout)
        return []

    monkeypatch.setattr(gateway.transport, "get_batch", get_batch)
    gateway._take_in()
    gateway.control.put(_Control("failed", 0))
    gateway._take_in()
    assert timeouts == [0.05, 0.0]
