"""Service settings, read from the environment (prefix ``EDGEDRIFT_CLOUD_``) or a ``.env`` file.

See ``cloud_trainer/.env.example`` for every variable. Each secret (operator token, device list, database
URL or its password) may instead be a file named by ``<VARIABLE>_FILE`` (Docker and Kubernetes secrets;
:mod:`edgedrift.secrets`). Outside development mode the service refuses to start with a placeholder,
development default or short secret, so a forgotten default never reaches production.
:func:`load_settings` reports an unusable configuration one line per problem, naming the variable and
the reason but never the value (pydantic's own errors would print it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)
from sqlalchemy.engine import URL, make_url

from edgedrift.secrets import (
    MIN_SECRET_LENGTH,
    PLACEHOLDER_SECRETS,
    SecretFileError,
    secrets_from_files,
    weak_secret_reason,
)
from edgedrift.wire import DEVICE_ID_PATTERN, HISTORY_BODY_BYTES, MAX_FEATURES

__all__ = [
    "MIN_SECRET_LENGTH",
    "PLACEHOLDER_SECRETS",
    "SECRET_FIELDS",
    "CloudSettings",
    "ConfigurationError",
    "InsecureSettingsError",
    "get_settings",
    "load_settings",
]

ENV_PREFIX = "EDGEDRIFT_CLOUD_"
#: Fields that may also be given as files (``EDGEDRIFT_CLOUD_OPERATOR_TOKEN_FILE`` ...).
SECRET_FIELDS = ("operator_token", "devices", "database_url", "database_password")
_INSECURE = "insecure_secret"
_REFUSING = "refusing to start in production mode: "
_PRODUCTION_HINT = " (set a real secret, or EDGEDRIFT_CLOUD_MODE=development)"


class ConfigurationError(RuntimeError):
    """An unusable configuration; ``problems`` has one line per problem, never a secret's value."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class InsecureSettingsError(ConfigurationError):
    """A placeholder, development default or short secret outside development mode."""


class _SecretFiles(PydanticBaseSettingsSource):
    """The secret fields named by ``EDGEDRIFT_CLOUD_<FIELD>_FILE`` in the ``.env`` file or the environment."""

    def __init__(
        self, settings_cls: type[BaseSettings], sources: Sequence[PydanticBaseSettingsSource]
    ) -> None:
        super().__init__(settings_cls)
        self.sources = sources

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads every secret file at once

    def __call__(self) -> dict[str, Any]:
        environ: dict[str, str] = {}
        for source in self.sources:  # later sources win: the .env file, then the process environment
            for key, value in getattr(source, "env_vars", {}).items():
                if value is not None:
                    environ[key.upper()] = value
        return secrets_from_files(environ, ENV_PREFIX, SECRET_FIELDS)


def _production(info: ValidationInfo) -> bool:
    """Whether the weak-secret rule applies (an invalid mode counts as production: fail closed)."""
    return bool(info.data.get("mode", "production") != "development")


def _refuse_weak(value: str, what: str, info: ValidationInfo) -> None:
    if _production(info) and (reason := weak_secret_reason(value)):
        raise PydanticCustomError(_INSECURE, f"{_REFUSING}{what} {reason}{_PRODUCTION_HINT}")


def _parse_database_url(value: str) -> URL:
    """The URL parsed by SQLAlchemy; errors never repeat it (it may hold a password)."""
    try:
        url = make_url(value)
    except Exception:
        raise ValueError(
            "is not a database URL (sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE)"
        ) from None
    if url.get_backend_name() not in ("sqlite", "postgresql"):
        raise ValueError("names a database the registry does not support (sqlite or postgresql)")
    return url


class CloudSettings(BaseSettings):
    """Everything the cloud trainer reads from its environment."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=".env", extra="ignore", hide_input_in_errors=True
    )

    #: ``development`` allows placeholder secrets and pretty logs; anything else is production.
    mode: Literal["development", "production"] = "production"
    #: SQLAlchemy URL: ``sqlite:///path.db`` (default) or ``postgresql+psycopg://user@host/db``.
    database_url: str = Field(default="sqlite:///edgedrift-cloud.db", repr=False)
    #: The database password apart from the URL (which then has none), so that one secret file serves
    #: both PostgreSQL (``POSTGRES_PASSWORD_FILE``) and the cloud (``..._DATABASE_PASSWORD_FILE``).
    database_password: SecretStr | None = None
    #: Bearer token of the operator (lists every device, registers devices, reads the fleet).
    operator_token: SecretStr = SecretStr("change-me")
    #: Devices provisioned at start: ``dev-1=secret1,dev-2=secret2``; a device the registry already holds
    #: keeps its secret and revocation (rotated or revoked by API), so a restart never undoes either.
    devices: Annotated[dict[str, SecretStr], NoDecode] = Field(default_factory=dict)
    #: Largest accepted request body in bytes (413 above it).
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    #: Largest training window in rows and features (422 above them).
    max_rows: int = Field(default=100_000, ge=1)
    max_features: int = Field(default=MAX_FEATURES, ge=1, le=MAX_FEATURES)
    #: Run the Alembic migrations at start (the ``serve`` command runs them once before the workers).
    auto_migrate: bool = True
    #: Log lines as JSON objects (one per line) or as plain text.
    log_json: bool = True
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    #: Seconds a verified device credential is cached per worker, used only while the worker hears
    #: PostgreSQL's credential notifications (any rotation, revocation or registration voids every cached
    #: credential in every worker when it commits, so a revoked or rotated secret still stops working at
    #: once). On SQLite, or while the notifications are not heard, the registry is asked on every
    #: request; 0: always.
    auth_cache_seconds: float = Field(default=60.0, ge=0.0)
    #: Seconds an unknown credential is remembered per worker (a flood of wrong tokens does not reach the
    #: database); 0: off.
    auth_miss_cache_seconds: float = Field(default=5.0, ge=0.0)
    #: Dashboard refresh period in seconds.
    dashboard_refresh_seconds: float = Field(default=5.0, gt=0.0)
    #: The fleet summary (default thresholds) is recomputed at most this often per worker and served
    #: from memory in between (0: on every request); its ``generated_at`` says how old it is.
    fleet_summary_max_age_s: float = Field(default=5.0, ge=0.0, le=300.0)
    #: Threads per worker for blocking request work (database calls, parsing large bodies): anyio's
    #: default thread pool. Fewer threads hold the GIL less often, so the event loop answers sooner
    #: under a storm; requests beyond them wait for a thread.
    request_threads: int = Field(default=40, ge=1, le=1000)
    #: Threads per worker for the operator's fleet views, apart from the pool the devices' requests
    #: share, so a recompute storm cannot make the dashboard wait for a thread.
    fleet_view_threads: int = Field(default=4, ge=1, le=64)
    #: Threads per worker for gateways' heartbeat batches, apart from the devices' pool too, so that a
    #: storm's recomputes do not hold a fleet's heartbeats for seconds.
    heartbeat_threads: int = Field(default=2, ge=1, le=64)
    #: Trainings running at once per worker (pool processes) and waiting beyond them; more: 429.
    training_slots: int = Field(default=2, ge=1, le=256)
    training_queue: int = Field(default=32, ge=0, le=100_000)
    #: Train in a process pool (off the GIL); False trains in threads (tests, tiny deployments).
    training_processes: bool = True
    #: A re-tuning recompute runs its search (seconds of CPU) only while at most this many trainings
    #: wait in the worker's queue; beyond it the request is answered as a plain recompute (``edge`` is
    #: null) and the edge keeps its parameters until its next recompute: a storm is absorbed first.
    retune_max_queued: int = Field(default=0, ge=0, le=100_000)
    #: Where trainings run: ``inline`` in this service's own pool (the default, nothing else to run),
    #: ``queue`` as jobs on a Dramatiq queue in Redis that ``edgedrift-cloud trainer-worker`` processes
    #: consume (the ``jobs`` extra; the API still validates, prices and admits: docs/cloud-trainer.md).
    training: Literal["inline", "queue"] = "inline"
    #: The Redis of the training queue and of its jobs' state (``training=queue``).
    jobs_redis_url: str = Field(default="redis://127.0.0.1:6379/0", repr=False)
    #: Prefix of every key of the queue in that Redis (several deployments or tests share one server).
    jobs_namespace: str = Field(default="edgedrift", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    #: How long a recompute request waits for its job before it answers 202 with the job to poll.
    jobs_wait_s: float = Field(default=5.0, ge=0.0, le=600.0)
    #: A job nobody has waited for or polled this long is cancelled (its client has gone).
    jobs_poll_deadline_s: float = Field(default=30.0, gt=0.0, le=3600.0)
    #: Jobs waiting in the queue beyond which a new recompute is refused (429 ``queue_full``).
    jobs_max_queued: int = Field(default=10_000, ge=1, le=10_000_000)
    #: A training worker silent this long is dead: its unfinished job goes back to the queue.
    jobs_heartbeat_timeout_s: float = Field(default=15.0, ge=1.0, le=3600.0)
    #: Niceness added to the training pool's processes: trainings are batch work and yield the CPU to
    #: the workers' event loops (health checks, fleet views, admission answers) under a storm.
    training_nice: int = Field(default=10, ge=0, le=19)
    #: Fleet recompute budget: recomputes per minute fleet-wide and per device (unset: unlimited),
    #: shared by every replica through the registry database. Per device it defaults to 30, so one
    #: device cannot monopolise training (a request without drift evidence may use half: 15 a minute);
    #: ``unlimited`` (or an empty value) lifts either limit.
    recompute_budget_per_minute: int | None = Field(default=None, ge=0)
    recompute_budget_per_device_per_minute: int | None = Field(default=30, ge=0)
    #: Largest training cost of one request, rows x features x grid (grid: the fits of the C search,
    #: 9 C values x 5 folds = 45 for ``C="auto"``, else 1); above it a 422 ``cost_cap`` before any
    #: training. CPU time grows about linearly with this cost (measurements: docs/cloud-trainer.md). The
    #: default admits a single fit of 100,000 x 54 (cost 5.4 M) and ``C="auto"`` up to about 1.1 M cells
    #: (20,000 x 54, 1,000 x 1,000), and refuses the requests that cost tens of CPU seconds: ``C="auto"``
    #: on 4,000 x 1,000 (cost 180 M) or on 100,000 x 54 (243 M).
    max_train_cost: int = Field(default=50_000_000, ge=1)
    #: Database connect and statement timeouts in seconds (past them an API call answers 503).
    database_connect_timeout_s: float = Field(default=5.0, gt=0.0)
    database_statement_timeout_s: float = Field(default=15.0, gt=0.0)
    #: Deadline of ``/readyz`` in seconds: past it the answer is 503, whatever the database does.
    readiness_timeout_s: float = Field(default=2.0, gt=0.0)
    #: Export the recompute counters per device too (one series per device: off for large fleets).
    metrics_per_device: bool = False
    #: Model quality in ``/metrics`` (docs/cloud-trainer.md, "Model quality metrics"): the fleet's
    #: accuracy/RMSE histograms and counts are read from the devices' latest heartbeats in one statement
    #: at most this often per worker; scrapes in between are answered from memory.
    metrics_quality_max_age_s: float = Field(default=15.0, ge=0.0, le=3600.0)
    #: Per-device quality series (``edgedrift_device_*``) for at most this many devices (the first by
    #: id; the others are counted in ``edgedrift_device_series_omitted``): 0 keeps only fleet series.
    metrics_quality_devices: int = Field(default=0, ge=0, le=20_000)
    #: A classifier whose recent accuracy is below this counts as low quality.
    metrics_low_accuracy: float = Field(default=0.6, ge=0.0, le=1.0)
    #: A device's quality is *falling* when its accuracy is this far below its own baseline, or its
    #: RMSE this fraction above it; the baseline is a moving average of its past values with this
    #: time constant, kept per worker.
    metrics_accuracy_drop: float = Field(default=0.1, gt=0.0, le=1.0)
    metrics_rmse_rise: float = Field(default=0.5, gt=0.0)
    metrics_quality_baseline_s: float = Field(default=3600.0, gt=0.0)
    #: Failed authentications per client address and 10 s before that address gets 429.
    auth_failures_per_10s: int = Field(default=50, ge=1)
    #: Heartbeats older than this are deleted (each device's newest two stay; 0 keeps every one).
    heartbeat_retention_hours: float = Field(default=72.0, ge=0.0)
    #: Seconds between two retention rounds in each worker.
    heartbeat_retention_every_s: float = Field(default=300.0, gt=0.0)
    #: Per-device limits in each worker (429 with Retry-After past them; bursts up to a minute's worth):
    #: heartbeats and their stored bytes (an agent sends one of about 400 bytes every
    #: ``heartbeat_every_s``, 10 s by default: the limits admit one every 0.5 s), history uploads and
    #: their bytes (an agent forwards a batch of 200 labels, ~90 KB at 54 features, every 2,000 samples).
    heartbeats_per_minute: int = Field(default=120, ge=1, le=1_000_000)
    heartbeat_bytes_per_minute: int = Field(default=64 * 2**10, ge=8 * 2**10, le=2**40)
    history_uploads_per_minute: int = Field(default=120, ge=1, le=1_000_000)
    history_bytes_per_minute: int = Field(default=16 * 2**20, ge=HISTORY_BODY_BYTES, le=2**40)
    #: Labels of each device's history the cloud keeps for re-tuning recomputes (``druid-tune``,
    #: ``periodic-tune``): the newest chunks that hold this many labels.
    history_labels: int = Field(default=20_000, ge=1, le=10_000_000)
    #: Bytes of labeled history each device keeps (its newest chunks; a larger batch is a 413), and the
    #: fleet's in all (a batch that would grow it beyond: 429 ``history_fleet_full``; unset: no limit).
    #: 16 MiB holds 20,000 labels up to d = 103; a re-tuning job loads at most this much.
    history_bytes_per_device: int = Field(default=16 * 1024 * 1024, ge=1024)
    history_bytes_total: int | None = Field(default=64 * 1024**3, ge=1024)
    #: Reverse proxies whose ``X-Forwarded-For``/``-Proto`` are trusted (comma-separated addresses or
    #: networks, ``*`` for any; uvicorn's ``--forwarded-allow-ips``); empty: none, the TCP peer is the
    #: client. (uvicorn alone trusts 127.0.0.1, so a local client could pose as any address.)
    forwarded_allow_ips: str = ""
    #: Seconds a request's line and headers may take to arrive (from the connection's opening or the
    #: request's first byte), and its body after them; past them 408 and the connection closes
    #: (:mod:`edgedrift_cloud.connections`).
    header_timeout_s: float = Field(default=10.0, gt=0.0, le=3600.0)
    body_timeout_s: float = Field(default=60.0, gt=0.0, le=3600.0)
    #: Largest request line and headers in bytes (431 past it).
    max_header_bytes: int = Field(default=16_384, ge=1024, le=1_048_576)
    #: Connections one client address may hold per worker (a further one: 429 and closed), and all
    #: connections and requests of a worker (uvicorn's ``--limit-concurrency``: 503 past it).
    max_connections_per_address: int = Field(default=1024, ge=1)
    max_connections: int = Field(default=4096, ge=1)
    #: Requests with a body above 256 KiB in progress at once per worker, for one credential's subject
    #: (a device, a gateway, the operator) and in all; beyond them 429 ``bodies_in_flight``.
    large_bodies_per_client: int = Field(default=2, ge=1)
    large_bodies: int = Field(default=8, ge=1)
    #: Seconds an idle kept-alive connection stays open (uvicorn's ``--timeout-keep-alive``).
    keep_alive_s: int = Field(default=5, ge=1, le=3600)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """``*_FILE`` secrets after the constructor's arguments, beside the environment and ``.env``."""
        files = _SecretFiles(settings_cls, (dotenv_settings, env_settings))
        return init_settings, files, env_settings, dotenv_settings, file_secret_settings

    @field_validator(
        "recompute_budget_per_minute",
        "recompute_budget_per_device_per_minute",
        "history_bytes_total",
        mode="before",
    )
    @classmethod
    def _unlimited_is_none(cls, value: object) -> object:
        """``unlimited``, ``none`` or an empty value: no limit."""
        return (
            None if isinstance(value, str) and value.strip().lower() in ("", "unlimited", "none") else value
        )

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str, info: ValidationInfo) -> str:
        url = _parse_database_url(value)
        if url.password is not None:
            _refuse_weak(str(url.password), "its password", info)
        return value

    @field_validator("database_password", mode="before")
    @classmethod
    def _empty_password_is_none(cls, value: object) -> object:
        """An empty variable counts as unset (an override may blank out the compose value)."""
        return None if value == "" else value

    @field_validator("database_password")
    @classmethod
    def _database_password(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is not None:
            _refuse_weak(value.get_secret_value(), "the password", info)
        return value

    @field_validator("operator_token")
    @classmethod
    def _operator_token(cls, value: SecretStr, info: ValidationInfo) -> SecretStr:
        _refuse_weak(value.get_secret_value(), "the token", info)
        return value

    @field_validator("devices", mode="before")
    @classmethod
    def _parse_devices(cls, value: object) -> object:
        """``id=secret`` entries separated by commas or newlines (a secret file has one per line)."""
        if not isinstance(value, str):
            return value
        parsed: dict[str, str] = {}
        items = (part.strip() for part in value.replace("\n", ",").split(","))
        for position, item in enumerate(filter(None, items), start=1):
            name, sep, secret = item.partition("=")
            if not sep:
                raise ValueError(f"entry {position} needs the form id=secret")
            parsed[name.strip()] = secret.strip()
        return parsed

    @field_validator("devices")
    @classmethod
    def _device_ids(cls, value: dict[str, SecretStr], info: ValidationInfo) -> dict[str, SecretStr]:
        for name in value:
            if not re.fullmatch(DEVICE_ID_PATTERN, name):
                raise ValueError(f"device id {name!r} must match {DEVICE_ID_PATTERN}")
        if _production(info):
            weak = [
                f"the secret of device {name} {reason}"
                for name, secret in value.items()
                if (reason := weak_secret_reason(secret.get_secret_value()))
            ]
            if weak:
                raise PydanticCustomError(_INSECURE, _REFUSING + "; ".join(weak) + _PRODUCTION_HINT)
        return value

    @model_validator(mode="after")
    def _password_into_the_url(self) -> CloudSettings:
        """Put ``database_password`` into ``database_url`` (URL-quoted), which must not carry one."""
        if self.database_password is None:
            return self
        url = make_url(self.database_url)
        if url.get_backend_name() == "sqlite":
            raise ValueError("EDGEDRIFT_CLOUD_DATABASE_PASSWORD is set, but a SQLite database takes none")
        if url.password is not None:
            raise ValueError(
                "EDGEDRIFT_CLOUD_DATABASE_PASSWORD is set and EDGEDRIFT_CLOUD_DATABASE_URL holds a password "
                "too; give it once"
            )
        password = self.database_password.get_secret_value()
        self.database_url = url.set(password=password).render_as_string(hide_password=False)
        return self

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def load_settings(**values: Any) -> CloudSettings:
    """The settings (``values`` as for :class:`CloudSettings`), or one problem per line, never a value.

    Raises :class:`InsecureSettingsError` when the only problems are weak secrets in production mode,
    :class:`ConfigurationError` otherwise. pydantic's own message prints each ``input_value``: a
    database URL with its password, a token one character short.
    """
    try:
        return CloudSettings(**values)
    except ValidationError as exc:
        problems: list[str] = []
        insecure = True
        for error in exc.errors(include_url=False, include_input=False, include_context=False):
            insecure = insecure and error["type"] == _INSECURE
            message = error["msg"].removeprefix("Value error, ")
            loc = error["loc"]
            problems.append(f"{ENV_PREFIX}{str(loc[0]).upper()}: {message}" if loc else message)
        raise (InsecureSettingsError if insecure else ConfigurationError)(problems) from None
    except (SecretFileError, SettingsError) as exc:
        raise ConfigurationError([str(exc)]) from None


@lru_cache(maxsize=1)
def get_settings() -> CloudSettings:
    """The process's settings (cached; tests build their own and pass them to ``create_app``)."""
    return load_settings()
