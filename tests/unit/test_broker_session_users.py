"""deploy/mosquitto/entrypoint.sh's users for a gateway's broker session per device
(``MQTT_<GATEWAY>_SESSIONS=device``): one user ``<gateway>.<device>`` per device with the gateway's
password and exactly its device's topics, checked in the written files and on a real shipped Mosquitto."""

from __future__ import annotations

import queue
import shutil
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from support.compose import run_entrypoint
from support.operator import PASSWORDS, shipped_env, user_url

from edgedrift_harness.mosquitto import ShippedMosquitto
from edgedrift_harness.mqtt import publish

# A session per device (MQTT_<GW>_SESSIONS=device): the gateway's agent, started with --broker-sessions
# device, logs in once per device as <gateway>.<device>, so each device has its own queue at the broker.
SESSIONS_ENV = {
    **shipped_env({"gw-1": ["dev-1", "dev-2"], "gw-2": ["dev-3"]}),
    "MQTT_GW_1_SESSIONS": "device",
    "MQTT_GW_2_SESSIONS": "device",
    # mosquitto_passwd -U would cut this one at its second ":" and trim its blanks: the -b path
    "MQTT_GW_2_PASSWORD": " gw-2:pass:0123456789 ",
}


def session_users(env: Mapping[str, str]) -> dict[str, str]:
    """The users the gateways' device sessions need: <gateway>.<device> -> the gateway's password."""
    out = {}
    for gateway in env["MQTT_GATEWAYS"].split(","):
        name = gateway.upper().replace("-", "_")
        if env.get(f"MQTT_{name}_SESSIONS") == "device":
            for device in env[f"MQTT_{name}_DEVICES"].split(","):
                out[f"{gateway}.{device}"] = env[f"MQTT_{name}_PASSWORD"]
    return out


def passwd_users(tmp_path: Path) -> dict[str, str]:
    return dict(line.split(":", 1) for line in (tmp_path / "auth" / "passwd").read_text().splitlines())


def test_entrypoint_adds_a_user_per_device_session(tmp_path: Path) -> None:
    result = run_entrypoint(tmp_path, SESSIONS_ENV)
    assert result.returncode == 0, result.stderr
    users = passwd_users(tmp_path)
    sessions = session_users(SESSIONS_ENV)
    assert sorted(sessions) == ["gw-1.dev-1", "gw-1.dev-2", "gw-2.dev-3"]
    assert {u: users[u] for u in sessions} == sessions, "a session user without the gateway's password"
    assert set(users) == {"operator", "replay", "healthcheck", "gw-1", "gw-2", *sessions}
    acl = (tmp_path / "auth" / "acl").read_text()
    block = acl.split("user gw-1.dev-1\n", 1)[1].split("\n\n", 1)[0]
    assert block.splitlines() == [
        "topic read edgedrift/dev-1/samples",
        "topic read edgedrift/dev-1/labels",
        "topic write edgedrift/dev-1/predictions",
        "topic write edgedrift/dev-1/events",
        "topic write edgedrift/dev-1/status",
    ]
    assert "user gw-1\ntopic write edgedrift/gateways/gw-1/status\n" in acl, "the gateway keeps its block"
    assert "3 device sessions" in result.stdout


@pytest.mark.parametrize("value", [None, "", "gateway"])
def test_entrypoint_adds_no_session_users_by_default(tmp_path: Path, value: str | None) -> None:
    env = {k: v for k, v in SESSIONS_ENV.items() if not k.endswith("_SESSIONS")}
    if value is not None:
        env |= {"MQTT_GW_1_SESSIONS": value, "MQTT_GW_2_SESSIONS": value}
    result = run_entrypoint(tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert set(passwd_users(tmp_path)) == {"operator", "replay", "healthcheck", "gw-1", "gw-2"}
    assert "user gw-1." not in (tmp_path / "auth" / "acl").read_text()


@pytest.mark.parametrize("value", ["devices", "Device", "per-device", "gateway device"])
def test_entrypoint_refuses_an_unknown_session_mode(tmp_path: Path, value: str) -> None:
    result = run_entrypoint(tmp_path, {**SESSIONS_ENV, "MQTT_GW_2_SESSIONS": value})
    assert result.returncode == 1 and "MQTT_GW_2_SESSIONS must be gateway or device" in result.stderr
    assert SESSIONS_ENV["MQTT_GW_1_PASSWORD"] not in result.stdout + result.stderr
    assert sorted(p.name for p in (tmp_path / "auth").iterdir()) == [], "a failed start left files behind"


class Login:
    """One paho client (VERSION2 callbacks) logged in as ``user``: what it receives, by topic."""

    def __init__(self, port: int, user: str, password: str) -> None:
        self.received: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self.connected = threading.Event()
        self.acked: set[int] = set()
        self.reason: Any = None
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=f"t-{user}", reconnect_on_failure=False
        )
        self.client.username_pw_set(user, password)
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda _c, _u, mid, _r, _p: self.acked.add(mid)
        self.client.on_message = lambda _c, _u, m: self.received.put((m.topic, bytes(m.payload)))
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert self.connected.wait(5), f"no CONNACK for {user}"

    def _on_connect(self, _c: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        self.reason = reason
        self.connected.set()

    def subscribe(self, topic: str) -> None:
        _rc, mid = self.client.subscribe(topic, qos=1)
        deadline = time.monotonic() + 5
        while mid not in self.acked:
            assert time.monotonic() < deadline, f"no SUBACK for {topic}"
            time.sleep(0.01)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def test_a_device_session_user_reaches_exactly_its_device(tmp_path: Path) -> None:
    if not all(shutil.which(t) for t in ("mosquitto", "mosquitto_passwd")):
        pytest.skip("needs mosquitto and mosquitto_passwd installed locally")
    result = run_entrypoint(tmp_path, SESSIONS_ENV, passwd=shutil.which("mosquitto_passwd"))
    assert result.returncode == 0, result.stderr
    passwd = tmp_path / "auth" / "passwd"
    assert passwd.stat().st_mode & 0o077 == 0, "the password file is readable by others"
    assert sorted(p.name for p in (tmp_path / "auth").iterdir()) == [
        "acl", "conf.d", "healthcheck", "passwd",
    ], "a plain-text or temporary password file was left behind"  # fmt: skip
    for user, hashed in passwd_users(tmp_path).items():
        assert hashed.startswith("$7$"), f"{user}'s password is not hashed"
    assert SESSIONS_ENV["MQTT_GW_1_PASSWORD"] not in passwd.read_text()

    sessions = session_users(SESSIONS_ENV)
    with ShippedMosquitto(tmp_path, None) as broker:
        gateway = Login(broker.port, "gw-1", SESSIONS_ENV["MQTT_GW_1_PASSWORD"])
        session = Login(broker.port, "gw-1.dev-1", sessions["gw-1.dev-1"])
        other = Login(broker.port, "gw-2.dev-3", sessions["gw-2.dev-3"])  # a password -U cannot carry
        wrong = Login(broker.port, "gw-1.dev-1", SESSIONS_ENV["MQTT_GW_2_PASSWORD"])
        watch = Login(broker.port, "operator", PASSWORDS["operator"])
        try:
            assert not gateway.reason.is_failure and not session.reason.is_failure, "login refused"
            assert not other.reason.is_failure, "gw-2.dev-3 refused with gw-2's password"
            assert wrong.reason.is_failure, "gw-1.dev-1 logged in with another gateway's password"
            session.subscribe("edgedrift/dev-1/samples")
            session.subscribe("edgedrift/dev-2/samples")  # granted a SUBACK, but nothing is delivered
            watch.subscribe("edgedrift/+/predictions")
            replay = user_url("replay", broker.port)
            publish(replay, "edgedrift/dev-2/samples", ["not-yours"])
            publish(replay, "edgedrift/dev-1/samples", ["yours"])  # after dev-2's: the positive control
            assert session.received.get(timeout=5) == ("edgedrift/dev-1/samples", b"yours")
            for topic in ("edgedrift/dev-2/predictions", "edgedrift/dev-1/predictions"):
                session.client.publish(topic, topic, qos=1).wait_for_publish(5)
            assert watch.received.get(timeout=5) == (
                "edgedrift/dev-1/predictions",
                b"edgedrift/dev-1/predictions",
            )
            time.sleep(0.3)
            assert session.received.empty(), "gw-1.dev-1 received another device's samples"
            assert watch.received.empty(), "gw-1.dev-1 wrote another device's predictions"
            assert gateway.client.is_connected(), "the device session disconnected the gateway's own"
        finally:
            for login in (gateway, session, other, wrong, watch):
                login.close()
