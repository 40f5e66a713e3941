"""Secrets from files and the production rule for weak secrets, shared by the cloud trainer and the agent.

Docker and Kubernetes mount secrets as files (``/run/secrets/NAME``): every secret variable ``NAME`` may
instead be given as ``NAME_FILE``, the path of a file that holds it (the convention of the official
images, e.g. ``POSTGRES_PASSWORD_FILE``). :func:`secrets_from_files` reads them for a settings class
from an environment mapping (a settings source of the agent's and the cloud's pydantic-settings classes;
this module itself needs neither). Errors name the variable and the path, never a secret's content.

:func:`weak_secret_reason` is the production rule that the cloud trainer, the agent and the compose
stack's entry points (``deploy/mosquitto/entrypoint.sh``, the PostgreSQL override) apply alike: no
placeholder, no development default (they all contain ``insecure``), nothing shorter than 16 characters,
nothing of fewer than 5 distinct characters or made of a repeated pattern.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = [
    "MIN_DISTINCT_CHARACTERS",
    "MIN_SECRET_LENGTH",
    "PLACEHOLDER_MARKERS",
    "PLACEHOLDER_SECRETS",
    "SecretFileError",
    "read_secret_file",
    "secrets_from_files",
    "weak_secret_reason",
]

#: Values refused outright (compared in lower case).
PLACEHOLDER_SECRETS = frozenset({"", "change-me", "changeme", "secret", "password", "dev", "development"})
#: Fragments that mark a placeholder or a public development default (the compose defaults end in
#: ``-insecure``, the example files say ``replace-with-...``), however long the value is.
PLACEHOLDER_MARKERS = ("insecure", "change-me", "changeme", "replace-with", "replace-me")
MIN_SECRET_LENGTH = 16
#: Fewest distinct characters of a production secret.
MIN_DISTINCT_CHARACTERS = 5
#: Larger files are not secrets (a device list of a few thousand entries stays far below this).
MAX_SECRET_FILE_BYTES = 1 << 20


class SecretFileError(ValueError):
    """A ``NAME_FILE`` variable that cannot be used; the message names the variable and the path only."""

    def __init__(self, variable: str, message: str) -> None:
        self.variable = variable
        super().__init__(f"{variable}: {message}")


def read_secret_file(variable: str, path: str) -> str:
    """The content of the file ``variable`` names, without one trailing newline (``\\n`` or ``\\r\\n``)."""
    try:
        file = Path(path)
        if file.stat().st_size > MAX_SECRET_FILE_BYTES:
            raise SecretFileError(variable, f"{path} is larger than {MAX_SECRET_FILE_BYTES} bytes")
        data = file.read_bytes()
    except OSError as exc:
        raise SecretFileError(
            variable, f"cannot read {path} ({exc.strerror or type(exc).__name__})"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretFileError(variable, f"{path} is not UTF-8 text") from None
    if text.endswith("\n"):
        text = text[:-2] if text.endswith("\r\n") else text[:-1]
    if not text:
        raise SecretFileError(variable, f"{path} is empty")
    return text


def secrets_from_files(environ: Mapping[str, str], prefix: str, names: Iterable[str]) -> dict[str, str]:
    """The secrets given as files: field name -> content, for each ``<prefix><NAME>_FILE`` that is set.

    ``names`` are field names (``operator_token``); the variables are ``prefix + name.upper()`` and the
    same with ``_FILE`` (``EDGEDRIFT_CLOUD_OPERATOR_TOKEN_FILE``). An empty variable counts as unset, so
    an override can blank out a value set elsewhere. Both ``NAME`` and ``NAME_FILE`` set, or a file that
    is missing, unreadable, empty or not text, is a :class:`SecretFileError`.
    """
    found: dict[str, str] = {}
    for name in names:
        variable = f"{prefix}{name.upper()}"
        path = environ.get(f"{variable}_FILE") or ""
        if not path:
            continue
        if environ.get(variable):
            raise SecretFileError(variable, f"set either {variable} or {variable}_FILE, not both")
        found[name] = read_secret_file(f"{variable}_FILE", path)
    return found


def weak_secret_reason(value: str, min_length: int = MIN_SECRET_LENGTH) -> str | None:
    """Why ``value`` must not be a production secret (a short phrase), or None when it may be: a
    placeholder, too short, too few distinct characters (``aaaaaaaaaaaaaaaa`` is 16 characters and
    nothing to guess), or one pattern repeated (``passwordpassword``). A random token of 16 or more
    characters, even hexadecimal, passes with certainty for all practical purposes."""
    lowered = value.lower()
    if lowered in PLACEHOLDER_SECRETS or any(marker in lowered for marker in PLACEHOLDER_MARKERS):
        return "is a placeholder or a development default"
    if len(value) < min_length:
        return f"is shorter than {min_length} characters"
    if len(set(value)) < MIN_DISTINCT_CHARACTERS:
        return f"uses fewer than {MIN_DISTINCT_CHARACTERS} distinct characters"
    n = len(value)
    if any(value[p:] == value[: n - p] for p in range(1, n // 2 + 1)):
        return "repeats a shorter pattern"
    return None
