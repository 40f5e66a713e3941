"""The network thread never blocks: a full queue drops the message, counts it, and the worker reports it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt

from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.settings import AgentSettings


def message(topic: str, payload: dict[str, object]) -> mqtt.MQTTMessage:
    msg = mqtt.MQTTMessage(topic=topic.encode())
    msg.payload = json.dumps(payload).encode()
    return msg


def test_overflow_is_counted_and_reported(tmp_path: Path) -> None:
    settings = AgentSettings(device_id="gw-1", queue_size=3, checkpoint_dir=str(tmp_path), n_features=2)
    agent = EdgeAgent(settings)
    sent: list[tuple[str, dict[str, object]]] = []
    agent.publish = lambda topic, payload, retain=False: sent.append((topic, payload))  # type: ignore[method-assign]
    topic = settings.topics["samples"]
    for i in range(10):
        agent._on_message(agent.client, None, message(topic, {"id": i, "x": [0.0, 1.0]}))
    assert agent.inbox.qsize() == 3 and agent.state.counters.dropped == 7
    kind, payload = agent.inbox.get_nowait()
    agent.handle(kind, payload)
    events = [p for t, p in sent if t == settings.topics["events"]]
    assert events and events[0]["type"] == "dropped" and events[0]["count"] == 7
    predictions = [p for t, p in sent if t == settings.topics["predictions"]]
    assert predictions == [{"id": 0, "y_hat": None, "model_version": None, "source": "warmup"}]


def test_settings_come_from_the_environment_and_flags_win() -> None:
    env = {"EDGEDRIFT_EDGE_DEVICE_ID": "gw-2", "EDGEDRIFT_EDGE_QOS": "0", "EDGEDRIFT_EDGE_C": "100"}
    s = AgentSettings.load({"qos": "1"}, environ=env)
    assert (s.device_id, s.qos, s.C) == ("gw-2", 1, 100.0)
    assert "EDGEDRIFT_EDGE_BROKER_URL" in AgentSettings.env_names()


def test_a_late_label_during_warm_up_labels_the_first_window(tmp_path: Path) -> None:
    settings = AgentSettings(device_id="gw-3", checkpoint_dir=str(tmp_path), n_features=2, warmup_samples=50)
    agent = EdgeAgent(settings)
    agent.publish = lambda topic, payload, retain=False: None  # type: ignore[method-assign]
    agent.handle("samples", json.dumps({"id": 7, "x": [0.5, 1.5]}).encode())
    assert np.isnan(agent.state.warm_y[0])
    agent.handle("labels", json.dumps({"id": 7, "y": -1}).encode())
    assert agent.state.warm_y == [-1.0] and agent.state.counters.label_misses == 0
