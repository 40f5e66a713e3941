"""Gateway mode against a real Mosquitto and the real cloud trainer: several devices in one process over
one MQTT connection, each with its own session, ledger and recomputes."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.cloud import OPERATOR, CloudServer

from edgedrift.data import Stream
from edgedrift.data.generators import sine1plus
from edgedrift.protocol import Protocol
from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.cloud.client import CloudClient
from edgedrift_edge.replay import ReplayPlan, replay
from edgedrift_edge.settings import AgentSettings
from edgedrift_eval.runner import RunSpec, run_one
from edgedrift_harness.mosquitto import MosquittoProcess, local_mosquitto
from edgedrift_harness.mqtt import DeviceWatcher, publish


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoProcess]:
    with local_mosquitto(tmp_path / "broker") as server:
        yield server


def gateway_settings(
    broker: MosquittoProcess, cloud: CloudServer, gateway: str, tmp: Path, **kw: Any
) -> AgentSettings:
    where = {"broker_url": broker.url, "cloud_url": cloud.url, "checkpoint_dir": str(tmp / "state")}
    fast = {"gateway_sync_s": 0.3, "heartbeat_every_s": 0.5, "retry_max_s": 0.5}
    return AgentSettings.model_validate(
        {"gateway_id": gateway, "warmup_samples": 300, "window_labels": 30, **where, **fast, **kw}
    )


def new_gateway(cloud: CloudServer, devices: list[str]) -> tuple[str, str]:
    """A gateway registered at the cloud with ``devices`` assigned; (gateway id, its secret)."""
    gateway = f"gw-{secrets.token_hex(3)}"
    with cloud.client(OPERATOR) as op:
        secret = op.put(f"/v1/gateways/{gateway}").raise_for_status().json()["secret"]
        op.post(f"/v1/gateways/{gateway}/devices", json={"devices": devices}).raise_for_status()
    return gateway, secret


def stream(seed: int, n_concepts: int = 1, length: int = 1000) -> Stream:
    return sine1plus(d=2, n_concepts=n_concepts, concept_length=length, seed=seed)


def ledger_holds(watch: DeviceWatcher, published: int, agent: EdgeAgent) -> dict[str, int]:
    """published = predicted + rejected + dropped for one device, from what it published on MQTT."""
    preds = [p["id"] for p in watch.predictions() if not p.get("repeat")]
    assert len(preds) == len(set(preds)), f"{watch.device}: a sample was predicted twice"
    rejected = sum(e["count"] for e in watch.events("rejected"))
    c = agent.devices[watch.device].session.counters
    assert published == len(preds) + rejected + c.dropped, (watch.device, len(preds), rejected)
    return {"predicted": len(preds), "rejected": rejected, "dropped": c.dropped}


def test_deployed_equals_offline_for_every_device_of_a_gateway(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    """Two devices with different streams in one gateway (sync mode): each makes its own offline
    evaluation's predictions, sample for sample, and its own recomputes."""
    protocol = Protocol(every=10, window=500)
    devices = {f"gd-{secrets.token_hex(3)}": seed for seed in (4, 7)}
    offline = {
        d: run_one(stream(seed, 3, 1500), protocol, RunSpec("druid", 0.99, 0), curves=True)
        for d, seed in devices.items()
    }
    assert all(r.recomputes >= 1 for r in offline.values())
    table = {d: secrets.token_urlsafe(24) for d in devices}
    for device, secret in table.items():
        sqlite_cloud.register(device, secret)
    (tmp_path / "devices.json").write_text(json.dumps(table))
    cfg = gateway_settings(
        broker,
        sqlite_cloud,
        f"gw-{secrets.token_hex(3)}",
        tmp_path,
        devices_file=str(tmp_path / "devices.json"),
        warmup_samples=500,
        window_labels=50,
        strategy_param=0.99,
        recompute_mode="sync",
    )
    agent = EdgeAgent(cfg).start()
    watches = {d: DeviceWatcher(broker.url, d) for d in devices}
    try:
        threads = [
            threading.Thread(
                target=replay,
                args=(ReplayPlan(stream(seed, 3, 1500), (d,), protocol), broker.url),
                kwargs={"progress": False, "client_id": f"replay-{d}"},
            )
            for d, seed in devices.items()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        preds = {d: watches[d].wait_predictions(4500, timeout=180) for d in devices}
    finally:
        for w in watches.values():
            w.close()
        agent.stop()
    assert len(agent.devices) == 2
    for device in devices:
        deployed = np.array([p["y_hat"] for p in sorted(preds[device], key=lambda p: p["id"])[500:]])
        assert np.array_equal(deployed, offline[device].scored_predictions()), device
        loop = agent.devices[device].session.loop
        assert loop is not None and loop.counters.recomputes == offline[device].recomputes
        assert sqlite_cloud.counters(device)["recomputes"] == offline[device].recomputes + 1


def test_one_devices_faults_touch_no_other_device(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    """A gateway provisioned by the cloud: device ``bad`` gets malformed messages, an outlier and a
    revoked credential (its recomputes fail); the two healthy devices answer every sample, keep their
    ledgers and state, and a device assigned while the gateway runs is picked up and then dropped."""
    tag = secrets.token_hex(3)
    good, bad = [f"ok1-{tag}", f"ok2-{tag}"], f"bad-{tag}"
    gateway, gateway_secret = new_gateway(sqlite_cloud, [*good, bad])
    cfg = gateway_settings(
        broker, sqlite_cloud, gateway, tmp_path, gateway_secret=gateway_secret, n_features=2
    )
    agent = EdgeAgent(cfg).start()
    assert sorted(agent.devices) == sorted([*good, bad])
    watches = {d: DeviceWatcher(broker.url, d) for d in [*good, bad]}
    try:
        # the bad device's credential is rotated behind the gateway's back: its recomputes get 401
        sqlite_cloud.register(bad, secrets.token_urlsafe(24))
        s = stream(1, 1, 1000)
        bad_payloads: list[bytes | str] = [
            b"{not json",
            b'{"id": 100000, "x": [1, 2, 3]}',
            json.dumps({"id": 100001, "x": [1e6, -1e6], "y": 1}),
        ]
        publish(broker.url, f"edgedrift/{bad}/samples", bad_payloads)
        for i, device in enumerate([*good, bad]):
            replay(
                ReplayPlan(stream(10 + i, 1, 1000), (device,), Protocol(every=5)), broker.url, progress=False
            )
        for device in good:
            watches[device].wait_predictions(1000, timeout=90)
            watches[device].wait_event("model_installed", timeout=60)  # may come after the last sample
        watches[bad].wait_event("unauthorized", timeout=60)
        watches[bad].wait_predictions(1000, timeout=60)
        # provisioning: a device assigned now is served without a restart, and dropped when unassigned
        late = f"late-{tag}"
        with sqlite_cloud.client(OPERATOR) as op:
            op.post(f"/v1/gateways/{gateway}/devices", json={"devices": [late]}).raise_for_status()
        deadline = time.monotonic() + 20
        while late not in agent.devices and time.monotonic() < deadline:
            time.sleep(0.1)
        assert late in agent.devices, "the gateway did not pick up the new device"
        with DeviceWatcher(broker.url, late) as watch_late:
            replay(ReplayPlan(s, (late,), Protocol(every=5), limit=400), broker.url, progress=False)
            watch_late.wait_predictions(400, timeout=60)
            watch_late.wait(lambda: watch_late.events("model_installed") != [], 30, "the late device's model")
            with sqlite_cloud.client(OPERATOR) as op:
                op.delete(f"/v1/gateways/{gateway}/devices/{late}").raise_for_status()
            watch_late.wait_status("offline", timeout=20)
        assert late not in agent.devices
        time.sleep(0.5)
        rows = {d: ledger_holds(watches[d], 1000, agent) for d in good}
        bad_row = ledger_holds(watches[bad], 1000 + len(bad_payloads), agent)
    finally:
        for w in watches.values():
            w.close()
        agent.stop()
    for device in good:
        c = agent.devices[device].session.counters
        assert rows[device] == {"predicted": 1000, "rejected": 0, "dropped": 0}
        assert {p["id"] for p in watches[device].predictions()} == set(range(1000))
        assert (
            c.outliers == 0
            and c.recompute_failures == 0
            and not agent.devices[device].session.recomputes.unauthorized
        )
        assert agent.devices[device].session.phase == "running"
        assert sqlite_cloud.counters(device)["recomputes"] >= 1
    b = agent.devices[bad].session
    assert bad_row == {"predicted": 1001, "rejected": 2, "dropped": 0} and b.counters.rejected == 2
    assert b.recomputes.unauthorized and b.counters.recompute_failures >= 1 and b.model_version is None
    # heartbeats go in the gateway's batches, under its own credential: the bad device's rotated secret
    # does not stop them (one request per device with that secret would get 401s)
    for device in [*good, bad]:
        c = agent.devices[device].session.counters
        assert c.heartbeats >= 1 and c.heartbeat_failures == 0, (device, c.heartbeats, c.heartbeat_failures)
        assert sqlite_cloud.counters(device)["heartbeats"] >= 1


def test_the_gateway_api_hands_each_device_secret_once(cloud: CloudServer) -> None:
    """On SQLite and PostgreSQL: only the gateway gets its devices' secrets, each one once, and a handed
    secret works for that device only; bad input is a 422 naming the field."""
    with cloud.client(OPERATOR) as op, cloud.client(None) as anon:
        assert op.post("/v1/gateways/gw-x/devices", json={"devices": ["a"]}).status_code == 404
        secret = op.put("/v1/gateways/gw-x").raise_for_status().json()["secret"]
        bad = op.post("/v1/gateways/gw-x/devices", json={"devices": ["no spaces"]})
        assert bad.status_code == 422 and "devices" in bad.text
        assigned = op.post("/v1/gateways/gw-x/devices", json={"devices": ["ga-1", "ga-2", "dev-a"]}).json()
        assert assigned == {"gateway_id": "gw-x", "devices": 3, "created": 2, "moved": 0}
        assert op.get("/v1/gateways/gw-x/devices").json() == ["dev-a", "ga-1", "ga-2"]
        assert op.post("/v1/gateways/gw-x/sync", json={}).status_code == 403, "the operator gets no secrets"
        wrong = {"Authorization": "Bearer " + "w" * 32}
        assert anon.post("/v1/gateways/gw-x/sync", json={}, headers=wrong).status_code == 401
        gw = {"Authorization": f"Bearer {secret}"}
        first = anon.post("/v1/gateways/gw-x/sync", json={"known": ["dev-a"]}, headers=gw).raise_for_status()
        handed = {d["device_id"]: d["secret"] for d in first.json()["devices"]}
        assert handed["dev-a"] is None and handed["ga-1"] and handed["ga-2"]
        again = anon.post("/v1/gateways/gw-x/sync", json={"known": ["ga-1", "ga-2", "dev-a"]}, headers=gw)
        assert all(d["secret"] is None for d in again.json()["devices"])
        own = {"Authorization": f"Bearer {handed['ga-1']}"}
        assert anon.get("/v1/devices/ga-1/counters", headers=own).status_code == 200
        assert anon.get("/v1/devices/ga-2/counters", headers=own).status_code == 403
        assert anon.get("/v1/gateways/gw-x/devices", headers=own).status_code == 401
        op.delete("/v1/gateways/gw-x/devices/ga-2").raise_for_status()
        assert op.delete("/v1/gateways/gw-x/devices/ga-2").status_code == 404
        listed = anon.post("/v1/gateways/gw-x/sync", json={"known": ["ga-1", "dev-a"]}, headers=gw).json()
        assert [d["device_id"] for d in listed["devices"]] == ["dev-a", "ga-1"]
        # a batch of the gateway's devices' heartbeats, with the gateway's credential
        beats = [{"device_id": d, "heartbeat": {"samples": 7}} for d in ("ga-1", "dev-a")]
        stored = anon.post("/v1/gateways/gw-x/heartbeats", json={"heartbeats": beats}, headers=gw)
        assert stored.status_code == 201 and stored.json() == {"stored": 2, "refused": []}, stored.text
        # ga-2 was unassigned after the gateway's last sync: the others' beats are stored, ga-2's is named
        foreign = [*beats, {"device_id": "ga-2", "heartbeat": {"samples": 8}}]
        partly = anon.post("/v1/gateways/gw-x/heartbeats", json={"heartbeats": foreign}, headers=gw)
        assert partly.status_code == 201 and partly.json() == {"stored": 2, "refused": ["ga-2"]}, partly.text
        only_foreign = [{"device_id": "ga-2", "heartbeat": {"samples": 8}}]
        refused = anon.post("/v1/gateways/gw-x/heartbeats", json={"heartbeats": only_foreign}, headers=gw)
        assert refused.status_code == 403 and "ga-2" in refused.json()["detail"], refused.text
        assert (
            anon.post("/v1/gateways/gw-x/heartbeats", json={"heartbeats": beats}, headers=own).status_code
            == 401
        )
        assert op.post("/v1/gateways/gw-x/heartbeats", json={"heartbeats": beats}).status_code == 201
        assert op.post("/v1/gateways/gw-none/heartbeats", json={"heartbeats": beats}).status_code == 404
        assert op.post("/v1/gateways/gw-x/heartbeats", json={"heartbeats": []}).status_code == 422
    assert cloud.counters("ga-1")["heartbeats"] == 3 and cloud.counters("ga-2")["heartbeats"] == 0
    client = CloudClient(cloud.url)
    try:  # a gateway starting with secrets it holds is not handed new ones (they would rotate them)
        assert client.first_gateway_devices("gw-x", secret, ["dev-a", "ga-1"], 10) == (
            {"dev-a": None, "ga-1": None},
            {},
        )
    finally:
        client.close()


def test_a_device_unassigned_since_the_last_sync_fails_only_its_own_heartbeat(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    """The operator unassigns a device between the gateway's syncs: the next heartbeat batch still
    stores every other device's beat, and only the unassigned device counts a failure."""
    tag = secrets.token_hex(3)
    kept, gone = f"kept-{tag}", f"gone-{tag}"
    gateway, gateway_secret = new_gateway(sqlite_cloud, [kept, gone])
    slow = {"gateway_sync_s": 3600.0, "heartbeat_every_s": 3600.0}
    cfg = gateway_settings(broker, sqlite_cloud, gateway, tmp_path, gateway_secret=gateway_secret, **slow)
    agent = EdgeAgent(cfg).start()

    def beats(device: str) -> tuple[int, int]:
        c = agent.devices[device].session.counters
        return c.heartbeats, c.heartbeat_failures

    def beat_until(done: Callable[[], bool]) -> None:
        agent.heartbeat_now()
        deadline = time.monotonic() + 20
        while not done() and time.monotonic() < deadline:
            time.sleep(0.05)

    try:
        beat_until(lambda: beats(kept)[0] + beats(gone)[0] >= 2)
        assert beats(kept) == beats(gone) == (1, 0)
        with sqlite_cloud.client(OPERATOR) as op:
            op.delete(f"/v1/gateways/{gateway}/devices/{gone}").raise_for_status()
        beat_until(lambda: beats(kept)[0] >= 2 and beats(gone)[1] >= 1)
        assert beats(kept) == (2, 0) and beats(gone) == (1, 1)
        assert not agent.devices[gone].session.recomputes.unauthorized, (
            "the gateway's credential, not the device's"
        )
    finally:
        agent.stop()
    assert sqlite_cloud.counters(kept)["heartbeats"] == 2 and sqlite_cloud.counters(gone)["heartbeats"] == 1
