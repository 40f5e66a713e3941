"""The fault suite: every fault an unattended device meets, on real processes (the shipped Mosquitto
configuration, the cloud trainer under uvicorn, ``edgedrift-edge run`` subprocesses), each asserting the
ledger published = predicted + rejected + dropped, plus what the fault must look like to an operator.

Scenarios live in :mod:`edgedrift_harness.faults` (``bench/faults.py`` runs the same ones for the table in
docs/benchmarks.md). Faults that need a bug inside the worker run the agent in process. Every test runs
twice: the agents log in with a password over TCP, then with their own device certificate over the
shipped mutual-TLS listener."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edgedrift.protocol import Protocol
from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.session.device_session import Output
from edgedrift_edge.settings import AgentSettings
from edgedrift_harness import faults
from edgedrift_harness.faults import PASSWORD, FaultLab, Ledger
from edgedrift_harness.mosquitto import ShippedMosquitto, save_window_s


@pytest.fixture(scope="module", params=faults.TRANSPORTS)
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultLab]:
    if request.param == "tls" and shutil.which("openssl") is None:
        pytest.skip("needs openssl (deploy/mosquitto/make-certs.sh)")
    work = tmp_path_factory.mktemp(f"faults-{request.param}")
    with FaultLab(work, devices=32, transport=request.param) as running:
        yield running


def run(lab: FaultLab, name: str) -> Ledger:
    result = faults.SCENARIOS[name](lab)
    assert result.published > 0
    assert result.lost == 0, result.row()
    return result


def test_tls_agents_use_their_certificate_and_no_password(lab: FaultLab) -> None:
    """Over TLS the agent's broker settings hold no password: the broker admits it by its certificate."""
    broker = lab.agent_broker(lab.devices[-1])
    if lab.transport == "tcp":
        assert broker["broker_url"].startswith("mqtt://") and PASSWORD in broker["broker_url"]
        return
    assert broker["broker_url"] == f"mqtts://127.0.0.1:{lab.broker.tls_port}"
    assert broker["tls_cert_file"].endswith(f"{lab.devices[-1]}.crt")
    assert PASSWORD not in json.dumps(broker)


def test_agent_sigkill_loses_no_acknowledged_sample(lab: FaultLab) -> None:
    result = run(lab, "agent_sigkill")
    assert result.checks["answered_at_kill"] < 6000, "the kill must happen while samples are queued"
    assert result.rejected == 0 and result.dropped == 0


def test_a_full_inbox_applies_back_pressure_instead_of_dropping(lab: FaultLab) -> None:
    result = run(lab, "queue_overflow")
    assert result.dropped == 0 and result.checks["exit_code"] == 0


def test_qos0_overflow_is_counted(lab: FaultLab) -> None:
    result = run(lab, "qos0_overflow")
    assert result.dropped > 0, "4,000 QoS-0 samples into an inbox of 4 must overflow"


@pytest.mark.parametrize("name", ["bad_items_100k", "oversized_batch_400k"])
def test_one_summary_event_per_bad_message(lab: FaultLab, name: str) -> None:
    result = run(lab, name)
    expected = 100_000 if name == "bad_items_100k" else 400_000
    assert result.checks["rejected_events"] == 1 and result.checks["reported_count"] == expected
    assert result.checks["next_1000_answered_s"] < 30


@pytest.mark.parametrize("name", ["outlier_1e6", "outlier_1e308"])
def test_an_outlier_is_predicted_reported_and_not_learned(lab: FaultLab, name: str) -> None:
    result = run(lab, name)
    assert result.checks["flagged"] is True and result.checks["outlier_event"] == 1


def test_the_first_sample_does_not_lock_the_width(lab: FaultLab) -> None:
    result = run(lab, "wrong_width_first")
    assert result.checks["width"] == 2 and result.checks["served_after_restart"] == 1000
    assert result.rejected == 0


def test_reused_ids_are_new_samples_reported_in_summary_events(lab: FaultLab) -> None:
    result = run(lab, "id_reused")
    assert result.checks["id_reused_reported"] == 1000 and result.predicted == 3000
    # one event a second at most (the first at once), where each reused id was an event before
    assert 1 <= result.checks["id_reused_events"] <= result.checks["seconds"] + 2


def test_an_unwritable_checkpoint_is_reported_and_retried(lab: FaultLab) -> None:
    result = run(lab, "checkpoint_unwritable")
    assert result.checks["recovered_after"] >= 1 and result.checks["exit_code"] == 0
    assert "error" not in result.checks["status_states"]


def test_a_full_disk_is_reported_and_predictions_go_on(lab: FaultLab) -> None:
    result = run(lab, "disk_full")
    assert result.checks["failed_reason"] and result.checks["exit_code"] == 0


def test_a_rejected_credential_is_a_status_not_a_storm(lab: FaultLab) -> None:
    result = run(lab, "cloud_unauthorized")
    assert result.checks["unauthorized_events"] == 1 and result.checks["status_unauthorized"] is True
    assert result.checks["recompute_failed_events"] <= 10, "401s must back off, not repeat per sample"


def test_a_trickling_cloud_hits_the_deadline(lab: FaultLab) -> None:
    result = run(lab, "cloud_trickle")
    assert "deadline" in result.checks["failed_reason"] and result.checks["exit_code"] == 0


def test_cloud_down_and_back(lab: FaultLab) -> None:
    result = run(lab, "cloud_down")
    assert result.checks["recompute_finished"] >= 1


def test_a_crafted_checkpoint_runs_no_code(lab: FaultLab) -> None:
    result = run(lab, "crafted_checkpoint")
    assert result.checks["code_ran"] is False and result.checks["quarantined"]


def test_a_broker_restart_loses_nothing(lab: FaultLab) -> None:
    run(lab, "broker_restart")


def test_broker_sigkill_keeps_an_offline_agents_queue(lab: FaultLab) -> None:
    """Everything the broker acknowledged before its last save survives a SIGKILL: Mosquitto saves every
    ``autosave_interval`` seconds (up to twice that apart), and the kill comes a second after that window."""
    assert isinstance(lab.broker, ShippedMosquitto)  # this module's lab runs the shipped Mosquitto
    result = faults.SCENARIOS["broker_kill9_offline_agent"](lab)
    window_s = save_window_s(lab.broker.options)
    assert result.lost == 0, result.row()
    assert result.checks["window_s"] == window_s == lab.save_window_s


# --- faults inside the worker: the agent in process, a bug injected --------------------------------------


def _agent(lab: FaultLab, tmp: Path, **kw: object) -> tuple[EdgeAgent, str]:
    device, secret = lab.device()
    settings = AgentSettings.model_validate(
        {
            "device_id": device,
            "device_secret": secret,
            **lab.agent_broker(device),
            "cloud_url": lab.cloud.url,
            "warmup_samples": 200,
            "window_labels": 20,
            "checkpoint_dir": str(tmp / "state"),
            "heartbeat_every_s": 0.5,
            **kw,
        }
    )
    return EdgeAgent(settings).start(), device


def test_a_dying_worker_reports_error_and_ends_the_agent(lab: FaultLab, tmp_path: Path) -> None:
    agent, device = _agent(lab, tmp_path)

    def broken(kind: str, payload: bytes) -> Output:
        raise RuntimeError("injected bug")

    agent.session.handle = broken  # type: ignore[method-assign]
    with lab.clients(device) as (pub, watch):
        s = faults.stream(1, 100)
        pub.send(faults.samples_topic(device), *faults.single_payloads(s, range(30)))
        assert agent.wait(30), "the agent must stop when its worker cannot work"
        status = watch.wait_status("error")
        assert "consecutive messages failed" in (status.get("reason") or "")
        assert agent.fatal is not None
        # The 20 messages it failed on are counted as rejected; what it did not take stays with the
        # broker, and a healthy agent answers it.
        healthy = lab.agent(device, lab.secrets[device]).start()
        try:
            watch.wait_ids(set(range(20, 30)))
        finally:
            healthy.stop()
        ledger = faults.ledger("worker_death", pub, watch, time.monotonic())
    assert ledger.rejected == 20 and ledger.predicted == 10 and ledger.lost == 0, ledger.row()


def test_a_stuck_worker_is_reported_degraded_and_recovers(lab: FaultLab, tmp_path: Path) -> None:
    agent, device = _agent(lab, tmp_path, watchdog_s=1.0)
    real = agent.session.handle
    stuck = {"until": 0.0}

    def slow(kind: str, payload: bytes) -> Output:
        while time.monotonic() < stuck["until"]:
            time.sleep(0.05)
        return real(kind, payload)

    agent.session.handle = slow  # type: ignore[method-assign]
    try:
        with lab.clients(device) as (pub, watch):
            s = faults.stream(1, 100)
            stuck["until"] = time.monotonic() + 4.0
            pub.send(faults.samples_topic(device), *faults.single_payloads(s, range(50)))
            degraded = watch.wait_status("degraded", timeout=10)
            assert "no progress" in degraded["reason"]
            watch.wait_ids(set(range(50)))
            watch.wait_event("recovered", timeout=10)
            assert agent.state_name() == "online"
    finally:
        agent.stop()


def test_outlier_recovery_offline_and_deployed(lab: FaultLab, tmp_path: Path) -> None:
    """After one labeled glitch (x = 1e6 or 1e308) accuracy is back within 1 point of the control run
    within 500 samples, offline; and the deployed agent (sync mode) makes the offline predictions."""
    from edgedrift.data import Stream
    from edgedrift_eval.runner import RunSpec, run_one

    base = faults.stream(2, 3000, seed=5)
    at = 1500
    protocol = Protocol(every=1, window=300)
    control = run_one(base, protocol, RunSpec("druid", None, 0), curves=True)
    for value in (1e6, 1e308):
        X = np.insert(base.X, at, np.full(base.X.shape[1], value), axis=0)
        y = np.insert(base.y, at, 1.0)
        glitched = Stream(f"glitch-{value:g}", X, y, base.task, base.feature_names)
        run = run_one(glitched, protocol, RunSpec("druid", None, 0), curves=True)
        preds = np.delete(run.scored_predictions(), at - 300)
        assert np.isfinite(preds).all()
        after = slice(at - 300, at - 300 + 500)
        acc_c = float(np.mean(control.scored_predictions()[after] == base.y[300:][after]))
        acc_g = float(np.mean(preds[after] == base.y[300:][after]))
        assert abs(acc_c - acc_g) <= 0.01, (value, acc_c, acc_g)
    agent, device = _agent(
        lab, tmp_path, recompute_mode="sync", warmup_samples=300, window_labels=300, strategy="druid"
    )
    try:
        with lab.clients(device) as (pub, watch):
            payloads = [
                json.dumps({"id": i, "x": glitched.X[i].tolist(), "y": float(glitched.y[i])}).encode()
                for i in range(len(glitched.y))
            ]
            pub.send(faults.samples_topic(device), payloads, [[i] for i in range(len(payloads))])
            watch.wait_ids(set(range(len(payloads))), 120)
            deployed = sorted(watch.predictions(), key=lambda p: p["id"])[300:]
            assert [p["y_hat"] for p in deployed] == [float(v) for v in run.scored_predictions()]
            assert watch.events("outlier")
    finally:
        agent.stop()
