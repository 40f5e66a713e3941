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
import ctypes
import json
import logging
import math
import os
import secrets
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import httpx
import numpy as np
import paho.mqtt.client as mqtt

from edgedrift.data import Stream, load_dataset, ridge_stream, sea, sine1plus
from edgedrift.models.losses import FloatArray
from edgedrift.protocol import Protocol
from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.mqtt import broker_address, make_client
from edgedrift_edge.replay import ReplayPlan, replay
from edgedrift_edge.settings import AgentSettings
from edgedrift_eval.runner import RunSpec, run_one
from edgedrift_harness.broker import Broker, BrokerError, start_broker
from edgedrift_harness.cloud_process import CloudProcess, CloudProcessError

log = logging.getLogger("edgedrift_demo.demo")

DEVICES = ("elec2", "sine", "ridge")
QUICK_LIMIT = 10_000
#: Synthetic streams: concepts × samples per concept (abrupt drifts between concepts).
SYNTH_CONCEPTS, SYNTH_CONCEPT_LENGTH = 4, 5_000
PROTOCOL = Protocol(every=10, window=2000, delay=0)
STRATEGY = "druid"
HEARTBEAT_S = 2.0
#: Give up waiting for predictions when nothing moved for this long after the replays finished.
STALL_S = 120.0
TTY_REFRESH_S = 0.5
LOG_REFRESH_S = 5.0
CLOUD_START_S = 60.0
HOST = "127.0.0.1"


class DemoError(RuntimeError):
    """A part of the demo could not be started."""


# --- streams -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceSpec:
    """One device of the demo: its id, the stream it receives, and why (if it is a stand-in)."""

    key: str
    device_id: str
    stream: Stream
    note: str = ""

    @property
    def metric(self) -> str:
        return "accuracy" if self.stream.task == "classification" else "rmse"


def head(stream: Stream, n: int | None) -> Stream:
    """The first n samples of a stream (the stream itself when n is None or not shorter)."""
    if n is None or n >= len(stream):
        return stream
    return Stream(
        name=stream.name,
        X=stream.X[:n],
        y=stream.y[:n],
        task=stream.task,
        feature_names=stream.feature_names,
        drift_points=tuple(p for p in stream.drift_points if p < n),
        meta=dict(stream.meta),
    )


def build_devices(keys: list[str], limit: int | None, say: Callable[[str], None]) -> list[DeviceSpec]:
    """The streams of the selected devices, ``limit`` samples each (ELEC2: its first ``limit``; the synthetic
    streams always have SYNTH_CONCEPTS concepts, of ``limit / SYNTH_CONCEPTS`` samples)."""
    out: list[DeviceSpec] = []
    synth_n = limit or SYNTH_CONCEPTS * SYNTH_CONCEPT_LENGTH
    concept = -(-synth_n // SYNTH_CONCEPTS)
    for key in keys:
        if key == "elec2":
            try:
                out.append(DeviceSpec("elec2", "elec2", head(load_dataset("elec2"), limit)))
            except (OSError, ValueError) as exc:
                n = synth_n
                stand_in = sea(n=n, drift_at=tuple(n * k // SYNTH_CONCEPTS for k in range(1, SYNTH_CONCEPTS)))
                note = f"ELEC2 unavailable ({str(exc).splitlines()[0][:160]}); replaying SEA instead"
                say(f"NOTE: {note}")
                out.append(DeviceSpec("elec2", "sea", stand_in, note))
        elif key == "sine":
            s = sine1plus(d=2, sigma=1.0, n_concepts=SYNTH_CONCEPTS, concept_length=concept, seed=0)
            out.append(DeviceSpec("sine", "sine", head(s, limit)))
        elif key == "ridge":
            r = ridge_stream(sigma=1.0, d=2, n_concepts=SYNTH_CONCEPTS, concept_length=concept, seed=0)
            out.append(DeviceSpec("ridge", "ridge", head(r, limit)))
        else:
            raise ValueError(f"unknown demo device {key!r}; known: {', '.join(DEVICES)}")
    return out


# --- the cloud trainer subprocess ----------------------------------------------------------------------


def port_open(port: int, host: str = HOST) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when the demo dies (even by SIGKILL); Linux only."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the forked child
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def start_cloud(workdir: Path, devices: dict[str, str], operator_token: str) -> CloudProcess:
    """The cloud trainer for the demo (SQLite registry in the work directory). It runs in its own
    session, so a terminal's Ctrl-C reaches only the demo, which stops the agents first (they may be
    talking to the cloud) and then the cloud; and it dies with the demo if the demo is killed."""
    cloud = CloudProcess(
        f"sqlite:///{(workdir / 'registry.db').resolve()}",
        workdir,
        operator_token=operator_token,
        devices=devices,
        log_path=workdir / "cloud.log",
        env={"EDGEDRIFT_CLOUD_DASHBOARD_REFRESH_SECONDS": str(HEARTBEAT_S)},
    )
    with _signals_held():
        cloud.spawn(start_new_session=True, preexec_fn=_die_with_parent())
    return cloud


# --- what the agents publish --------------------------------------------------------------------------


class PredictionCollector:
    """Subscribes to ``edgedrift/+/predictions`` and keeps every device's ``y_hat`` by sample id."""

    def __init__(self, broker_url: str, sizes: dict[str, int], prefix: str = "edgedrift") -> None:
        self.y_hat = {d: np.full(n, np.nan) for d, n in sizes.items()}
        self.seen = {d: np.zeros(n, dtype=bool) for d, n in sizes.items()}
        self.count = dict.fromkeys(sizes, 0)
        self.duplicates = dict.fromkeys(sizes, 0)
        self.unexpected = 0
        self.prefix = prefix
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self.client = make_client(
            broker_url, f"edgedrift-demo-collector-{secrets.token_hex(4)}", clean_session=True
        )
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *_: self._ready.set()
        self.client.on_message = self._on_message
        host, port, _tls = broker_address(broker_url)
        self.client.connect_async(host, port, keepalive=30)
        self.client.loop_start()
        if not self._ready.wait(30):
            self.close()
            raise DemoError(f"could not subscribe to the predictions at {broker_url}")

    def _on_connect(self, client: mqtt.Client, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        if not reason.is_failure:
            client.subscribe(f"{self.prefix}/+/predictions", qos=1)

    def _on_message(self, _c: mqtt.Client, _u: Any, message: mqtt.MQTTMessage) -> None:
        device = message.topic.split("/")[-2]
        try:
            body = json.loads(message.payload)
            preds = body.get("predictions", [body])
        except (ValueError, TypeError, KeyError):
            with self._lock:
                self.unexpected += 1
            return
        with self._lock:
            if device not in self.seen:
                self.unexpected += len(preds)
                return
            seen, y_hat = self.seen[device], self.y_hat[device]
            for p in preds:
                i = p.get("id")
                if not isinstance(i, int) or not 0 <= i < len(seen):
                    self.unexpected += 1
                elif seen[i]:
                    self.duplicates[device] += 1
                else:
                    seen[i] = True
                    y_hat[i] = math.nan if p.get("y_hat") is None else float(p["y_hat"])
                    self.count[device] += 1

    def received(self, device: str) -> int:
        with self._lock:
            return self.count[device]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


# --- one device's run ----------------------------------------------------------------------------------


@dataclass
class DeviceRun:
    """A device's spec, its agent and its replay thread."""

    spec: DeviceSpec
    secret: str
    agent: EdgeAgent | None = None
    thread: threading.Thread | None = None
    replay_error: BaseException | None = None
    replay_done: threading.Event = field(default_factory=threading.Event)
    started: float = 0.0
    finished: float | None = None

    @property
    def n(self) -> int:
        return len(self.spec.stream)


def agent_settings(
    spec: DeviceSpec, secret: str, broker_url: str, cloud_url: str, checkpoints: Path
) -> AgentSettings:
    """The recipe under which a deployed agent equals ``run_one`` sample for sample: sync recomputes,
    C tuned on the first window, float64 windows, warm-up = the protocol's window."""
    return AgentSettings.model_validate(
        {
            "device_id": spec.device_id,
            "device_secret": secret,
            "broker_url": broker_url,
            "cloud_url": cloud_url,
            "strategy": STRATEGY,
            "strategy_param": None,
            "task": spec.stream.task,
            "warmup_samples": PROTOCOL.window,
            "window_labels": PROTOCOL.window_labels,
            "C": "auto",
            "recompute_mode": "sync",
            "window_encoding": "binary-float64",
            "checkpoint_dir": str(checkpoints),
            "heartbeat_every_s": HEARTBEAT_S,
            # the whole stream may sit in the agent's queue when the replay outruns it: never drop
            "queue_size": max(20_000, len(spec.stream) + 1_000),
            "join_buffer": max(50_000, len(spec.stream) + 1_000),
        }
    )


def _replay_thread(run: DeviceRun, broker_url: str, rate: float) -> None:
    plan = ReplayPlan(
        run.spec.stream, (run.spec.device_id,), PROTOCOL, offset=0, batch_size=1, rate=rate, qos=1
    )
    try:
        replay(plan, broker_url, progress=False, client_id=f"edgedrift-demo-replay-{run.spec.device_id}")
    except BaseException as exc:  # reported by the main thread
        run.replay_error = exc
    finally:
        run.replay_done.set()


# --- the live view ---------------------------------------------------------------------------------------


def recent_metric(agent: EdgeAgent) -> str:
    """Recent accuracy (classification) or RMSE (regression) over the agent's last labeled samples."""
    st = agent.session
    accuracy, rmse = st.accuracy(), st.rmse()
    if accuracy is not None:
        return f"acc {accuracy:.3f}"
    return "-" if rmse is None else f"rmse {rmse:.3f}"


def status_line(run: DeviceRun, collector: PredictionCollector, now: float) -> str:
    """One device's progress line."""
    agent = run.agent
    if agent is None:
        return f"  {run.spec.device_id:<6} starting"
    st = agent.session
    done = st.counters.samples
    pct = 100.0 * done / max(run.n, 1)
    rate = done / max((run.finished or now) - run.started, 1e-9)
    loop = st.loop
    if st.phase != "running":
        learning = f"warm-up {min(done, PROTOCOL.window)}/{PROTOCOL.window}"
    else:
        learning = f"{recent_metric(agent)} (last {len(st.recent)} labels)"
    recomputes = loop.counters.recomputes if loop is not None else 0
    version = "-" if st.model_version is None else f"v{st.model_version}"
    return (
        f"  {run.spec.device_id:<6} {done:>7,}/{run.n:<7,} {pct:5.1f}%  {learning:<30} "
        f"recomputes {recomputes:<3} model {version:<4} queue {agent.transport.inbox.qsize():>6,}  "
        f"{rate:>6,.0f}/s  published {collector.received(run.spec.device_id):,}"
    )


class LiveView:
    """One line per device: redrawn in place ~2x/s on a terminal, a block every few seconds in a log."""

    def __init__(self, out: TextIO, runs: list[DeviceRun], collector: PredictionCollector) -> None:
        self.out, self.runs, self.collector = out, runs, collector
        self.tty = out.isatty()
        self.drawn = 0
        self.last = 0.0
        self.t0 = time.monotonic()

    def render(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < (TTY_REFRESH_S if self.tty else LOG_REFRESH_S):
            return
        self.last = now
        lines = [status_line(r, self.collector, now) for r in self.runs]
        if self.tty:
            width = shutil.get_terminal_size((160, 24)).columns - 1
            if self.drawn:
                self.out.write(f"\x1b[{self.drawn}F")
            self.out.write("".join(f"\x1b[2K{line[:width]}\n" for line in lines))
            self.drawn = len(lines)
        else:
            self.out.write(f"[{now - self.t0:6.1f} s]\n" + "".join(f"{line}\n" for line in lines))
        self.out.flush()


# --- comparing with the offline evaluator ---------------------------------------------------------------


def same(a: FloatArray, b: FloatArray) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Element-wise equality that counts NaN == NaN."""
    return np.asarray((a == b) | (np.isnan(a) & np.isnan(b)))


def score(task: str, y: FloatArray, y_hat: FloatArray) -> float:
    """Accuracy (classification) or RMSE (regression) of the predictions."""
    if task == "classification":
        return float(np.mean(y_hat == y))
    return math.sqrt(float(np.mean((y_hat - y) ** 2)))


def compare(run: DeviceRun, collector: PredictionCollector, cloud: CloudProcess) -> dict[str, Any]:
    """The deployed figures, the offline evaluator's, and whether they agree."""
    spec, agent = run.spec, run.agent
    assert agent is not None
    stream, W = spec.stream, PROTOCOL.window
    offline = run_one(stream, PROTOCOL, RunSpec(STRATEGY, None, 0), curves=True)
    deployed_preds = collector.y_hat[spec.device_id][W:]
    offline_preds = np.asarray(offline["predictions"], dtype=np.float64)
    equal = same(deployed_preds, offline_preds)
    mismatches = int(np.count_nonzero(~equal))
    first = int(np.argmin(equal)) + W if mismatches else None
    received = collector.received(spec.device_id)
    loop = agent.session.loop
    c = agent.session.counters
    loop_recomputes = loop.counters.recomputes if loop is not None else 0
    cloud_counters = cloud.counters(spec.device_id)
    complete = received == run.n and c.dropped == 0
    agree = complete and mismatches == 0 and loop_recomputes == offline["recomputes"]
    scored = ~np.isnan(deployed_preds)
    metric_key = spec.metric
    return {
        "device": spec.device_id,
        "dataset": stream.name,
        "note": spec.note,
        "task": stream.task,
        "metric": metric_key,
        "samples": run.n,
        "scored": int(len(stream) - W),
        "deployed": {
            metric_key: score(stream.task, stream.y[W:][scored], deployed_preds[scored])
            if scored.any()
            else None,
            "predictions_received": received,
            "samples_processed": c.samples,
            "dropped": c.dropped,
            "duplicates": c.duplicates,
            "recomputes": loop_recomputes,
            "cloud_recomputes": int(cloud_counters["recomputes"]),
            "cloud_reasons": cloud_counters.get("reasons", {}),
            "model_version": agent.session.model_version,
            "bytes_up": loop.counters.bytes_up if loop is not None else 0,
            "bytes_down": loop.counters.bytes_down if loop is not None else 0,
            "http_bytes_up": c.http_bytes_up,
            "http_bytes_down": c.http_bytes_down,
            "cloud_bytes_in": int(cloud_counters.get("bytes_in", 0)),
            "cloud_bytes_out": int(cloud_counters.get("bytes_out", 0)),
            "recompute_failures": c.recompute_failures,
            "replay_s": None if run.finished is None else round(run.finished - run.started, 2),
        },
        "offline": {
            metric_key: float(offline[metric_key]),
            "recomputes": int(offline["recomputes"]),
            "bytes_up": int(offline["bytes_up"]),
            "bytes_down": int(offline["bytes_down"]),
            "recompute_at": [int(i) for i in offline["recompute_at"]],
            "C": offline.get("C"),
        },
        "mismatched_predictions": mismatches,
        "first_mismatch": first,
        "complete": complete,
        "agree": agree,
        "cloud_consistent": int(cloud_counters["recomputes"]) == loop_recomputes + 1,
    }


def _kb(n: int) -> str:
    if n < 1000:
        return str(n)
    return f"{n / 1e3:.1f}k" if n < 1e6 else f"{n / 1e6:.2f}M"


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The final table: deployed figures beside the offline evaluator's."""
    head_ = (
        "device", "samples", "metric", "deployed", "offline", "recomp edge/cloud/offline",
        "loop bytes up/down", "offline up/down", "HTTP bytes up/down", "agree",
    )  # fmt: skip
    body = []
    for r in rows:
        d, o = r["deployed"], r["offline"]
        dep = d[r["metric"]]
        body.append(
            (
                r["device"],
                f"{r['samples']:,}",
                r["metric"],
                "-" if dep is None else f"{dep:.4f}",
                f"{o[r['metric']]:.4f}",
                f"{d['recomputes']} / {d['cloud_recomputes']} / {o['recomputes']}",
                f"{_kb(d['bytes_up'])} / {_kb(d['bytes_down'])}",
                f"{_kb(o['bytes_up'])} / {_kb(o['bytes_down'])}",
                f"{_kb(d['http_bytes_up'])} / {_kb(d['http_bytes_down'])}",
                "yes" if r["agree"] else "NO",
            )
        )
    widths = [max(len(str(row[i])) for row in [head_, *body]) for i in range(len(head_))]
    fmt = "  ".join("{:<%d}" % w if i in (0, 2) else "{:>%d}" % w for i, w in enumerate(widths))  # noqa: UP031
    lines = [fmt.format(*head_), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row) for row in body]
    return lines


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """summary.md: the table and how it was made."""
    out = [
        "# EdgeDrift demo",
        "",
        f"{meta['broker']['kind']} broker, cloud trainer at {meta['cloud_url']}, protocol: label every "
        f"{PROTOCOL.every}th sample, window {PROTOCOL.window}, delay {PROTOCOL.delay}; strategy {STRATEGY} "
        f"(default alpha), sync recomputes; wall time {meta['wall_s']:.1f} s.",
        "",
        "| device | data | samples | metric | deployed | offline | recomputes edge | cloud (incl. initial) "
        "| offline | loop bytes up/down | offline bytes up/down | HTTP bytes up/down | agree |",
        "|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for r in rows:
        d, o = r["deployed"], r["offline"]
        dep = d[r["metric"]]
        out.append(
            f"| {r['device']} | {r['dataset']} | {r['samples']:,} | {r['metric']} | "
            f"{'-' if dep is None else f'{dep:.4f}'} | {o[r['metric']]:.4f} | {d['recomputes']} | "
            f"{d['cloud_recomputes']} | {o['recomputes']} | {d['bytes_up']:,} / {d['bytes_down']:,} | "
            f"{o['bytes_up']:,} / {o['bytes_down']:,} | {d['http_bytes_up']:,} / {d['http_bytes_down']:,} | "
            f"{'yes' if r['agree'] else '**no**'} |"
        )
    notes = [r["note"] for r in rows if r["note"]]
    if notes:
        out += ["", *(f"- {n}" for n in notes)]
    return "\n".join(out) + "\n"


# --- the command -----------------------------------------------------------------------------------------


def register(sub: Any) -> None:
    """The ``edgedrift demo`` subcommand (entry-point group ``edgedrift.commands``)."""
    p = sub.add_parser(
        "demo",
        help="broker + cloud trainer + edge agents on this machine, checked against the offline evaluator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--devices",
        default=",".join(DEVICES),
        help=f"comma-separated subset of {','.join(DEVICES)} (default: all)",
    )
    p.add_argument(
        "--limit", type=int, help=f"samples per stream (default: all; > {PROTOCOL.window}, the warm-up)"
    )
    p.add_argument("--quick", action="store_true", help=f"{QUICK_LIMIT:,} samples per stream")
    p.add_argument(
        "--rate", type=float, default=0.0, help="samples/s per device (default 0: as fast as possible)"
    )
    p.add_argument(
        "--workdir", type=Path, default=Path("out/demo"), help="registry, logs, summary (out/demo)"
    )
    p.add_argument("--broker-url", help="use this MQTT broker (mqtt://host:port) instead of starting one")
    p.add_argument(
        "--broker",
        choices=["auto", "mosquitto", "embedded"],
        default="auto",
        help="which broker to start: Mosquitto when installed (auto), or the embedded amqtt one",
    )
    p.add_argument(
        "--keep-serving",
        action="store_true",
        help="after the table, keep the cloud trainer (and its dashboard) up until Ctrl-C",
    )
    p.set_defaults(func=demo)


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


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM (like SIGINT) raises KeyboardInterrupt in the main thread while the demo runs."""

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    old_term = signal.signal(signal.SIGTERM, interrupt)
    old_int = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold Ctrl-C / SIGTERM over a short step that starts a process, then raise KeyboardInterrupt (so the
    process is recorded and gets stopped)."""
    caught: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        caught.append(signum)

    old_term = signal.signal(signal.SIGTERM, hold)
    old_int = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)
    if caught:
        raise KeyboardInterrupt


@contextlib.contextmanager
def _signals_deferred(say: Callable[[str], None]) -> Iterator[None]:
    """While shutting down, further Ctrl-C / SIGTERM only print a note (every step has a time limit)."""

    def note(_signum: int, _frame: FrameType | None) -> None:
        say("still stopping (agents checkpoint, then the cloud trainer and the broker stop) ...")

    old_term = signal.signal(signal.SIGTERM, note)
    old_int = signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)


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
        with _signals_held():  # an interrupt while it starts must not orphan the broker process
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
                target=_replay_thread,
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
        (self.workdir / "summary.json").write_text(
            json.dumps(summary, indent=2, default=_json_default) + "\n"
        )
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


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


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
        with _signals_raise():
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
                    with _signals_deferred(say):
                        app.shutdown(interrupted)
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    if interrupted:
        say("stopped")
        return 130
    return code
