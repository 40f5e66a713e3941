"""Bulk registration (API and CLI from a file) and batched heartbeats for a gateway (issue 12, rows 15
and 17), on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.cloud import OPERATOR, CloudServer

N = 500


def test_bulk_registration_and_batched_heartbeats(cloud: CloudServer) -> None:
    given = {f"fleet-{i:04d}": f"secret-of-fleet-device-{i:06d}" for i in range(N)}
    devices = [{"device_id": d, "secret": s} for d, s in given.items()]
    devices.append({"device_id": "fleet-generated"})
    with cloud.client(OPERATOR) as op:
        r = op.post("/v1/bulk/devices", json={"devices": devices})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["created"] == N + 1 and body["rotated"] == 0
        assert list(body["secrets"]) == ["fleet-generated"]
        generated = body["secrets"]["fleet-generated"]
        again = op.post("/v1/bulk/devices", json={"devices": devices[:2]})
        assert again.json()["created"] == 0 and again.json()["rotated"] == 2
        clash = op.post(
            "/v1/bulk/devices", json={"devices": [{"device_id": "x-1", "secret": given["fleet-0001"]}]}
        )
        assert clash.status_code == 409, clash.text
        twice = op.post("/v1/bulk/devices", json={"devices": [devices[0], devices[0]]})
        assert twice.status_code == 409 and "appears twice" in twice.json()["detail"]
        beats = [{"device_id": d, "heartbeat": {"samples": i, "accuracy": 0.9}} for i, d in enumerate(given)]
        r = op.post("/v1/bulk/heartbeats", json={"heartbeats": beats})
        assert r.status_code == 201 and r.json() == {"stored": N}, r.text
        unknown = op.post(
            "/v1/bulk/heartbeats",
            json={"heartbeats": [{"device_id": "nobody", "heartbeat": {"samples": 1}}, beats[0]]},
        )
        assert unknown.status_code == 404 and "nobody" in unknown.json()["detail"]
        too_big = op.post(
            "/v1/bulk/heartbeats",
            json={"heartbeats": [{"device_id": "fleet-0000", "heartbeat": {"samples": 2**63}}]},
        )
        assert too_big.status_code == 422
    assert cloud.counters("fleet-0007")["heartbeats"] == 1
    assert cloud.counters("fleet-0000")["heartbeats"] == 1, "a refused batch stored a heartbeat"
    with cloud.client(generated) as dev:
        assert dev.get("/v1/devices/fleet-generated/stats").status_code == 200
    with cloud.client(given["fleet-0003"]) as dev:
        assert dev.get("/v1/devices/fleet-0003/stats").json()[0]["samples"] == 3
    with cloud.client("not-an-operator-token-at-all") as anon:
        assert anon.post("/v1/bulk/devices", json={"devices": devices[:1]}).status_code == 401


def test_add_devices_from_a_file(tmp_path: Path) -> None:
    listing = tmp_path / "devices.csv"
    listing.write_text("# id[,secret]\ncsv-1,secret-of-csv-device-0001\ncsv-2\n\ncsv-3\n")
    url = f"sqlite:///{tmp_path / 'r.db'}"
    run = subprocess.run(
        [sys.executable, "-m", "edgedrift_cloud.cli", "add-devices", str(listing), "--database-url", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "registered 3 devices" in run.stderr
    printed = dict(line.split(",") for line in run.stdout.splitlines())
    assert sorted(printed) == ["csv-2", "csv-3"] and all(len(s) >= 32 for s in printed.values())
    bad = tmp_path / "bad.csv"
    bad.write_text("csv-9\ncsv-9\n")
    run = subprocess.run(
        [sys.executable, "-m", "edgedrift_cloud.cli", "add-devices", str(bad), "--database-url", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0 and "line 2" in run.stderr
    server = CloudServer(url, tmp_path, EDGEDRIFT_CLOUD_TRAINING_PROCESSES="false").start()
    try:
        for device, secret in {"csv-1": "secret-of-csv-device-0001", **printed}.items():
            with server.client(secret) as c:
                assert c.get(f"/v1/devices/{device}/counters").status_code == 200
    finally:
        server.stop()
