"""The compose stack run for real through testcontainers' compose support (``DockerCompose``): up and
healthy, a replayed stream predicted on MQTT and recomputed by the cloud, an edge container killed and
resumed from its checkpoint volume, the cloud restarted mid-stream and the broker restarted with a queue
held for a stopped agent, and the ledger checked at the end: every sample predicted, every device's
heartbeat counting every sample it was sent, no recompute lost. :func:`run` returns the figures (image
sizes, container memory, phase times).

The test tests/container/test_compose_smoke.py runs it (``bash deploy/smoke.sh`` builds the images first);
``.venv/bin/python deploy/smoke.py [--postgres] [--keep] [--json PATH]`` runs it alone from the repository
root. testcontainers drives ``docker compose`` (the v2 CLI) for ``up --wait``, ``ps``, ``exec``, ``logs``
and ``down``; a container's kill, stop, start and restart, its memory and the image sizes go through the
Docker SDK that testcontainers brings, and the one-shot replay through ``compose run`` on the same project.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import docker
import httpx
from docker.models.containers import Container
from testcontainers.compose import DockerCompose

from edgedrift_harness.mqtt import Subscriber
from edgedrift_harness.ports import HOST, free_port

ROOT = Path(__file__).resolve().parent.parent
DEVICES = ("dev-1", "dev-2", "dev-3")
AGENTS = tuple(f"edge-{i}" for i in range(1, len(DEVICES) + 1))
#: The long-running services of the SQLite stack (the PostgreSQL override adds ``postgres``).
SERVICES = ("mosquitto", "redis", "cloud", "trainer-worker", *AGENTS)
#: The compose file's development defaults (the smoke test runs in development mode).
OPERATOR_TOKEN = "change-me"
OPERATOR_MQTT_PASSWORD = "operator-mqtt-insecure"
IMAGES = ("edgedrift-cloud:local", "edgedrift-edge:local", "eclipse-mosquitto:2", "redis:7.4-alpine")
POSTGRES_IMAGE = "postgres:16-alpine"
#: Images that deploy/smoke.sh builds from deploy/smoke/ when the engine lacks them (no registry here).
STAND_INS = {POSTGRES_IMAGE: "deploy/smoke/postgres", "redis:7.4-alpine": "deploy/smoke/redis"}
#: Short concepts, so each phase holds a drift the agents' monitors answer with a recompute.
DATASET = "sine1+:concept_length=1500"


class SmokeError(RuntimeError):
    """A step of the smoke test failed; the message says which and why."""


def log(message: str) -> None:
    print(f"[smoke {time.strftime('%H:%M:%S')}] {message}", flush=True)


def wait(until: Callable[[], bool], timeout: float, what: str, every: float = 1.0) -> float:
    """Poll ``until`` every ``every`` seconds; the seconds it took, SmokeError after ``timeout``."""
    start = time.monotonic()
    while not until():
        if time.monotonic() - start > timeout:
            raise SmokeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
    return time.monotonic() - start


def images_needed(postgres: bool) -> list[str]:
    return [*IMAGES, *([POSTGRES_IMAGE] if postgres else [])]


def memory_mib(stats: Mapping[str, Any]) -> float:
    """A container's memory as ``docker stats`` shows it (MiB): usage less the inactive page cache
    (``total_inactive_file`` under cgroup v1, ``inactive_file`` under v2)."""
    memory = stats["memory_stats"]
    usage = int(memory["usage"])
    detail = memory.get("stats", {})
    for key in ("total_inactive_file", "inactive_file"):
        if key in detail and int(detail[key]) < usage:
            usage -= int(detail[key])
            break
    return round(usage / 2**20, 1)


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


def operator_client(cloud_url: str) -> httpx.Client:
    """An HTTP client of the stack's cloud with the operator's token."""
    return httpx.Client(base_url=cloud_url, headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}, timeout=10)


def stored_recomputes(cloud_url: str) -> dict[str, int]:
    """The recomputes the cloud stored for each device of the stack."""
    with operator_client(cloud_url) as op:
        return {d: int(op.get(f"/v1/devices/{d}/counters").json()["recomputes"]) for d in DEVICES}


class Stack:
    """One compose project (its own name, free ports in an env file) driven through ``DockerCompose``."""

    def __init__(self, postgres: bool, project: str, workdir: Path) -> None:
        self.cloud_port = free_port()
        self.mqtt_port = free_port()
        env_file = workdir / "smoke.env"
        env_file.write_text(
            f"COMPOSE_PROJECT_NAME={project}\nCLOUD_PORT={self.cloud_port}\nMQTT_PORT={self.mqtt_port}\n"
        )
        self.services = [*SERVICES, *(["postgres"] if postgres else [])]
        files = ["docker-compose.yml", *(["deploy/compose.postgres.yml"] if postgres else [])]
        self.compose = DockerCompose(
            ROOT, compose_file_name=files, env_file=str(env_file), services=self.services, wait=True
        )
        self.cloud_url = f"http://{HOST}:{self.cloud_port}"
        self.docker = docker.from_env()

    def up(self) -> None:
        """``up --wait``: returns once every service's health check passes."""
        try:
            self.compose.start()
        except subprocess.CalledProcessError as exc:
            raise SmokeError(f"compose up failed:\n{exc.stderr.decode(errors='replace')}") from exc

    def down(self) -> None:
        """``down --volumes`` of the whole project (the replay's leftovers too)."""
        dataclasses.replace(self.compose, services=None).stop(down=True)

    def container(self, service: str) -> Container:
        return self.docker.containers.get(self.compose.get_container(service, include_all=True).ID)

    def healthy(self, *services: str) -> bool:
        states = {c.Service: (c.State, c.Health) for c in self.compose.get_containers(include_all=True)}
        return all(states.get(s) == ("running", "healthy") for s in services)

    def replay(self, seed: int, limit: int, rate: float) -> subprocess.Popen[str]:
        argv = [
            *self.compose.compose_command_property, "run", "--rm", "--no-deps", "-T", "replay", "replay",
            "--dataset", DATASET, "--seed", str(seed), "--limit", str(limit), "--devices", ",".join(DEVICES),
            "--rate", f"{rate:g}", "--broker-url", "mqtt://replay@mosquitto:1883", "--no-progress",
        ]  # fmt: skip
        return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def operator(self) -> httpx.Client:
        return operator_client(self.cloud_url)

    def recomputes(self) -> dict[str, int]:
        return stored_recomputes(self.cloud_url)

    def heartbeats(self, field: str = "samples") -> dict[str, int]:
        """``field`` of each device's newest heartbeat at the cloud (0 before the first)."""
        with self.operator() as op:
            out = {}
            for device in DEVICES:
                beats = op.get(f"/v1/devices/{device}/stats").json()
                out[device] = int(beats[-1][field]) if beats else 0
            return out

    def memory_mib(self) -> dict[str, float]:
        return {s: memory_mib(self.container(s).stats(stream=False, one_shot=True)) for s in self.services}

    def image_sizes_mb(self) -> dict[str, float]:
        images = [*images_needed("postgres" in self.services), "python:3.11-slim"]
        return {image: round(int(self.docker.images.get(image).attrs["Size"]) / 1e6, 1) for image in images}

    def newest_checkpoint(self, service: str) -> float:
        """mtime of the newest file in the agent's checkpoint volume (0 when empty)."""
        code = (
            "import pathlib;"
            "print(max((p.stat().st_mtime for p in pathlib.Path('/var/lib/edgedrift').rglob('*')"
            " if p.is_file()), default=0))"
        )
        stdout, _, _ = self.compose.exec_in_container(["python", "-c", code], service)
        return float(stdout.strip())

    def logs(self, service: str, lines: int = 30) -> str:
        try:
            stdout, stderr = self.compose.get_logs(service)
        except subprocess.CalledProcessError as exc:
            return f"(no logs: {exc})"
        return "\n".join((stdout + stderr).splitlines()[-lines:])


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
    stack.up()
    phases["up_to_healthy"] = time.monotonic() - start
    figures["memory_mib_at_ready"] = stack.memory_mib()
    log(f"healthy after {phases['up_to_healthy']:.0f} s; memory MiB {figures['memory_mib_at_ready']}")

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
        wait(lambda: stack.newest_checkpoint("edge-1") > last_sample, 90, "edge-1's checkpoint", 2)
        edge1 = stack.container("edge-1")
        edge1.kill()
        log("edge-1 killed (SIGKILL)")
        time.sleep(3)
        edge1.reload()
        if edge1.status != "running":
            edge1.start()
        phases["edge_kill_to_healthy"] = wait(lambda: stack.healthy("edge-1"), 180, "edge-1 healthy again", 2)
        edge1.reload()
        figures["edge_restarts"] = int(edge1.attrs["RestartCount"])

        # Phase 2: dev-2's agent is stopped, so its samples queue in the broker; the cloud restarts
        # while the stream runs; then the broker restarts holding dev-2's queue.
        edge2 = stack.container("edge-2")
        edge2.stop(timeout=30)
        t = time.monotonic()
        replay = stack.replay(1, limit, rate)
        time.sleep(min(5.0, limit / rate / 3))
        stack.container("cloud").restart()
        log("cloud restarted during the second replay")
        finish(replay, "the second replay", 300)
        wait(lambda: stack.healthy("cloud"), 120, "the cloud healthy again", 2)
        stack.container("mosquitto").restart()
        wait(lambda: stack.healthy("mosquitto"), 120, "the broker healthy again", 2)
        log("broker restarted with dev-2's queue")
        edge2.start()
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
    log(f"phase 2: predictions {counts}, heartbeats {stack.heartbeats()}, cloud recomputes {final}")
    if any(final[d] < first[d] for d in DEVICES):
        raise SmokeError(f"recomputes went down across the restarts: {first} -> {final}")
    # Every recompute an agent asked for (its heartbeat's count, kept in its checkpoint) is stored.
    wait(lambda: stack.recomputes() == stack.heartbeats("recomputes_requested"), 120, "recomputes stored")
    figures.update(
        predictions=counts,
        heartbeat_samples=stack.heartbeats(),
        recomputes_after_phase1=first,
        recomputes_final=stack.recomputes(),
        recomputes_requested=stack.heartbeats("recomputes_requested"),
        drift_events=stack.heartbeats("drift_events"),
        memory_mib_at_end=stack.memory_mib(),
    )
    phases["total"] = time.monotonic() - start


def run(postgres: bool, samples: int = 3000, rate: float = 200.0, keep: bool = False) -> dict[str, Any]:
    """The whole smoke test on a project of its own; the figures, SmokeError (after the services' log
    tails) when a step fails. The stack is torn down (``down --volumes``) unless ``keep``."""
    figures: dict[str, Any] = {"postgres": postgres, "samples_per_phase": samples}
    with tempfile.TemporaryDirectory(prefix="edgedrift-smoke-") as workdir:
        stack = Stack(postgres, "edgedrift-smoke-pg" if postgres else "edgedrift-smoke", Path(workdir))
        figures["image_mb"] = stack.image_sizes_mb()
        try:
            smoke(stack, samples, rate, figures)
            log("PASS")
        except Exception as exc:
            log(f"FAIL: {exc!r}")
            for service in stack.services:
                log(f"--- {service} log (tail) ---\n{stack.logs(service)}")
            raise exc if isinstance(exc, SmokeError) else SmokeError(repr(exc)) from exc
        finally:
            if not keep:
                stack.down()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--postgres", action="store_true", help="with deploy/compose.postgres.yml")
    parser.add_argument("--samples", type=int, default=3000, help="samples per device and phase")
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second to each device")
    parser.add_argument("--keep", action="store_true", help="leave the stack running (no teardown)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    try:
        figures = run(args.postgres, args.samples, args.rate, args.keep)
    except SmokeError:
        return 1
    print(json.dumps(figures, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
