"""The agent's settings on pydantic-settings: the same ``EDGEDRIFT_EDGE_*`` variables, flags on top, secrets
from files, errors that name the setting and never print a value; ``model_validate`` reads nothing but the
values it is given."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_settings import BaseSettings

from edgedrift_edge.settings import AgentSettings, SettingsError

SECRET = "a-real-device-secret-0123456789"


def test_the_process_environment_is_read_with_the_prefix_and_flags_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert issubclass(AgentSettings, BaseSettings)
    monkeypatch.setenv("EDGEDRIFT_EDGE_DEVICE_ID", "dev-9")
    monkeypatch.setenv("EDGEDRIFT_EDGE_QUEUE_SIZE", "77")
    monkeypatch.setenv("EDGEDRIFT_EDGE_HEARTBEAT_EVERY_S", "")  # empty: unset, the default holds
    monkeypatch.setenv("EDGEDRIFT_EDGE_SOMETHING_ELSE", "x")  # not a setting: ignored, as before
    s = AgentSettings.load({"queue_size": "5", "strategy": None})
    assert (s.device_id, s.queue_size, s.heartbeat_every_s, s.strategy) == ("dev-9", 5, 10.0, "druid")
    assert AgentSettings.load().queue_size == 77


def test_model_validate_takes_only_the_values_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEDRIFT_EDGE_QUEUE_SIZE", "77")
    monkeypatch.setenv("EDGEDRIFT_EDGE_DEVICE_SECRET_FILE", "/nonexistent")
    s = AgentSettings.model_validate({"device_id": "dev-1"})
    assert s.queue_size == 20_000 and s.device_secret is None
    with pytest.raises(SettingsError, match="EDGEDRIFT_EDGE_DEVICE_SECRET_FILE: cannot read /nonexistent"):
        AgentSettings.load({"device_id": "dev-1"})


def test_a_list_setting_reads_comma_separated_names_or_json() -> None:
    env = {"EDGEDRIFT_EDGE_DEVICE_ID": "d", "EDGEDRIFT_EDGE_STRATEGY": "shrub-ensemble"}
    s = AgentSettings.load(environ={**env, "EDGEDRIFT_EDGE_CLASSES": "oak, ash,elm"})
    assert s.classes == ["oak", "ash", "elm"]
    assert AgentSettings.load(environ={**env, "EDGEDRIFT_EDGE_CLASSES": '["a", "b"]'}).classes == ["a", "b"]
    with pytest.raises(SettingsError, match="--classes / EDGEDRIFT_EDGE_CLASSES: must be a JSON list"):
        AgentSettings.load(environ={**env, "EDGEDRIFT_EDGE_CLASSES": "[oops"})


def test_every_secret_comes_from_a_file_and_errors_never_show_one(tmp_path: Path) -> None:
    files = {}
    for name, value in {"device": SECRET, "broker": "broker-pass/word-0123456", "gw": SECRET + "-gw"}.items():
        files[name] = tmp_path / name
        files[name].write_text(value + "\n")
    s = AgentSettings.load(
        environ={
            "EDGEDRIFT_EDGE_GATEWAY_ID": "gw-1",
            "EDGEDRIFT_EDGE_MODE": "production",
            "EDGEDRIFT_EDGE_BROKER_URL": "mqtts://gw-1@broker:8883",
            "EDGEDRIFT_EDGE_BROKER_PASSWORD_FILE": str(files["broker"]),
            "EDGEDRIFT_EDGE_GATEWAY_SECRET_FILE": str(files["gw"]),
        }
    )
    assert s.gateway_secret is not None and s.gateway_secret.get_secret_value() == SECRET + "-gw"
    assert s.effective_broker_url == "mqtts://gw-1:broker-pass%2Fword-0123456@broker:8883"
    both = {
        "EDGEDRIFT_EDGE_DEVICE_ID": "d",
        "EDGEDRIFT_EDGE_DEVICE_SECRET": SECRET,
        "EDGEDRIFT_EDGE_DEVICE_SECRET_FILE": str(files["device"]),
    }
    with pytest.raises(SettingsError, match="set either EDGEDRIFT_EDGE_DEVICE_SECRET or") as err:
        AgentSettings.load(environ=both)
    assert SECRET not in str(err.value)
    for bad in ({"EDGEDRIFT_EDGE_QUEUE_SIZE": SECRET}, {"EDGEDRIFT_EDGE_MODE": SECRET}):
        with pytest.raises(SettingsError) as err:
            AgentSettings.load(environ={"EDGEDRIFT_EDGE_DEVICE_ID": "d", **bad})
        assert SECRET not in str(err.value) and "EDGEDRIFT_EDGE_" in str(err.value)
    weak = tmp_path / "weak"
    weak.write_text("short-pw")
    with pytest.raises(SettingsError, match="production mode: the broker password is shorter") as err:
        AgentSettings.load(
            {"broker_url": "mqtt://d@broker:1883"},
            environ={
                "EDGEDRIFT_EDGE_DEVICE_ID": "d",
                "EDGEDRIFT_EDGE_MODE": "production",
                "EDGEDRIFT_EDGE_DEVICE_SECRET_FILE": str(files["device"]),
                "EDGEDRIFT_EDGE_BROKER_PASSWORD_FILE": str(weak),
            },
        )
    assert "short-pw" not in str(err.value)


def test_tls_files_and_mqtt5_expiries_come_from_the_environment(tmp_path: Path) -> None:
    s = AgentSettings.load(
        environ={
            "EDGEDRIFT_EDGE_DEVICE_ID": "dev-1",
            "EDGEDRIFT_EDGE_BROKER_URL": "mqtts://broker:8883",
            "EDGEDRIFT_EDGE_TLS_CA_FILE": str(tmp_path / "ca.crt"),
            "EDGEDRIFT_EDGE_TLS_CERT_FILE": str(tmp_path / "dev-1.crt"),
            "EDGEDRIFT_EDGE_TLS_KEY_FILE": str(tmp_path / "dev-1.key"),
            "EDGEDRIFT_EDGE_MQTT_VERSION": "5",
            "EDGEDRIFT_EDGE_SESSION_EXPIRY_S": "3600",
            "EDGEDRIFT_EDGE_MESSAGE_EXPIRY_S": "120",
        }
    )
    assert (s.tls_cert_file, s.session_expiry_s, s.message_expiry_s) == (
        str(tmp_path / "dev-1.crt"),
        3600,
        120,
    )
    with pytest.raises(SettingsError, match=r"--session-expiry-s / EDGEDRIFT_EDGE_SESSION_EXPIRY_S: .*"):
        AgentSettings.load(environ={"EDGEDRIFT_EDGE_DEVICE_ID": "d", "EDGEDRIFT_EDGE_SESSION_EXPIRY_S": "-1"})


@pytest.mark.parametrize(
    ("url", "why"),
    [
        (f"http://user:{SECRET}@cloud:port", "the port is not a number"),
        (f"http://user:{SECRET}@cloud:0", "the port is not a number"),
        (SECRET, "must start with http:// or https://"),
        (f"ftp://{SECRET}@cloud", "must start with http:// or https://"),
        ("http://:8000", "has no host"),
    ],
)
def test_a_cloud_url_the_client_cannot_use_is_refused_at_start_without_showing_it(url: str, why: str) -> None:
    """It was a traceback at the first request (a port that is not a number), or a warning at every
    heartbeat of an agent that looked healthy (no scheme)."""
    with pytest.raises(SettingsError, match=why) as err:
        AgentSettings.load({"cloud_url": url}, environ={"EDGEDRIFT_EDGE_DEVICE_ID": "d"})
    assert SECRET not in str(err.value) and "EDGEDRIFT_EDGE_CLOUD_URL" in str(err.value)
    for fine in ("https://[::1]:8443/base", "http://cloud.example"):
        assert (
            AgentSettings.load({"cloud_url": fine}, environ={"EDGEDRIFT_EDGE_DEVICE_ID": "d"}).cloud_url
            == fine
        )


@pytest.mark.parametrize("prefix", ["a/#", "a+b", "#", "$SYS", "", "a//b", "/a", "a/", "x" * 129, "a\x00b"])
def test_a_topic_prefix_the_broker_cannot_take_is_refused_at_start(prefix: str) -> None:
    """A wildcard in the prefix made the broker refuse every publish and the start time out after 30 s."""
    with pytest.raises(SettingsError, match="EDGEDRIFT_EDGE_TOPIC_PREFIX"):
        AgentSettings.load({"topic_prefix": prefix}, environ={"EDGEDRIFT_EDGE_DEVICE_ID": "d"})
    good = AgentSettings.load({"topic_prefix": "site-1/edgedrift"}, environ={"EDGEDRIFT_EDGE_DEVICE_ID": "d"})
    assert good.topic_prefix == "site-1/edgedrift"
