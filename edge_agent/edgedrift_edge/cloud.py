"""HTTP client of the cloud trainer: recomputes with retries (exponential backoff, full jitter) and
heartbeats. Every retry of one recompute carries the same ``request_id``, so a retry after a lost
response returns the stored version instead of training (and counting) twice."""

from __future__ import annotations

import json
import logging
import math
import random
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from edgedrift.models.document import BatchModel, model_from_document
from edgedrift.models.losses import FloatArray
from edgedrift.strategies import LINEAR, TrainSpec
from edgedrift.wire import WINDOW_CONTENT_TYPE, Heartbeat, LearnerParams, WindowHeader, encode_window

log = logging.getLogger("edgedrift_edge.cloud")

#: Loss of the learning core -> learner name of the training API.
LOSS_LEARNER = {"logistic": "logistic", "squared_hinge": "svm", "squared": "ridge"}


class CloudError(RuntimeError):
    """A failed call; ``retryable`` is False for refusals that a retry cannot fix (4xx)."""

    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class TrainedModel:
    """A model version the cloud stored for this device."""

    version: int
    model: BatchModel
    document: dict[str, Any]
    train_ms: float
    bytes_up: int
    bytes_down: int
    replayed: bool


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base·2^attempt)] (AWS architecture blog, "Exponential
    Backoff And Jitter"), so a fleet that lost the cloud together does not retry together."""
    return rng.uniform(0.0, min(cap, base * 2.0**attempt))


class CloudClient:
    """One device's connection to the cloud trainer."""

    def __init__(
        self,
        base_url: str,
        device_id: str,
        secret: str | None,
        *,
        timeout: float = 10.0,
        retry_base: float = 0.5,
        retry_max: float = 30.0,
        encoding: str = "binary-float64",
        seed: int | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)
        self.device_id = device_id
        self.retry_base = retry_base
        self.retry_max = retry_max
        self.encoding = encoding
        self.rng = random.Random(seed)

    def close(self) -> None:
        self.http.close()

    def train(
        self,
        X: FloatArray,
        y: FloatArray,
        *,
        task: str,
        loss: str,
        C: float | str,
        reason: str,
        monitor: dict[str, Any],
        request_id: str,
        spec: TrainSpec = LINEAR,
        reset_rows: int | None = None,
    ) -> TrainedModel:
        """One attempt: post the window, return the stored version (raises :class:`CloudError`).

        ``spec`` is the strategy's learner (the loss's linear learner by default); ``reset_rows`` marks
        the last rows as RebalanceStream's reset batch.
        """
        fields: dict[str, Any] = {
            "task": task,
            "learner": spec.learner or LOSS_LEARNER[loss],
            "params": LearnerParams.model_validate({"C": C, **spec.params}),
            "rebalance": spec.rebalance,
            "reason": reason,
            "monitor": scalar_stats(monitor),
            "request_id": request_id,
        }
        if reset_rows is not None:
            fields["reset_rows"] = reset_rows
        if spec.return_base:
            fields["return_base"] = True
        header = WindowHeader.model_validate(fields)
        url = f"/v1/devices/{self.device_id}/models"
        try:
            if self.encoding == "json":
                body = json.dumps(
                    {**header.model_dump(mode="json"), "X": X.tolist(), "y": y.tolist()}
                ).encode()
                response = self.http.post(url, content=body, headers={"Content-Type": "application/json"})
            else:
                dtype = "float32" if self.encoding == "binary-float32" else "float64"
                body = encode_window(header, X, y, dtype=dtype)
                response = self.http.post(url, content=body, headers={"Content-Type": WINDOW_CONTENT_TYPE})
        except httpx.HTTPError as exc:
            raise CloudError(f"{type(exc).__name__}: {exc}", retryable=True) from None
        if response.status_code >= 400:
            retryable = response.status_code >= 500 or response.status_code in (408, 429)
            raise CloudError(f"HTTP {response.status_code}: {response.text[:300]}", retryable)
        data = response.json()
        doc = data["model"]
        return TrainedModel(
            version=int(data["version"]),
            model=model_from_document(doc),
            document=doc,
            train_ms=float(data["train_ms"]),
            bytes_up=len(body),
            bytes_down=len(response.content),
            replayed=bool(data.get("replayed", False)),
        )

    def train_with_retries(
        self,
        X: FloatArray,
        y: FloatArray,
        *,
        stop: threading.Event,
        attempts: int | None = None,
        on_failure: Callable[[int, CloudError], None] | None = None,
        **kwargs: Any,
    ) -> TrainedModel | None:
        """Retry :meth:`train` until it succeeds, ``attempts`` run out, ``stop`` is set, or the cloud
        refuses for good; ``on_failure(attempt, error)`` is told about each failure."""
        request_id = f"{self.device_id}-{uuid.uuid4().hex[:16]}"
        attempt = 0
        while not stop.is_set():
            try:
                return self.train(X, y, request_id=request_id, **kwargs)
            except CloudError as exc:
                if on_failure is not None:
                    on_failure(attempt, exc)
                if not exc.retryable:
                    log.error("recompute refused by the cloud: %s", exc)
                    return None
            attempt += 1
            if attempts is not None and attempt >= attempts:
                return None
            stop.wait(backoff_delay(attempt, self.retry_base, self.retry_max, self.rng))
        return None

    def heartbeat(self, beat: Heartbeat) -> None:
        try:
            response = self.http.post(
                f"/v1/devices/{self.device_id}/stats", json=beat.model_dump(mode="json")
            )
        except httpx.HTTPError as exc:
            raise CloudError(f"{type(exc).__name__}: {exc}", retryable=True) from None
        if response.status_code >= 400:
            raise CloudError(
                f"HTTP {response.status_code}: {response.text[:300]}", response.status_code >= 500
            )


def scalar_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """Monitor stats the API stores: up to 32 finite scalars with short names (numpy scalars converted)."""
    out: dict[str, Any] = {}
    for key, value in stats.items():
        if len(out) == 32:
            break
        name = "".join(c if c.isalnum() or c in "_.:-" else "_" for c in str(key))[:64] or "_"
        if isinstance(value, bool | np.bool_):
            out[name] = bool(value)
        elif isinstance(value, int | np.integer):
            out[name] = int(value)
        elif isinstance(value, float | np.floating) and math.isfinite(float(value)):
            out[name] = float(value)
        elif isinstance(value, str):
            out[name] = value[:256]
    return out
