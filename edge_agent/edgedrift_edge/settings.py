"""Agent settings: environment variables ``EDGEDRIFT_EDGE_<FIELD>`` and ``edgedrift-edge run --<field>``.

Plain pydantic (no pydantic-settings) so the edge install stays at edgedrift-core + paho-mqtt + httpx.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from edgedrift.wire import DEVICE_ID_PATTERN

ENV_PREFIX = "EDGEDRIFT_EDGE_"


class AgentSettings(BaseModel):
    """Everything one edge agent reads (one agent per device)."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    #: The device this agent serves; its topics are ``{topic_prefix}/{device_id}/...``.
    device_id: Annotated[str, Field(pattern=DEVICE_ID_PATTERN)]
    #: The device's secret for the cloud trainer (bearer token).
    device_secret: SecretStr | None = None
    #: ``mqtt://[user:password@]host:port`` or ``mqtts://...`` for TLS.
    broker_url: str = "mqtt://127.0.0.1:1883"
    #: CA file for mqtts (the system store when unset).
    tls_ca_file: str | None = None
    topic_prefix: str = "edgedrift"
    #: QoS of the subscriptions and of the predictions and events the agent publishes.
    qos: Annotated[int, Field(ge=0, le=2)] = 1
    #: The cloud trainer's base URL; empty = edge only (no recomputes).
    cloud_url: str = "http://127.0.0.1:8000"
    #: A strategy of :mod:`edgedrift.strategies` (druid, druid-rmsprop, periodic, predsign, sgd, ...).
    strategy: str = "druid"
    #: The strategy's trade-off parameter (druid: alpha; periodic: period; ...); its default when unset.
    strategy_param: float | None = None
    task: Literal["classification", "regression"] = "classification"
    #: Features per sample; taken from the first valid sample when unset.
    n_features: Annotated[int, Field(ge=1, le=4096)] | None = None
    #: Samples of the first window (its labeled ones train the first model and tune C and the learner).
    warmup_samples: Annotated[int, Field(ge=1)] = 2000
    #: Labels in the sliding window that recomputes train on.
    window_labels: Annotated[int, Field(ge=2)] = 200
    #: C of the batch model; "auto" tunes it on the first window (as the evaluator does).
    C: Annotated[float, Field(gt=0)] | Literal["auto"] = "auto"
    #: ``async``: keep predicting with the incremental model while the cloud trains; ``sync``: wait for
    #: the model (a deployed run then equals an offline replay sample for sample).
    recompute_mode: Literal["async", "sync"] = "async"
    #: ``exact``: a batch message is processed sample by sample (as the evaluator does); ``vectorised``:
    #: as one mini-batch (much faster; predictions use the state at the batch's start).
    batch_mode: Literal["exact", "vectorised"] = "vectorised"
    #: Window upload encoding: the binary body (float64 exact, float32 half the bytes) or JSON.
    window_encoding: Literal["binary-float64", "binary-float32", "json"] = "binary-float64"
    #: Bounded queue between the MQTT network thread and the worker; overflow is counted, never silent.
    queue_size: Annotated[int, Field(ge=1)] = 20_000
    #: Unlabeled samples kept for late labels; a label for an evicted or unknown id is a counted miss.
    join_buffer: Annotated[int, Field(ge=1)] = 50_000
    http_timeout_s: Annotated[float, Field(gt=0)] = 10.0
    #: Recompute retries: exponential backoff from retry_base_s to retry_max_s with full jitter.
    retry_base_s: Annotated[float, Field(gt=0)] = 0.5
    retry_max_s: Annotated[float, Field(gt=0)] = 30.0
    #: Attempts per recompute in sync mode (async mode retries until the model arrives).
    sync_attempts: Annotated[int, Field(ge=1)] = 5
    checkpoint_dir: str = "edgedrift-state"
    checkpoint_every_s: Annotated[float, Field(gt=0)] = 30.0
    heartbeat_every_s: Annotated[float, Field(gt=0)] = 10.0
    #: Labeled samples in the "recent accuracy" of heartbeats and status.
    accuracy_window: Annotated[int, Field(ge=1)] = 1000
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("broker_url")
    @classmethod
    def _broker_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("mqtt", "mqtts", "tcp", "ssl") or not parts.hostname:
            raise ValueError("broker_url must look like mqtt://[user:password@]host:port or mqtts://...")
        return value

    @field_validator("strategy")
    @classmethod
    def _strategy(cls, value: str) -> str:
        from edgedrift.strategies import STRATEGIES

        if value not in STRATEGIES:
            raise ValueError(f"unknown strategy {value!r}; known: {', '.join(sorted(STRATEGIES))}")
        return value

    @property
    def topics(self) -> dict[str, str]:
        base = f"{self.topic_prefix}/{self.device_id}"
        return {k: f"{base}/{k}" for k in ("samples", "labels", "predictions", "events", "status")}

    @classmethod
    def env_names(cls) -> list[str]:
        """Every environment variable the agent reads."""
        return [ENV_PREFIX + name.upper() for name in cls.model_fields]

    @classmethod
    def load(
        cls, overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
    ) -> AgentSettings:
        """Environment first, then explicit overrides (CLI flags) on top."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = environ.get(ENV_PREFIX + name.upper())
            if raw is not None and raw != "":
                values[name] = raw
        values.update({k: v for k, v in (overrides or {}).items() if v is not None})
        return cls.model_validate(values)
