"""Issue 30, rows 6, 7, 8, 9 and 10: what a gateway is handed that it must not trust or must not forget,
against a real Mosquitto and the real cloud trainer: device ids from every source, a SIGKILL between
checkpoints, wide rows of a device stuck in warm-up, retained messages on input topics, labels in another
encoding. Each test asserts the per-device ledger (published = predicted + rejected + dropped)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cloud import CloudServer
from support.gateways import gateway_process

from edgedrift_edge.agent import EdgeAgent, _Control
from edgedrift_edge.device import RETAINED_REASON
from edgedrift_edge.settings import AgentSettings
from edgedrift_harness.mosquitto import MosquittoProcess, local_mosquitto
from edgedrift_harness.mqtt import DeviceWatcher, Subscriber, publish
from edgedrift_harness.proc import rss_mb


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoProcess]:
    with local_mosquitto(tmp_path / "broker") as server:
        yield server


def gateway_settings(broker: MosquittoProcess, cloud: CloudServer, tmp: Path, **kw: Any) -> AgentSettings:
    base = {
        "gateway_id": f"gw-{secrets.token_hex(3)}",
        "broker_url": broker.url,
        "cloud_url": cloud.url,
        "checkpoint_dir": str(tmp / "state"),
        "heartbeat_every_s": 0.3,
        "retry_max_s": 0.5,
        "n_features": 2,
    }
    return AgentSettings.model_validate(base | kw)


def samples(first: int, n: int, labeled: bool = False) -> list[bytes]:
    """``n`` samples with ids from ``first``; labeled ones alternate -1/+1 by the first feature's sign."""
    out = []
    for i in range(first, first + n):
        x = [((i * 7919) % 200 - 100) / 50.0, (i % 13) / 6.0 - 1.0]
        body: dict[str, Any] = {"id": i, "x": x}
        if labeled:
            body["y"] = 1 if x[0] > 0 else -1
        out.append(json.dumps(body).encode())
    return out


def ledger(watch: DeviceWatcher, published: int, dropped: int = 0) -> dict[str, int]:
    """published = predicted + rejected + dropped, from what the device published on MQTT (a prediction
    the broker delivered twice to the watcher, QoS 1 across a broker restart, is one prediction)."""
    delivered = {json.dumps(p, sort_keys=True) for p in watch.predictions() if not p.get("repeat")}
    preds = [json.loads(p)["id"] for p in delivered]
    assert len(preds) == len(set(preds)), f"{watch.device}: a sample was predicted twice"
    rejected = sum(e["count"] for e in watch.events("rejected"))
    assert published == len(preds) + rejected + dropped, (watch.device, published, len(preds), rejected)
    return {"predicted": len(preds), "rejected": rejected}


def handled(watch: DeviceWatcher, n: int) -> Callable[[], bool]:
    """Whether ``n`` samples were answered or rejected."""
    return lambda: len(watch.answered()) + sum(e["count"] for e in watch.events("rejected")) == n


class GatewayStatus(Subscriber):
    """The gateway's own retained status messages."""

    def __init__(self, url: str, gateway: str) -> None:
        self.seen: list[dict[str, Any]] = []
        super().__init__(url, [(f"edgedrift/gateways/{gateway}/status", 1)])

    def handle(self, topic: str, payload: bytes) -> None:
        with self.lock:
            self.seen.append(json.loads(payload))

    def last(self) -> dict[str, Any]:
        with self.lock:
            return self.seen[-1] if self.seen else {}


BAD_IDS = ["a+b", "#", "x/y", "../../escape", "z" * 300, ""]


def test_bad_device_ids_are_refused_alone_from_every_source(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    """Row 6: ids that are MQTT wildcards, topic levels, paths out of the checkpoint directory, too long
    or empty, from --devices-file, --devices and the cloud's list, are each refused alone (logged, listed
    in the gateway's status); the valid devices are served and checkpointed inside checkpoint_dir only."""
    tag = secrets.token_hex(3)
    from_file, from_flag, from_cloud = f"file-{tag}", f"flag-{tag}", f"cloud-{tag}"
    (tmp_path / "devices.json").write_text(json.dumps(dict.fromkeys([from_file, *BAD_IDS])))
    state = tmp_path / "deep" / "state"
    cfg = gateway_settings(
        broker,
        sqlite_cloud,
        tmp_path,
        devices_file=str(tmp_path / "devices.json"),
        devices=f"{from_flag},f+lag,../flag",
        checkpoint_dir=str(state),
    )
    agent = EdgeAgent(cfg).start(timeout=15)
    status = GatewayStatus(broker.url, agent.gateway_id or "")
    watches = {d: DeviceWatcher(broker.url, d) for d in (from_file, from_flag, from_cloud)}
    try:
        assert sorted(agent.devices) == sorted([from_file, from_flag])
        # the cloud's list goes through the same path as a sync's answer
        listed = {**dict.fromkeys(agent.devices), from_cloud: None, "c+d": None, "../up": None}
        agent.control.put(_Control("devices", (listed, {})))  # (secrets, hand-over flags)
        watches[from_cloud].wait(lambda: from_cloud in agent.devices, 10, "the cloud's device")
        for device in watches:
            publish(broker.url, f"edgedrift/{device}/samples", samples(0, 20))
        for device, watch in watches.items():
            watch.wait_predictions(20)
            assert ledger(watch, 20) == {"predicted": 20, "rejected": 0}, device
        deadline = time.monotonic() + 10
        while len(status.last().get("refused", [])) < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        refused = status.last()["refused"]
    finally:
        for w in watches.values():
            w.close()
        status.close()
        agent.stop()
    assert len(refused) == len(BAD_IDS) + 4, refused
    assert all(r["reason"] for r in refused)
    assert len(agent.ids.refused) == len(BAD_IDS) + 4
    assert sorted(p.name for p in state.iterdir() if p.suffix == ".ckpt") == sorted(
        f"{d}.ckpt" for d in (from_file, from_flag, from_cloud)
    )
    outside = [p for p in tmp_path.rglob("*") if p.is_file() and state not in p.parents]
    assert not [p for p in outside if "escape" in p.name or "up" in p.name or p.name.endswith(".ckpt")]


def test_a_sigkilled_gateway_never_counts_backwards_nor_warms_up_again(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    """Row 7: a gateway of three devices, SIGKILLed long before its periodic checkpoint, comes back with
    every counter at least where it last reported it (status after status, per device), resumes each
    device from the checkpoint taken right after its first model (one warm-up, one initial model), and
    its final counters equal what was published."""
    tag = secrets.token_hex(3)
    devices = [f"k{i}-{tag}" for i in range(3)]
    gateway = gateway_process(
        tmp_path,
        sqlite_cloud,
        devices,
        broker.url,
        warmup_samples=100,
        window_labels=30,
        n_features=2,
        checkpoint_every_s=3600,  # only the checkpoint after the first model can be there
        heartbeat_every_s=0.2,
    )
    watches = {d: DeviceWatcher(broker.url, d) for d in devices}

    def reported(watch: DeviceWatcher) -> list[int]:
        return [s["counters"]["samples"] for s in watch.statuses() if "counters" in s]

    def reports(watch: DeviceWatcher, n: int) -> Callable[[], bool]:
        return lambda: n in reported(watch)

    def checkpointed(watch: DeviceWatcher, n: int) -> Callable[[], bool]:
        return lambda: any(s.get("counters", {}).get("checkpoints", 0) >= n for s in watch.statuses())

    gateway.start()
    try:
        for device in devices:
            publish(broker.url, f"edgedrift/{device}/samples", samples(0, 300, labeled=True))
        for device, watch in watches.items():
            watch.wait_predictions(300)
            watch.wait_event("model_installed", 60)
            watch.wait(reports(watch, 300), 20, f"{device}: a status with 300 samples")
            watch.wait(checkpointed(watch, 1), 10, f"{device}: the checkpoint after the first model")
        gateway.kill()
        gateway.start()
        for watch in watches.values():
            assert watch.wait_event("resumed", 30)["model_version"] is not None
        for device in devices:
            publish(broker.url, f"edgedrift/{device}/samples", samples(300, 200, labeled=True))
        for device, watch in watches.items():
            watch.wait_predictions(500)
            watch.wait(reports(watch, 500), 20, f"{device}: a status with 500 samples")
    finally:
        code = gateway.stop()
        for w in watches.values():
            w.close()
    assert code == 0
    for device, watch in watches.items():
        counts = reported(watch)
        assert counts == sorted(counts), f"{device}: counters went backwards: {counts}"
        assert len(watch.events("warmup_done")) == 1, f"{device}: warmed up again"
        assert len([e for e in watch.events("model_installed") if e["reason"] == "initial"]) == 1
        assert ledger(watch, 500) == {"predicted": 500, "rejected": 0}
        final = next(s for s in reversed(watch.statuses()) if "counters" in s)["counters"]
        assert final["samples"] == final["predictions"] == 500, (device, final)


def test_a_device_stuck_in_warm_up_with_wide_rows_stays_within_its_byte_budget(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    """Row 8's kind before the width is known: a device of a gateway without ``n_features`` sends 3,000
    unlabeled samples of 2,000 features (16 KB a row), so it never leaves warm-up. Its first window and
    its recent samples each stay within ``recent_samples_mb`` (4 MB here); they grew by the row count
    before (the window to 2 x warmup_samples rows, the recent samples to their whole capacity: 101 MB of
    RSS here, 1.6 GB for the single agent's defaults at 4,096 features). Every sample is answered."""
    device = f"wide-{secrets.token_hex(3)}"
    gateway = gateway_process(
        tmp_path,
        sqlite_cloud,
        [device],
        broker.url,
        warmup_samples=4000,
        recent_samples=5000,
        recent_samples_mb=4,
        checkpoint_every_s=3600,
    )
    watch = DeviceWatcher(broker.url, device)
    gateway.start()
    try:
        row = [0.125] * 2000
        first_rows = [json.dumps({"id": i, "x": row}).encode() for i in range(20)]
        publish(broker.url, f"edgedrift/{device}/samples", first_rows)  # the code paths' first use
        watch.wait_predictions(20)
        before = rss_mb(gateway.pid)
        for first in range(20, 3020, 500):
            bodies = [json.dumps({"id": i, "x": row}).encode() for i in range(first, first + 500)]
            publish(broker.url, f"edgedrift/{device}/samples", bodies)
        watch.wait_predictions(3020, timeout=120)
        grown = rss_mb(gateway.pid) - before
    finally:
        code = gateway.stop()
        watch.close()
    assert code == 0
    assert ledger(watch, 3020) == {"predicted": 3020, "rejected": 0}
    assert all(p["source"] == "warmup" for p in watch.predictions())
    # 26 MB measured: the buffers, the inbox (up to the broker's 1,000 messages in flight, 12 KB each) and
    # the parsing's transients; 101 MB before
    assert grown < 50, f"RSS grew {grown:.1f} MB for two buffers of 4 MB"


def test_a_devices_numbers_cannot_end_its_gateway(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    """Numbers a device makes up: a ``seq`` that claims 10^20 samples dropped (its heartbeat then broke the
    wire's BIGINT bound, and building it ended the gateway's worker: every device of the gateway), a
    400-digit ``ts`` and ``y`` (``float()`` raised OverflowError: an internal error per message, the device
    out of service after a few), strings and booleans in ``x`` (numpy read "1" and true as 1.0). Each is
    refused with its reason or counted; the gateway and its other device go on, heartbeats stored."""
    tag = secrets.token_hex(3)
    odd, fine = f"odd-{tag}", f"fine-{tag}"
    gateway = gateway_process(
        tmp_path, sqlite_cloud, [odd, fine], broker.url, n_features=2, heartbeat_every_s=0.3, seq_grace_s=0.5
    )
    watches = {d: DeviceWatcher(broker.url, d) for d in (odd, fine)}

    def reasons() -> list[str]:
        return [r["reason"] for e in watches[odd].events("rejected") for r in e["reasons"]]

    big = "1" * 400
    bodies = [
        b'{"id": 0, "x": [0.5, 1.0], "seq": 0}',
        b'{"id": 1, "x": [0.5, 1.0], "seq": 100000000000000000000}',  # past 2^63 - 1: refused
        b'{"id": 2, "x": [0.5, 1.0], "seq": 9223372036854775000}',  # a gap of ~9.2e18: counted
        f'{{"id": 3, "x": [0.5, 1.0], "ts": {big}}}'.encode(),
        f'{{"id": 4, "x": [0.5, 1.0], "y": {big}}}'.encode(),
        f'{{"id": 5, "x": [{big}, 1.0]}}'.encode(),
        b'{"id": 6, "x": ["1", 1.0]}',
        b'{"id": 7, "x": [true, 1.0]}',
    ]
    gateway.start()
    try:
        for _ in range(3):  # three times: a device failing that often in a row was taken out of service
            publish(broker.url, f"edgedrift/{odd}/samples", bodies)
        publish(broker.url, f"edgedrift/{fine}/samples", samples(0, 50))
        watches[fine].wait_predictions(50)
        watches[odd].wait(lambda: len(reasons()) >= 18, 20, "the odd device's rejections")
        beats = sqlite_cloud.counters(fine)["heartbeats"]
        watches[odd].wait(lambda: bool(watches[odd].events("dropped")), 20, "the broker drops told from seq")
        publish(broker.url, f"edgedrift/{fine}/samples", samples(50, 50))
        watches[fine].wait_predictions(100)
        deadline = time.monotonic() + 20
        while (
            sqlite_cloud.counters(odd)["heartbeats"] < 2 or sqlite_cloud.counters(fine)["heartbeats"] <= beats
        ):
            assert gateway.proc is not None and gateway.proc.poll() is None, gateway.tail()
            assert time.monotonic() < deadline, "heartbeats stopped"
            time.sleep(0.2)
    finally:
        code = gateway.stop()
        for w in watches.values():
            w.close()
    assert code == 0, gateway.tail()
    assert ledger(watches[fine], 100) == {"predicted": 100, "rejected": 0}
    assert sorted(set(reasons())) == [
        "seq must be an integer from 0 to 2^63 - 1, got 100000000000000000000",
        "ts must be a finite number",
        "x contains NaN or inf",
        "x must be a list of numbers",
        "y is not a finite number",
    ]
    assert not watches[odd].events("error"), "no internal error"
    final = next(s for s in reversed(watches[odd].statuses()) if "counters" in s)["counters"]
    assert final["broker_dropped"] == 9223372036854775000 - 2 and final["rejected"] == 18


def test_retained_input_messages_are_ignored_and_counted_once(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    """Row 9: a retained sample without an id on a device's samples topic, there before the gateway
    subscribed, is rejected once (reason: retained) and never answered, across five broker restarts; one
    published retained while the gateway listens is answered once, not at every reconnect."""
    tag = secrets.token_hex(3)
    before, live = f"rb-{tag}", f"rl-{tag}"
    publish(broker.url, f"edgedrift/{before}/samples", [json.dumps({"x": [0.5, 0.5]})], retain=True)
    watches = {d: DeviceWatcher(broker.url, d, persistent=True) for d in (before, live)}
    table = {d: secrets.token_urlsafe(24) for d in watches}
    for device, secret in table.items():
        sqlite_cloud.register(device, secret)
    (tmp_path / "devices.json").write_text(json.dumps(table))
    cfg = gateway_settings(broker, sqlite_cloud, tmp_path, devices_file=str(tmp_path / "devices.json"))
    agent = EdgeAgent(cfg).start(timeout=15)
    try:
        publish(broker.url, f"edgedrift/{live}/samples", [json.dumps({"x": [0.5, 0.5]})], retain=True)
        for device in watches:
            publish(broker.url, f"edgedrift/{device}/samples", samples(10_000, 20))
        watches[before].wait_event("rejected")
        watches[live].wait_predictions(21)
        connection = agent.transport
        for restarts in range(1, 6):
            broker.restart()
            deadline = time.monotonic() + 30
            while connection.reconnects < restarts and time.monotonic() < deadline:
                time.sleep(0.02)
            assert connection.reconnects == restarts and agent.transport.connected.wait(30)
        for device in watches:
            publish(broker.url, f"edgedrift/{device}/samples", samples(20_000, 20))
        watches[before].wait_predictions(40)
        watches[live].wait_predictions(41)
        assert agent.wait_idle(30)
        time.sleep(0.5)
    finally:
        for w in watches.values():
            w.close()
        agent.stop()
    rejected = watches[before].events("rejected")
    assert [e["count"] for e in rejected] == [1]
    assert rejected[0]["reasons"][0]["reason"] == RETAINED_REASON
    assert ledger(watches[before], 41) == {"predicted": 40, "rejected": 1}
    assert ledger(watches[live], 41) == {"predicted": 41, "rejected": 0}
    assert agent.devices[before].session.counters.retained == 1
    assert agent.devices[live].session.counters.samples == 41
    assert agent.transport.counters.reconnects >= 5


def test_a_device_stuck_in_warm_up_says_why_and_classes_fix_the_encoding(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    """Row 10: labels 0/1 where the task expects -1/+1: the 0s are rejected (their reason names the
    ``classes`` setting), the first window holds one class only, and the device says so in a
    ``warmup_stalled`` event and its status' ``warmup`` field instead of warming up silently for ever.
    The same stream to a device configured with classes 0,1 warms up and predicts by those names."""
    tag = secrets.token_hex(3)
    plain, named = f"w01-{tag}", f"wcl-{tag}"
    for device in (plain, named):
        sqlite_cloud.register(device, f"secret-{device}-0123456789abcdef")
    zero_one = [
        json.dumps({"id": i, "x": [((i * 7919) % 200 - 100) / 50.0, 0.1], "y": int((i * 7919) % 200 >= 100)})
        for i in range(300)
    ]
    n_zero = sum(1 for m in zero_one if json.loads(m)["y"] == 0)
    common = {"warmup_samples": 100, "window_labels": 30, "heartbeat_every_s": 0.2}
    agents = [
        EdgeAgent(
            AgentSettings.model_validate(
                {
                    "device_id": device,
                    "device_secret": f"secret-{device}-0123456789abcdef",
                    "broker_url": broker.url,
                    "cloud_url": sqlite_cloud.url,
                    "checkpoint_dir": str(tmp_path / device),
                    "n_features": 2,
                    **common,
                    **kw,
                }
            )
        ).start()
        for device, kw in ((plain, {}), (named, {"classes": "0,1"}))
    ]
    watches = {d: DeviceWatcher(broker.url, d) for d in (plain, named)}
    try:
        for device in (plain, named):
            publish(broker.url, f"edgedrift/{device}/samples", zero_one)
        stalled = watches[plain].wait_event("warmup_stalled", 30)
        watches[named].wait_event("model_installed", 60)
        for watch in watches.values():
            watch.wait(handled(watch, 300), 30, "300 handled")
        after = [json.dumps({"id": 1000 + i, "x": [i / 10 - 1, 0.1]}) for i in range(20)]
        for device in (plain, named):
            publish(broker.url, f"edgedrift/{device}/samples", after)
        for watch in watches.values():
            watch.wait(handled(watch, 320), 30, "320 handled")
        watches[plain].wait(
            lambda: any(
                (s.get("warmup") or {}).get("rejected_labels") == n_zero for s in watches[plain].statuses()
            ),
            10,
            "a status with the rejected labels",
        )
    finally:
        for w in watches.values():
            w.close()
        for agent in agents:
            agent.stop()
    assert stalled["cause"] == "one_class" and "classes" in stalled["reason"], stalled
    assert stalled["rejected_labels"] > 0
    assert len(watches[plain].events("warmup_stalled")) <= 3  # once, then every warmup_samples samples
    status = next(s for s in reversed(watches[plain].statuses()) if s.get("warmup"))
    assert (
        status["phase"] == "warmup" and status["warmup"]["reason"] and status["warmup"]["classes_seen"] == 1
    )
    reasons = [r["reason"] for e in watches[plain].events("rejected") for r in e["reasons"]]
    assert all("set classes" in r for r in reasons), reasons[:3]
    assert ledger(watches[plain], 320) == {"predicted": 320 - n_zero, "rejected": n_zero}
    assert ledger(watches[named], 320) == {"predicted": 320, "rejected": 0}
    assert not watches[named].events("warmup_stalled")
    named_preds = [p["y_hat"] for p in watches[named].predictions() if p["y_hat"] is not None]
    assert named_preds and set(named_preds) <= {"0", "1"}
