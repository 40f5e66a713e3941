"""Service settings: device list parsing and the refusal of placeholder secrets outside development."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from edgedrift_cloud.settings import CloudSettings, InsecureSettingsError

STRONG = "a-strong-operator-token-123"


def test_devices_parse_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEDRIFT_CLOUD_OPERATOR_TOKEN", STRONG)
    monkeypatch.setenv("EDGEDRIFT_CLOUD_DEVICES", "gw-1=aaaaaaaaaaaaaaaaaaaa, gw_2=bbbbbbbbbbbbbbbbbbbb")
    s = CloudSettings()
    assert {k: v.get_secret_value() for k, v in s.devices.items()} == {
        "gw-1": "a" * 20,
        "gw_2": "b" * 20,
    }
    assert STRONG not in repr(s)


@pytest.mark.parametrize("token", ["change-me", "", "too-short"])
def test_placeholder_operator_token_refused_outside_development(token: str) -> None:
    with pytest.raises(InsecureSettingsError, match="OPERATOR_TOKEN"):
        CloudSettings(operator_token=token, _env_file=None)  # type: ignore[call-arg,arg-type]
    CloudSettings(operator_token=token, mode="development", _env_file=None)  # type: ignore[call-arg,arg-type]


def test_weak_device_secret_and_bad_device_ids_refused() -> None:
    with pytest.raises(InsecureSettingsError, match="device gw-1"):
        CloudSettings(operator_token=STRONG, devices={"gw-1": "short"})  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="must match"):
        CloudSettings(operator_token=STRONG, devices={"../etc": "x" * 20})  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="id=secret"):
        CloudSettings(operator_token=STRONG, devices="gw-1")  # type: ignore[arg-type]
