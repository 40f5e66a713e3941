"""Agent settings: environment variables ``EDGEDRIFT_EDGE_<FIELD>`` and ``edgedrift-edge run --<field>``.

pydantic-settings, as the cloud's settings; its sources (:mod:`.settings_sources`): the flags (they win),
the environment (an empty variable is unset), the secrets given as files (``EDGEDRIFT_EDGE_<SECRET>_FILE``:
they never sit on a command line; the TLS client certificate and key are files already). Each field's
``description`` is its ``--help`` text. Production mode refuses placeholder, default or short secrets.
Errors (:class:`SettingsError`) name the setting and the reason, never the value (a URL may hold a password).
One module of over 500 lines: a declaration per setting (about 55, with its help text) and their checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self
from urllib.parse import unquote, urlsplit

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings import SettingsError as SourceError

from edgedrift.ids import DEVICE_ID_PATTERN, topic_prefix_problem
from edgedrift.limits import MAX_FEATURES
from edgedrift.secrets import SecretFileError, weak_secret_reason
from edgedrift_edge import settings_sources as sources
from edgedrift_edge.transport.mqtt import MAX_EXPIRY_S, SESSION_EXPIRY_S, parse_broker_url, with_password

ENV_PREFIX = "EDGEDRIFT_EDGE_"
#: Settings that may be read from a file named by ``EDGEDRIFT_EDGE_<NAME>_FILE``.
SECRET_FIELDS = ("device_secret", "broker_password", "gateway_secret")
#: Former settings, now one: ``recent_samples``.
MERGED_INTO_RECENT_SAMPLES = ("join_buffer", "dedup_window")
MERGED_MESSAGE = "the join buffer and the duplicate window are one window now: set recent_samples instead"
#: Most unconfirmed QoS-1 publishes one connection can hold: paho numbers them with 16-bit packet ids
#: and never skips one still in use, so some are left for subscriptions and acknowledgements.
MAX_PUBLISH_QUEUE = 65_000


class SettingsError(ValueError):
    """Invalid settings: one line per problem, naming the setting, never its value."""


def _described(description: str, **kw: Any) -> Any:
    return Field(description=description, **kw)


class AgentSettings(BaseSettings):
    """Everything one edge agent reads (one agent, one device or one gateway). ``AgentSettings(...)`` and
    :meth:`load` read the environment; :meth:`model_validate` takes the values given and nothing else."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_ignore_empty=True,
        extra="forbid",
        validate_default=True,
        hide_input_in_errors=True,
    )

    device_id: str | None = _described(
        "the device this agent serves; its topics are {topic_prefix}/{device_id}/... "
        "(or run a gateway: --gateway-id with --devices, --devices-file or --gateway-secret)",
        pattern=DEVICE_ID_PATTERN,
        default=None,
    )
    gateway_id: str | None = _described(
        "serve several devices over one MQTT connection as this gateway (its broker user and "
        "its name at the cloud)",
        pattern=DEVICE_ID_PATTERN,
        default=None,
    )
    devices: str | None = _described(
        "gateway: comma-separated device ids it serves (their secrets from --devices-file); an id that "
        "is not a valid device id is refused alone (logged, listed in the gateway's status)",
        default=None,
    )
    devices_file: str | None = _described(
        'gateway: a JSON file {"device-id": "secret", ...} of the devices it serves', default=None
    )
    gateway_secret: SecretStr | None = _described(
        "gateway: its credential at the cloud; the cloud then lists its devices and hands it their "
        "secrets, polled every gateway_sync_s (better: EDGEDRIFT_EDGE_GATEWAY_SECRET_FILE)",
        default=None,
    )
    gateway_sync_s: Annotated[float, Field(gt=0)] = _described(
        "gateway: seconds between two polls of the cloud's device list (new devices start, removed stop)",
        default=10.0,
    )
    mode: Literal["development", "production"] = _described(
        "production refuses placeholder, default or short secrets (cloud secret, broker password)",
        default="development",
    )
    device_secret: SecretStr | None = _described(
        "the device's bearer secret at the cloud trainer (better: EDGEDRIFT_EDGE_DEVICE_SECRET_FILE)",
        default=None,
    )
    broker_url: str = _described(
        "mqtt://[user[:password]@]host:port; mqtts://... for TLS, ws://host:port/path or wss://... for "
        "WebSockets; an IPv6 host in brackets (mqtt://[::1]:1883)",
        default="mqtt://127.0.0.1:1883",
    )
    broker_password: SecretStr | None = _described(
        "the broker password (overrides one in the URL; better: EDGEDRIFT_EDGE_BROKER_PASSWORD_FILE)",
        default=None,
    )
    tls_ca_file: str | None = _described(
        "CA file that verifies the broker over mqtts and wss (the system store when unset)", default=None
    )
    tls_cert_file: str | None = _described(
        "client certificate (PEM) for mutual TLS, as AWS IoT Core and the shipped TLS listener require",
        default=None,
    )
    tls_key_file: str | None = _described(
        "the client certificate's private key (PEM; unset: the key is in --tls-cert-file)", default=None
    )
    mqtt_version: Literal["3.1.1", "5"] = _described(
        "MQTT protocol version: 5 adds session and message expiries, reason codes and a Receive Maximum "
        "(the broker holds what the inbox cannot take)",
        default="3.1.1",
    )
    session_expiry_s: Annotated[int, Field(ge=0, le=MAX_EXPIRY_S)] = _described(
        "MQTT 5: seconds the broker keeps the agent's session (its subscriptions and the samples queued "
        "for it) while the agent is away; over 3.1.1 the broker's persistent_client_expiration applies",
        default=SESSION_EXPIRY_S,
    )
    message_expiry_s: Annotated[int, Field(ge=1, le=MAX_EXPIRY_S)] | None = _described(
        "MQTT 5: seconds after which the broker discards a prediction or event not yet delivered to a "
        "subscriber (an offline consumer does not get stale predictions hours later); unset = never",
        default=None,
    )
    topic_prefix: str = _described("first level of every topic", default="edgedrift")
    qos: Annotated[int, Field(ge=0, le=1)] = _described(
        "QoS of the subscriptions and of the predictions and events published: 0 or 1 (samples carry ids "
        "and redeliveries are deduplicated, so QoS 2 would add a round trip and nothing else)",
        default=1,
    )
    cloud_url: str = _described("the cloud trainer's base URL", default="http://127.0.0.1:8000")
    strategy: str = _described(
        "a strategy of edgedrift.strategies: the learner and its recompute policy (docs/edge-agent.md)",
        default="druid",
    )
    strategy_param: float | None = _described(
        "the strategy's trade-off parameter (druid: alpha, periodic: period, ...); unset = its default",
        default=None,
    )
    task: Literal["classification", "regression"] = _described(
        "what the labels are", default="classification"
    )
    classes: Annotated[list[str | int] | None, NoDecode] = _described(
        "classification: the class names in code order, as a JSON list or comma-separated (e.g. "
        "oak,ash,elm); labels arrive and predictions leave by name. Two classes keep the codes -1/+1, "
        "three or more are one-vs-rest over the codes 0..C-1 (a multi-class strategy). Unset: labels "
        "are -1/+1",
        default=None,
    )
    n_features: Annotated[int, Field(ge=1, le=MAX_FEATURES)] | None = _described(
        f"features per sample, at most {MAX_FEATURES} (the one width limit: a wider sample is rejected); "
        "unset = the majority width of the warm-up samples",
        default=None,
    )
    warmup_samples: Annotated[int, Field(ge=1)] = _described(
        "samples of the first window (its labeled ones train the first model and tune the learner)",
        default=2000,
    )
    window_labels: Annotated[int, Field(ge=2)] = _described(
        "labels in the sliding window that recomputes train on", default=200
    )
    C: Annotated[float, Field(gt=0)] | Literal["auto"] = _described(
        "C of the batch model; auto = tuned by the cloud on the first window", default="auto"
    )
    recompute_mode: Literal["async", "sync"] = _described(
        "async: keep predicting with the incremental model while the cloud trains; sync: wait for the "
        "model (up to sync_wait_s), so a deployed run equals an offline replay",
        default="async",
    )
    batch_mode: Literal["exact", "vectorised"] = _described(
        "a batch message sample by sample (exact: each labeled sample is learned before the next is "
        "predicted, as the evaluator) or, opt-in, as one mini-batch (vectorised: faster, but every sample "
        "is predicted with the state at the batch's start; on ELEC2 it loses 10-14 points of accuracy "
        "at batches of 100, docs/benchmarks.md)",
        default="exact",
    )
    window_encoding: Literal["binary-float64", "binary-float32", "json"] = _described(
        "how windows are uploaded: binary float64 (exact), float32 (half the bytes) or JSON",
        default="binary-float64",
    )
    queue_size: Annotated[int, Field(ge=1)] = _described(
        "messages the inbox holds between the MQTT I/O thread and the worker (then back-pressure); with "
        "broker_sessions device, each device's session holds a sixteenth of it",
        default=20_000,
    )
    silent_after_s: Annotated[float, Field(gt=0)] = _described(
        "a device that received no message for this long while connected to the broker is reported "
        "silent (status, event, metric, the cloud's fleet view): its publisher is down or the broker's "
        "ACL does not grant this gateway its topics",
        default=300.0,
    )
    device_share: Annotated[int, Field(ge=1)] = _described(
        "a gateway's fairness: messages of one device its worker holds waiting (drained round-robin "
        "between devices). With a broker session per device, the rest of a device's messages wait at the "
        "broker in its own queue. With one session, while the broker's window is half full and another "
        "device is quiet (under twice device_rate_per_s for 10 s), a device holding this many is refused "
        "further messages, counted in dropped and overloaded with one overloaded event per second, so "
        "that a flood cannot delay the quiet devices (otherwise, and in a single-device agent, "
        "back-pressure holds the rest). As many as the worker hands a session at once: a restart's "
        "queues drain in groups of this many",
        default=32,
    )
    broker_sessions: Literal["gateway", "device"] = _described(
        "gateway: one broker session for all its devices, or one per device (its own connection and "
        "queue at the broker, logged in as <broker user>.<device id>: a device's backlog queued while the "
        "gateway is away can then not push out the other devices' samples; at most 1,000 devices a "
        "process, fewer under a lower descriptor limit; docs/edge-agent.md, deploy/mosquitto/README.md)",
        default="gateway",
    )
    broker_inflight: Annotated[int, Field(ge=2)] = _described(
        "the broker's max_inflight_messages (deploy/mosquitto/mosquitto.conf: 1000): a gateway refuses a "
        "device past device_share only while half of this many of its messages are unacknowledged",
        default=1000,
    )
    seq_grace_s: Annotated[float, Field(ge=0)] = _described(
        "seconds a gap in a publisher's seq waits for its samples before they count as dropped by the "
        "broker (broker_dropped): a broker may deliver a device's messages out of order, and a sample "
        "that comes late is handled, not counted twice",
        default=30.0,
    )
    max_inbox_mb: Annotated[float, Field(gt=0)] = _described(
        "payload megabytes the inbox holds (then back-pressure; QoS 0 messages are dropped and counted); "
        "with broker_sessions device, each device's session holds a sixteenth of it",
        default=256.0,
    )
    publish_queue: Annotated[int, Field(ge=1, le=MAX_PUBLISH_QUEUE)] = _described(
        "QoS-1 publishes the broker has not confirmed yet that the agent holds (at most 65000: MQTT "
        "packet ids are 16 bits); a publish beyond it is counted and retried",
        default=MAX_PUBLISH_QUEUE,
    )
    max_items_per_message: Annotated[int, Field(ge=1)] = _described(
        "samples (or labels) one message may carry; a bigger batch is rejected whole, with its count",
        default=10_000,
    )
    recent_samples: Annotated[int, Field(ge=1)] | None = _described(
        "newest samples remembered per device: a QoS-1 redelivery is recognised, and a late label joins "
        "its unlabeled sample, within them (a label for an older or unknown id is a counted miss); "
        "unset = 50,000 for one device, for a gateway sized from label_delay_s and device_rate_per_s",
        default=None,
    )
    recent_samples_mb: Annotated[float, Field(gt=0)] = _described(
        "megabytes each row buffer of one device may take, its recent samples and its first window "
        "(rows are 8 bytes per feature): wide samples keep fewer than recent_samples (and fill the first "
        "window sooner), so 50,000 samples of 4,096 features do not take 1.6 GB",
        default=64.0,
    )
    label_delay_s: Annotated[float, Field(ge=0)] = _described(
        "the longest a label arrives after its sample, in seconds: with device_rate_per_s it sizes a "
        "gateway's per-device recent samples (edgedrift.window.delay_buffer_size)",
        default=60.0,
    )
    device_rate_per_s: Annotated[float, Field(gt=0)] = _described(
        "samples per second one device sends at most: sizes the buffers with label_delay_s, and a gateway "
        "protects a device that keeps under twice this rate from a flooding neighbour (device_share)",
        default=10.0,
    )
    outlier_threshold: Annotated[float, Field(gt=0)] = _described(
        "robust z-score above which a sample is an outlier (predicted, not learned)", default=100.0
    )
    http_timeout_s: Annotated[float, Field(gt=0)] = _described(
        "connect/read/write timeout of one HTTP operation", default=10.0
    )
    http_deadline_s: Annotated[float, Field(gt=0)] = _described(
        "overall deadline of one cloud call (a trickling server cannot hang it)", default=60.0
    )
    retry_base_s: Annotated[float, Field(gt=0)] = _described(
        "first backoff of a failed recompute (exponential with full jitter)", default=0.5
    )
    retry_max_s: Annotated[float, Field(gt=0)] = _described("longest backoff between attempts", default=30.0)
    unauthorized_retry_s: Annotated[float, Field(gt=0)] = _described(
        "longest wait between attempts while the cloud rejects the credential (401/403)", default=300.0
    )
    retry_cooldown_s: Annotated[float, Field(ge=0)] = _described(
        "after the cloud refused a recompute for good (4xx), wait this long before asking again",
        default=30.0,
    )
    sync_wait_s: Annotated[float, Field(gt=0)] = _described(
        "sync mode: how long the worker waits for a model before going on asynchronously", default=120.0
    )
    history_batch: Annotated[int, Field(ge=1, le=100_000)] = _described(
        "re-tuning strategies (druid-tune, periodic-tune): labels per batch forwarded to the cloud's history",
        default=200,
    )
    history_outbox: Annotated[int, Field(ge=1, le=100_000)] = _described(
        "re-tuning strategies: label batches on the way to the cloud per device; more are dropped (counted)",
        default=64,
    )
    checkpoint_dir: str = _described("directory of the checkpoint file", default="edgedrift-state")
    checkpoint_every_s: Annotated[float, Field(gt=0)] = _described(
        "seconds between checkpoints (a failed one is reported and retried)", default=30.0
    )
    heartbeat_every_s: Annotated[float, Field(gt=0)] = _described(
        "seconds between heartbeats to the cloud and status updates on MQTT", default=10.0
    )
    watchdog_s: Annotated[float, Field(gt=0)] = _described(
        "status degraded when work is queued and nothing progresses for this long", default=60.0
    )
    accuracy_window: Annotated[int, Field(ge=1)] = _described(
        "labeled samples in the recent accuracy (or RMSE) of heartbeats and status", default=1000
    )
    metrics_port: Annotated[int, Field(ge=0, le=65535)] | None = _described(
        "serve Prometheus metrics on http://<metrics-addr>:<port>/metrics (docs/edge-agent.md, "
        '"Metrics"; the deployments use 9464); unset = no metrics server and no per-message cost',
        default=None,
    )
    metrics_addr: str = _described("address the metrics server listens on", default="0.0.0.0")
    metrics_device_labels: Annotated[int, Field(ge=0, le=10_000)] = _described(
        "devices with series of their own (a device label) in the metrics: the first this many served; "
        'the others are summed under device="_other" (bounds a large gateway\'s series)',
        default=100,
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = _described("log level", default="INFO")
    keepalive_s: Annotated[int, Field(ge=2, le=65535)] = _described(
        "MQTT keep-alive: a connection that carries nothing from the broker for this long (a half-open "
        "connection) is given up and reconnected",
        default=30,
    )
    switch_interval_s: Annotated[float, Field(gt=0, le=0.1)] = _described(
        "the interpreter's thread switch interval (sys.setswitchinterval) of the agent command: Python's "
        "5 ms; shorter hands the GIL to the MQTT I/O thread sooner for more switches, which cost the "
        "MQTT transport CPU per message (docs/benchmarks.md, section 6)",
        default=0.005,
    )
    gc_threshold: Annotated[int, Field(ge=100)] = _described(
        "allocations (less deallocations) between two collections of the cyclic garbage collector's "
        "youngest generation (gc.set_threshold) in the agent command. Python's 700 moves a gateway's "
        "short-lived objects to the oldest generation while it drains a backlog, whose collections over "
        "86,000-340,000 objects then held every thread for 60-240 ms (docs/benchmarks.md, section 23)",
        default=20_000,
    )

    @field_validator("broker_url")
    @classmethod
    def _broker_url(cls, value: str) -> str:
        try:
            parse_broker_url(value)
        except ValueError as exc:  # its message never holds the URL (which may hold a password)
            raise ValueError(
                f"must look like mqtt://[user:password@]host:port (or mqtts, ws, wss): {exc}"
            ) from None
        return value

    @field_validator("topic_prefix")
    @classmethod
    def _topic_prefix(cls, value: str) -> str:
        """Topic levels the agent can subscribe to and publish on (a wildcard made the broker refuse every
        publish and the start time out after 30 s: "not subscribed")."""
        problem = topic_prefix_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("cloud_url")
    @classmethod
    def _cloud_url(cls, value: str) -> str:
        """An http(s) URL with a host and a numeric port, checked at start: a URL the HTTP client cannot use
        was a traceback at the first request, or a warning at every heartbeat of an agent that looked
        healthy. The message never repeats the URL (it may hold credentials)."""
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https"):
            raise ValueError("must start with http:// or https://")
        try:
            port = parts.port
        except ValueError:
            port = 0
        if port == 0:
            raise ValueError("the port is not a number from 1 to 65535")
        if not parts.hostname:
            raise ValueError("has no host")
        return value

    @model_validator(mode="after")
    def _client_certificate_needs_tls(self) -> AgentSettings:
        if self.tls_key_file and not self.tls_cert_file:
            raise ValueError("tls_key_file needs tls_cert_file")
        if self.tls_cert_file and not parse_broker_url(self.broker_url).tls:
            raise ValueError("tls_cert_file needs TLS: an mqtts:// or wss:// broker URL")
        if self.broker_sessions == "device" and self.tls_cert_file:
            raise ValueError(
                "broker_sessions device logs each device's session in as <user>.<device id>, which a "
                "client certificate (one identity) cannot do: use a user name and password"
            )
        return self

    @field_validator("message_expiry_s")
    @classmethod
    def _message_expiry_needs_mqtt5(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("mqtt_version") != "5":
            raise ValueError("needs mqtt_version 5 (MQTT 3.1.1 has no message expiry)")
        return value

    @field_validator("strategy")
    @classmethod
    def _strategy(cls, value: str) -> str:
        from edgedrift.adapters.entry_points import strategy_catalogue

        catalogue = strategy_catalogue()  # built-in and entry-point (edgedrift.strategies) strategies
        if value not in catalogue:
            raise ValueError(catalogue.unknown(value))
        return value

    @field_validator("classes", mode="before")
    @classmethod
    def _class_list(cls, value: Any) -> Any:
        """A JSON list or comma-separated names (an environment variable or a flag is one string)."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except ValueError:
                raise ValueError("must be a JSON list of names or comma-separated names") from None
        return [name.strip() for name in text.split(",")]

    @field_validator("classes")
    @classmethod
    def _classes(cls, value: list[str | int] | None) -> list[str | int] | None:
        if value is None:
            return None
        from edgedrift.labels import ClassLabels
        from edgedrift.wire import MAX_CLASSES

        if len(value) > MAX_CLASSES:
            raise ValueError(f"at most {MAX_CLASSES} classes, got {len(value)}")
        if any(isinstance(name, str) and not name for name in value):
            raise ValueError("a class name must not be empty")
        ClassLabels(tuple(value))  # two or more, distinct by value
        return value

    @model_validator(mode="after")
    def _classes_fit_the_task(self) -> AgentSettings:
        if self.classes is None:
            return self
        if self.task != "classification":
            raise ValueError("classes applies to classification only")
        from edgedrift.adapters.entry_points import strategy_catalogue

        strategy = strategy_catalogue()[self.strategy]
        if len(self.classes) >= 3 and not strategy.multiclass:
            multi = sorted(name for name, s in strategy_catalogue().items() if s.multiclass)
            raise ValueError(
                f"strategy {self.strategy!r} runs on two classes only; with {len(self.classes)} classes "
                f"choose one of {', '.join(multi)}"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _merged_settings(cls, values: Any) -> Any:
        if isinstance(values, Mapping) and any(name in values for name in MERGED_INTO_RECENT_SAMPLES):
            raise ValueError(f"{' and '.join(MERGED_INTO_RECENT_SAMPLES)}: {MERGED_MESSAGE}")
        return values

    @model_validator(mode="after")
    def _one_identity(self) -> AgentSettings:
        if self.device_id is None and self.gateway_id is None:
            raise ValueError("set device_id (one device) or gateway_id (a gateway)")
        if self.gateway_id is None and (self.devices or self.devices_file or self.gateway_secret):
            raise ValueError("devices, devices_file and gateway_secret need gateway_id")
        if self.gateway_id is None and self.broker_sessions == "device":
            raise ValueError("broker_sessions device needs gateway_id (one device has one session)")
        return self

    @model_validator(mode="after")
    def _secure_in_production(self) -> AgentSettings:
        if self.mode != "production":
            return self
        checks = [("EDGEDRIFT_EDGE_DEVICE_SECRET", self.device_secret)]
        if self.gateway_id is not None:
            checks = [("EDGEDRIFT_EDGE_GATEWAY_SECRET", self.gateway_secret)] if self.gateway_secret else []
        password = self.broker_password or _url_password(self.broker_url)
        if password is not None or urlsplit(self.broker_url).username:
            checks.append(("the broker password", password))
        for name, secret in checks:
            if secret is None:
                raise ValueError(f"production mode: {name} is missing")
            weak = weak_secret_reason(secret.get_secret_value())
            if weak is not None:
                raise ValueError(f"production mode: {name} {weak}")
        return self

    @property
    def topics(self) -> dict[str, str]:
        """The topics of ``device_id`` (a single-device agent)."""
        return device_topics(self.topic_prefix, self.device_id or "")

    @property
    def status_topic(self) -> str:
        """Where the process's last will goes: the device's status, or the gateway's own."""
        if self.gateway_id is None:
            return self.topics["status"]
        return f"{self.topic_prefix}/gateways/{self.gateway_id}/status"

    @property
    def effective_broker_url(self) -> str:
        """The broker URL with ``broker_password`` in it (for the client only; log :func:`redact`)."""
        if self.broker_password is None:
            return self.broker_url
        return with_password(self.broker_url, self.broker_password.get_secret_value())

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags, then the environment, then secrets from files (no .env file: the agent has none); only
        the values given in :meth:`model_validate`."""
        if sources.values_only_active():
            return (init_settings,)
        return (
            init_settings,
            sources.Environment(settings_cls),
            sources.SecretFiles(settings_cls, ENV_PREFIX, SECRET_FIELDS),
        )

    @classmethod
    def model_validate(cls, *args: Any, **kwargs: Any) -> Self:
        """The settings of the values given, without the environment (an agent built in process: a test,
        the demo, a benchmark), as for a plain pydantic model."""
        with sources.values_only():
            return super().model_validate(*args, **kwargs)

    @classmethod
    def env_names(cls) -> list[str]:
        """Every environment variable the agent reads."""
        names = [ENV_PREFIX + name.upper() for name in cls.model_fields]
        return names + [ENV_PREFIX + name.upper() + "_FILE" for name in SECRET_FIELDS]

    @classmethod
    def load(
        cls, overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
    ) -> AgentSettings:
        """The settings from ``environ`` (default: the process's; secrets also from ``*_FILE``) with the
        ``overrides`` (CLI flags; None: not given) on top. Raises :class:`SettingsError` with one line per
        problem and no value in it."""
        flags = {k: v for k, v in (overrides or {}).items() if v is not None}
        with sources.reading(environ) as env:
            merged = [ENV_PREFIX + name.upper() for name in MERGED_INTO_RECENT_SAMPLES]
            if any(env.get(name) for name in merged):
                raise SettingsError(f"{' and '.join(merged)}: {MERGED_MESSAGE}")
            try:
                return cls(**flags)
            except SecretFileError as exc:
                raise SettingsError(str(exc)) from None
            except ValidationError as exc:
                raise SettingsError(sources.describe_errors(exc, ENV_PREFIX)) from None
            except SourceError as exc:  # a value pydantic-settings could not decode; it names no value
                raise SettingsError(str(exc)) from None


def device_topics(prefix: str, device_id: str) -> dict[str, str]:
    """``{prefix}/{device_id}/{kind}`` for the five kinds of topic a device has."""
    return {k: f"{prefix}/{device_id}/{k}" for k in ("samples", "labels", "predictions", "events", "status")}


def device_list(value: str) -> list[str]:
    """The ids of a comma-separated list (blanks ignored)."""
    return [d.strip() for d in value.split(",") if d.strip()]


def _url_password(url: str) -> SecretStr | None:
    password = urlsplit(url).password
    return None if password is None else SecretStr(unquote(password))
