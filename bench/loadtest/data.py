"""The windows the simulated devices post: seeded synthetic classification data, encoded as JSON or as the
binary body of ``edgedrift.wire.encode_window``, with what the service's own parser gets out of each body;
and the peer, ``train_window`` in a plain in-process loop on the very same decoded arrays."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from edgedrift.models.losses import FloatArray
from edgedrift.wire import WINDOW_CONTENT_TYPE, WindowHeader, encode_window

ENCODINGS = ("json", "binary")
CONTENT_TYPES = {"json": "application/json", "binary": WINDOW_CONTENT_TYPE}


@dataclass(frozen=True)
class Window:
    """One pre-encoded window: the exact body a device sends, and what the service decodes from it."""

    body: bytes
    header: WindowHeader
    X: FloatArray
    y: FloatArray


def make_header(learner: str, C: str) -> WindowHeader:
    params: dict[str, Any] = {} if learner == "shrub" else {"C": C if C == "auto" else float(C)}
    return WindowHeader.model_validate(
        {"task": "classification", "learner": learner, "params": params, "reason": "bench"}
    )


def synthetic_windows(d: int, count: int, n: int, seed: int) -> list[tuple[FloatArray, FloatArray]]:
    """Seeded windows of a noisy linear concept (labels ±1, both classes present), drifting slowly."""
    rng = np.random.default_rng([seed, d])
    beta = rng.normal(size=d)
    windows = []
    for _ in range(count):
        beta = beta + 0.2 * rng.normal(size=d)
        X = rng.normal(size=(n, d)) * rng.uniform(0.5, 2.0, size=d) + rng.normal(size=d)
        margin = (X - X.mean(axis=0)) @ beta
        y = np.where(margin + rng.normal(scale=0.5 * margin.std(), size=n) > 0, 1.0, -1.0)
        y[:2] = (1.0, -1.0)
        windows.append((X, y))
    return windows


def encode(header: WindowHeader, X: FloatArray, y: FloatArray, encoding: str) -> bytes:
    """The body a device sends: JSON as a plain client writes it, or the compact float32 binary body."""
    if encoding == "binary":
        return encode_window(header, X, y)
    doc = header.model_dump(mode="json", exclude_defaults=True)
    doc.update(task=header.task, learner=header.learner, X=X.tolist(), y=y.tolist())
    return json.dumps(doc, separators=(",", ":")).encode()


def build_windows(header: WindowHeader, d: int, encoding: str, count: int, n: int, seed: int) -> list[Window]:
    """Bodies plus the arrays the service's own parser gets out of them (float32 for binary bodies)."""
    from edgedrift_cloud.routers.window_body import parse_window
    from edgedrift_cloud.settings import CloudSettings

    settings = CloudSettings(mode="development")
    state: Any = SimpleNamespace(settings=settings)
    out = []
    for X, y in synthetic_windows(d, count, n, seed):
        body = encode(header, X, y, encoding)
        h, Xs, ys, _ = parse_window(body, CONTENT_TYPES[encoding], state)
        out.append(Window(body, h, Xs, ys))
    return out


@dataclass
class InProcess:
    """train_window on the same decoded windows, one core: per-call times and the loop's rate."""

    p50_ms: float
    retrains_per_s: float
    calls: int


def in_process(windows: list[Window], seconds: float) -> InProcess:
    from edgedrift.training.window import train_window

    for w in windows[:3]:
        train_window(w.header, w.X, w.y)
    times: list[float] = []
    start = time.perf_counter()
    deadline = start + seconds
    i = 0
    while time.perf_counter() < deadline or i < len(windows):
        w = windows[i % len(windows)]
        t = time.perf_counter()
        train_window(w.header, w.X, w.y)
        times.append(time.perf_counter() - t)
        i += 1
    total = time.perf_counter() - start
    return InProcess(1e3 * statistics.median(times), i / total, i)
