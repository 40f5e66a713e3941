"""The compose settings: every ``EDGEDRIFT_*`` variable is a setting and its compose value is accepted,
defaults are documented, the services agree on device ids, secrets and broker users, long-running
services have healthchecks and start in order, and the PostgreSQL override works."""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

import pytest
from support.compose import (
    BASE,
    COMPOSE,
    EDGES,
    ENV_EXAMPLE,
    OTHER_EDGEDRIFT_VARIABLES,
    POSTGRES_OVERRIDE,
    PRODUCTION,
    PROJECTS,
    SERVICES,
    WITH_POSTGRES,
    cloud_env,
    cloud_settings,
    compose_variables,
    dockerfile_env,
    dockerfile_of,
    effective_command,
    environment,
    has_healthcheck,
    load_compose,
    long_running,
    mqtt_password,
)
from support.dockerfiles import ROOT

from edgedrift_cloud.settings import CloudSettings, InsecureSettingsError


def agent_env_names() -> set[str]:
    from edgedrift_edge.settings import AgentSettings

    return set(AgentSettings.env_names())


CLOUD_ENV_NAMES = {f"EDGEDRIFT_CLOUD_{name.upper()}" for name in CloudSettings.model_fields}


@pytest.mark.parametrize("project", PROJECTS)
def test_edgedrift_variables_are_settings(project: str) -> None:
    agent_names = agent_env_names()
    for name, service in PROJECTS[project]["services"].items():
        image_env = dockerfile_env(dockerfile_of(service))
        command = effective_command(service) if dockerfile_of(service) else []
        for variable in {**image_env, **environment(service)}:
            if variable.startswith("EDGEDRIFT_CLOUD_"):
                assert variable in CLOUD_ENV_NAMES, f"{name}: {variable} is no field of CloudSettings"
            elif variable.startswith("EDGEDRIFT_EDGE_"):
                assert variable in agent_names, f"{name}: {variable} is not in AgentSettings.env_names()"
                # Only `run` reads them (AgentSettings); `replay` takes flags, it would ignore them.
                assert variable in image_env or command[:2] == ["edgedrift-edge", "run"], (
                    f"{name}: `{' '.join(command[:2])}` does not read {variable}; pass a flag"
                )
            elif variable.startswith("EDGEDRIFT_"):
                assert variable in OTHER_EDGEDRIFT_VARIABLES, f"{name}: unknown variable {variable}"


@pytest.mark.parametrize("project", PROJECTS)
def test_settings_accept_the_compose_values(project: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from edgedrift_edge.settings import AgentSettings

    settings = cloud_settings(cloud_env(PROJECTS[project]), monkeypatch)
    assert settings.mode == "development"
    assert settings.is_sqlite == (project == "base")
    for name in EDGES:
        service = PROJECTS[project]["services"][name]
        agent = AgentSettings.load(environ={**dockerfile_env(dockerfile_of(service)), **environment(service)})
        assert agent.device_id in settings.devices


def test_default_secrets_are_refused_in_production(monkeypatch: pytest.MonkeyPatch) -> None:
    """The development defaults are public: production mode must not start with them."""
    env = cloud_env(load_compose(COMPOSE, env=PRODUCTION))
    assert env["EDGEDRIFT_CLOUD_MODE"] == "production"
    with pytest.raises(InsecureSettingsError, match="OPERATOR_TOKEN") as caught:
        cloud_settings(env, monkeypatch)
    assert [p.split(":")[0] for p in caught.value.problems] == [
        "EDGEDRIFT_CLOUD_OPERATOR_TOKEN",
        "EDGEDRIFT_CLOUD_DEVICES",
    ]
    strong = "9f86d081884c7d659a2feaa0c55ad015"
    with pytest.raises(InsecureSettingsError, match="device"):
        cloud_settings({**env, "EDGEDRIFT_CLOUD_OPERATOR_TOKEN": strong}, monkeypatch)
    devices = ",".join(f"dev-{n}={n}{strong}" for n in (1, 2, 3))
    secure = {**env, "EDGEDRIFT_CLOUD_OPERATOR_TOKEN": strong, "EDGEDRIFT_CLOUD_DEVICES": devices}
    cloud_settings(secure, monkeypatch)
    # The PostgreSQL override's default password too.
    postgres = cloud_env(load_compose(COMPOSE, POSTGRES_OVERRIDE, env=PRODUCTION))
    with pytest.raises(InsecureSettingsError, match="EDGEDRIFT_CLOUD_DATABASE_PASSWORD"):
        cloud_settings(
            {**postgres, **{k: secure[k] for k in secure if "TOKEN" in k or "DEVICES" in k}}, monkeypatch
        )


def test_variables_are_documented_with_their_defaults() -> None:
    used = compose_variables(COMPOSE, POSTGRES_OVERRIDE)
    documented: dict[str, str] = {}
    commented: dict[str, str] = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if match := re.fullmatch(r"([A-Z][A-Z0-9_]*)=(.*)", line.strip()):
            documented[match.group(1)] = match.group(2)
        elif match := re.fullmatch(r"#\s*([A-Z][A-Z0-9_]*)=(\S*)", line.strip()):
            commented[match.group(1)] = match.group(2)
    assert set(used) == set(documented), (
        f"only in compose: {set(used) - set(documented)}; only in .env.example: {set(documented) - set(used)}"
    )
    for name, default in used.items():
        assert default is not None, f"${{{name}}} has no default"
        assert documented[name] == default, (
            f"{name}: .env.example says {documented[name]!r}, compose {default!r}"
        )
    for file in commented["COMPOSE_FILE"].split(":"):
        assert (ROOT / file).is_file(), f"COMPOSE_FILE names {file}, which does not exist"


def test_env_example_names_do_not_reach_a_local_cloud() -> None:
    """Copied to .env at the root, it must not configure an `edgedrift-cloud` (or agent) started there."""
    names = re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), flags=re.MULTILINE)
    assert names and not [n for n in names if n.startswith(("EDGEDRIFT_CLOUD_", "EDGEDRIFT_EDGE_"))]


def device_secrets(cloud: Mapping[str, str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in cloud["EDGEDRIFT_CLOUD_DEVICES"].split(","))


def test_edges_agree_with_the_broker_the_cloud_and_the_replay() -> None:
    mosquitto = environment(SERVICES["mosquitto"])
    cloud = cloud_env(BASE)
    cloud_argv = effective_command(SERVICES["cloud"])
    cloud_port = cloud_argv[cloud_argv.index("--port") + 1]
    broker_ports = {p.rsplit(":", 1)[1] for p in SERVICES["mosquitto"]["ports"]}
    devices, volumes = [], []
    for name in EDGES:
        service = SERVICES[name]
        env = {**dockerfile_env(dockerfile_of(service)), **environment(service)}
        device = env["EDGEDRIFT_EDGE_DEVICE_ID"]
        devices.append(device)
        broker = urlsplit(env["EDGEDRIFT_EDGE_BROKER_URL"])
        assert (broker.hostname, str(broker.port)) in {("mosquitto", p) for p in broker_ports}
        assert broker.username == device, f"{name}: the ACL's %u patterns need the device id as broker user"
        assert broker.password is None, (
            f"{name}: the broker password belongs in EDGEDRIFT_EDGE_BROKER_PASSWORD"
        )
        assert env["EDGEDRIFT_EDGE_BROKER_PASSWORD"] == mqtt_password(mosquitto, device), (
            f"{name}: broker password differs"
        )
        assert device in mosquitto["MQTT_DEVICES"].replace(",", " ").split()
        assert device_secrets(cloud)[device] == env["EDGEDRIFT_EDGE_DEVICE_SECRET"], f"{name}: cloud secret"
        assert env["EDGEDRIFT_EDGE_CLOUD_URL"] == f"http://cloud:{cloud_port}"
        state = [v for v in service["volumes"] if v.split(":")[1] == env["EDGEDRIFT_EDGE_CHECKPOINT_DIR"]]
        assert len(state) == 1, f"{name}: its checkpoint directory needs a volume"
        volumes.append(state[0].split(":")[0])
        assert volumes[-1] in BASE["volumes"], f"{name}: {volumes[-1]} is not a named volume"
    assert len(set(devices)) == len(devices) and len(set(volumes)) == len(volumes)
    assert set(device_secrets(cloud)) == set(devices)
    assert set(mosquitto["MQTT_DEVICES"].replace(",", " ").split()) == set(devices)
    assert len(set(device_secrets(cloud).values())) == len(devices), "device secrets must differ"

    replay_argv = effective_command(SERVICES["replay"])
    assert replay_argv[1] == "replay"
    assert replay_argv[replay_argv.index("--devices") + 1].split(",") == devices
    assert "--broker-url" in replay_argv, "replay connects to 127.0.0.1 without --broker-url"
    replay_broker = urlsplit(replay_argv[replay_argv.index("--broker-url") + 1])
    assert (replay_broker.hostname, str(replay_broker.port)) in {("mosquitto", p) for p in broker_ports}
    assert replay_broker.username == "replay" and replay_broker.password is None, "no password on argv"
    replay_env = SERVICES["replay"]["environment"]
    assert replay_env["EDGEDRIFT_REPLAY_BROKER_PASSWORD"] == mosquitto["MQTT_REPLAY_PASSWORD"]


@pytest.mark.parametrize("project", PROJECTS)
def test_long_running_services_have_healthchecks(project: str) -> None:
    services = PROJECTS[project]["services"]
    for name, service in services.items():
        assert "restart" in service, (
            f"{name}: say whether it is long-running (restart: unless-stopped or 'no')"
        )
        if long_running(service):
            assert has_healthcheck(service), f"{name} runs for good but has no healthcheck"
        for target, condition in (service.get("depends_on") or {}).items():
            if condition.get("condition") == "service_healthy":
                assert has_healthcheck(services[target]), (
                    f"{name} waits for {target}, which has no healthcheck"
                )


def test_start_order() -> None:
    for name in EDGES:
        depends = SERVICES[name]["depends_on"]
        assert depends["cloud"]["condition"] == "service_healthy"
        assert depends["mosquitto"]["condition"] == "service_healthy"
    assert {e: {"condition": "service_healthy"} for e in EDGES}.items() <= SERVICES["replay"][
        "depends_on"
    ].items()
    cloud = WITH_POSTGRES["services"]["cloud"]
    assert cloud["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_postgres_override(monkeypatch: pytest.MonkeyPatch) -> None:
    services = WITH_POSTGRES["services"]
    cloud = environment(services["cloud"])
    url = urlsplit(cloud["EDGEDRIFT_CLOUD_DATABASE_URL"])
    postgres = environment(services["postgres"])
    assert url.scheme == "postgresql+psycopg"
    assert (url.hostname, url.port) == ("postgres", 5432)
    assert url.password is None, (
        "the password is EDGEDRIFT_CLOUD_DATABASE_PASSWORD (one secret file for both)"
    )
    assert cloud["EDGEDRIFT_CLOUD_DATABASE_PASSWORD"] == postgres["POSTGRES_PASSWORD"]
    assert (url.username, url.path) == (postgres["POSTGRES_USER"], "/" + postgres["POSTGRES_DB"])
    connects = urlsplit(cloud_settings(cloud_env(WITH_POSTGRES), monkeypatch).database_url)
    assert (connects.username, connects.password) == (
        postgres["POSTGRES_USER"],
        postgres["POSTGRES_PASSWORD"],
    )
    assert services["cloud"]["command"] == SERVICES["cloud"]["command"]
    assert environment(SERVICES["cloud"])["EDGEDRIFT_CLOUD_DATABASE_URL"].startswith("sqlite:////var/lib/")
