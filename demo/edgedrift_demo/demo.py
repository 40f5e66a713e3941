"""``edgedrift demo``: the whole system on one machine, checked against the offline evaluator.

Starts an MQTT broker (Mosquitto when installed, else an embedded amqtt broker, or the one given by
``--broker-url``), the cloud trainer as a subprocess with random credentials, and one in-process edge agent
per device; then replays a stream to every device over MQTT (one sample per QoS-1 message, DRUiD protocol:
every 10th sample labeled, the first 2000 samples warm up). Recomputes run in sync mode, so every deployed
prediction must equal the offline evaluator's (``run_one``) for the same stream and parameters: the final
table shows both side by side, and ``WORKDIR/summary.json`` / ``summary.md`` keep them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import secrets
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from edgedrift_demo.command import DEVICES, QUICK_LIMIT
from edgedrift_demo.devices import (
    PROTOCOL,
    STRATEGY,
    DeviceRun,
    DeviceSpec,
    agent_settings,
    build_devices,
    replay_thread,
)
from edgedrift_demo.errors import DemoError
from edgedrift_demo.live import LiveView
from edgedrift_demo.processes import CLOUD_START_S, start_cloud
from edgedrift_demo.report import compare, json_default, markdown, table
from edgedrift_demo.signals import signals_deferred, signals_held, signals_raise
from edgedrift_edge.agent import EdgeAgent
from edgedrift_harness.broker import Broker, BrokerError, start_broker
from edgedrift_harness.cloud import CloudProcess, CloudProcessError
from edgedrift_harness.mqtt import PredictionCollector

log = logging.getLogger("edgedrift_demo.demo")

#: Give up waiting for predictions when nothing moved for this long after the replays finished.
STALL_S = 120.0


def _prepare_workdir(workdir: Path) -> None:
    """Create the work directory and remove the previous run's registry, checkpoints, logs and summary."""
    workdir.mkdir(parents=True, exist_ok=True)
    for name in ("registry.db", "registry.db-wal", "registry.db-shm", "registry.db-journal", "cloud.log",
                 "demo.log", "summary.json", "summary.md"):  # fmt: skip
        (workdir / name).unlink(missing_ok=True)
    shutil.rmtree(workdir / "checkpoints", ignore_errors=True)


def _setup_logging(path: Path) -> logging.Handler:
    """Library logs (agents, paho, httpx) go to WORKDIR/demo.log, not over the live view."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    return handler


def _wait_for_predictions(
    runs: list[DeviceRun], collector: PredictionCollector, view: LiveView, say: Callable[[str], None]
) -> None:
    """Until every device published a prediction for every sample (or nothing moved for STALL_S)."""
    last_progress, last_total = time.monotonic(), -1
    while True:
        now = time.monotonic()
        for run in runs:
            if run.finished is None and collector.received(run.spec.device_id) >= run.n:
                run.finished = now
        view.render()
        if all(run.finished is not None for run in runs):
            return
        errors = [r for r in runs if r.replay_error is not None]
        if errors:
            raise DemoError(f"replay to {errors[0].spec.device_id} failed: {errors[0].replay_error!r}")
        total = sum(collector.received(r.spec.device_id) for r in runs)
        if total != last_total:
            last_progress, last_total = now, total
        elif all(r.replay_done.is_set() for r in runs) and now - last_progress > STALL_S:
            view.render(force=True)
            say(f"no new prediction for {STALL_S:.0f} s after the replays finished; giving up waiting")
            return
        time.sleep(0.1)


def _stop_agent(agent: EdgeAgent) -> None:
    """Stop an agent: it finishes the message at hand and checkpoints; queued messages stay with the
    broker (unacknowledged), so stopping is quick."""
    agent.stop()


class Demo:
    """The broker, the cloud trainer, the agents and the replays of one demo run."""

    def __init__(
        self, args: argparse.Namespace, specs: list[DeviceSpec], workdir: Path, say: Callable[[str], None]
    ) -> None:
        self.args, self.specs, self.workdir, self.say = args, specs, workdir, say
        self.broker: Broker | None = None
        self.cloud: CloudProcess | None = None
        self.collector: PredictionCollector | None = None
        self.runs: list[DeviceRun] = []
        self.t0 = time.monotonic()

    def run(self) -> int:
        """Start everything, replay, wait for every prediction, compare, report."""
        args, say = self.args, self.say
        with signals_held():  # an interrupt while it starts must not orphan the broker process
            self.broker = broker = start_broker(args.broker_url, prefer=args.broker)
        what = {"mosquitto": "Mosquitto", "embedded": "embedded amqtt", "external": "external"}[broker.kind]
        say(f"broker:    {what} MQTT broker at {broker.url}")
        secrets_ = {s.device_id: secrets.token_urlsafe(24) for s in self.specs}
        operator = secrets.token_urlsafe(24)
        self.cloud = cloud = start_cloud(self.workdir, secrets_, operator)
        try:  # recorded first, so that an interrupt while it starts still stops it
            cloud.wait_ready(CLOUD_START_S)
        except CloudProcessError as exc:
            raise DemoError(str(exc)) from None
        say(f"cloud:     trainer at {cloud.url} (log {cloud.log_path}, registry {cloud.database_url})")
        say(f"dashboard: {cloud.url}/dashboard#token={operator}")
        self.collector = collector = PredictionCollector(
            broker.url, {s.device_id: len(s.stream) for s in self.specs}
        )
        checkpoints = self.workdir / "checkpoints"
        for spec in self.specs:
            run = DeviceRun(spec, secrets_[spec.device_id])
            self.runs.append(run)
            run.agent = EdgeAgent(agent_settings(spec, run.secret, broker.url, cloud.url, checkpoints))
            run.agent.start()
        say(
            "devices:   "
            + "; ".join(
                f"{s.device_id} <- {s.stream.name} ({len(s.stream):,} samples, {s.stream.task})"
                for s in self.specs
            )
        )
        say(
            f"protocol:  label every {PROTOCOL.every}th sample, warm-up {PROTOCOL.window} samples "
            f"({PROTOCOL.window_labels} labels), strategy {STRATEGY}, sync recomputes, one sample per "
            f"QoS-1 message" + (f", {args.rate:g} samples/s per device" if args.rate > 0 else "")
        )
        view = LiveView(sys.stdout, self.runs, collector)
        for run in self.runs:
            run.started = time.monotonic()
            run.thread = threading.Thread(
                target=replay_thread,
                args=(run, broker.url, float(args.rate)),
                name=f"edgedrift-demo-replay-{run.spec.device_id}",
                daemon=True,  # replay() cannot be cancelled; an interrupted demo must still exit
            )
            run.thread.start()
        _wait_for_predictions(self.runs, collector, view, say)
        for run in self.runs:
            assert run.agent is not None
            run.agent.wait_idle(30)
            run.agent.heartbeat_now()  # the dashboard shows the final counters
        view.render(force=True)
        replay_s = time.monotonic() - min(r.started for r in self.runs)
        say(f"replayed in {replay_s:.1f} s; running the offline evaluator on the same streams ...")
        rows = [compare(run, collector, cloud) for run in self.runs]
        meta = {
            "wall_s": time.monotonic() - self.t0,
            "replay_s": replay_s,
            "broker": {"kind": broker.kind, "url": broker.url},
            "cloud_url": cloud.url,
            "protocol": {"every": PROTOCOL.every, "window": PROTOCOL.window, "delay": PROTOCOL.delay},
            "strategy": STRATEGY,
            "recompute_mode": "sync",
            "limit": args.limit,
            "rate": args.rate,
        }
        self._report(rows, meta)
        ok = all(r["agree"] and r["cloud_consistent"] for r in rows)
        if args.keep_serving:
            say(f"the dashboard stays up at {cloud.url}/dashboard#token={operator} until Ctrl-C")
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
        return 0 if ok else 1

    def _report(self, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
        say = self.say
        say("")
        for line in table(rows):
            say(line)
        say("")
        say(
            "deployed = what the agents published over MQTT (scored after the warm-up); offline = "
            "edgedrift_eval.runner.run_one on the same stream; cloud recomputes include the initial model."
        )
        say(
            "loop bytes down count the model documents, which carry the registry's version number where the "
            "offline ones carry null: a few bytes per recompute apart."
        )
        for r in rows:
            if r["note"]:
                say(f"note: {r['note']}")
            if not r["complete"]:
                d = r["deployed"]
                say(
                    f"INCOMPLETE {r['device']}: {d['predictions_received']:,} of {r['samples']:,} "
                    f"predictions received, {d['dropped']} samples dropped by the agent's queue (a broker "
                    "may also drop QoS-1 messages for a slow subscriber, e.g. beyond Mosquitto's "
                    "max_queued_messages: try --rate)"
                )
            if r["mismatched_predictions"]:
                say(
                    f"DISAGREE {r['device']}: {r['mismatched_predictions']:,} predictions differ from the "
                    f"offline evaluator's, the first at sample {r['first_mismatch']}"
                )
            if r["deployed"]["recomputes"] != r["offline"]["recomputes"]:
                say(
                    f"DISAGREE {r['device']}: {r['deployed']['recomputes']} recomputes deployed, "
                    f"{r['offline']['recomputes']} offline"
                )
            if not r["cloud_consistent"]:
                say(
                    f"CLOUD {r['device']}: the registry counts {r['deployed']['cloud_recomputes']} models, "
                    f"expected {r['deployed']['recomputes'] + 1} (recomputes + the initial model)"
                )
        meta["wall_s"] = time.monotonic() - self.t0
        summary = {"meta": meta, "devices": rows}
        (self.workdir / "summary.json").write_text(json.dumps(summary, indent=2, default=json_default) + "\n")
        (self.workdir / "summary.md").write_text(markdown(rows, meta))
        say(
            f"wrote {self.workdir / 'summary.json'} and {self.workdir / 'summary.md'}; "
            f"wall time {meta['wall_s']:.1f} s"
        )

    def shutdown(self, interrupted: bool) -> None:
        """Agents stop (and checkpoint), then the collector, the cloud trainer and the broker; each step is
        attempted even when an earlier one fails."""
        for run in self.runs:
            if run.agent is not None:
                try:
                    _stop_agent(run.agent)
                except Exception:
                    log.exception("stopping the agent of %s failed", run.spec.device_id)
        steps: list[tuple[str, Callable[[], None] | None]] = [
            ("collector", self.collector.close if self.collector is not None else None),
            ("cloud trainer", self.cloud.stop if self.cloud is not None else None),
            ("broker", self.broker.stop if self.broker is not None else None),
        ]
        for name, step in steps:
            if step is None:
                continue
            try:
                step()
            except Exception:
                log.exception("stopping the %s failed", name)


def demo(args: argparse.Namespace) -> int:
    """Run the demo: 0 when every device's deployed run equals the offline one, 1 otherwise, 130 when
    stopped by Ctrl-C or SIGTERM."""
    out = sys.stdout

    def say(text: str) -> None:
        out.write(text + "\n")
        out.flush()

    keys = [k.strip() for k in args.devices.split(",") if k.strip()]
    if not keys or any(k not in DEVICES for k in keys) or len(set(keys)) != len(keys):
        raise ValueError(
            f"--devices expects a comma-separated subset of {','.join(DEVICES)}, got {args.devices!r}"
        )
    limit: int | None = args.limit if args.limit is not None else (QUICK_LIMIT if args.quick else None)
    if limit is not None and limit <= PROTOCOL.window:
        raise ValueError(f"--limit must exceed the warm-up window of {PROTOCOL.window} samples")
    args.limit = limit
    workdir: Path = args.workdir
    _prepare_workdir(workdir)
    handler = _setup_logging(workdir / "demo.log")
    interrupted = False
    code = 1
    try:
        with signals_raise():
            app: Demo | None = None
            try:
                app = Demo(args, build_devices(keys, limit, say), workdir, say)
                code = app.run()
            except KeyboardInterrupt:
                interrupted = True
                say("\nstopping ...")
            except (DemoError, BrokerError, TimeoutError, ConnectionError, httpx.HTTPError) as exc:
                say(f"edgedrift demo: error: {exc}")
                code = 1
            finally:
                if app is not None:
                    with signals_deferred(say):
                        app.shutdown(interrupted)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    if interrupted:
        say("stopped")
        return 130
    return code
