"""The compose stack's ``monitoring`` profile run for real (issue 31): Prometheus scraping the cloud and the
three agents with the shipped rules, and the alerts firing in it for three faults at once: dev-1's stream
drifts while the fleet recompute budget is 0 (``EdgeDriftQualityFalling``), edge-2 hangs (``docker pause``:
its device falls silent, ``EdgeDriftDevicesSilent`` and ``EdgeDriftDeviceSilent``), and, once the silence
fired, edge-3 is stopped (``EdgeDriftGatewayDown``). Each alert must fire within its rule's ``for`` plus
the time the fault takes to reach the expression (:func:`expectations`). Prints the times from each fault
to every alert's pending and firing state, and writes them as JSON with ``--json``.

``--windows shipped`` (the default) runs deploy/prometheus/ as shipped: about 20 minutes, the quality
alert waits 10. ``--windows short`` mounts a rendering with every ``for`` divided by 10 and scrapes and
evaluations every 5 s (the expressions unchanged): the container test's mode.

Needs a Docker engine with the images edgedrift-cloud:local and edgedrift-edge:local (deploy/smoke.sh
builds them) and eclipse-mosquitto:2. Where no registry is reachable, the Prometheus image is built from
deploy/smoke/prometheus (Debian's Prometheus) under the name compose uses; Grafana, which Debian does not
package, is not started. The cloud trains inline: no Redis, no trainer-worker.

Run from the repository root: ``.venv/bin/python deploy/monitoring_smoke.py [--windows short]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml
from smoke import (
    AGENTS,
    DEVICES,
    OPERATOR_MQTT_PASSWORD,
    ROOT,
    Predictions,
    SmokeError,
    finish,
    log,
    operator_client,
    stored_recomputes,
    wait,
)

from edgedrift_cloud.fleet_query import STALE_AFTER_S
from edgedrift_cloud.settings import CloudSettings
from edgedrift_edge.settings import AgentSettings
from edgedrift_harness.ports import HOST, free_port
from edgedrift_harness.prometheus import PrometheusAPI, PrometheusError

PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
STAND_IN = ROOT / "deploy" / "smoke" / "prometheus"
PROJECT = "edgedrift-monitoring"
SERVICES = ("mosquitto", "cloud", *AGENTS, "prometheus")
#: The agents' metrics port in docker-compose.yml (EDGEDRIFT_EDGE_METRICS_PORT), as prometheus.yml scrapes it.
METRICS_PORT = 9464
DRIFTING = "dev-1"
HUNG, HUNG_DEVICE = "edge-2", "dev-2"
STOPPED = "edge-3"
#: The agents predict with the batch model and ask for a recompute every 100 labels: with the budget at
#: 0 every request is refused and the drift stays (druid's edge learner would follow it without one).
STRATEGY = "periodic"
#: Concept A only: the first models (2,000 warm-up samples) and 100 labels predicted before the budget
#: goes to 0, so the cloud has each device's accuracy as its quality baseline.
STABLE = "sine1+:concept_length=3000,n_concepts=1"
STABLE_SAMPLES = 3000
#: Concept A, then its labels flipped at sample CONCEPT and flipped back every CONCEPT samples (Sine1+'s
#: recurring drifts): dev-1's accuracy falls from ~0.97 to 0.55-0.7 and stays there. The stream runs until
#: the alerts fired (it is stopped then): an agent reports a device that receives nothing for
#: silent_after_s (300 s) as silent, and the cloud's quality figures leave it out, so a stream that ended
#: would end the quality alert's 10-minute window too.
CONCEPT = 2000
DRIFT_CONCEPTS = 50
DRIFT = f"sine1+:concept_length={CONCEPT},n_concepts={DRIFT_CONCEPTS}"
DRIFT_SAMPLES = CONCEPT * DRIFT_CONCEPTS
#: The stable stream's rate (messages per second to each device), then the drifting one's: 50/s lasts
#: 2,000 s, longer than the shipped windows need.
RATE = 200.0
DRIFT_RATE = 50.0
HEARTBEAT_S = float(AgentSettings.model_fields["heartbeat_every_s"].default)
QUALITY_MAX_AGE_S = float(CloudSettings.model_fields["metrics_quality_max_age_s"].default)
#: Seconds between two polls of /api/v1/alerts, and the slack every bound allows for the poll.
POLL_S = 1.0
SLACK_S = 5.0
#: A device's accuracy is below its baseline minus 0.1 within this long after the drift (~40 labels at
#: DRIFT_RATE, every 10th sample labeled).
DRIFT_SHOWS_S = 10.0


def seconds(duration: str) -> float:
    """A Prometheus duration of one unit (``30s``, ``2m``, ``1h``) in seconds."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", str(duration))
    if match is None:
        raise SmokeError(f"cannot read the duration {duration!r}")
    return float(match.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[match.group(2)]


@dataclass(frozen=True)
class Windows:
    """The rules' ``for`` (seconds, by alert) and Prometheus's intervals in one run."""

    for_s: dict[str, float]
    scrape_s: float
    evaluation_s: float


def shipped_windows() -> Windows:
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())["global"]
    rules = yaml.safe_load((PROMETHEUS_DIR / "rules.yml").read_text())["groups"]
    for_s = {r["alert"]: seconds(r.get("for", "0s")) for g in rules for r in g["rules"] if "alert" in r}
    return Windows(for_s, seconds(config["scrape_interval"]), seconds(config["evaluation_interval"]))


def render_short(out: Path, scale: float = 0.1, interval_s: int = 5) -> Windows:
    """prometheus.yml and rules.yml in ``out`` with every ``for`` times ``scale`` and scrapes and
    evaluations every ``interval_s``; nothing else changes (expressions, labels, scrape targets)."""
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"].update(scrape_interval=f"{interval_s}s", evaluation_interval=f"{interval_s}s")
    rules = yaml.safe_load((PROMETHEUS_DIR / "rules.yml").read_text())
    for_s: dict[str, float] = {}
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = f"{max(1, round(seconds(rule['for']) * scale))}s"
            if "alert" in rule:
                for_s[rule["alert"]] = seconds(rule.get("for", "0s"))
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o755)
    for name, document in (("prometheus.yml", config), ("rules.yml", rules)):
        (out / name).write_text(yaml.safe_dump(document, sort_keys=False))
        (out / name).chmod(0o644)
    return Windows(for_s, float(interval_s), float(interval_s))


@dataclass(frozen=True)
class Expected:
    """An alert (and labels it must carry) that a fault must fire within ``onset_s`` + its ``for``."""

    alert: str
    labels: dict[str, str]
    fault: str
    #: Longest time from the fault until the expression is true in Prometheus.
    onset_s: float

    def matches(self, labels: dict[str, str]) -> bool:
        return labels.get("alertname") == self.alert and self.labels.items() <= labels.items()


def expectations(windows: Windows) -> list[Expected]:
    """The faults' alerts and how long each fault takes to reach its expression: the cloud learns of a
    device from its heartbeats (every HEARTBEAT_S), answers scrapes from a quality snapshot up to
    QUALITY_MAX_AGE_S old (a stale one once more while the next is read), then a scrape and an evaluation."""
    scrape, evaluation = windows.scrape_s, windows.evaluation_s
    cloud = HEARTBEAT_S + QUALITY_MAX_AGE_S + 2 * scrape + evaluation
    rules = yaml.safe_load((PROMETHEUS_DIR / "rules.yml").read_text())["groups"]
    silent_expr = next(
        r["expr"] for g in rules for r in g["rules"] if r.get("alert") == "EdgeDriftDeviceSilent"
    )
    silent_after = float(silent_expr.rsplit(">", 1)[1])
    return [
        Expected("EdgeDriftQualityFalling", {"task": "classification"}, "drift", DRIFT_SHOWS_S + cloud),
        Expected("EdgeDriftDevicesSilent", {}, "hang", STALE_AFTER_S + cloud),
        Expected("EdgeDriftDeviceSilent", {"device": HUNG_DEVICE}, "hang", silent_after + cloud),
        Expected(
            "EdgeDriftGatewayDown", {"instance": f"{STOPPED}:{METRICS_PORT}"}, "stop", scrape + evaluation
        ),
    ]


def active_at(text: str) -> float:
    """Prometheus's RFC 3339 time (nanoseconds, ``Z``) as seconds since the epoch."""
    trimmed = re.sub(r"(\.\d{6})\d+", r"\1", text).replace("Z", "+00:00")
    return datetime.fromisoformat(trimmed).timestamp()


class AlertLog:
    """Every alert seen in /api/v1/alerts: when it went pending (its ``activeAt``) and the first poll
    that found it firing."""

    def __init__(self) -> None:
        self.pending: dict[str, float] = {}
        #: The ``activeAt`` of the pending spell that turned into firing (a later one than ``pending``
        #: when the expression was empty at an evaluation in between and the alert started over).
        self.armed: dict[str, float] = {}
        #: The distinct pending spells seen of each alert (their ``activeAt``).
        self.spells: dict[str, set[float]] = {}
        self.firing: dict[str, float] = {}
        self.labels: dict[str, dict[str, str]] = {}

    def poll(self, prometheus: PrometheusAPI) -> None:
        now = time.time()
        for alert in prometheus.alerts():
            labels = alert["labels"]
            key = ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "severity")
            self.labels[key] = labels
            active = active_at(alert["activeAt"])
            self.pending.setdefault(key, active)
            self.spells.setdefault(key, set()).add(active)
            if alert["state"] == "firing" and key not in self.firing:
                self.firing[key] = now
                self.armed[key] = active

    def find(self, expected: Expected) -> str | None:
        """The first alert matching ``expected`` that fired, else the first pending one."""
        keys = [k for k, labels in self.labels.items() if expected.matches(labels)]
        return next((k for k in keys if k in self.firing), keys[0] if keys else None)

    def fired(self, expected: Expected) -> bool:
        key = self.find(expected)
        return key is not None and key in self.firing


def run(
    argv: list[str], *, check: bool = True, timeout: float = 600.0, env: dict[str, str] | None = None
) -> str:
    """``argv``'s stdout; SmokeError with its output when it fails and ``check``."""
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT, check=False
    )
    if check and done.returncode != 0:
        raise SmokeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


class MonitoringStack:
    """The compose stack with the monitoring profile under its own project name, on free ports, driven
    through the compose CLI (``docker compose``); the cloud trains inline, the agents run STRATEGY, the
    per-device quality series are on. ``override`` (a compose file) mounts a short-window rendering of
    deploy/prometheus/ when given."""

    def __init__(self, project: str, override: Path | None) -> None:
        files = ["-f", "docker-compose.yml", *(["-f", str(override)] if override else [])]
        self.base = ["docker", "compose", "-p", project, *files, "--profile", "monitoring"]
        self.cloud_port, self.mqtt_port, prometheus_port = free_port(), free_port(), free_port()
        self.env = {
            **os.environ,
            "CLOUD_PORT": str(self.cloud_port),
            "MQTT_PORT": str(self.mqtt_port),
            "PROMETHEUS_PORT": str(prometheus_port),
            "CLOUD_TRAINING": "inline",
            "EDGE_STRATEGY": STRATEGY,
            "CLOUD_METRICS_QUALITY_DEVICES": str(len(DEVICES)),
            "CLOUD_RECOMPUTE_BUDGET_PER_MINUTE": "unlimited",
        }
        self.cloud_url = f"http://{HOST}:{self.cloud_port}"
        self.services = list(SERVICES)
        self.prometheus = PrometheusAPI(f"http://{HOST}:{prometheus_port}")

    def compose(self, *args: str, timeout: float = 600.0, check: bool = True) -> str:
        return run([*self.base, *args], timeout=timeout, env=self.env, check=check)

    def container(self, service: str) -> str:
        found = self.compose("ps", "-a", "-q", service).split()
        if len(found) != 1:
            raise SmokeError(f"expected one container of {service}, found {found}")
        return found[0]

    def healthy(self, *services: str) -> bool:
        template = "{{.State.Running}} {{if .State.Health}}{{.State.Health.Status}}{{end}}"
        states = [run(["docker", "inspect", "-f", template, self.container(s)]).strip() for s in services]
        return all(s == "true healthy" for s in states)

    def replay(
        self, dataset: str, seed: int, limit: int, devices: list[str], rate: float = RATE
    ) -> subprocess.Popen[str]:
        """The replay service publishing ``limit`` samples of ``dataset`` to each of ``devices``."""
        argv = [
            *self.base, "run", "--rm", "--no-deps", "-T", "replay", "replay", "--dataset", dataset,
            "--seed", str(seed), "--limit", str(limit), "--devices", ",".join(devices), "--rate", f"{rate:g}",
            "--broker-url", "mqtt://replay@mosquitto:1883", "--no-progress",
        ]  # fmt: skip
        return subprocess.Popen(
            argv, cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def operator(self) -> httpx.Client:
        return operator_client(self.cloud_url)

    def recomputes(self) -> dict[str, int]:
        return stored_recomputes(self.cloud_url)

    def latest_beats(self) -> dict[str, dict[str, Any]]:
        """Each device's newest heartbeat at the cloud (empty before the first)."""
        with self.operator() as op:
            beats = {d: op.get(f"/v1/devices/{d}/stats").json() for d in DEVICES}
        return {d: (b[-1] if b else {}) for d, b in beats.items()}

    def value(self, promql: str) -> float | None:
        """The one value ``promql`` returns (None: no series)."""
        result = self.prometheus.query(promql)
        return float(result[0]["value"][1]) if result else None


def prometheus_image() -> str:
    image: str = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["prometheus"]["image"]
    return image


def ensure_prometheus_image() -> None:
    """The image compose names for Prometheus; built from the Debian stand-in when the engine lacks it."""
    image = prometheus_image()
    if run(["docker", "image", "inspect", image], check=False):
        return
    log(f"{image} is absent: building the stand-in from {STAND_IN.relative_to(ROOT)}")
    started = time.monotonic()
    run(["docker", "build", "--network", "host", "-q", "-t", image, str(STAND_IN)], timeout=1200)
    log(f"built {image} in {time.monotonic() - started:.0f} s")


def up(stack: MonitoringStack, phases: dict[str, float]) -> None:
    start = time.monotonic()
    log(f"up: {' '.join(stack.services)} (Prometheus on {stack.prometheus.url})")
    # --no-deps: the cloud trains inline, so Redis (its dependency in the file) stays down.
    stack.compose("up", "-d", "--no-deps", "--no-build", "mosquitto", "cloud")
    wait(lambda: stack.healthy("mosquitto", "cloud"), 300, "the broker and the cloud healthy", 2)
    stack.compose("up", "-d", "--no-deps", "--no-build", *AGENTS, "prometheus")
    wait(lambda: stack.healthy(*stack.services), 300, "every service healthy", 2)
    wait(
        lambda: stack.value('count(up{job=~"edgedrift-cloud|edgedrift-gateways"} == 1)') == 1 + len(AGENTS),
        120,
        "Prometheus scraping the cloud and the three agents",
    )
    phases["up_to_scraped"] = time.monotonic() - start


def budget_zero(stack: MonitoringStack, windows: Windows, phases: dict[str, float]) -> None:
    """The cloud recreated with a fleet budget of 0, then until it has a quality baseline of each device
    (kept per worker: every scrape of the last six must carry dev-1's) and no expected alert is on."""
    start = time.monotonic()
    stack.env["CLOUD_RECOMPUTE_BUDGET_PER_MINUTE"] = "0"
    stack.compose("up", "-d", "--no-deps", "--no-build", "cloud")
    wait(lambda: stack.healthy("cloud"), 300, "the cloud healthy with budget 0", 2)
    wait(lambda: stack.value("max(edgedrift_recompute_budget_per_minute)") == 0, 120, "the budget 0 scraped")
    ready = time.monotonic()
    span = f"{round(6 * windows.scrape_s)}s"
    baseline = f'count_over_time(edgedrift_device_quality_baseline{{device="{DRIFTING}"}}[{span}])'
    scrapes = f'count_over_time(up{{job="edgedrift-cloud"}}[{span}])'

    def settled() -> bool:
        if time.monotonic() - ready < 6 * windows.scrape_s:
            return False
        carried, scraped = stack.value(baseline), stack.value(scrapes)
        quiet = not [a for a in stack.prometheus.alerts() if a["labels"]["alertname"] in QUIET_BEFORE]
        return quiet and carried is not None and carried == scraped and carried >= 5

    wait(settled, 300, "dev-1's quality baseline in every scrape and no alert on", 2)
    phases["budget_zero_to_baseline"] = time.monotonic() - start


#: Alerts that must not be on before the faults (a fault, not the restart, must fire them).
QUIET_BEFORE = {
    "EdgeDriftQualityFalling",
    "EdgeDriftLowAccuracyDevices",
    "EdgeDriftDevicesSilent",
    "EdgeDriftDeviceSilent",
    "EdgeDriftGatewayDown",
}


def faults(stack: MonitoringStack, windows: Windows, figures: dict[str, Any]) -> AlertLog:
    """Drift dev-1, hang edge-2, stop edge-3 once the silence fired; poll the alerts until every
    expected one fired (SmokeError past the longest bound)."""
    expected = expectations(windows)
    bound = max(e.onset_s + windows.for_s[e.alert] for e in expected)
    alerts = AlertLog()
    at: dict[str, float] = {}
    url = f"mqtt://operator:{OPERATOR_MQTT_PASSWORD}@{HOST}:{stack.mqtt_port}"
    with Predictions(url) as predictions:
        time.sleep(2)  # the subscription is in place before the stream
        before = predictions.counts()[DRIFTING]
        replay = stack.replay(DRIFT, 1, DRIFT_SAMPLES, [DRIFTING], DRIFT_RATE)
        run(["docker", "pause", stack.container(HUNG)])
        at["hang"] = time.time()
        log(f"{HUNG} paused; {DRIFTING}'s drifting stream started")
        stopper: subprocess.Popen[bytes] | None = None
        deadline = time.monotonic() + 2 * bound + 60
        while not all(alerts.fired(e) for e in expected):
            if time.monotonic() > deadline:
                raise SmokeError(f"not every alert fired within {2 * bound + 60:.0f} s: {alerts.firing}")
            if "drift" not in at and predictions.counts()[DRIFTING] >= before + CONCEPT:
                at["drift"] = time.time()
                log(f"{DRIFTING} predicted its last sample of concept A: the labels flip now")
            alerts.poll(stack.prometheus)
            silent = next(e for e in expected if e.alert == "EdgeDriftDevicesSilent")
            if stopper is None and alerts.fired(silent):
                stopper = subprocess.Popen(
                    [*stack.base, "stop", STOPPED],
                    cwd=ROOT,
                    env=stack.env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                at["stop"] = time.time()
                log(f"the silence fired; stopping {STOPPED}")
            if stopper is not None and "stopped" not in at and stopper.poll() is not None:
                at["stopped"] = time.time()
            time.sleep(POLL_S)
        if replay.poll() is not None:
            raise SmokeError(f"the drifting replay ended (exit {replay.returncode}) before the alerts fired")
        replay.terminate()
        try:
            replay.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            replay.kill()  # its container goes with the project's `down`
    figures["fault_at"] = at
    return alerts


def judge(alerts: AlertLog, at: dict[str, float], windows: Windows) -> dict[str, dict[str, Any]]:
    """Each alert seen, timed from its fault; SmokeError when an expected one fired late."""
    report: dict[str, dict[str, Any]] = {}
    late = []
    if absent := {"drift", "hang", "stop"} - set(at):
        raise SmokeError(f"no time for the faults {sorted(absent)}: {at}")
    for e in expectations(windows):
        key = alerts.find(e)
        assert key is not None and key in alerts.firing
        for_s = windows.for_s[e.alert]
        limit = e.onset_s + for_s + windows.evaluation_s + SLACK_S
        firing_after = alerts.firing[key] - at[e.fault]
        pending_to_firing = alerts.firing[key] - alerts.armed[key]
        report[key] = row = {
            "fault": e.fault,
            "for_s": for_s,
            "pending_after_s": round(alerts.pending[key] - at[e.fault], 1),
            "pending_spells": len(alerts.spells[key]),
            "firing_after_s": round(firing_after, 1),
            "pending_to_firing_s": round(pending_to_firing, 1),
            "bound_s": round(limit, 1),
        }
        if firing_after > limit or pending_to_firing > for_s + windows.evaluation_s + SLACK_S:
            late.append(f"{key}: {row}")
    for key in alerts.pending:  # the others (a consequence of the same faults), timed from the first fault
        if key not in report:
            first = min(at["hang"], at.get("drift", at["hang"]))
            fired = alerts.firing.get(key)
            report[key] = {
                "pending_after_s": round(alerts.pending[key] - first, 1),
                "firing_after_s": None if fired is None else round(fired - first, 1),
            }
    if late:
        every = "\n".join(f"{key}: {row}" for key, row in report.items())
        raise SmokeError(f"alerts fired later than their window allows:\n{chr(10).join(late)}\nall:\n{every}")
    return report


def monitoring_smoke(stack: MonitoringStack, windows: Windows, figures: dict[str, Any]) -> None:
    phases: dict[str, float] = {}
    figures["phases_s"] = phases
    up(stack, phases)
    start = time.monotonic()
    finish(stack.replay(STABLE, 0, STABLE_SAMPLES, list(DEVICES)), "the stable replay", 300)
    wait(
        lambda: all(b.get("model_version") and b.get("accuracy") for b in stack.latest_beats().values()),
        180,
        "a model and an accuracy in every device's heartbeat",
        2,
    )
    figures["accuracy_before"] = {d: b["accuracy"] for d, b in stack.latest_beats().items()}
    phases["models"] = time.monotonic() - start
    log(f"models installed; accuracy {figures['accuracy_before']}")
    budget_zero(stack, windows, phases)
    recomputes = stack.recomputes()
    rejected = 'sum(edgedrift_recompute_rejected_total{reason=~"budget_.*"}) or vector(0)'
    start = time.monotonic()
    alerts = faults(stack, windows, figures)
    phases["faults_to_alerts"] = time.monotonic() - start
    figures["alerts"] = judge(alerts, figures["fault_at"], windows)
    figures["accuracy_after"] = stack.latest_beats()[DRIFTING].get("accuracy")
    figures["refused_for_budget"] = stack.value(rejected)
    if stack.recomputes()[DRIFTING] != recomputes[DRIFTING]:
        raise SmokeError(
            f"{DRIFTING} got a recompute with the budget at 0: {recomputes} -> {stack.recomputes()}"
        )
    if not figures["refused_for_budget"]:
        raise SmokeError("the cloud refused no recompute for the budget: did the agent ask for one?")
    for key, row in figures["alerts"].items():
        log(f"{key}: {row}")


def short_override(directory: Path) -> tuple[Path, Windows]:
    """A compose file that mounts the short-window rendering over the shipped files."""
    windows = render_short(directory / "prometheus")
    override = directory / "compose.monitoring-short.yml"
    mounts = [
        f"{directory / 'prometheus' / n}:/etc/prometheus/{n}:ro" for n in ("prometheus.yml", "rules.yml")
    ]
    override.write_text(yaml.safe_dump({"services": {"prometheus": {"volumes": mounts}}}))
    return override, windows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--windows", choices=["shipped", "short"], default="shipped", help="rules' windows")
    parser.add_argument("--project", default=PROJECT, help="compose project name (default: %(default)s)")
    parser.add_argument("--keep", action="store_true", help="leave the stack running (no teardown)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    figures: dict[str, Any] = {"windows": args.windows}
    status = 1
    tmp = Path(tempfile.mkdtemp(prefix="edgedrift-monitoring-"))  # kept with --keep: the stack mounts it
    override, windows = short_override(tmp) if args.windows == "short" else (None, shipped_windows())
    figures["intervals_s"] = {"scrape": windows.scrape_s, "evaluation": windows.evaluation_s}
    figures["expected"] = [asdict(e) | {"for_s": windows.for_s[e.alert]} for e in expectations(windows)]
    stack = MonitoringStack(args.project, override)
    try:
        ensure_prometheus_image()
        monitoring_smoke(stack, windows, figures)
        status = 0
        log("PASS")
    except (SmokeError, PrometheusError) as exc:
        log(f"FAIL: {exc}")
        for service in stack.services:
            log(
                f"--- {service} log (tail) ---\n"
                + stack.compose("logs", "--tail", "30", service, check=False)
            )
    finally:
        if not args.keep:
            stack.compose("unpause", HUNG, check=False)
            stack.compose("down", "-v", "--remove-orphans", check=False)
            shutil.rmtree(tmp, ignore_errors=True)
        figures["passed"] = status == 0
        print(json.dumps(figures, indent=2))
        if args.json is not None:
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
