"""The compose stack run for real by deploy/smoke.sh (which builds the images first): up and healthy, a
replayed stream predicted on MQTT and recomputed by the cloud, an edge container killed and resumed from
its checkpoint volume, the cloud restarted mid-stream and the broker restarted with a queue held for a
stopped agent, and the ledger checked at the end: every sample predicted, every device's heartbeat
counting every sample it was sent, no recompute lost. Prints the figures (image sizes, container RSS,
phase times) and writes them as JSON with ``--json``.

Run from the repository root with the project's interpreter: ``.venv/bin/python deploy/smoke.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from edgedrift_harness.mqtt import Subscriber
from edgedrift_harness.ports import HOST, free_port

ROOT = Path(__file__).resolve().parent.parent
DEVICES = ("dev-1", "dev-2", "dev-3")
AGENTS = tuple(f"edge-{i}" for i in range(1, len(DEVICES) + 1))
#: The compose file's development defaults (the smoke test runs in development mode).
OPERATOR_TOKEN = "change-me"
OPERATOR_MQTT_PASSWORD = "operator-mqtt-insecure"
IMAGES = ("edgedrift-cloud:local", "edgedrift-edge:local", "eclipse-mosquitto:2", "python:3.11-slim")
#: Short concepts, so each phase holds a drift the agents' monitors answer with a recompute.
DATASET = "sine1+:concept_length=1500"


class SmokeError(RuntimeError):
    """A step of the smoke test failed; the message says which and why."""


def log(message: str) -> None:
    print(f"[smoke {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(
    argv: list[str], *, check: bool = True, timeout: float = 600.0, env: dict[str, str] | None = None
) -> str:
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT, check=False
    )
    if check and done.returncode != 0:
        raise SmokeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def wait(until: Callable[[], bool], timeout: float, what: str, every: float = 1.0) -> float:
    """Poll ``until`` every ``every`` seconds; the seconds it took, SmokeError after ``timeout``."""
    start = time.monotonic()
    while not until():
        if time.monotonic() - start > timeout:
            raise SmokeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
    return time.monotonic() - start


class Predictions(Subscriber):
    """The operator's persistent subscription to every device's predictions: samples predicted per device."""

    def __init__(self, url: str) -> None:
        self.count = dict.fromkeys(DEVICES, 0)
        super().__init__(url, [("edgedrift/+/predictions", 1)], clean_session=False, reconnect=(1, 5))

    def handle(self, topic: str, payload: bytes) -> None:
        device = topic.split("/")[-2]
        body = json.loads(payload)
        with self.lock:
            self.count[device] = self.count.get(device, 0) + len(body.get("predictions", [body]))

    def counts(self) -> dict[str, int]:
        with self.lock:
            return dict(self.count)


class Stack:
    """One compose project: its CLI, files, variables, and the containers of its services."""

    def __init__(self, cli: list[str], postgres: bool, project: str) -> None:
        files = ["-f", "docker-compose.yml"] + (["-f", "deploy/compose.postgres.yml"] if postgres else [])
        self.base = [*cli, "-p", project, *files]
        self.cloud_port = free_port()
        self.mqtt_port = free_port()
        self.env = {**os.environ, "CLOUD_PORT": str(self.cloud_port), "MQTT_PORT": str(self.mqtt_port)}
        self.cloud_url = f"http://{HOST}:{self.cloud_port}"
        self.services = ["mosquitto", "cloud", *AGENTS] + (["postgres"] if postgres else [])

    def compose(self, *args: str, timeout: float = 600.0, check: bool = True) -> str:
        return run([*self.base, *args], timeout=timeout, env=self.env, check=check)

    def container(self, service: str) -> str:
        found = self.compose("ps", "-a", "-q", service).split()
        if len(found) != 1:
            raise SmokeError(f"expected one container of {service}, found {found}")
        return found[0]

    def inspect(self, service: str, template: str) -> str:
        return run(["docker", "inspect", "-f", template, self.container(service)]).strip()

    def healthy(self, *services: str) -> bool:
        states = [self.inspect(s, "{{.State.Running}} {{.State.Health.Status}}") for s in services]
        return all(s == "true healthy" for s in states)

    def replay(self, seed: int, limit: int, rate: float) -> subprocess.Popen[str]:
        argv = [
            *self.base, "run", "--rm", "--no-deps", "-T", "replay", "replay", "--dataset", DATASET,
            "--seed", str(seed), "--limit", str(limit), "--devices", ",".join(DEVICES), "--rate", f"{rate:g}",
            "--broker-url", "mqtt://replay@mosquitto:1883", "--no-progress",
        ]  # fmt: skip
        return subprocess.Popen(
            argv, cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def operator(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.cloud_url, headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}, timeout=10
        )

    def recomputes(self) -> dict[str, int]:
        with self.operator() as op:
            return {d: int(op.get(f"/v1/devices/{d}/counters").json()["recomputes"]) for d in DEVICES}

    def heartbeats(self, field: str = "samples") -> dict[str, int]:
        """``field`` of each device's newest heartbeat at the cloud (0 before the first)."""
        with self.operator() as op:
            out = {}
            for device in DEVICES:
                beats = op.get(f"/v1/devices/{device}/stats").json()
                out[device] = int(beats[-1][field]) if beats else 0
            return out

    def rss_mb(self) -> dict[str, float]:
        out = run(["docker", "stats", "--no-stream", "--format", "{{.ID}} {{.MemUsage}}"])
        ids = {self.container(s)[:12]: s for s in self.services}
        figures: dict[str, float] = {}
        for line in out.splitlines():
            cid, usage = line.split(" ", 1)
            if cid[:12] in ids:
                figures[ids[cid[:12]]] = _mib(usage.split("/")[0].strip())
        return figures


def _mib(text: str) -> float:
    units = {"B": 1 / 2**20, "KiB": 1 / 2**10, "MiB": 1.0, "GiB": 2**10, "kB": 1e3 / 2**20, "MB": 1e6 / 2**20}
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit):
            return round(float(text[: -len(unit)]) * units[unit], 1)
    raise SmokeError(f"cannot read a memory figure from {text!r}")


def image_sizes_mb() -> dict[str, float]:
    sizes = {}
    for image in IMAGES:
        size = run(["docker", "image", "inspect", "-f", "{{.Size}}", image], check=False).strip()
        if size:
            sizes[image] = round(int(size) / 1e6, 1)
    return sizes


def newest_checkpoint(stack: Stack, service: str) -> float:
    """mtime of the newest file in the agent's checkpoint volume (0 when empty)."""
    code = (
        "import os,pathlib;"
        "print(max((p.stat().st_mtime for p in pathlib.Path('/var/lib/edgedrift').rglob('*') if p.is_file()),"
        " default=0))"
    )
    return float(run(["docker", "exec", stack.container(service), "python", "-c", code]).strip())


def finish(proc: subprocess.Popen[str], what: str, timeout: float) -> None:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise SmokeError(f"{what} did not finish within {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise SmokeError(f"{what} exited {proc.returncode}:\n{out}")


def smoke(stack: Stack, limit: int, rate: float, figures: dict[str, Any]) -> None:
    phases: dict[str, float] = {}
    figures["phases_s"] = phases
    start = time.monotonic()
    log(f"up: {' '.join(stack.services)} (cloud on {stack.cloud_url}, broker on port {stack.mqtt_port})")
    stack.compose("up", "-d", "--no-build", *[s for s in stack.services if s != "postgres"])
    wait(lambda: stack.healthy(*stack.services), 300, "every service healthy", 2)
    phases["up_to_healthy"] = time.monotonic() - start
    figures["rss_mb_at_ready"] = stack.rss_mb()
    log(f"healthy after {phases['up_to_healthy']:.0f} s; RSS MiB {figures['rss_mb_at_ready']}")

    url = f"mqtt://operator:{OPERATOR_MQTT_PASSWORD}@{HOST}:{stack.mqtt_port}"
    with Predictions(url) as predictions:
        # Phase 1: a stream to every device, predicted on MQTT and recomputed by the cloud.
        t = time.monotonic()
        finish(stack.replay(0, limit, rate), "the first replay", 300)
        wait(lambda: all(n >= limit for n in predictions.counts().values()), 120, f"{limit} predictions each")
        wait(lambda: all(n >= 1 for n in stack.recomputes().values()), 120, "a recompute of every device")
        phases["phase1"] = time.monotonic() - t
        first = stack.recomputes()
        log(f"phase 1: predictions {predictions.counts()}, cloud recomputes {first}")

        # The agent of dev-1 is killed (SIGKILL) once its checkpoint covers every sample it was sent.
        last_sample = time.time()
        wait(lambda: newest_checkpoint(stack, "edge-1") > last_sample, 90, "edge-1's checkpoint", 2)
        t = time.monotonic()
        run(["docker", "kill", stack.container("edge-1")])
        log("edge-1 killed (SIGKILL)")
        time.sleep(3)
        if stack.inspect("edge-1", "{{.State.Running}}") != "true":
            stack.compose("start", "edge-1")
        phases["edge_kill_to_healthy"] = wait(lambda: stack.healthy("edge-1"), 180, "edge-1 healthy again", 2)
        figures["edge_restarts"] = int(stack.inspect("edge-1", "{{.RestartCount}}"))

        # Phase 2: dev-2's agent is stopped, so its samples queue in the broker; the cloud restarts
        # while the stream runs; then the broker restarts holding dev-2's queue.
        stack.compose("stop", "edge-2")
        t = time.monotonic()
        replay = stack.replay(1, limit, rate)
        time.sleep(min(5.0, limit / rate / 3))
        stack.compose("restart", "cloud")
        log("cloud restarted during the second replay")
        finish(replay, "the second replay", 300)
        wait(lambda: stack.healthy("cloud"), 120, "the cloud healthy again", 2)
        stack.compose("restart", "mosquitto")
        wait(lambda: stack.healthy("mosquitto"), 120, "the broker healthy again", 2)
        log("broker restarted with dev-2's queue")
        stack.compose("start", "edge-2")
        expected = 2 * limit
        wait(
            lambda: all(n >= expected for n in predictions.counts().values()),
            240,
            f"{expected} predictions each",
        )
        wait(
            lambda: stack.heartbeats() == dict.fromkeys(DEVICES, expected),
            120,
            "heartbeats of every sample",
        )
        phases["phase2"] = time.monotonic() - t
        counts = predictions.counts()
    final = stack.recomputes()
    requested = stack.heartbeats("recomputes_requested")
    log(f"phase 2: predictions {counts}, heartbeats {stack.heartbeats()}, cloud recomputes {final}")
    if any(final[d] < first[d] for d in DEVICES):
        raise SmokeError(f"recomputes went down across the restarts: {first} -> {final}")
    # Every recompute an agent asked for (its heartbeat's count, kept in its checkpoint) is stored.
    wait(lambda: stack.recomputes() == stack.heartbeats("recomputes_requested"), 120, "recomputes stored")
    figures.update(
        predictions=counts,
        recomputes_after_phase1=first,
        recomputes_final=stack.recomputes(),
        recomputes_requested=requested,
        drift_events=stack.heartbeats("drift_events"),
        rss_mb_at_end=stack.rss_mb(),
    )
    phases["total"] = time.monotonic() - start


def compose_cli(choice: str) -> list[str]:
    if choice in ("auto", "v2") and run(["docker", "compose", "version"], check=False):
        return ["docker", "compose"]
    if choice in ("auto", "v1") and shutil.which("docker-compose"):
        return ["docker-compose"]
    raise SmokeError(f"no compose CLI ({choice}) found")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--postgres", action="store_true", help="with deploy/compose.postgres.yml")
    parser.add_argument("--cli", choices=["auto", "v1", "v2"], default="auto", help="compose CLI")
    parser.add_argument("--samples", type=int, default=3000, help="samples per device and phase")
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second to each device")
    parser.add_argument("--keep", action="store_true", help="leave the stack running (no teardown)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    figures: dict[str, Any] = {"postgres": args.postgres, "samples_per_phase": args.samples}
    cli = compose_cli(args.cli)
    figures["cli"] = " ".join(cli)
    stack = Stack(cli, args.postgres, "edgedrift-smoke-pg" if args.postgres else "edgedrift-smoke")
    figures["image_mb"] = image_sizes_mb()
    status = 1
    try:
        smoke(stack, args.samples, args.rate, figures)
        status = 0
        log("PASS")
    except SmokeError as exc:
        log(f"FAIL: {exc}")
        for service in stack.services:
            log(
                f"--- {service} log (tail) ---\n"
                + stack.compose("logs", "--tail", "30", service, check=False)
            )
    finally:
        if not args.keep:
            stack.compose("down", "-v", "--remove-orphans", check=False)
        figures["passed"] = status == 0
        print(json.dumps(figures, indent=2))
        if args.json is not None:
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
