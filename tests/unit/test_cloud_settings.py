"""Service settings: device list parsing, the refusal of placeholder secrets outside development, secrets
from ``*_FILE`` files, and errors that name the variable but never print a value."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from edgedrift_cloud.settings import (
    SECRET_FIELDS,
    CloudSettings,
    ConfigurationError,
    InsecureSettingsError,
    load_settings,
)

STRONG = "a-strong-operator-token-123"
DB_PASSWORD = "pg-Passw0rd/with@odd:chars"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No EDGEDRIFT_CLOUD_* variable of the caller's shell, and no .env file, reaches these tests."""
    import os

    for variable in list(os.environ):
        if variable.startswith("EDGEDRIFT_CLOUD_"):
            monkeypatch.delenv(variable)
    monkeypatch.chdir(tmp_path)


def test_devices_parse_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEDRIFT_CLOUD_OPERATOR_TOKEN", STRONG)
    monkeypatch.setenv("EDGEDRIFT_CLOUD_DEVICES", f"gw-1=a-{STRONG}, gw_2=b-{STRONG}")
    s = CloudSettings()
    assert {k: v.get_secret_value() for k, v in s.devices.items()} == {
        "gw-1": f"a-{STRONG}",
        "gw_2": f"b-{STRONG}",
    }
    assert STRONG not in repr(s)


@pytest.mark.parametrize("token", ["change-me", "", "too-short"])
def test_placeholder_operator_token_refused_outside_development(token: str) -> None:
    with pytest.raises(InsecureSettingsError, match="OPERATOR_TOKEN"):
        load_settings(operator_token=token, _env_file=None)
    load_settings(operator_token=token, mode="development", _env_file=None)


def test_weak_device_secret_and_bad_device_ids_refused() -> None:
    with pytest.raises(InsecureSettingsError, match="device gw-1"):
        load_settings(operator_token=STRONG, devices={"gw-1": "short"})
    with pytest.raises(ValidationError, match="must match"):
        CloudSettings(operator_token=STRONG, devices={"../etc": "x" * 20})  # type: ignore[arg-type,dict-item]
    with pytest.raises(ValidationError, match="id=secret"):
        CloudSettings(operator_token=STRONG, devices="gw-1")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Secrets from files
# --------------------------------------------------------------------------------------------------


def secret_file(tmp_path: Path, name: str, content: str) -> str:
    path = tmp_path / name
    path.write_text(content + "\n")
    return str(path)


def test_every_secret_can_come_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(SECRET_FIELDS) == {"operator_token", "devices", "database_url", "database_password"}
    monkeypatch.setenv("EDGEDRIFT_CLOUD_OPERATOR_TOKEN_FILE", secret_file(tmp_path, "token", STRONG))
    # A device list file: one id=secret per line (commas work too).
    devices = f"dev-1=a-{STRONG}\ndev-2=b-{STRONG},dev-3=c-{STRONG}"
    monkeypatch.setenv("EDGEDRIFT_CLOUD_DEVICES_FILE", secret_file(tmp_path, "devices", devices))
    monkeypatch.setenv(
        "EDGEDRIFT_CLOUD_DATABASE_URL_FILE",
        secret_file(tmp_path, "url", "postgresql+psycopg://edgedrift@db/x"),
    )
    monkeypatch.setenv("EDGEDRIFT_CLOUD_DATABASE_PASSWORD_FILE", secret_file(tmp_path, "pw", DB_PASSWORD))
    s = load_settings()
    assert s.operator_token.get_secret_value() == STRONG
    assert {k: v.get_secret_value() for k, v in s.devices.items()} == {
        "dev-1": f"a-{STRONG}",
        "dev-2": f"b-{STRONG}",
        "dev-3": f"c-{STRONG}",
    }
    from sqlalchemy.engine import make_url

    url = make_url(s.database_url)
    assert (url.username, url.password, url.host, url.database) == ("edgedrift", DB_PASSWORD, "db", "x")
    assert DB_PASSWORD not in repr(s) and STRONG not in repr(s) and "database_url" not in repr(s)


def test_files_named_in_the_dotenv_file_are_read(tmp_path: Path) -> None:
    token = secret_file(tmp_path, "token", STRONG)
    (tmp_path / ".env").write_text(f"EDGEDRIFT_CLOUD_OPERATOR_TOKEN_FILE={token}\n")
    assert load_settings().operator_token.get_secret_value() == STRONG
    without_dotenv = load_settings(_env_file=None, mode="development")
    assert without_dotenv.operator_token.get_secret_value() == "change-me"


def test_a_value_and_a_file_for_one_secret_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGEDRIFT_CLOUD_OPERATOR_TOKEN", "another-" + STRONG)
    monkeypatch.setenv("EDGEDRIFT_CLOUD_OPERATOR_TOKEN_FILE", secret_file(tmp_path, "token", STRONG))
    with pytest.raises(ConfigurationError, match="not both") as caught:
        load_settings()
    assert STRONG not in str(caught.value)
    monkeypatch.setenv("EDGEDRIFT_CLOUD_OPERATOR_TOKEN", "")  # blanked out by an override: the file wins
    assert load_settings().operator_token.get_secret_value() == STRONG


def test_a_missing_file_names_the_variable_and_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDGEDRIFT_CLOUD_DEVICES_FILE", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigurationError) as caught:
        load_settings(operator_token=STRONG)
    missing = tmp_path / "nowhere"
    assert caught.value.problems == [
        f"EDGEDRIFT_CLOUD_DEVICES_FILE: cannot read {missing} (No such file or directory)"
    ]


# --------------------------------------------------------------------------------------------------
# The database password
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("password", ["postgres-insecure", "change-me", "short-pw"])
def test_a_weak_database_password_is_refused_in_production(password: str) -> None:
    url = f"postgresql+psycopg://edgedrift:{password}@db:5432/edgedrift"
    with pytest.raises(InsecureSettingsError) as caught:
        load_settings(operator_token=STRONG, database_url=url, _env_file=None)
    refusal = "EDGEDRIFT_CLOUD_DATABASE_URL: refusing to start in production mode: its password "
    assert caught.value.problems[0].startswith(refusal)
    assert password not in str(caught.value)
    with pytest.raises(InsecureSettingsError, match="EDGEDRIFT_CLOUD_DATABASE_PASSWORD"):
        load_settings(
            operator_token=STRONG,
            database_url="postgresql+psycopg://edgedrift@db/x",
            database_password=password,
            _env_file=None,
        )
    load_settings(database_url=url, mode="development", _env_file=None)


def test_a_url_without_password_is_accepted_in_production() -> None:
    """Other ways to authenticate (trust, .pgpass, certificates) need no password in the URL."""
    url = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    assert load_settings(operator_token=STRONG, database_url=url, _env_file=None).database_url == url


def test_the_password_goes_into_the_url_once() -> None:
    s = load_settings(
        operator_token=STRONG, database_url="postgresql+psycopg://u@h/d", database_password="", _env_file=None
    )
    assert s.database_password is None and s.database_url == "postgresql+psycopg://u@h/d"
    with pytest.raises(ConfigurationError, match="holds a password too"):
        load_settings(
            operator_token=STRONG,
            database_url="postgresql+psycopg://u:another-long-password-1@h/d",
            database_password=DB_PASSWORD,
            _env_file=None,
        )
    with pytest.raises(ConfigurationError, match="SQLite"):
        load_settings(operator_token=STRONG, database_password=DB_PASSWORD, _env_file=None)


# --------------------------------------------------------------------------------------------------
# Errors: one line per problem, the variable and the reason, never the value
# --------------------------------------------------------------------------------------------------


def test_every_problem_is_one_line_without_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    secret_in_url = "Pg-" + "9" * 20
    monkeypatch.setenv(
        "EDGEDRIFT_CLOUD_DATABASE_URL", f"postgresql+psycopg://u:{secret_in_url}@db:notaport/x"
    )
    monkeypatch.setenv("EDGEDRIFT_CLOUD_OPERATOR_TOKEN", "tok-3x4mpl3")
    monkeypatch.setenv("EDGEDRIFT_CLOUD_DEVICES", "dev-1=dev1-k3y-short,dev-2")
    monkeypatch.setenv("EDGEDRIFT_CLOUD_MAX_ROWS", "many")
    with pytest.raises(ConfigurationError) as caught:
        load_settings(_env_file=None)
    assert not isinstance(caught.value, InsecureSettingsError), "not only weak secrets"
    variables = [line.split(":", 1)[0] for line in caught.value.problems]
    assert variables == [
        "EDGEDRIFT_CLOUD_DATABASE_URL",
        "EDGEDRIFT_CLOUD_OPERATOR_TOKEN",
        "EDGEDRIFT_CLOUD_DEVICES",
        "EDGEDRIFT_CLOUD_MAX_ROWS",
    ]
    text = str(caught.value)
    for value in (secret_in_url, "tok-3x4mpl3", "dev1-k3y-short", "many", "input_value"):
        assert value not in text
    assert "is not a database URL" in text and "entry 2 needs the form id=secret" in text


def test_pydantic_errors_hide_the_input_too() -> None:
    """Constructing CloudSettings directly (tests, benchmarks) must not print a value either."""
    with pytest.raises(ValidationError) as caught:
        CloudSettings(operator_token="tok-3x4mpl3", database_url="nonsense://u:pw-9876@h", _env_file=None)  # type: ignore[call-arg,arg-type]
    assert "tok-3x4mpl3" not in str(caught.value) and "pw-9876" not in str(caught.value)
