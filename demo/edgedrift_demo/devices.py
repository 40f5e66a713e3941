"""The demo's devices: which stream each one replays, its agent's settings and its replay thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgedrift.data import Stream, load_dataset, ridge_stream, sea, sine1plus
from edgedrift.protocol import Protocol
from edgedrift_demo.command import DEVICES, WARMUP
from edgedrift_edge.agent import EdgeAgent
from edgedrift_edge.replay import ReplayPlan, replay
from edgedrift_edge.settings import AgentSettings

#: Synthetic streams: concepts × samples per concept (abrupt drifts between concepts).
SYNTH_CONCEPTS, SYNTH_CONCEPT_LENGTH = 4, 5_000
PROTOCOL = Protocol(every=10, window=WARMUP, delay=0)
STRATEGY = "druid"
HEARTBEAT_S = 2.0


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
            "recent_samples": max(50_000, len(spec.stream) + 1_000),
        }
    )


def replay_thread(run: DeviceRun, broker_url: str, rate: float) -> None:
    plan = ReplayPlan(
        run.spec.stream, (run.spec.device_id,), PROTOCOL, offset=0, batch_size=1, rate=rate, qos=1
    )
    try:
        replay(plan, broker_url, progress=False, client_id=f"edgedrift-demo-replay-{run.spec.device_id}")
    except BaseException as exc:  # reported by the main thread
        run.replay_error = exc
    finally:
        run.replay_done.set()
