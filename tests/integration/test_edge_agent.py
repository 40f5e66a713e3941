"""The edge agent against a real Mosquitto (one per test) and the real cloud trainer under uvicorn."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from support.cloud import OPERATOR, CloudServer

from edgedrift.data import Stream
from edgedrift.data.generators import sine1plus
from edgedrift.protocol import Protocol
from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.replay import ReplayPlan, replay
from edgedrift_edge.settings import AgentSettings
from edgedrift_eval.runner import RunSpec, run_one
from edgedrift_harness.agent import AgentProcess
from edgedrift_harness.mosquitto import MosquittoProcess, local_mosquitto
from edgedrift_harness.mqtt import DeviceWatcher, publish


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoProcess]:
    with local_mosquitto(tmp_path / "broker") as server:
        yield server


def new_device(cloud: CloudServer) -> tuple[str, str]:
    device, secret = f"edge-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
    cloud.register(device, secret)
    return device, secret


def settings(
    broker: MosquittoProcess, cloud: CloudServer, device: str, secret: str, tmp: Path, **kw: Any
) -> AgentSettings:
    base: dict[str, Any] = {
        "device_id": device,
        "device_secret": secret,
        "broker_url": broker.url,
        "cloud_url": cloud.url,
        "warmup_samples": 300,
        "window_labels": 30,
        "checkpoint_dir": str(tmp / "state"),
        "heartbeat_every_s": 0.5,
        "retry_base_s": 0.05,
        "retry_max_s": 0.5,
    }
    return AgentSettings.model_validate(base | kw)


def stream(n_concepts: int = 3, length: int = 1000, seed: int = 1) -> Stream:
    return sine1plus(d=2, n_concepts=n_concepts, concept_length=length, seed=seed)


def counters(cloud: CloudServer, device: str) -> dict[str, Any]:
    return cloud.counters(device)


def test_every_sample_gets_exactly_one_prediction(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    device, secret = new_device(sqlite_cloud)
    agent = EdgeAgent(settings(broker, sqlite_cloud, device, secret, tmp_path)).start()
    watch = DeviceWatcher(broker.url, device)
    try:
        s = stream(1, 2000)
        singles = ReplayPlan(s, (device,), Protocol(every=10), limit=1000)
        replay(singles, broker.url, progress=False)
        preds = watch.wait_predictions(1000)
        # the batches are published once the first model is in: the agent may answer the singles faster
        # than the cloud trains, so the test waits rather than racing it
        watch.wait_event("model_installed", timeout=60)
        samples = [{"id": 1000 + i, "x": s.X[1000 + i].tolist()} for i in range(1000)]
        publish(
            broker.url,
            f"edgedrift/{device}/samples",
            [json.dumps({"samples": samples[k : k + 100]}) for k in range(0, 1000, 100)],
        )
        preds = watch.wait_predictions(2000)
        time.sleep(0.3)
        preds = watch.predictions()
        ids = [p["id"] for p in preds]
        assert len(ids) == 2000 and sorted(ids) == list(range(2000)), "lost or duplicated predictions"
        assert all(p["source"] == "warmup" and p["y_hat"] is None for p in preds[:300])
        version = counters(sqlite_cloud, device)["latest_version"]
        # async mode: samples that arrive while the first model is trained are answered with null
        awaiting = [p for p in preds[300:] if p["y_hat"] is None]
        assert all(p["source"] == "warmup" for p in awaiting) and len(awaiting) < 1000
        served = [p for p in preds[300:] if p["y_hat"] is not None]
        assert all(p["model_version"] == version and p["y_hat"] in (-1.0, 1.0) for p in served)
        assert all(p["y_hat"] is not None for p in preds[1000:]), "batches come after the first model"
        assert agent.session.counters.samples == 2000 and agent.session.counters.dropped == 0
    finally:
        watch.close()
        agent.stop()
    status = agent.status()
    assert status["counters"]["predictions"] == 2000


@pytest.mark.parametrize("batch_size", [1, 37, 100])
def test_deployed_run_equals_the_offline_evaluation(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path, batch_size: int
) -> None:
    """Same stream, same parameters: the same predictions, sample for sample, and the same recomputes,
    whether the samples come one per message or in batch messages (per-sample batch semantics; 37 does
    not divide the warm-up, so one batch straddles the first model)."""
    s = stream(3, 1500, seed=4)
    protocol = Protocol(every=10, window=500)
    offline = run_one(s, protocol, RunSpec("druid", 0.99, 0), curves=True)
    assert offline.recomputes >= 1, "the stream must make DRUiD recompute for the check to mean something"

    device, secret = new_device(sqlite_cloud)
    cfg = settings(
        broker,
        sqlite_cloud,
        device,
        secret,
        tmp_path,
        warmup_samples=500,
        window_labels=50,
        strategy="druid",
        strategy_param=0.99,
        recompute_mode="sync",
        C="auto",
    )
    agent = EdgeAgent(cfg).start()
    watch = DeviceWatcher(broker.url, device)
    try:
        replay(ReplayPlan(s, (device,), protocol, batch_size=batch_size), broker.url, progress=False)
        preds = watch.wait_predictions(len(s.y), timeout=120)
    finally:
        watch.close()
        agent.stop()
    deployed = np.array([p["y_hat"] for p in sorted(preds, key=lambda p: p["id"])[500:]])
    assert np.array_equal(deployed, offline.scored_predictions())
    assert agent.session.loop is not None
    assert agent.session.loop.counters.recomputes == offline.recomputes
    assert counters(sqlite_cloud, device)["recomputes"] == offline.recomputes + 1  # + the initial model


def test_drift_makes_a_recompute_and_its_version_reaches_predictions(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    device, secret = new_device(sqlite_cloud)
    agent = EdgeAgent(settings(broker, sqlite_cloud, device, secret, tmp_path, strategy_param=0.99)).start()
    watch = DeviceWatcher(broker.url, device)
    try:
        s = stream(2, 1500)
        replay(ReplayPlan(s, (device,), Protocol(every=5)), broker.url, progress=False)
        preds = watch.wait_predictions(len(s.y), timeout=90)
        finished = watch.wait_events("recompute_finished")
    finally:
        watch.close()
        agent.stop()
    assert watch.events("recompute_requested")
    c = counters(sqlite_cloud, device)
    assert c["recomputes"] >= 2 and c["reasons"]["initial"] == 1 and c["reasons"]["druid"] >= 1
    new_version = finished[0]["version"]
    assert new_version >= 2
    assert any(p["model_version"] == new_version for p in preds), "the new version never reached predictions"
    versions = [p["model_version"] for p in sorted(preds, key=lambda p: p["id"]) if p["model_version"]]
    assert versions == sorted(versions), "versions must only move forward"


def test_cloud_down_mid_stream(broker: MosquittoProcess, tmp_path: Path) -> None:
    cloud = CloudServer(f"sqlite:///{tmp_path / 'c.db'}", tmp_path).start()
    try:
        device, secret = new_device(cloud)
        agent = EdgeAgent(settings(broker, cloud, device, secret, tmp_path, strategy_param=0.99)).start()
        watch = DeviceWatcher(broker.url, device)
        s = stream(2, 1500)
        replay(ReplayPlan(s, (device,), Protocol(every=5), limit=800), broker.url, progress=False)
        watch.wait_predictions(800)
        watch.wait_events("model_installed", timeout=30)  # the first model may come after the 800th sample
        assert agent.session.phase == "running"
        cloud.stop()
        replay(
            ReplayPlan(Stream("rest", s.X, s.y, "classification", ("a", "b")), (device,), Protocol(every=5)),
            broker.url,
            progress=False,
        )
        watch.wait_events("recompute_failed", timeout=60)
        # 800 + 3000 samples: ids 0..799 were sent twice; the second copy is predicted again (marked as a
        # repeat), not learned again
        preds = watch.wait_predictions(3800, timeout=60)
        assert agent.session.counters.duplicates == 800 and agent.session.counters.samples == 3000
        assert {p["id"] for p in preds} == set(range(3000)) and len(preds) == 3800
        assert sum(1 for p in preds if p.get("repeat")) == 800
        late = [p for p in preds if p["id"] > 1600]
        assert late and all(p["y_hat"] in (-1.0, 1.0) for p in late), "predictions continue without the cloud"
        cloud.start()
        finished = watch.wait_events("recompute_finished", timeout=60)
        assert counters(cloud, device)["recomputes"] >= 2
        assert agent.session.model_version == finished[-1]["version"]
        watch.close()
        agent.stop()
    finally:
        cloud.stop()


def test_broker_restart_loses_no_qos1_sample(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    """The broker is stopped in the middle of a QoS-1 stream and restarted a second later: the agent
    reconnects and renews its subscription, and every sample reaches it exactly once (redeliveries are
    dropped by id and counted)."""
    device, secret = new_device(sqlite_cloud)
    agent = EdgeAgent(settings(broker, sqlite_cloud, device, secret, tmp_path)).start()
    watch = DeviceWatcher(broker.url, device, persistent=True)
    s = stream(1, 3000)
    done = threading.Event()

    def publisher() -> None:
        replay(ReplayPlan(s, (device,), Protocol(every=10), rate=1500), broker.url, progress=False)
        done.set()

    thread = threading.Thread(target=publisher, daemon=True)
    thread.start()
    watch.wait_predictions(800)
    broker.stop()
    time.sleep(1.0)
    broker.start()
    thread.join(120)
    assert done.is_set()
    watch.wait_predictions(3000, timeout=90)
    assert agent.wait_idle(30)
    time.sleep(0.5)
    ids = [p["id"] for p in watch.predictions()]
    watch.close()
    agent.stop()
    assert set(ids) == set(range(3000)), f"lost {sorted(set(range(3000)) - set(ids))[:10]}"
    assert agent.session.counters.samples == 3000, "a redelivered sample was processed twice"
    assert agent.session.counters.reconnects >= 1


def test_sigkill_resumes_from_the_checkpoint(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    device, secret = new_device(sqlite_cloud)
    agent = AgentProcess(
        tmp_path / "agent.log",
        {
            "device_id": device,
            "device_secret": secret,
            "broker_url": broker.url,
            "cloud_url": sqlite_cloud.url,
            "warmup_samples": 300,
            "window_labels": 30,
            "checkpoint_dir": tmp_path / "state",
            "checkpoint_every_s": 0.2,
        },
    )
    watch = DeviceWatcher(broker.url, device)
    agent.start()
    s = stream(1, 2000)
    replay(ReplayPlan(s, (device,), Protocol(every=10), limit=1000), broker.url, progress=False)
    watch.wait_event("model_installed", 60)
    watch.wait_predictions(1000)
    time.sleep(0.6)  # > checkpoint period
    agent.kill()
    agent.start()
    try:
        resumed = watch.wait_events("resumed")[0]
        assert resumed["samples"] == 1000 and resumed["model_version"] is not None
        payloads = [json.dumps({"id": 1000 + i, "x": s.X[1000 + i].tolist()}) for i in range(200)]
        publish(broker.url, f"edgedrift/{device}/samples", payloads)
        preds = watch.wait_predictions(1200)
        assert all(p["source"] != "warmup" and p["model_version"] for p in preds[1000:]), (
            "restarted from scratch"
        )
    finally:
        code = agent.stop()
        watch.close()
    assert code == 0


def test_a_flood_of_labels_for_unknown_ids_is_summarised_and_samples_stay_answered(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    """Issue 30 row 3: 3,000 single-label messages for ids the agent never saw are counted one by one
    but reported as a few summary events (at most one a second), and samples behind them are answered."""
    device, secret = new_device(sqlite_cloud)
    agent = EdgeAgent(settings(broker, sqlite_cloud, device, secret, tmp_path, n_features=2)).start()
    watch = DeviceWatcher(broker.url, device)
    try:
        started = time.monotonic()
        labels = [json.dumps({"id": 10**6 + i, "y": 1}).encode() for i in range(3000)]
        publish(broker.url, f"edgedrift/{device}/labels", labels)
        publish(
            broker.url,
            f"edgedrift/{device}/samples",
            [json.dumps({"id": i, "x": [0.1, i]}) for i in range(20)],
        )
        watch.wait_predictions(20)
        watch.wait(lambda: sum(e["count"] for e in watch.events("label_miss")) == 3000, 30, "3,000 misses")
        seconds = time.monotonic() - started
        misses = watch.events("label_miss")
        assert len(misses) <= seconds + 2, (len(misses), seconds)
        assert agent.session.counters.label_misses == 3000
        assert len(watch.answered()) == 20 and agent.session.counters.rejected == 0
    finally:
        watch.close()
        agent.stop()


def test_bad_payloads_are_reported_and_the_agent_keeps_going(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    device, secret = new_device(sqlite_cloud)
    agent = EdgeAgent(settings(broker, sqlite_cloud, device, secret, tmp_path, n_features=2)).start()
    watch = DeviceWatcher(broker.url, device)
    topic = f"edgedrift/{device}/samples"
    try:
        publish(
            broker.url,
            topic,
            [
                b"{not json",
                b"[1, 2]",
                b'{"id": 1, "x": [1, 2, 3]}',
                b'{"id": 2, "x": [NaN, 1]}',
                b'{"id": 3, "x": [1, 2], "colour": "red"}',
                b'{"id": 4, "x": [1, 2], "y": 0.5}',
                b'{"id": 5, "x": "ab"}',
                json.dumps(
                    {"samples": [{"id": 6, "x": [0.1, 0.2]}, {"id": 7, "x": [1]}, {"id": 8, "x": [0.3, 0.4]}]}
                ),
            ],
        )
        publish(broker.url, f"edgedrift/{device}/labels", [b'{"id": 999, "y": 1}', b'{"id": 6, "y": 7}'])
        rejected = watch.wait_events("rejected", 9)
        reasons = " | ".join(r["reason"] for e in rejected for r in e["reasons"])
        for words in (
            "malformed JSON",
            "expected a JSON object",
            "x has 3 values, expected 2",
            "NaN",
            "unknown field 'colour'",
            "-1 or +1",
            "list of numbers",
            "x has 1 values",
        ):
            assert words in reasons, (words, reasons)
        assert watch.wait_events("label_miss")[0]["id"] == 999
        preds = watch.wait_predictions(2)
        assert [p["id"] for p in preds] == [6, 8]
        assert agent.session.counters.rejected == 9
    finally:
        watch.close()
        agent.stop()


def test_agent_imports_stay_light() -> None:
    code = (
        "import sys, edgedrift_edge.agent, edgedrift_edge.cli, edgedrift_edge.replay\n"
        "heavy = [m for m in ('sklearn', 'liblinear', 'fastapi', 'edgedrift_cloud', 'imblearn', 'sqlalchemy')"
        " if m in sys.modules]\nprint(heavy)\nsys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_heartbeats_reach_the_dashboard_series(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    device, secret = new_device(sqlite_cloud)
    # sync: the first model is in before the samples after the warm-up (which would otherwise all be
    # answered before it arrives, leaving no scored prediction and no accuracy)
    cfg = settings(
        broker, sqlite_cloud, device, secret, tmp_path, heartbeat_every_s=0.2, recompute_mode="sync"
    )
    agent = EdgeAgent(cfg).start()
    try:
        replay(ReplayPlan(stream(1, 1000), (device,), Protocol(every=2)), broker.url, progress=False)
        assert agent.wait_idle(30)
        with httpx.Client(base_url=sqlite_cloud.url, headers={"Authorization": f"Bearer {OPERATOR}"}) as op:
            deadline = time.monotonic() + 20.0
            beats = op.get(f"/v1/devices/{device}/stats").json()
            while not (beats and beats[-1]["samples"] == 1000) and time.monotonic() < deadline:
                time.sleep(0.2)
                beats = op.get(f"/v1/devices/{device}/stats").json()
    finally:
        agent.stop()
    assert len(beats) >= 2 and beats[-1]["samples"] == 1000 and 0.5 < beats[-1]["accuracy"] <= 1.0
