"""Service settings, read from the environment (prefix ``EDGEDRIFT_CLOUD_``) or a ``.env`` file.

See ``cloud_trainer/.env.example`` for every variable. Outside development mode the service refuses
to start with a placeholder or short secret, so a forgotten default never reaches production.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from edgedrift.wire import DEVICE_ID_PATTERN

PLACEHOLDER_SECRETS = frozenset({"", "change-me", "changeme", "secret", "password", "dev", "development"})
MIN_SECRET_LENGTH = 16


class InsecureSettingsError(RuntimeError):
    """A placeholder or short secret outside development mode."""


class CloudSettings(BaseSettings):
    """Everything the cloud trainer reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="EDGEDRIFT_CLOUD_", env_file=".env", extra="ignore")

    #: ``development`` allows placeholder secrets and pretty logs; anything else is production.
    mode: Literal["development", "production"] = "production"
    #: SQLAlchemy URL: ``sqlite:///path.db`` (default) or ``postgresql+psycopg://user@host/db``.
    database_url: str = "sqlite:///edgedrift-cloud.db"
    #: Bearer token of the operator (lists every device, registers devices, reads the fleet).
    operator_token: SecretStr = SecretStr("change-me")
    #: Devices provisioned at start: ``dev-1=secret1,dev-2=secret2`` (secrets may be rotated by API).
    devices: Annotated[dict[str, SecretStr], NoDecode] = Field(default_factory=dict)
    #: Largest accepted request body in bytes (413 above it).
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    #: Largest training window in rows and features (422 above them).
    max_rows: int = Field(default=100_000, ge=1)
    max_features: int = Field(default=4096, ge=1)
    #: Run the Alembic migrations at start (the ``serve`` command runs them once before the workers).
    auto_migrate: bool = True
    #: Log lines as JSON objects (one per line) or as plain text.
    log_json: bool = True
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    #: Seconds a verified credential is cached per worker (0 = ask the database every request).
    auth_cache_seconds: float = Field(default=5.0, ge=0.0)
    #: Dashboard refresh period in seconds.
    dashboard_refresh_seconds: float = Field(default=5.0, gt=0.0)

    @field_validator("devices", mode="before")
    @classmethod
    def _parse_devices(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        parsed: dict[str, str] = {}
        for item in filter(None, (part.strip() for part in value.split(","))):
            name, sep, secret = item.partition("=")
            if not sep:
                raise ValueError(f"device entry {name!r} needs the form id=secret")
            parsed[name.strip()] = secret.strip()
        return parsed

    @field_validator("devices")
    @classmethod
    def _device_ids(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for name in value:
            if not re.fullmatch(DEVICE_ID_PATTERN, name):
                raise ValueError(f"device id {name!r} must match {DEVICE_ID_PATTERN}")
        return value

    @model_validator(mode="after")
    def _secure_outside_development(self) -> CloudSettings:
        if self.mode == "development":
            return self
        weak = [("EDGEDRIFT_CLOUD_OPERATOR_TOKEN", self.operator_token)]
        weak += [(f"the secret of device {name}", s) for name, s in self.devices.items()]
        for what, secret in weak:
            value = secret.get_secret_value()
            if value.lower() in PLACEHOLDER_SECRETS or len(value) < MIN_SECRET_LENGTH:
                raise InsecureSettingsError(
                    f"refusing to start: {what} is a placeholder or shorter than {MIN_SECRET_LENGTH} "
                    "characters; set a real secret or EDGEDRIFT_CLOUD_MODE=development"
                )
        return self

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


@lru_cache(maxsize=1)
def get_settings() -> CloudSettings:
    """The process's settings (cached; tests build their own and pass them to ``create_app``)."""
    return CloudSettings()
