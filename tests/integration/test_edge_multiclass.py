"""A multi-class device end to end: the edge agent on a real Mosquitto with ``classes`` configured, the real
cloud trainer (one-vs-rest LIBLINEAR), and the operator's fleet views. Deployed = offline, sample for
sample, on the Sine-MC stream; labels and predictions travel by class name."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.browser import Browser, only_local
from support.cloud import OPERATOR, CloudServer, field_error

from edgedrift.data import sine_mc
from edgedrift.protocol import Protocol
from edgedrift.wire import WINDOW_CONTENT_TYPE, WindowHeader, encode_window
from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.replay import ReplayPlan, replay
from edgedrift_edge.settings import AgentSettings
from edgedrift_eval.runner import RunSpec, run_one
from edgedrift_harness.mosquitto import MosquittoProcess, local_mosquitto
from edgedrift_harness.mqtt import DeviceWatcher, publish

WINDOW = 300


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MosquittoProcess]:
    with local_mosquitto(tmp_path / "broker") as server:
        yield server


def agent_settings(
    broker: MosquittoProcess, cloud: CloudServer, tmp: Path, classes: list[Any], **kw: Any
) -> tuple[AgentSettings, str, str]:
    device, secret = f"mc-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
    cloud.register(device, secret)
    base: dict[str, Any] = {
        "device_id": device,
        "device_secret": secret,
        "broker_url": broker.url,
        "cloud_url": cloud.url,
        "classes": json.dumps(classes),
        "warmup_samples": WINDOW,
        "window_labels": 60,  # the protocol's: 300 samples, a label every 5
        "strategy": "druid",
        "strategy_param": 0.99,
        "recompute_mode": "sync",
        "C": "auto",
        "checkpoint_dir": str(tmp / "state"),
        "heartbeat_every_s": 0.3,
        "retry_base_s": 0.05,
        "retry_max_s": 0.5,
    }
    return AgentSettings.model_validate(base | kw), device, secret


def test_a_multiclass_device_deployed_equals_offline_and_the_cloud_counts_its_recomputes(
    broker: MosquittoProcess, sqlite_cloud: CloudServer, tmp_path: Path
) -> None:
    stream = sine_mc(n_classes=4, d=2, n_concepts=3, concept_length=700, seed=5)
    names = list(stream.labels.names)
    protocol = Protocol(every=5, window=WINDOW)
    offline = run_one(stream, protocol, RunSpec("druid", 0.99, 0), curves=True)
    assert offline.recomputes >= 2, (
        "Sine-MC's drifts must make DRUiD recompute for the check to mean something"
    )

    cfg, device, _ = agent_settings(broker, sqlite_cloud, tmp_path, names)
    agent = EdgeAgent(cfg).start()
    watch = DeviceWatcher(broker.url, device)
    try:
        replay(ReplayPlan(stream, (device,), protocol), broker.url, progress=False)
        preds = watch.wait_predictions(len(stream.y), timeout=180)
        publish(
            broker.url,
            f"edgedrift/{device}/samples",
            [json.dumps({"samples": [{"id": 10**6, "x": [0.5, 0.5], "y": "no-such-class"}]})],
        )
        rejected = watch.wait_event("rejected", timeout=30)
    finally:
        watch.close()
        agent.stop()
    deployed = [p["y_hat"] for p in sorted(preds, key=lambda p: p["id"])[WINDOW:]]
    assert deployed == stream.labels.decode(offline.scored_predictions()), "deployed != offline"
    assert set(deployed) <= set(names) and len(set(deployed)) == 4
    assert "unknown class 'no-such-class'" in rejected["reasons"][0]["reason"]
    c = agent.session.counters
    assert c.predictions == len(stream.y) and c.rejected == 1 and c.dropped == 0, "the ledger adds up"
    assert agent.session.loop is not None and agent.session.loop.counters.recomputes == offline.recomputes
    counted = sqlite_cloud.counters(device)
    assert counted["recomputes"] == offline.recomputes + 1  # + the initial model

    with sqlite_cloud.client(OPERATOR) as ops:
        latest = ops.get(f"/v1/devices/{device}/models/latest").json()
        page = ops.get(f"/v1/fleet/devices/{device}").json()
    document = latest.get("model") or latest.get("document")
    assert document["classes"] == [0, 1, 2, 3] and len(document["coef"]) == 4, "one-vs-rest over 4 classes"
    assert document["class_names"] == [str(n) for n in names], "the model names the device's classes"
    row = page["device"]
    assert row["task"] == "classification" and row["rmse"] is None and row["n_classes"] == 4
    assert 0.0 < row["accuracy"] <= 1.0 and 0.0 < row["macro_f1"] <= 1.0
    assert any(b["macro_f1"] is not None for b in page["heartbeats"])


def test_the_cloud_refuses_a_label_outside_the_classes_naming_the_field(sqlite_cloud: CloudServer) -> None:
    device, secret = f"mc-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
    sqlite_cloud.register(device, secret)
    stream = sine_mc(n_classes=3, d=2, n_concepts=1, concept_length=60, seed=1)
    header = WindowHeader.model_validate({"task": "classification", "learner": "logistic", "n_classes": 3})
    y = stream.y.copy()
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": WINDOW_CONTENT_TYPE}
    with httpx.Client(base_url=sqlite_cloud.url, timeout=30) as http:
        good = http.post(
            f"/v1/devices/{device}/models", content=encode_window(header, stream.X, y), headers=headers
        )
        y[7] = 3.0  # a fourth class of a three-class device
        bad = http.post(
            f"/v1/devices/{device}/models", content=encode_window(header, stream.X, y), headers=headers
        )
    assert good.status_code == 201, good.text
    assert good.json()["model"]["classes"] == [0, 1, 2]
    field_error(bad, 422, "y")
    assert "0..2" in bad.text and "y[7]" in bad.text


def test_a_model_names_the_classes_its_request_named_and_a_mismatch_is_a_field_error(
    sqlite_cloud: CloudServer,
) -> None:
    device, secret = f"mc-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
    sqlite_cloud.register(device, secret)
    stream = sine_mc(n_classes=3, d=2, n_concepts=1, concept_length=60, seed=1)
    headers = {"Authorization": f"Bearer {secret}"}
    base = {"task": "classification", "learner": "logistic", "n_classes": 3, "X": stream.X.tolist()}
    with httpx.Client(base_url=sqlite_cloud.url, timeout=30) as http:
        named = http.post(
            f"/v1/devices/{device}/models",
            json={**base, "y": stream.y.tolist(), "class_names": ["oak", "ash", "elm"]},
            headers=headers,
        )
        short = http.post(
            f"/v1/devices/{device}/models",
            json={**base, "y": stream.y.tolist(), "class_names": ["oak", "ash"]},
            headers=headers,
        )
    assert named.status_code == 201, named.text
    assert named.json()["model"]["class_names"] == ["oak", "ash", "elm"]
    assert short.status_code == 422 and "2 names for 3 classes" in short.text


def test_the_fleet_views_show_a_multiclass_device_on_either_registry(cloud: CloudServer) -> None:
    """The fleet row and the device page read ``macro_f1`` and ``n_classes`` from the newest heartbeat on
    SQLite and PostgreSQL; a macro-F1 outside [0, 1] is refused naming the entry."""
    device, secret = f"mc-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
    cloud.register(device, secret)
    beat = {"samples": 500, "labeled": 100, "accuracy": 0.8, "extra": {"n_classes": 4, "macro_f1": 0.75}}
    auth = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(base_url=cloud.url, timeout=30) as http:
        assert http.post(f"/v1/devices/{device}/stats", json=beat, headers=auth).status_code < 300
        bad = {**beat, "extra": {"macro_f1": 1.5}}
        field_error(http.post(f"/v1/devices/{device}/stats", json=bad, headers=auth), 422, "macro_f1")
    with cloud.client(OPERATOR) as ops:
        page = ops.get(f"/v1/fleet/devices/{device}").json()
        table = ops.get("/v1/fleet", params={"q": device}).json()
    row = page["device"]
    assert row["task"] == "classification" and row["rmse"] is None
    assert (row["accuracy"], row["macro_f1"], row["n_classes"]) == (0.8, 0.75, 4)
    assert page["heartbeats"][-1]["macro_f1"] == 0.75
    assert [(r["device_id"], r["macro_f1"]) for r in table["devices"]] == [(device, 0.75)]


#: What the device page shows: its facts and the series of its first (quality) chart.
DEVICE_JS = """(() => ({
  rendered: document.body.dataset.rendered || "",
  facts: Object.fromEntries([...document.querySelectorAll("[data-fact]")]
    .map((n) => [n.dataset.fact, n.textContent])),
  caption: document.querySelector("figure[data-chart=metric] figcaption")?.textContent,
  legend: [...document.querySelectorAll("figure[data-chart=metric] .u-legend .u-label")]
    .map((n) => n.textContent),
}))()"""


def test_the_dashboard_shows_a_multiclass_device_with_accuracy_and_macro_f1(
    sqlite_cloud: CloudServer,
) -> None:
    device, secret = f"mc-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
    sqlite_cloud.register(device, secret)
    with httpx.Client(base_url=sqlite_cloud.url, timeout=30) as http:
        for k in range(3):
            beat = {
                "samples": 100 * (k + 1),
                "accuracy": 0.7 + 0.05 * k,
                "extra": {"n_classes": 4, "macro_f1": 0.6},
            }
            r = http.post(
                f"/v1/devices/{device}/stats", json=beat, headers={"Authorization": f"Bearer {secret}"}
            )
            assert r.status_code < 300, r.text
    chromium = Browser()
    try:
        with chromium.new_page() as page:
            page.goto(f"{sqlite_cloud.url}/dashboard?refresh=30#token={OPERATOR}")
            page.wait_js("document.body.dataset.rendered", "the fleet table")
            page.evaluate(f"location.hash = 'device={device}';")
            page.wait_js(
                f"(document.body.dataset.rendered || '').startsWith('device {device}')", "the device page"
            )
            shown = page.evaluate(DEVICE_JS)
            assert only_local(page.requests()) == [] and page.errors() == []
    finally:
        chromium.stop()
    assert shown["facts"]["task"] == "classification" and shown["facts"]["classes"] == "4"
    assert shown["facts"]["accuracy"] == "80.0% · macro-F1 0.600", "accuracy and macro-F1, not RMSE"
    assert shown["caption"].split(" (")[0] == "accuracy", shown["caption"]  # then the recompute markers' key
    assert "macro-F1" in shown["legend"] and "RMSE" not in shown["legend"]
