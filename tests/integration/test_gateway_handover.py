"""Issue 30 row 4: the operator moves a live device from one gateway to another at the cloud, under a
steady stream, on the shipped Mosquitto configuration (both gateways' ACLs grant the device), the real
cloud and both gateways as subprocesses. Nothing is lost or answered twice (the ledger), the device does
not warm up again on the new gateway and its counters go on from where they were; with one broker session
per gateway or one per device (``--broker-sessions device``: the device's session logs in as
``gw-1.<device>`` on the source and ``gw-2.<device>`` on the target)."""

from __future__ import annotations

import json
import secrets
import shutil
import threading
import time
from pathlib import Path

import pytest
from support.cloud import OPERATOR, CloudServer
from support.compose import run_entrypoint
from support.operator import OperatorView, shipped_env, user_url

from edgedrift_edge.transport.mqtt import broker_address, make_client
from edgedrift_harness.agent import AgentProcess
from edgedrift_harness.mosquitto import ShippedMosquitto


def sample(i: int) -> bytes:
    x = [((i * 7919) % 200 - 100) / 50.0, (i % 13) / 6.0 - 1.0]
    return json.dumps({"id": i, "x": x, "y": 1 if x[0] > 0 else -1}).encode()


@pytest.mark.parametrize("sessions", ["gateway", "device"])
def test_a_device_moved_between_gateways_under_a_stream_loses_nothing_and_stays_warm(
    sqlite_cloud: CloudServer, tmp_path: Path, sessions: str
) -> None:
    if not all(shutil.which(t) for t in ("mosquitto", "mosquitto_passwd")):
        pytest.skip("needs mosquitto and mosquitto_passwd installed locally")
    tag = secrets.token_hex(3)
    moved, stay1, stay2 = f"mv-{tag}", f"a-{tag}", f"b-{tag}"
    gw1, gw2 = f"gw1-{tag}", f"gw2-{tag}"  # the cloud of the test session keeps what earlier tests assigned
    env = shipped_env({gw1: [moved, stay1], gw2: [moved, stay2]})
    env |= {f"MQTT_{g.upper().replace('-', '_')}_SESSIONS": sessions for g in (gw1, gw2)}
    result = run_entrypoint(tmp_path, env, passwd=shutil.which("mosquitto_passwd"))
    assert result.returncode == 0, result.stderr
    gateway_secrets = {}
    with sqlite_cloud.client(OPERATOR) as op:
        for gateway, devices in ((gw1, [moved, stay1]), (gw2, [stay2])):
            gateway_secrets[gateway] = op.put(f"/v1/gateways/{gateway}").raise_for_status().json()["secret"]
            op.post(f"/v1/gateways/{gateway}/devices", json={"devices": devices}).raise_for_status()
    n, move_at = 700, 350  # 20 samples/s: 35 s; the operator moves the device after 17.5 s
    with ShippedMosquitto(tmp_path, None) as broker:
        url = {u: user_url(u, broker.port) for u in ("operator", "replay", gw1, gw2)}
        gateways = {
            g: AgentProcess(
                tmp_path / f"{g}.log",
                {
                    "gateway_id": g,
                    "gateway_secret": gateway_secrets[g],
                    "broker_url": url[g],
                    "cloud_url": sqlite_cloud.url,
                    "warmup_samples": 200,
                    "window_labels": 50,
                    "n_features": 2,
                    "checkpoint_dir": tmp_path / g,
                    "heartbeat_every_s": 0.5,
                    "gateway_sync_s": 3,
                    "broker_sessions": sessions,
                },
            )
            for g in (gw1, gw2)
        }
        view = OperatorView(url["operator"])
        published = threading.Event()

        def stream() -> None:
            """20 samples/s of the moved device, as the replay user (one login), QoS 1."""
            client = make_client(url["replay"], f"replay-{tag}", clean_session=True)
            host, port, _tls = broker_address(url["replay"])
            client.connect(host, port)
            client.loop_start()
            start = time.monotonic()
            for i in range(n):
                if i == move_at:
                    with sqlite_cloud.client(OPERATOR) as op:
                        moved_to = op.post(f"/v1/gateways/{gw2}/devices", json={"devices": [moved]})
                        assert moved_to.json()["moved"] == 1, moved_to.text
                client.publish(f"edgedrift/{moved}/samples", sample(i), qos=1).wait_for_publish(10)
                time.sleep(max(0.0, start + 0.05 * (i + 1) - time.monotonic()))
            published.set()
            client.disconnect()
            client.loop_stop()

        for process in gateways.values():
            process.start()
        publisher = threading.Thread(target=stream)
        publisher.start()
        try:
            publisher.join(180)
            assert published.is_set()
            view.wait(lambda: len({p["id"] for p in view.predicted(moved)}) >= n, 60, "every sample answered")

            def final() -> bool:
                statuses = [s for s in view.of(moved, "status") if "counters" in s]
                return bool(statuses) and statuses[-1]["counters"]["predictions"] >= n

            view.wait(final, 30, "the final counters")
            time.sleep(1.0)
        finally:
            codes = {g: p.stop() for g, p in gateways.items()}
            view.close()
    assert codes == {gw1: 0, gw2: 0}, codes
    predicted = view.predicted(moved)
    ids = [p["id"] for p in predicted]
    assert sorted(set(ids)) == list(range(n)), f"lost: {sorted(set(range(n)) - set(ids))[:20]}"
    assert len(ids) == n and not [p for p in predicted if p.get("repeat")], "a sample answered twice"
    rejected = sum(e["count"] for e in view.events(moved, "rejected"))
    statuses = [s for s in view.of(moved, "status") if "counters" in s]
    counters = statuses[-1]["counters"]
    assert n == len(ids) + rejected + counters["dropped"] and counters["dropped"] == 0, counters
    assert counters["samples"] == counters["predictions"] == n, counters
    # on the new gateway the device goes on: one warm-up, one initial model, counters never go back
    assert len(view.events(moved, "warmup_done")) == 1
    initial = [e for e in view.events(moved, "model_installed") if e.get("reason") == "initial"]
    assert len(initial) == 1, initial
    assert not [p for p in predicted if p["id"] >= move_at and p["source"] == "warmup"]
    [handover] = view.events(moved, "handover")
    assert handover["resumed"] and handover["dropped"] == 0, handover
    # both gateways received the messages between gw-2's SUBACK and gw-1's UNSUBACK (gw-1 learns of the
    # SUBACK at its next sync, half a second later: ~10 samples): gw-2 skipped them
    assert 0 < handover["overlap"] < handover["held"], handover
    samples = [s["counters"]["samples"] for s in statuses]
    assert samples == sorted(samples), "the device's counters went backwards"
    assert statuses[-1]["gateway"] == gw2
    gateway_status = view.of(gw1, "gateway")[-1]
    assert gateway_status["devices"] == 1, gateway_status
