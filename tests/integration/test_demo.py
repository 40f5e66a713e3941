"""``edgedrift demo`` end to end, as a subprocess: broker, cloud trainer, three agents, the offline check,
and a clean shutdown (nothing left running or listening) on success, Ctrl-C and SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgedrift_harness.ports import can_connect

BIN = Path(sys.executable).parent / "edgedrift"
DEMO = [str(BIN), "demo"] if BIN.exists() else [sys.executable, "-m", "edgedrift.cli", "demo"]


def ports(output: str) -> tuple[int, int]:
    """The broker's and the cloud trainer's ports, as the demo printed them."""
    broker = re.search(r"^broker: .* at mqtt://127\.0\.0\.1:(\d+)", output, re.M)
    cloud = re.search(r"^cloud: +trainer at http://127\.0\.0\.1:(\d+)", output, re.M)
    assert broker and cloud, output
    return int(broker.group(1)), int(cloud.group(1))


def processes_mentioning(text: str) -> list[str]:
    """Command lines of running processes that contain text (the cloud's has the work directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def assert_nothing_left(workdir: Path, output: str) -> None:
    broker_port, cloud_port = ports(output)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (can_connect(broker_port) or can_connect(cloud_port)):
        time.sleep(0.1)
    assert not can_connect(cloud_port), "the cloud trainer is still listening"
    assert not can_connect(broker_port), "the broker is still listening"
    deadline = time.monotonic() + 10  # the training pool's fork server leaves once it sees its server gone
    while time.monotonic() < deadline and processes_mentioning(str(workdir)):
        time.sleep(0.2)
    assert processes_mentioning(str(workdir)) == []


def test_demo_deployed_equals_offline_and_cleans_up(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    proc = subprocess.run(
        [*DEMO, "--quick", "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert re.search(r"^dashboard: http://127\.0\.0\.1:\d+/dashboard#token=\S{16,}$", proc.stdout, re.M), out
    summary = json.loads((workdir / "summary.json").read_text())
    devices = summary["devices"]
    assert len(devices) == 3, devices
    assert {d["task"] for d in devices} == {"classification", "regression"}
    for d in devices:
        dep, off = d["deployed"], d["offline"]
        assert d["agree"] is True, d
        assert d["samples"] == 10_000 and dep["predictions_received"] == 10_000 and dep["dropped"] == 0
        assert d["mismatched_predictions"] == 0
        assert dep[d["metric"]] == off[d["metric"]]
        assert dep["recomputes"] == off["recomputes"]
        assert dep["cloud_recomputes"] == dep["recomputes"] + 1  # + the initial model
        assert dep["http_bytes_up"] == dep["cloud_bytes_in"] > 0
    assert sum(d["deployed"]["recomputes"] for d in devices) >= 1, "no recompute: the check means little"
    assert "agree" in (workdir / "summary.md").read_text()
    # each device's checkpoint and the counters it last reported (so a restart never counts backwards)
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == sorted(
        f"{d['device']}{suffix}" for d in devices for suffix in (".ckpt", ".counters.json")
    )
    assert_nothing_left(workdir, proc.stdout)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_demo_stops_cleanly_on_a_signal(tmp_path: Path, sig: signal.Signals) -> None:
    workdir = tmp_path / "demo"
    log = tmp_path / "demo.out"
    with log.open("wb") as out:
        proc = subprocess.Popen([*DEMO, "--workdir", str(workdir)], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while b"protocol:" not in log.read_bytes():  # everything is up; the replays start
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        time.sleep(3.0)  # mid-replay: the full default streams take far longer
        assert proc.poll() is None, log.read_text()
        proc.send_signal(sig)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = log.read_text()
    assert code == 130, output
    assert output.rstrip().endswith("stopped"), output
    assert not (workdir / "summary.json").exists()
    # the agents stopped the clean way: each wrote its checkpoint
    assert len(list((workdir / "checkpoints").glob("*.ckpt"))) == 3, output
    assert_nothing_left(workdir, output)
