"""``edgedrift.secrets``: secrets from ``NAME_FILE`` files and the production rule for weak secrets."""

from __future__ import annotations

import random
import string
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from edgedrift.secrets import (
    MIN_SECRET_LENGTH,
    SecretFileError,
    read_secret_file,
    secrets_from_files,
    weak_secret_reason,
)

PREFIX = "EDGEDRIFT_TEST_"
SECRET = "s3cret-value-that-must-never-leak"


def write(path: Path, data: str | bytes) -> str:
    if isinstance(data, str):
        path.write_text(data, newline="")
    else:
        path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (SECRET, SECRET),
        (SECRET + "\n", SECRET),
        (SECRET + "\r\n", SECRET),
        (SECRET + "\n\n", SECRET + "\n"),  # one newline only: the rest belongs to the secret
        (" " + SECRET + " \n", " " + SECRET + " "),  # spaces are content
    ],
)
def test_a_file_gives_its_content_without_one_trailing_newline(
    tmp_path: Path, content: str, expected: str
) -> None:
    path = write(tmp_path / "token", content)
    found = secrets_from_files({f"{PREFIX}OPERATOR_TOKEN_FILE": path}, PREFIX, ["operator_token", "other"])
    assert found == {"operator_token": expected}


def test_unset_or_empty_file_variables_give_nothing(tmp_path: Path) -> None:
    assert secrets_from_files({}, PREFIX, ["token"]) == {}
    assert secrets_from_files({f"{PREFIX}TOKEN_FILE": ""}, PREFIX, ["token"]) == {}
    assert secrets_from_files({f"{PREFIX}TOKEN": SECRET}, PREFIX, ["token"]) == {}, (
        "plain values are not read"
    )


def test_an_empty_value_beside_a_file_counts_as_unset(tmp_path: Path) -> None:
    """An override blanks out a value set elsewhere (compose cannot unset a variable) and names a file."""
    path = write(tmp_path / "token", SECRET)
    environ = {f"{PREFIX}TOKEN": "", f"{PREFIX}TOKEN_FILE": path}
    assert secrets_from_files(environ, PREFIX, ["token"]) == {"token": SECRET}


def test_both_set_is_an_error_naming_both_variables_and_no_value(tmp_path: Path) -> None:
    path = write(tmp_path / "token", SECRET)
    environ = {f"{PREFIX}TOKEN": "another-" + SECRET, f"{PREFIX}TOKEN_FILE": path}
    with pytest.raises(SecretFileError) as caught:
        secrets_from_files(environ, PREFIX, ["token"])
    message = str(caught.value)
    assert f"{PREFIX}TOKEN " in message and f"{PREFIX}TOKEN_FILE" in message and "not both" in message
    assert SECRET not in message
    assert caught.value.variable == f"{PREFIX}TOKEN"


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda d: str(d / "missing"), "cannot read"),
        (lambda d: str(d), "cannot read"),  # a directory
        (lambda d: write(d / "empty", ""), "is empty"),
        (lambda d: write(d / "newline", "\n"), "is empty"),
        (lambda d: write(d / "binary", b"\xff\xfe" + SECRET.encode()), "not UTF-8"),
    ],
    ids=["missing", "directory", "empty", "only-a-newline", "not-text"],
)
def test_unusable_files_are_errors_naming_the_variable_and_the_path(
    tmp_path: Path, make: Callable[[Path], str], reason: str
) -> None:
    path = make(tmp_path)
    with pytest.raises(SecretFileError) as caught:
        secrets_from_files({f"{PREFIX}DEVICES_FILE": path}, PREFIX, ["devices"])
    message = str(caught.value)
    assert message.startswith(f"{PREFIX}DEVICES_FILE: ") and path in message and reason in message
    assert SECRET not in message
    assert isinstance(caught.value, ValueError)


def test_oversized_files_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "big", "x" * (2 << 20))
    with pytest.raises(SecretFileError, match="larger than"):
        read_secret_file("X_FILE", path)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "change-me",
        "CHANGE-ME",
        "secret",
        "password",
        "dev",
        "development",
        "dev-1-insecure",
        "operator-mqtt-insecure",
        "postgres-insecure-but-quite-long",
        "replace-with-a-long-random-token",
        "please-changeme-0123456789",
        "x" * (MIN_SECRET_LENGTH - 1),
        "a" * MIN_SECRET_LENGTH,
        "abababababababab",
        "abcdabcdabcdabcd",
        "passwordpassword",
        "Sup3r-S3cret!Sup3r-S3cret!",
        "change-me-change-me-insecure",
    ],
)
def test_weak_secrets_have_a_reason(value: str) -> None:
    assert weak_secret_reason(value) is not None


@pytest.mark.parametrize(
    "value", ["abcdexyz01234567", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b", "operator-token-" + "x" * 24]
)
def test_real_secrets_pass(value: str) -> None:
    assert weak_secret_reason(value) is None


def test_random_tokens_always_pass() -> None:
    """The repetition rules never refuse a random secret of the minimum length, even a hexadecimal one."""
    rng = random.Random(7)
    for alphabet in ("0123456789abcdef", string.ascii_letters + string.digits + "-_"):
        for _ in range(2000):
            token = "".join(rng.choice(alphabet) for _ in range(MIN_SECRET_LENGTH))
            assert weak_secret_reason(token) is None, token


def test_the_module_needs_no_pydantic() -> None:
    """The core's secrets module is plain Python: it must not pull pydantic-settings (or pydantic)."""
    code = (
        "import sys, edgedrift.secrets; "
        "bad = [m for m in ('pydantic_settings', 'pydantic') if m in sys.modules]; "
        "sys.exit(str(bad) if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
