"""docker-compose.yml and deploy/compose.postgres.yml read without a Docker engine: variable interpolation
with the development defaults, the override merge, the services, the image and command each one ends up
with, and the broker's password entry point run with a stub (for the tests/unit/test_compose_*.py files)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from edgedrift_cloud.settings import CloudSettings, load_settings
from support.dockerfiles import (
    ROOT,
    exec_form,
    final_stage,
    only,
)

COMPOSE = ROOT / "docker-compose.yml"
POSTGRES_OVERRIDE = ROOT / "deploy" / "compose.postgres.yml"


ENV_EXAMPLE = ROOT / "deploy" / ".env.example"
MOSQUITTO_DIR = ROOT / "deploy" / "mosquitto"


ENTRYPOINT = MOSQUITTO_DIR / "entrypoint.sh"
EDGE_DOCKERFILE = ROOT / "deploy" / "edge" / "Dockerfile"


CLOUD_DOCKERFILE = ROOT / "deploy" / "cloud" / "Dockerfile"
#: What the edge image must never contain (import names for the build check, distributions for pyproject).
HEAVY_MODULES = ("sklearn", "liblinear", "fastapi")
HEAVY_DISTRIBUTIONS = {
    "scikit-learn",
    "liblinear-official",
    "fastapi",
    "river",
    "edgedrift-cloud",
    "edgedrift-eval",
}
#: EDGEDRIFT_* variables that belong to no settings class: data locations of edgedrift-core, and the
#: stack's mode as the broker's and PostgreSQL's entry points read it.
OTHER_EDGEDRIFT_VARIABLES = {
    "EDGEDRIFT_DATA_DIR",
    "EDGEDRIFT_CACHE_DIR",
    "EDGEDRIFT_MODE",
    "EDGEDRIFT_REPLAY_BROKER_PASSWORD",  # edgedrift_edge.cli.replay_broker_url (also *_FILE)
}
README = ROOT / "deploy" / "README.md"


_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


def interpolate(value: str, env: Mapping[str, str], used: dict[str, str | None] | None = None) -> str:
    """Compose interpolation: ``${VAR}``, ``${VAR:-default}``, ``${VAR-d}``, ``${VAR:?err}``, ``$$``."""

    def substitute(match: re.Match[str]) -> str:
        if match.group("escaped"):
            return "$"
        name = match.group("braced") or match.group("bare")
        op, arg = match.group("op"), match.group("arg")
        if used is not None:
            used[name] = arg if op in (":-", "-") else None
        value = env.get(name)
        unset = value is None or (value == "" and op is not None and op.startswith(":"))
        if op in (":-", "-"):
            return arg if unset else str(value)
        if op in (":+", "+"):
            return "" if unset else arg
        if unset:
            raise AssertionError(
                f"${{{name}}} has no default: `docker compose up` needs it set ({arg or ''})"
            )
        return str(value)

    return _VARIABLE.sub(substitute, value)


def resolve(node: Any, env: Mapping[str, str], used: dict[str, str | None] | None = None) -> Any:
    if isinstance(node, str):
        return interpolate(node, env, used)
    if isinstance(node, list):
        return [resolve(item, env, used) for item in node]
    if isinstance(node, dict):
        return {key: resolve(value, env, used) for key, value in node.items()}
    return node


def merge(base: Any, override: Any) -> Any:
    """Compose's merge for what the override uses: mappings merge key by key, sequences concatenate."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = merge(base[key], value) if key in base else value
        return merged
    if isinstance(base, list) and isinstance(override, list):
        return base + [item for item in override if item not in base]
    return override


def load_compose(*paths: Path, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The project as ``docker compose -f ... config`` would see it with only the defaults set."""
    project: dict[str, Any] = {}
    for path in paths:
        project = merge(project, yaml.safe_load(path.read_text()))
    return {k: v for k, v in resolve(project, env or {}).items() if not k.startswith("x-")}


def compose_variables(*paths: Path) -> dict[str, str | None]:
    """Every variable the compose files read, with its default (None when it has none)."""
    used: dict[str, str | None] = {}
    for path in paths:
        resolve(yaml.safe_load(path.read_text()), {}, used)
    return used


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


BASE = load_compose(COMPOSE)
WITH_POSTGRES = load_compose(COMPOSE, POSTGRES_OVERRIDE)


PROJECTS = {"base": BASE, "postgres": WITH_POSTGRES}
SERVICES = BASE["services"]


#: The agent services: those that name a device.
EDGES = sorted(name for name, s in SERVICES.items() if "EDGEDRIFT_EDGE_DEVICE_ID" in environment(s))


def dockerfile_of(service: Mapping[str, Any]) -> Path | None:
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        build = {"context": build}
    path: Path = (ROOT / build.get("context", ".") / build.get("dockerfile", "Dockerfile")).resolve()
    return path


def effective_command(service: Mapping[str, Any]) -> list[str]:
    """ENTRYPOINT + CMD after compose's ``entrypoint``/``command`` (exec form only)."""
    dockerfile = dockerfile_of(service)
    stage = final_stage(dockerfile) if dockerfile else []
    entrypoint = service.get("entrypoint")
    if entrypoint is None:
        found = only(stage, "ENTRYPOINT")
        entrypoint = exec_form(found) if found else []
    command = service.get("command")
    if command is None:
        found = only(stage, "CMD")
        command = exec_form(found) if found else []
    assert isinstance(entrypoint, list) and isinstance(command, list), "use the exec (list) form"
    return [str(t) for t in [*entrypoint, *command]]


def has_healthcheck(service: Mapping[str, Any]) -> bool:
    check = service.get("healthcheck")
    if check is not None:
        return not check.get("disable", False) and check.get("test") not in (["NONE"], "NONE")
    dockerfile = dockerfile_of(service)
    found = only(final_stage(dockerfile), "HEALTHCHECK") if dockerfile else None
    return found is not None and found.args.upper() != "NONE"


def long_running(service: Mapping[str, Any]) -> bool:
    return service.get("restart") in ("always", "unless-stopped")


def image_commands() -> list[tuple[str, list[str], Path]]:
    """(id, argv, dockerfile): every service built here, plus each image's own default command."""
    out = []
    for name, service in SERVICES.items():
        dockerfile = dockerfile_of(service)
        if dockerfile is not None:
            out.append((name, effective_command(service), dockerfile))
    for dockerfile in (CLOUD_DOCKERFILE, EDGE_DOCKERFILE):
        default = effective_command(
            {"build": {"context": ".", "dockerfile": str(dockerfile.relative_to(ROOT))}}
        )
        out.append((f"default of {dockerfile.relative_to(ROOT)}", default, dockerfile))
    return out


def dockerfile_env(dockerfile: Path | None) -> dict[str, str]:
    env: dict[str, str] = {}
    for i in final_stage(dockerfile) if dockerfile else []:
        if i.keyword == "ENV":
            tokens = shlex.split(i.args)
            if len(tokens) >= 2 and "=" not in tokens[0]:
                env[tokens[0]] = " ".join(tokens[1:])
            else:
                for token in tokens:
                    key, _, value = token.partition("=")
                    env[key] = value
    return env


def cloud_settings(env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> CloudSettings:
    for variable in list(os.environ):
        if variable.startswith("EDGEDRIFT_CLOUD_"):
            monkeypatch.delenv(variable)
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    return load_settings(_env_file=None)


def cloud_env(project: Mapping[str, Any]) -> dict[str, str]:
    service = project["services"]["cloud"]
    return {**dockerfile_env(dockerfile_of(service)), **environment(service)}


PRODUCTION = {"EDGEDRIFT_MODE": "production"}


def mqtt_password(mosquitto_env: Mapping[str, str], device: str) -> str:
    return mosquitto_env["MQTT_" + device.upper().replace("-", "_") + "_PASSWORD"]


STUB_PASSWD = """#!/bin/sh
# mosquitto_passwd [-c] -b FILE USER PASSWORD, writing "user:password" in clear, and -U FILE, leaving
# the file in clear (test stub).
[ "$1" = -U ] && { [ -f "$2" ] || { echo "no file $2" >&2; exit 1; }; exit 0; }
create=
[ "$1" = -c ] && { create=1; shift; }
[ "$1" = -b ] || exit 2
shift
[ -n "$create" ] && : > "$1"
[ -f "$1" ] || { echo "no file $1" >&2; exit 1; }
printf '%s:%s\\n' "$2" "$3" >> "$1"
"""


def run_entrypoint(
    tmp_path: Path, env: Mapping[str, str], passwd: str | None = None
) -> subprocess.CompletedProcess[str]:
    """entrypoint.sh with the auth dir in tmp_path and `true` as the broker; a stub mosquitto_passwd."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if passwd is None:
        (bin_dir / "mosquitto_passwd").write_text(STUB_PASSWD)
        (bin_dir / "mosquitto_passwd").chmod(0o755)
    else:
        (bin_dir / "mosquitto_passwd").symlink_to(passwd)
    full_env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin:/usr/sbin:/sbin",
        "MOSQUITTO_AUTH_DIR": str(tmp_path / "auth"),
        "MOSQUITTO_CONFIG_DIR": str(MOSQUITTO_DIR),
        **env,
    }
    return subprocess.run(
        ["sh", str(ENTRYPOINT), "true"], env=full_env, capture_output=True, text=True, timeout=60
    )
