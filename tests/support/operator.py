"""What an operator sees on the shipped broker: every message under ``edgedrift/`` (one login for all: the
shipped broker allows one connection per user), and the entry point's environment for a fleet of
gateways, shared by the gateway tests that run the shipped Mosquitto configuration."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from edgedrift_harness.mqtt import Subscriber

#: Passwords of the shipped broker's users in these tests (gateways get ``<id>-password-0123456789``).
PASSWORDS = {
    "operator": "operator-password-0123456789",
    "replay": "replay-password-0123456789",
}


def password(user: str) -> str:
    return PASSWORDS.get(user, f"{user}-password-0123456789")


def user_url(user: str, port: int) -> str:
    """The broker URL a user of these tests logs in with."""
    return f"mqtt://{user}:{password(user)}@127.0.0.1:{port}"


def shipped_env(gateways: Mapping[str, list[str]]) -> dict[str, str]:
    """deploy/mosquitto/entrypoint.sh's environment: the operator, the replay and ``gateways`` (id -> the
    devices its ACL grants)."""
    env = {
        "EDGEDRIFT_MODE": "production",
        "MQTT_OPERATOR_PASSWORD": password("operator"),
        "MQTT_REPLAY_PASSWORD": password("replay"),
        "MQTT_GATEWAYS": ",".join(gateways),
    }
    for gateway, devices in gateways.items():
        name = gateway.upper().replace("-", "_")
        env[f"MQTT_{name}_PASSWORD"] = password(gateway)
        env[f"MQTT_{name}_DEVICES"] = ",".join(devices)
    return env


class OperatorView(Subscriber):
    """Every device's predictions, events and statuses and each gateway's status, as the operator."""

    def __init__(self, url: str) -> None:
        self.seen: dict[tuple[str, str], list[dict[str, Any]]] = {}
        super().__init__(url, [("edgedrift/#", 1)])

    def handle(self, topic: str, payload: bytes) -> None:
        parts = topic.split("/")  # edgedrift/{device}/{kind} or edgedrift/gateways/{gateway}/status
        key = (parts[2], "gateway") if parts[1] == "gateways" else (parts[1], parts[2])
        if payload:
            with self.lock:
                self.seen.setdefault(key, []).append(json.loads(payload))

    def of(self, device: str, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.seen.get((device, kind), []))

    def events(self, device: str, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.of(device, "events") if e["type"] == kind]

    def predicted(self, device: str) -> list[dict[str, Any]]:
        """Every prediction of the device, batches unpacked."""
        return [p for m in self.of(device, "predictions") for p in m.get("predictions", [m])]

    def counters(self, device: str) -> dict[str, Any]:
        """The counters of the device's last status that had them."""
        last: dict[str, Any] = [s for s in self.of(device, "status") if "counters" in s][-1]["counters"]
        return last

    def wait(self, found: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not found():
            if time.monotonic() > deadline:
                raise TimeoutError(what)
            time.sleep(0.05)
