"""How soon a gateway's devices have their first model on disk (issue 30 row 7: a first checkpoint right
after the warm-up and the initial model, so that a crash does not make a device warm up again).

One gateway process of ``--devices`` devices on the shipped Mosquitto configuration (anonymous, a broker
session per device) with the real cloud trainer (SQLite, at nice 10 as in ``bench/gateway_fairness.py``).
Each device gets its whole warm-up window in one message (``--warmup`` labeled samples, d = 2) and then
nothing: the gateway is otherwise idle while the first models come back. Reported: when the last model was
installed (its ``model_installed`` event), and per device the time from that event until its checkpoint
file was seen rewritten after it (p50, max; the file is polled every 50 ms), with the gateway's CPU
seconds. Before 4 Dec 2026 a gateway wrote checkpoints for at most 5 ms a housekeeping turn of 50 ms
whether or not a message waited; to compare with another tree, ``--agent-pythonpath`` puts its
``edge_agent`` first on the gateway's path (only the edge's modules: a source tree of ``shared`` has no
compiled kernels and would compare the numpy path).

    .venv/bin/python bench/first_checkpoints.py --devices 500 --json out/first_checkpoints.json
    .venv/bin/python bench/first_checkpoints.py --quick          # 20 devices (the smoke run)
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from edgedrift_harness.agent import AgentProcess
from edgedrift_harness.cloud import CloudProcess
from edgedrift_harness.mosquitto import ShippedMosquitto
from edgedrift_harness.mqtt import Subscriber, publish
from edgedrift_harness.results import write_json

OPERATOR = "bench-operator-token-" + "x" * 24


class Models(Subscriber):
    """When each device's first model was installed (its ``model_installed`` event)."""

    def __init__(self, url: str) -> None:
        self.at: dict[str, float] = {}
        super().__init__(url, [("edgedrift/+/events", 1)])

    def handle(self, topic: str, payload: bytes) -> None:
        now = time.monotonic()
        if payload and json.loads(payload).get("type") == "model_installed":
            with self.lock:
                self.at.setdefault(topic.split("/")[1], now)

    def installed(self) -> dict[str, float]:
        with self.lock:
            return dict(self.at)


def window(n: int) -> bytes:
    """A device's warm-up window: ``n`` labeled samples in one message."""
    rows = []
    for i in range(n):
        x = [((i * 7919) % 200 - 100) / 50.0, (i % 13) / 6.0 - 1.0]
        rows.append({"id": i, "x": x, "y": 1 if x[0] > 0 else -1})
    return json.dumps({"samples": rows}).encode()


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    tag = secrets.token_hex(3)
    devices = {f"d{i:04d}-{tag}": secrets.token_urlsafe(24) for i in range(args.devices)}
    (workdir / "devices.json").write_text(json.dumps(devices))
    broker = ShippedMosquitto.anonymous(workdir / "broker").start()
    cloud = CloudProcess.on_sqlite(workdir, devices, operator_token=OPERATOR, nice=10).start()
    url = f"mqtt://127.0.0.1:{broker.port}"
    state = workdir / "state"
    settings = {
        "gateway_id": f"gw-{tag}",
        "devices_file": workdir / "devices.json",
        "broker_url": url,
        "cloud_url": cloud.url,
        "warmup_samples": args.warmup,
        "n_features": 2,
        "checkpoint_dir": state,
        "broker_sessions": "device",
        "checkpoint_every_s": 600,  # only the first checkpoints fall in the run
    }
    env = {"PYTHONPATH": args.agent_pythonpath} if args.agent_pythonpath else None
    gateway = AgentProcess(workdir / "gateway.log", settings, env=env)
    models = Models(url)
    try:
        gateway.start(timeout=300)
        start, cpu0 = time.monotonic(), cpu_seconds(gateway.pid)
        body = window(args.warmup)
        for device in devices:
            publish(url, f"edgedrift/{device}/samples", [body])
        seen: dict[str, tuple[int, float]] = {}  # device -> its file's mtime and when that was seen
        on_disk: dict[str, float] = {}  # device -> when its file was seen rewritten after its model
        deadline = start + args.timeout_s
        while len(on_disk) < len(devices) and time.monotonic() < deadline:
            now, installed = time.monotonic(), models.installed()
            for device in devices:
                try:
                    mtime = (state / f"{device}.ckpt").stat().st_mtime_ns
                except OSError:
                    continue
                if device not in seen or seen[device][0] != mtime:
                    seen[device] = (mtime, now)
                got = installed.get(device)
                if device not in on_disk and got is not None and seen[device][1] > got:
                    on_disk[device] = seen[device][1]
            time.sleep(0.05)
        cpu = cpu_seconds(gateway.pid) - cpu0
        installed = models.installed()
    finally:
        gateway.stop(timeout=60)
        models.close()
        cloud.stop()
        broker.stop()
    lags = sorted(on_disk[d] - installed[d] for d in on_disk)
    return {
        "devices": args.devices,
        "warmup": args.warmup,
        "agent_pythonpath": args.agent_pythonpath or None,
        "models": len(installed),
        "on_disk": len(on_disk),
        "last_model_s": round(max(installed.values()) - start, 2) if installed else None,
        "last_on_disk_s": round(max(on_disk.values()) - start, 2) if on_disk else None,
        "lag_p50_s": round(statistics.median(lags), 2) if lags else None,
        "lag_max_s": round(lags[-1], 2) if lags else None,
        "gateway_cpu_s": round(cpu, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=200, help="each device's warm-up samples")
    parser.add_argument("--timeout-s", type=float, default=240.0, help="give up after this long")
    parser.add_argument("--agent-pythonpath", default="", help="put DIR first on the gateway's PYTHONPATH")
    parser.add_argument("--quick", action="store_true", help="20 devices (the smoke run)")
    parser.add_argument("--json", type=Path, help="write the result here")
    args = parser.parse_args()
    if args.quick:
        args.devices = 20
    with tempfile.TemporaryDirectory(prefix="edgedrift-first-checkpoints-") as tmp:
        result = run(args, Path(tmp))
    print(json.dumps(result, indent=2))
    if args.json:
        write_json(args.json, result)
    if result["on_disk"] < args.devices:
        raise SystemExit(f"only {result['on_disk']} of {args.devices} devices had their model on disk")


if __name__ == "__main__":
    main()
