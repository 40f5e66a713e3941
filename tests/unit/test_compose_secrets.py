"""One mode variable (EDGEDRIFT_MODE) reaches every service, every secret has a ``*_FILE`` alternative (or
is listed in deploy/README.md as not having one yet), and in production the broker's entry point and
PostgreSQL's refuse the public defaults as the cloud does."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.compose import (
    BASE,
    COMPOSE,
    EDGES,
    POSTGRES_OVERRIDE,
    PRODUCTION,
    README,
    SERVICES,
    WITH_POSTGRES,
    cloud_env,
    cloud_settings,
    compose_variables,
    dockerfile_env,
    dockerfile_of,
    environment,
    load_compose,
    merge,
    mqtt_password,
    resolve,
    run_entrypoint,
)

from edgedrift.secrets import weak_secret_reason
from edgedrift_cloud.settings import SECRET_FIELDS

#: Where each non-agent service reads the stack's mode.
MODE_VARIABLES = {
    "cloud": "EDGEDRIFT_CLOUD_MODE",
    "trainer-worker": "EDGEDRIFT_CLOUD_MODE",
    "mosquitto": "EDGEDRIFT_MODE",
    "postgres": "EDGEDRIFT_MODE",
}
SECRET_NAME = re.compile(r"(PASSWORD|SECRET|TOKEN)$")


STRONG = "k9Qz-long-enough-random-value"


@pytest.mark.parametrize("mode", ["development", "production"])
def test_one_mode_variable_reaches_every_service(mode: str) -> None:
    project = load_compose(COMPOSE, POSTGRES_OVERRIDE, env={"EDGEDRIFT_MODE": mode})
    reached = set()
    for name, service in project["services"].items():
        env = environment(service)
        if name in EDGES:
            assert env["EDGEDRIFT_EDGE_MODE"] == mode, name
        elif name not in ("replay", "redis") and "monitoring" not in service.get("profiles", []):
            # replay: a publisher reading flags only; Redis, Prometheus, Grafana: no EdgeDrift code
            assert env[MODE_VARIABLES[name]] == mode, name
        reached.add(name)
    assert {"mosquitto", "cloud", "postgres", *EDGES} <= reached
    default = load_compose(COMPOSE, POSTGRES_OVERRIDE)["services"]
    assert {environment(default[n])[v] for n, v in MODE_VARIABLES.items()} == {"development"}


def test_agents_refuse_the_defaults_in_production() -> None:
    from edgedrift_edge.settings import AgentSettings

    services = load_compose(COMPOSE, env=PRODUCTION)["services"]
    for name in EDGES:
        env = {**dockerfile_env(dockerfile_of(services[name])), **environment(services[name])}
        with pytest.raises(ValueError) as caught:
            AgentSettings.load(environ=env)
        for variable in ("EDGEDRIFT_EDGE_DEVICE_SECRET", "EDGEDRIFT_EDGE_BROKER_PASSWORD"):
            assert env[variable] not in str(caught.value), f"{name}: the error prints {variable}"


def compose_secrets(project: Mapping[str, Any] = WITH_POSTGRES) -> list[tuple[str, str]]:
    """(service, variable or argument) for every secret the compose files hand to a container: variables
    named like one, and any value that holds a default secret (a URL with a password, a device list)."""
    defaults = {
        value
        for name, value in compose_variables(COMPOSE, POSTGRES_OVERRIDE).items()
        if value and SECRET_NAME.search(name)
    }
    found: list[tuple[str, str]] = []
    for name, service in project["services"].items():
        for variable, value in environment(service).items():
            if SECRET_NAME.search(variable) or any(d in value for d in defaults):
                found.append((name, variable))
        argv = service.get("command") or []
        for i, arg in enumerate(argv):
            if any(d in arg for d in defaults):
                found.append((name, argv[i - 1] if i and argv[i - 1].startswith("--") else arg))
    return found


def not_yet_from_files() -> str:
    """The paragraph of deploy/README.md that lists secrets without a file alternative."""
    match = re.search(
        r"^Not yet from files:(.*?)(?:\n\n|\Z)", README.read_text(), flags=re.MULTILINE | re.DOTALL
    )
    assert match, "deploy/README.md has no 'Not yet from files:' paragraph"
    return match.group(1)


def run_postgres_entrypoint(tmp_path: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """The override's entry point under sh, with a stub docker-entrypoint.sh that reports its arguments."""
    service = WITH_POSTGRES["services"]["postgres"]
    bin_dir = tmp_path / "pg-bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "docker-entrypoint.sh").write_text('#!/bin/sh\necho "docker-entrypoint.sh $*"\n')
    (bin_dir / "docker-entrypoint.sh").chmod(0o755)
    return subprocess.run(
        [*service["entrypoint"], *service["command"]],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_every_secret_can_come_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each secret variable has a NAME_FILE twin its reader accepts (Docker/Kubernetes secrets), or is
    listed in deploy/README.md as not having one yet."""
    from edgedrift_edge.settings import AgentSettings

    secrets = compose_secrets()
    assert ("cloud", "EDGEDRIFT_CLOUD_OPERATOR_TOKEN") in secrets
    assert ("cloud", "EDGEDRIFT_CLOUD_DEVICES") in secrets
    assert ("postgres", "POSTGRES_PASSWORD") in secrets and ("mosquitto", "MQTT_DEV_1_PASSWORD") in secrets
    services = WITH_POSTGRES["services"]
    files = tmp_path / "secrets"
    files.mkdir()

    def as_file(name: str, value: str) -> str:
        path = files / name
        path.write_text(value + "\n")
        return str(path)

    mosquitto = environment(services["mosquitto"])
    from_files = {**mosquitto}
    cloud = cloud_env(WITH_POSTGRES)
    cloud_from_files = {**cloud}
    undocumented = []
    for service, variable in secrets:
        env = environment(services[service])
        if service == "mosquitto":
            assert re.fullmatch(r"MQTT_[A-Z0-9_]+_PASSWORD", variable), variable
            from_files |= {variable: "", f"{variable}_FILE": as_file(variable, env[variable])}
        elif variable.startswith("EDGEDRIFT_CLOUD_"):
            assert variable.removeprefix("EDGEDRIFT_CLOUD_").lower() in SECRET_FIELDS, variable
            cloud_from_files |= {variable: "", f"{variable}_FILE": as_file(variable, env[variable])}
        elif variable.startswith("EDGEDRIFT_EDGE_") and f"{variable}_FILE" in AgentSettings.env_names():
            continue
        elif variable == "EDGEDRIFT_REPLAY_BROKER_PASSWORD":
            from edgedrift_edge.cli import replay_broker_url

            env_file = {f"{variable}_FILE": as_file(variable, env[variable])}
            assert replay_broker_url("mqtt://replay@b:1883", None, env_file) == replay_broker_url(
                "mqtt://replay@b:1883", None, {variable: env[variable]}
            )
        elif (service, variable) == ("postgres", "POSTGRES_PASSWORD"):
            # The image reads POSTGRES_PASSWORD_FILE itself; the override's check before it must too.
            path = as_file("postgres", STRONG)
            result = run_postgres_entrypoint(
                tmp_path, {**env, **PRODUCTION, "POSTGRES_PASSWORD": "", "POSTGRES_PASSWORD_FILE": path}
            )
            assert result.returncode == 0 and "docker-entrypoint.sh postgres" in result.stdout, result.stderr
        elif variable not in not_yet_from_files():
            undocumented.append((service, variable))
    assert not undocumented, f"secrets without a *_FILE alternative, not in deploy/README.md: {undocumented}"

    result = run_entrypoint(tmp_path, from_files)
    assert result.returncode == 0, result.stderr
    users = dict(line.split(":", 1) for line in (tmp_path / "auth" / "passwd").read_text().splitlines())
    assert users["operator"] == mosquitto["MQTT_OPERATOR_PASSWORD"]
    assert users["dev-2"] == mqtt_password(mosquitto, "dev-2")
    from_env, from_file = cloud_settings(cloud, monkeypatch), cloud_settings(cloud_from_files, monkeypatch)
    assert from_file.database_url == from_env.database_url
    assert from_file.operator_token == from_env.operator_token and from_file.devices == from_env.devices


@pytest.mark.parametrize(
    "variable", [v for v in environment(SERVICES["mosquitto"]) if v.endswith("_PASSWORD")]
)
def test_entrypoint_refuses_each_default_in_production(tmp_path: Path, variable: str) -> None:
    env = environment(load_compose(COMPOSE, env=PRODUCTION)["services"]["mosquitto"])
    assert env["EDGEDRIFT_MODE"] == "production"
    strong = {v: f"{v.lower()}-{STRONG}" for v in env if v.endswith("_PASSWORD")}
    passwd = shutil.which("mosquitto_passwd")
    (tmp_path / "refused").mkdir()
    refused = run_entrypoint(tmp_path / "refused", {**env, **strong, variable: env[variable]}, passwd=passwd)
    assert refused.returncode == 1, refused.stdout
    assert f"{variable} is a placeholder or a development default" in refused.stderr
    assert env[variable] not in refused.stdout + refused.stderr
    assert not (tmp_path / "refused" / "auth" / "passwd").exists(), "a refused start left a password file"
    (tmp_path / "accepted").mkdir()
    accepted = run_entrypoint(tmp_path / "accepted", {**env, **strong}, passwd=passwd)
    assert accepted.returncode == 0, accepted.stderr
    (tmp_path / "development").mkdir()
    development = run_entrypoint(
        tmp_path / "development", {**env, "EDGEDRIFT_MODE": "development"}, passwd=passwd
    )
    assert development.returncode == 0, development.stderr


def test_entrypoint_reads_password_files(tmp_path: Path) -> None:
    env = environment(SERVICES["mosquitto"])
    path = tmp_path / "operator"
    path.write_text(STRONG + "\r\n")
    result = run_entrypoint(
        tmp_path, {**env, "MQTT_OPERATOR_PASSWORD": "", "MQTT_OPERATOR_PASSWORD_FILE": str(path)}
    )
    assert result.returncode == 0, result.stderr
    assert f"operator:{STRONG}\n" in (tmp_path / "auth" / "passwd").read_text()
    both = run_entrypoint(tmp_path, {**env, "MQTT_OPERATOR_PASSWORD_FILE": str(path)})
    assert (
        both.returncode == 1
        and "not both" in both.stderr
        and env["MQTT_OPERATOR_PASSWORD"] not in both.stderr
    )
    missing = run_entrypoint(
        tmp_path, {**env, "MQTT_OPERATOR_PASSWORD": "", "MQTT_OPERATOR_PASSWORD_FILE": str(tmp_path / "none")}
    )
    assert (
        missing.returncode == 1
        and f"MQTT_OPERATOR_PASSWORD_FILE: cannot read {tmp_path / 'none'}" in missing.stderr
    )


def test_postgres_refuses_its_default_in_production(tmp_path: Path) -> None:
    env = environment(load_compose(COMPOSE, POSTGRES_OVERRIDE, env=PRODUCTION)["services"]["postgres"])
    refused = run_postgres_entrypoint(tmp_path, env)
    assert refused.returncode == 1 and "POSTGRES_PASSWORD is a placeholder" in refused.stderr
    assert env["POSTGRES_PASSWORD"] not in refused.stdout + refused.stderr
    assert run_postgres_entrypoint(tmp_path, {**env, "POSTGRES_PASSWORD": STRONG}).returncode == 0
    development = run_postgres_entrypoint(tmp_path, {**env, "EDGEDRIFT_MODE": "development"})
    assert development.returncode == 0 and "docker-entrypoint.sh postgres" in development.stdout


@pytest.mark.parametrize(
    "value",
    [
        "change-me",
        "operator-mqtt-insecure",
        "Replace-With-A-Long-Random-Token",
        "CHANGEME-but-long-enough",
        "development",
        "x" * 15,
        "x" * 16,
        "abababababababab",
        "passwordpassword",
        "secret-but-long-enough-0123",
        "9f86d081884c7d659a2feaa0c55ad015",
    ],
)
def test_the_entry_points_apply_the_python_rule(tmp_path: Path, value: str) -> None:
    """entrypoint.sh and the PostgreSQL override refuse exactly what edgedrift.secrets refuses."""
    accepted = weak_secret_reason(value) is None
    env = {**environment(SERVICES["mosquitto"]), **PRODUCTION}
    strong = {v: f"{v.lower()}-{STRONG}" for v in env if v.endswith("_PASSWORD")}
    mosquitto = run_entrypoint(tmp_path, {**env, **strong, "MQTT_REPLAY_PASSWORD": value})
    assert (mosquitto.returncode == 0) == accepted, mosquitto.stderr
    postgres = run_postgres_entrypoint(tmp_path, {**PRODUCTION, "POSTGRES_PASSWORD": value})
    assert (postgres.returncode == 0) == accepted, postgres.stderr


def readme_overrides() -> list[dict[str, Any]]:
    """The YAML blocks of deploy/README.md's "Secrets from files": the override and its PostgreSQL part."""
    section = README.read_text().split("### Secrets from files", 1)[1]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 2, "expected the override and its PostgreSQL part"
    return [yaml.safe_load(block) for block in blocks]


def test_the_documented_secrets_override_covers_every_secret() -> None:
    """Merged as documented, every secret variable is blanked and read from a declared Docker secret."""
    base_override, postgres_override = readme_overrides()
    base = yaml.safe_load(COMPOSE.read_text())
    with_postgres = merge(base, yaml.safe_load(POSTGRES_OVERRIDE.read_text()))
    stacks = [
        (merge(base, base_override), compose_secrets(BASE)),
        (merge(merge(with_postgres, base_override), postgres_override), compose_secrets(WITH_POSTGRES)),
    ]
    for raw, secrets in stacks:
        project = {k: v for k, v in resolve(raw, {}).items() if not k.startswith("x-")}
        declared = project["secrets"]
        for service, variable in secrets:
            if variable.startswith("-"):  # a command-line flag: only a documented gap may remain
                assert variable in not_yet_from_files(), (service, variable)
                continue
            env = environment(project["services"][service])
            assert env[variable] == "", f"{service}: {variable} keeps its compose value"
            path = env.get(f"{variable}_FILE", "")
            name = path.removeprefix("/run/secrets/")
            assert path.startswith("/run/secrets/") and name in declared, f"{service}: {variable}_FILE"
            assert name in project["services"][service].get("secrets", []), f"{service} does not mount {name}"
            assert declared[name]["file"].startswith("./secrets/")
