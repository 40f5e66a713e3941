"""Where the agent's settings come from, as pydantic-settings sources: the environment (the process's, or a
mapping a caller gives), the secrets given as files, or only the values given; and their errors as the
command line prints them (the setting's flag and variable, never its value).

The mapping is a context variable, so that :meth:`~edgedrift_edge.settings.AgentSettings.load` can read a
mapping of its own (a test, a deployment check) without touching ``os.environ``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource
from pydantic_settings.sources.utils import parse_env_vars

from edgedrift.secrets import secrets_from_files

__all__ = [
    "Environment",
    "SecretFiles",
    "describe_errors",
    "environ",
    "reading",
    "values_only",
    "values_only_active",
]

_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("edgedrift_edge_environ", default=None)
_VALUES_ONLY: ContextVar[bool] = ContextVar("edgedrift_edge_values_only", default=False)


def environ() -> Mapping[str, str]:
    """The environment being read: the mapping of :func:`reading`, else ``os.environ``."""
    given = _ENVIRON.get()
    return os.environ if given is None else given


@contextmanager
def reading(mapping: Mapping[str, str] | None) -> Iterator[Mapping[str, str]]:
    """Read ``mapping`` (None: the process's environment) as the environment within the block."""
    token = _ENVIRON.set(mapping)
    try:
        yield environ()
    finally:
        _ENVIRON.reset(token)


@contextmanager
def values_only() -> Iterator[None]:
    """Within the block the values given are all there is (no environment, no secret file)."""
    token = _VALUES_ONLY.set(True)
    try:
        yield
    finally:
        _VALUES_ONLY.reset(token)


def values_only_active() -> bool:
    return _VALUES_ONLY.get()


class Environment(EnvSettingsSource):
    """pydantic-settings' environment source over :func:`environ`."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(environ(), self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


class SecretFiles(PydanticBaseSettingsSource):
    """The secrets named by ``<prefix><FIELD>_FILE`` for each of ``fields``, read from their files
    (:func:`edgedrift.secrets.secrets_from_files`: errors name the variable and the path only)."""

    def __init__(self, settings_cls: type[BaseSettings], prefix: str, fields: tuple[str, ...]) -> None:
        super().__init__(settings_cls)
        self.prefix = prefix
        self.fields = fields

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads every secret file at once

    def __call__(self) -> dict[str, Any]:
        return secrets_from_files(environ(), self.prefix, self.fields)


def describe_errors(exc: ValidationError, prefix: str) -> str:
    """One line per problem: ``--flag / <prefix>VAR: reason``, never the rejected value."""
    lines = []
    for error in exc.errors(include_input=False, include_url=False):
        field = str(error["loc"][0]) if error["loc"] else ""
        where = f"--{field.replace('_', '-')} / {prefix}{field.upper()}" if field else "settings"
        message = str(error["msg"]).removeprefix("Value error, ")
        lines.append(f"{where}: {message}")
    return "\n".join(lines)
