"""The container files, checked without a Docker engine.

``docker-compose.yml``, ``deploy/compose.postgres.yml``, the two Dockerfiles, ``.dockerignore`` and the
broker's configuration must agree with the code they start: build inputs exist and enter the context,
every command is accepted by its CLI (``<script> <subcommand> ... --help``), every ``EDGEDRIFT_*``
variable is a setting, the services agree on device ids, secrets and broker users, the edge image stays
slim, long-running services have healthchecks. One mode variable (EDGEDRIFT_MODE) reaches every service,
every secret has a ``*_FILE`` alternative (or is listed in deploy/README.md as not having one yet), and in
production the broker's entry point and PostgreSQL's refuse the public defaults as the cloud does. The
broker's configuration is also run for real when a ``mosquitto`` binary is installed (logins, per-device
ACL, persistence across a restart).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from packaging.requirements import Requirement

from edgedrift.secrets import weak_secret_reason
from edgedrift_cloud.settings import SECRET_FIELDS, CloudSettings, InsecureSettingsError, load_settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
POSTGRES_OVERRIDE = ROOT / "deploy" / "compose.postgres.yml"
ENV_EXAMPLE = ROOT / "deploy" / ".env.example"
DOCKERIGNORE = ROOT / ".dockerignore"
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


# --------------------------------------------------------------------------------------------------
# Compose files: variable interpolation with the development defaults, and the override merge
# --------------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------------
# Dockerfiles and .dockerignore
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    stage: int


def instructions(path: Path) -> list[Instruction]:
    """Instructions with their continuation lines joined, comments dropped; ``stage`` counts FROMs."""
    out: list[Instruction] = []
    pending = ""
    stage = -1
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).strip().partition(" ")
        pending = ""
        if keyword.upper() == "FROM":
            stage += 1
        out.append(Instruction(keyword.upper(), args.strip(), stage))
    return out


def final_stage(path: Path) -> list[Instruction]:
    found = instructions(path)
    last = max(i.stage for i in found)
    return [i for i in found if i.stage == last]


def exec_form(instruction: Instruction) -> list[str]:
    value = json.loads(instruction.args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), instruction
    return value


def only(found: list[Instruction], keyword: str) -> Instruction | None:
    """The instruction that counts (the last one), if any."""
    matching = [i for i in found if i.keyword == keyword]
    return matching[-1] if matching else None


def required(found: list[Instruction], keyword: str) -> Instruction:
    instruction = only(found, keyword)
    assert instruction is not None, f"no {keyword} instruction"
    return instruction


@dataclass(frozen=True)
class Copy:
    sources: tuple[str, ...]
    destination: str
    from_stage: str | None


def copies(path: Path) -> list[Copy]:
    out = []
    for i in instructions(path):
        if i.keyword not in ("COPY", "ADD"):
            continue
        tokens = json.loads(i.args) if i.args.startswith("[") else shlex.split(i.args)
        flags = {t.split("=", 1)[0]: t.partition("=")[2] for t in tokens if t.startswith("--")}
        paths = [t for t in tokens if not t.startswith("--")]
        out.append(Copy(tuple(paths[:-1]), paths[-1], flags.get("--from")))
    return out


def pip_installed_projects(path: Path) -> dict[str, set[str]]:
    """Local projects installed by ``pip install ./dir[extras]`` in RUN lines: dir -> extras."""
    found: dict[str, set[str]] = {}
    for i in instructions(path):
        if i.keyword != "RUN":
            continue
        lexer = shlex.shlex(i.args, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        commands: list[list[str]] = [[]]
        for token in lexer:
            if token in ("&&", "||", ";", "|"):
                commands.append([])
            else:
                commands[-1].append(token)
        for tokens in commands:
            if "pip" not in " ".join(tokens[:3]) or "install" not in tokens:
                continue
            for token in tokens[tokens.index("install") + 1 :]:
                if token.startswith("./"):
                    match = re.fullmatch(r"\./([^\[]+?)/?(?:\[(.*)\])?", token)
                    assert match, token
                    extras = {e.strip() for e in (match.group(2) or "").split(",") if e.strip()}
                    found[match.group(1)] = extras
    return found


def pyproject(project_dir: str) -> dict[str, Any]:
    return tomllib.loads((ROOT / project_dir / "pyproject.toml").read_text())


def console_scripts(dockerfile: Path) -> dict[str, str]:
    """Console scripts the image installs (``[project.scripts]`` of its local projects): name -> target."""
    scripts: dict[str, str] = {}
    for project_dir in pip_installed_projects(dockerfile):
        scripts.update(pyproject(project_dir)["project"].get("scripts", {}))
    return scripts


def dockerignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    """(negated, regex) per line, in order; Docker's syntax: ``*``, ``?``, ``**``, a leading ``!``."""
    patterns = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        line = line.lstrip("!").strip().strip("/")
        regex = ""
        i = 0
        while i < len(line):
            if line.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
            elif line.startswith("**", i):
                regex += ".*"
                i += 2
            elif line[i] == "*":
                regex += "[^/]*"
                i += 1
            elif line[i] == "?":
                regex += "[^/]"
                i += 1
            elif line[i] == "[":
                end = line.index("]", i)
                regex += line[i : end + 1]
                i = end + 1
            else:
                regex += re.escape(line[i])
                i += 1
        patterns.append((negated, re.compile(regex)))
    return patterns


def in_build_context(relative: str) -> bool:
    """Whether .dockerignore lets ``relative`` (a path in the repository) into the build context."""
    parts = Path(relative).parts
    excluded = False
    for negated, pattern in dockerignore_patterns():
        # A pattern matches the path or any of its parent directories (as Docker's matcher does).
        if any(pattern.fullmatch("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            excluded = not negated
    return not excluded


def source_files(directory: Path) -> list[str]:
    """Files under ``directory`` that git tracks or would track (so no caches, builds or egg-info)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", str(directory)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if (ROOT / line).is_file()]


# --------------------------------------------------------------------------------------------------
# Which image, command and healthcheck each service ends up with
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# Files and build inputs
# --------------------------------------------------------------------------------------------------


def test_expected_services() -> None:
    assert {"mosquitto", "cloud", "replay"} <= set(SERVICES)
    assert EDGES == ["edge-1", "edge-2", "edge-3"]
    assert "postgres" not in SERVICES
    assert "postgres" in WITH_POSTGRES["services"]


@pytest.mark.parametrize("project", PROJECTS)
def test_build_contexts_and_dockerfiles_exist(project: str) -> None:
    built = 0
    for name, service in PROJECTS[project]["services"].items():
        build = service.get("build")
        if build is None:
            assert service.get("image"), f"{name}: neither build nor image"
            continue
        built += 1
        assert (ROOT / build["context"]).is_dir(), f"{name}: build context {build['context']} is missing"
        dockerfile = dockerfile_of(service)
        assert dockerfile is not None and dockerfile.is_file(), f"{name}: {dockerfile} is missing"
    assert built >= 5


@pytest.mark.parametrize("dockerfile", [CLOUD_DOCKERFILE, EDGE_DOCKERFILE], ids=["cloud", "edge"])
def test_copy_sources_exist_and_enter_the_build_context(dockerfile: Path) -> None:
    stages = {
        i.args.split()[-1]
        for i in instructions(dockerfile)
        if i.keyword == "FROM" and " AS " in i.args.upper()
    }
    for copy in copies(dockerfile):
        if copy.from_stage is not None:
            assert copy.from_stage in stages, f"COPY --from={copy.from_stage}: no such stage"
            continue
        for source in copy.sources:
            path = ROOT / source
            assert path.exists(), f"{dockerfile.name}: COPY source {source} does not exist"
            relative = str(path.relative_to(ROOT))
            assert in_build_context(relative), (
                f".dockerignore excludes {relative}, which the Dockerfile copies"
            )
            if path.is_dir():
                files = source_files(path)
                assert files, f"{source} holds no source files"
                dropped = [
                    f for f in files if not in_build_context(f) and not Path(f).name.startswith(".env")
                ]
                assert not dropped, f".dockerignore drops source files: {dropped[:5]}"


def test_dockerignore_keeps_secrets_and_local_state_out() -> None:
    for path in [
        ".venv/bin/python",
        ".git/config",
        ".env",
        "cloud_trainer/.env",
        "out/elec2/results.json",
        "shared/edgedrift/__pycache__/x.pyc",
        "shared/edgedrift_core.egg-info/PKG-INFO",
        "tests/x.py",
    ]:
        assert not in_build_context(path), f"{path} would enter the build context"
    assert in_build_context("edge_agent/pyproject.toml")


@pytest.mark.parametrize("dockerfile", [CLOUD_DOCKERFILE, EDGE_DOCKERFILE], ids=["cloud", "edge"])
def test_images_run_as_a_non_root_user_in_exec_form(dockerfile: Path) -> None:
    stage = final_stage(dockerfile)
    user = required(stage, "USER")
    assert user.args.split(":")[0] not in ("root", "0"), "the final stage runs as root"
    for keyword in ("ENTRYPOINT", "CMD"):
        if (found := only(stage, keyword)) is not None:
            exec_form(found)  # exec form: signals reach the process
    assert stage[0].args.split()[0] == "python:3.11-slim"


def test_cloud_image() -> None:
    assert pip_installed_projects(CLOUD_DOCKERFILE) == {"shared": set(), "cloud_trainer": set()}
    stage = final_stage(CLOUD_DOCKERFILE)
    assert required(stage, "EXPOSE").args.split() == ["8000"]
    health = required(stage, "HEALTHCHECK").args
    assert "urllib" in health and "http://127.0.0.1:8000/readyz" in health
    assert exec_form(required(stage, "CMD")) == [
        "edgedrift-cloud",
        "serve",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    argv = effective_command(SERVICES["cloud"])
    assert argv[argv.index("--port") + 1] == "8000", "the healthcheck and EXPOSE assume port 8000"


def test_edge_image_is_slim() -> None:
    projects = pip_installed_projects(EDGE_DOCKERFILE)
    assert projects == {"shared": set(), "edge_agent": set()}, (
        "the edge image installs shared/ and edge_agent/ only"
    )
    copied = {s.strip("/").split("/")[0] for c in copies(EDGE_DOCKERFILE) for s in c.sources}
    assert not copied & {"cloud_trainer", "bench"}, f"the edge image copies {copied}"
    for project_dir in projects:
        for dependency in pyproject(project_dir)["project"]["dependencies"]:
            requirement = Requirement(dependency)
            assert requirement.name not in HEAVY_DISTRIBUTIONS, f"{project_dir} depends on {requirement.name}"
            assert "river" not in requirement.extras, f"{project_dir} pulls edgedrift-core[river]"
    check = [i.args for i in instructions(EDGE_DOCKERFILE) if i.keyword == "RUN" and "find_spec" in i.args]
    assert check and all(f"'{m}'" in check[0] for m in HEAVY_MODULES), (
        "the build-time import check is missing"
    )
    stage = final_stage(EDGE_DOCKERFILE)
    assert exec_form(required(stage, "ENTRYPOINT")) == ["edgedrift-edge"]
    assert exec_form(required(stage, "CMD")) == ["run"]
    assert json.loads(required(stage, "VOLUME").args) == ["/var/lib/edgedrift"]
    assert dockerfile_env(EDGE_DOCKERFILE)["EDGEDRIFT_EDGE_CHECKPOINT_DIR"] == "/var/lib/edgedrift"


def test_edge_healthcheck_is_the_copied_script() -> None:
    health = required(final_stage(EDGE_DOCKERFILE), "HEALTHCHECK")
    script = next(c for c in copies(EDGE_DOCKERFILE) if c.sources == ("deploy/edge/healthcheck.py",))
    assert script.destination in health.args


# --------------------------------------------------------------------------------------------------
# Commands against the real CLIs
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "dockerfile"), [(a, d) for _, a, d in image_commands()], ids=[i for i, _, _ in image_commands()]
)
def test_command_is_accepted_by_its_cli(argv: list[str], dockerfile: Path, tmp_path: Path) -> None:
    """The executable is a console script of the image; ``argv + --help`` parses and names every flag."""
    scripts = console_scripts(dockerfile)
    assert argv and argv[0] in scripts, f"{argv[:1]} is no console script of {sorted(scripts)}"
    module, _, function = scripts[argv[0]].partition(":")
    # The pyproject's target (what pip puts behind the script in the image), so a stale local install of
    # the package cannot hide or fake a command. The values are parsed too: --help comes last.
    code = f"import sys; sys.argv[0] = {argv[0]!r}; from {module} import {function} as main; sys.exit(main())"
    result = subprocess.run(
        [sys.executable, "-c", code, *argv[1:], "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, f"{' '.join(argv)} --help failed:\n{result.stdout}{result.stderr}"
    assert len([t for t in argv[1:] if not t.startswith("-")]) >= 1, "no subcommand"
    for flag in (t.split("=", 1)[0] for t in argv[1:] if t.startswith("--")):
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", result.stdout), (
            f"{flag} is not in `{' '.join(argv[:2])} --help`:\n{result.stdout}"
        )


# --------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------


def agent_env_names() -> set[str]:
    from edgedrift_edge.settings import AgentSettings

    return set(AgentSettings.env_names())


CLOUD_ENV_NAMES = {f"EDGEDRIFT_CLOUD_{name.upper()}" for name in CloudSettings.model_fields}


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


PRODUCTION = {"EDGEDRIFT_MODE": "production"}


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
    strong = "x" * 32
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


# --------------------------------------------------------------------------------------------------
# The services agree with each other
# --------------------------------------------------------------------------------------------------


def device_secrets(cloud: Mapping[str, str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in cloud["EDGEDRIFT_CLOUD_DEVICES"].split(","))


def mqtt_password(mosquitto_env: Mapping[str, str], device: str) -> str:
    return mosquitto_env["MQTT_" + device.upper().replace("-", "_") + "_PASSWORD"]


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


# --------------------------------------------------------------------------------------------------
# The broker: configuration files, the password entrypoint, the ACL
# --------------------------------------------------------------------------------------------------


def mosquitto_conf() -> dict[str, list[str]]:
    conf: dict[str, list[str]] = {}
    for raw in (MOSQUITTO_DIR / "mosquitto.conf").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            conf.setdefault(key, []).append(value.strip())
    return conf


def mounts(service: Mapping[str, Any]) -> dict[str, str]:
    """Container path -> host path (bind mounts) or volume name."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        out[target.rstrip("/")] = source
    return out


def entrypoint_default(name: str) -> str:
    match = re.search(rf"\${{{name}:-([^}}]+)}}", ENTRYPOINT.read_text())
    assert match, f"entrypoint.sh has no default for {name}"
    return match.group(1)


STUB_PASSWD = """#!/bin/sh
# mosquitto_passwd [-c] -b FILE USER PASSWORD, writing "user:password" in clear (test stub).
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


def test_mosquitto_conf_requires_logins_and_persists() -> None:
    conf = mosquitto_conf()
    assert conf["allow_anonymous"] == ["false"]
    assert conf["persistence"] == ["true"]
    assert conf["listener"] == ["1883"]
    assert "password_file" in conf and "acl_file" in conf
    # Saves after a number of changes, not once a minute (tests/integration/test_broker_durability.py).
    assert conf["autosave_on_changes"] == ["true"] and int(conf["autosave_interval"][0]) <= 100
    # Sessions keyed by the login: another device's credentials cannot take a session over.
    assert conf["use_username_as_clientid"] == ["true"]
    for limit in ("max_queued_messages", "max_queued_bytes", "max_inflight_messages"):
        assert int(conf[limit][0]) > 0, f"{limit} is unlimited"


def test_mosquitto_conf_references_files_that_exist() -> None:
    """Every file the configuration names is mounted from deploy/mosquitto, generated by the entrypoint,
    or (persistence) on a named volume."""
    service = SERVICES["mosquitto"]
    mounted = mounts(service)
    auth_dir = entrypoint_default("MOSQUITTO_AUTH_DIR")
    config_dir = entrypoint_default("MOSQUITTO_CONFIG_DIR")
    assert mounted[config_dir] == "./deploy/mosquitto"
    assert service["entrypoint"][-1] == f"{config_dir}/entrypoint.sh"
    assert service["command"][-1] == f"{config_dir}/mosquitto.conf"
    generated = {f"{auth_dir}/passwd", f"{auth_dir}/acl"}
    conf = mosquitto_conf()
    for key in ("password_file", "acl_file", "include_dir", "cafile", "certfile", "keyfile", "psk_file"):
        for path in conf.get(key, []):
            if path.startswith(config_dir + "/"):
                assert (MOSQUITTO_DIR / path.removeprefix(config_dir + "/")).exists(), (
                    f"{key} {path} is missing"
                )
            else:
                assert path in generated, f"{key} {path} is neither mounted nor generated"
    location = conf["persistence_location"][0].rstrip("/")
    assert location in mounted and mounted[location] in BASE["volumes"], "persistence needs a named volume"


def test_entrypoint_writes_every_user(tmp_path: Path) -> None:
    env = environment(SERVICES["mosquitto"])
    result = run_entrypoint(tmp_path, env)
    assert result.returncode == 0, result.stderr
    users = dict(line.split(":", 1) for line in (tmp_path / "auth" / "passwd").read_text().splitlines())
    health = (tmp_path / "auth" / "healthcheck").read_text().strip()
    assert len(health) >= 32 and not weak_secret_reason(health)
    assert users == {
        "operator": env["MQTT_OPERATOR_PASSWORD"],
        "replay": env["MQTT_REPLAY_PASSWORD"],
        "healthcheck": health,
        **{d: mqtt_password(env, d) for d in env["MQTT_DEVICES"].split()},
    }
    assert (tmp_path / "auth" / "acl").read_text() == (MOSQUITTO_DIR / "acl").read_text()
    assert (tmp_path / "auth" / "passwd").stat().st_mode & 0o077 == 0, (
        "the password file is readable by others"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"MQTT_DEV_2_PASSWORD": ""}, "MQTT_DEV_2_PASSWORD"),
        ({"MQTT_OPERATOR_PASSWORD": ""}, "MQTT_OPERATOR_PASSWORD"),
        ({"MQTT_DEVICES": "dev-1 replay"}, "reserved"),
        ({"MQTT_DEVICES": "dev-1 healthcheck"}, "reserved"),
        ({"EDGEDRIFT_MODE": "prod"}, "EDGEDRIFT_MODE must be"),
        ({"MQTT_DEVICES": "dev-1 ../x"}, "must match"),
    ],
)
def test_entrypoint_refuses_missing_passwords_and_bad_names(
    tmp_path: Path, change: dict[str, str], message: str
) -> None:
    result = run_entrypoint(tmp_path, {**environment(SERVICES["mosquitto"]), **change})
    assert result.returncode != 0 and message in result.stderr


@dataclass(frozen=True)
class Rule:
    user: str | None  # None: a pattern (every user)
    access: str
    topic: str


def acl_rules() -> list[Rule]:
    rules: list[Rule] = []
    user: str | None = None
    for raw in (MOSQUITTO_DIR / "acl").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        if keyword == "user":
            user = rest.strip()
            continue
        assert keyword in ("topic", "pattern"), line
        parts = rest.split(" ", 1)
        access, topic = (
            (parts[0], parts[1].strip())
            if parts[0] in ("read", "write", "readwrite", "deny")
            else ("readwrite", rest.strip())
        )
        rules.append(Rule(None if keyword == "pattern" else user, access, topic))
    return rules


def topic_matches(subscription: str, topic: str) -> bool:
    """MQTT matching: ``+`` one level, ``#`` the rest; wildcards at the start never match ``$`` topics."""
    if topic.startswith("$") and subscription[:1] in ("+", "#"):
        return False
    sub, top = subscription.split("/"), topic.split("/")
    for i, level in enumerate(sub):
        if level == "#":
            return True
        if i >= len(top) or (level != "+" and level != top[i]):
            return False
    return len(sub) == len(top)


def acl_allows(user: str, access: str, topic: str) -> bool:
    for rule in acl_rules():
        pattern = rule.topic.replace("%u", user).replace("%c", user) if rule.user is None else rule.topic
        if (rule.user in (None, user)) and access in rule.access and topic_matches(pattern, topic):
            return True
    return False


def test_acl_gives_each_device_its_own_topics() -> None:
    from edgedrift_edge.settings import AgentSettings

    for device in ("dev-1", "dev-2", "dev-3"):
        other = "dev-2" if device != "dev-2" else "dev-1"
        topics = AgentSettings(device_id=device).topics
        for kind in ("samples", "labels"):
            assert acl_allows(device, "read", topics[kind])
            assert not acl_allows(device, "write", topics[kind])
            assert not acl_allows(device, "read", topics[kind].replace(device, other))
            assert acl_allows("replay", "write", topics[kind])
        for kind in ("predictions", "events", "status"):
            assert acl_allows(device, "write", topics[kind])
            assert not acl_allows(device, "write", topics[kind].replace(device, other))
            assert not acl_allows(device, "read", topics[kind])
            assert not acl_allows("replay", "write", topics[kind])
        for kind, topic in topics.items():
            assert acl_allows("operator", "read", topic), kind
            assert not acl_allows("operator", "write", topic), kind
            assert not acl_allows("replay", "read", topic), kind
    assert acl_allows("operator", "read", "$SYS/broker/uptime")
    assert acl_allows("healthcheck", "read", "$SYS/broker/uptime"), "the compose healthcheck reads it"
    assert not acl_allows("dev-1", "read", "$SYS/broker/uptime")
    for kind, topic in AgentSettings(device_id="dev-1").topics.items():
        assert not acl_allows("healthcheck", "read", topic), kind
        assert not acl_allows("healthcheck", "write", topic), kind


# --------------------------------------------------------------------------------------------------
# The broker for real (skipped without a local mosquitto) and the edge healthcheck
# --------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    """deploy/mosquitto run locally: the same conf and ACL, the paths moved into a temporary directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.env = environment(SERVICES["mosquitto"])
        result = run_entrypoint(tmp_path, self.env, passwd=shutil.which("mosquitto_passwd"))
        assert result.returncode == 0, result.stderr
        self.port = free_port()
        conf = (MOSQUITTO_DIR / "mosquitto.conf").read_text()
        data = tmp_path / "data"
        data.mkdir()
        replacements = {
            "/mosquitto/auth/": f"{tmp_path / 'auth'}/",
            "persistence_location /mosquitto/data/": f"persistence_location {data}/",
            "listener 1883\n": f"listener {self.port} 127.0.0.1\n",
        }
        for old, new in replacements.items():
            assert old in conf, f"mosquitto.conf no longer contains {old!r}"
            conf = conf.replace(old, new)
        if os.geteuid() == 0:
            conf += "\nuser root\n"  # the temporary files are root's; do not drop to the mosquitto user
        self.conf = tmp_path / "mosquitto.conf"
        self.conf.write_text(conf)
        self.log = tmp_path / "mosquitto.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(["mosquitto", "-c", str(self.conf)], stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                assert self.proc.poll() is None, self.log.read_text()
                time.sleep(0.05)
        raise AssertionError(f"mosquitto did not listen:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=10)
        self.proc = None

    def client(self, tool: str, user: str, *args: str) -> subprocess.CompletedProcess[str]:
        password = {
            "operator": self.env["MQTT_OPERATOR_PASSWORD"],
            "replay": self.env["MQTT_REPLAY_PASSWORD"],
        }
        pw = password.get(user) or mqtt_password(self.env, user)
        return subprocess.run(
            [tool, "-h", "127.0.0.1", "-p", str(self.port), "-u", user, "-P", pw, *args],
            capture_output=True,
            text=True,
            timeout=30,
        )


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    if not all(shutil.which(t) for t in ("mosquitto", "mosquitto_passwd", "mosquitto_sub", "mosquitto_pub")):
        pytest.skip("needs mosquitto and its clients installed locally")
    b = Broker(tmp_path)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_broker_healthcheck_and_logins(broker: Broker, tmp_path: Path) -> None:
    command = SERVICES["mosquitto"]["healthcheck"]["test"][1]
    auth_dir = entrypoint_default("MOSQUITTO_AUTH_DIR")
    assert "-p 1883 " in command and f"{auth_dir}/healthcheck" in command
    command = command.replace("-p 1883 ", f"-p {broker.port} ").replace(auth_dir, str(tmp_path / "auth"))
    # An operator watching the broker (mosquitto_sub -u operator ...) stays connected through healthchecks:
    # with the user name as client id, a healthcheck logged in as the operator would disconnect it.
    watch = subprocess.Popen(
        ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(broker.port), "-u", "operator", "-P",
         broker.env["MQTT_OPERATOR_PASSWORD"], "-t", "edgedrift/#", "-v"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(0.3)
        for _ in range(2):
            check = subprocess.run(["sh", "-c", command], env={"PATH": os.environ["PATH"]}, timeout=30)
            assert check.returncode == 0, "the compose healthcheck fails against the broker"
        time.sleep(0.3)
        assert watch.poll() is None, f"the healthcheck disconnected the operator: {watch.communicate()}"
    finally:
        watch.terminate()
        watch.wait(10)
    anonymous = subprocess.run(
        ["mosquitto_sub", "-h", "127.0.0.1", "-p", str(broker.port), "-t", "#", "-C", "1", "-W", "2"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert anonymous.returncode != 0 and "not authorised" in anonymous.stderr
    wrong = subprocess.run(
        [
            "mosquitto_sub",
            "-h",
            "127.0.0.1",
            "-p",
            str(broker.port),
            "-u",
            "dev-1",
            "-P",
            "wrong",
            "-t",
            "x",
            "-C",
            "1",
            "-W",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert wrong.returncode != 0 and "not authorised" in wrong.stderr


def test_broker_delivers_per_device_and_keeps_qos1_sessions_across_a_restart(broker: Broker) -> None:
    samples = "edgedrift/dev-1/samples"
    for user in ("dev-1", "dev-2", "operator"):  # persistent sessions (clean_session=false), QoS 1
        topic = "edgedrift/#" if user == "operator" else samples
        result = broker.client("mosquitto_sub", user, "-c", "-i", f"t-{user}", "-q", "1", "-t", topic, "-E")
        assert result.returncode == 0, result.stderr
    assert (
        broker.client("mosquitto_pub", "replay", "-q", "1", "-t", samples, "-m", "sample-1").returncode == 0
    )
    # Not allowed: the replay writing predictions, a device writing another device's samples.
    broker.client("mosquitto_pub", "replay", "-q", "1", "-t", "edgedrift/dev-1/predictions", "-m", "forged")
    broker.client("mosquitto_pub", "dev-2", "-q", "1", "-t", samples, "-m", "forged")
    time.sleep(0.3)
    broker.stop()
    broker.start()

    def receive(user: str, topic: str, count: int) -> list[str]:
        result = broker.client(
            "mosquitto_sub",
            user,
            "-c",
            "-i",
            f"t-{user}",
            "-q",
            "1",
            "-t",
            topic,
            "-v",
            "-C",
            str(count),
            "-W",
            "2",
        )
        return result.stdout.splitlines()

    assert receive("dev-1", samples, 1) == [f"{samples} sample-1"]
    assert receive("dev-2", samples, 1) == [], "dev-2 read dev-1's samples"
    assert receive("operator", "edgedrift/#", 2) == [f"{samples} sample-1"]


def load_edge_healthcheck() -> Any:
    spec = importlib.util.spec_from_file_location(
        "edge_healthcheck", ROOT / "deploy" / "edge" / "healthcheck.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_edge_healthcheck(port: int, checkpoint_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "EDGEDRIFT_EDGE_BROKER_URL": f"mqtt://dev-1:pw@127.0.0.1:{port}",
        "EDGEDRIFT_EDGE_CHECKPOINT_DIR": str(checkpoint_dir),
    }
    script = ROOT / "deploy" / "edge" / "healthcheck.py"
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net/tcp (Linux)")
def test_edge_healthcheck_follows_the_broker_connection_and_the_checkpoints(tmp_path: Path) -> None:
    """Run as the image runs it, on this machine's /proc (its PID 1 started long ago)."""
    (tmp_path / "dev-1.ckpt").write_bytes(b"state")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert run_edge_healthcheck(port, tmp_path).returncode == 1, "healthy without a connection"
        with socket.create_connection(("127.0.0.1", port)), server.accept()[0]:
            result = run_edge_healthcheck(port, tmp_path)
            assert result.returncode == 0, result.stdout
            old = time.time() - 91
            os.utime(tmp_path / "dev-1.ckpt", (old, old))
            result = run_edge_healthcheck(port, tmp_path)
            assert result.returncode == 1 and "no checkpoint" in result.stdout, (
                "healthy with a stale checkpoint"
            )
            (tmp_path / "dev-1.ckpt").unlink()
            assert run_edge_healthcheck(port, tmp_path).returncode == 1, (
                "healthy long after start, no checkpoint"
            )
    (tmp_path / "dev-1.ckpt").write_bytes(b"state")
    assert run_edge_healthcheck(port, tmp_path).returncode == 1, "healthy after the connection closed"


def test_edge_healthcheck_counts_the_container_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh container has not checkpointed yet; a restarted one finds the previous run's old file."""
    health = load_edge_healthcheck()
    monkeypatch.setattr(health, "established_remote_ports", lambda: {1883})
    env = {
        "EDGEDRIFT_EDGE_BROKER_URL": "mqtt://mosquitto:1883",
        "EDGEDRIFT_EDGE_CHECKPOINT_DIR": str(tmp_path),
    }
    monkeypatch.setattr(health, "container_started_at", lambda: time.time() - 5)
    assert health.check(env)[0], "a fresh start without a checkpoint is healthy"
    (tmp_path / "dev-1.ckpt").write_bytes(b"old")
    os.utime(tmp_path / "dev-1.ckpt", (time.time() - 3600, time.time() - 3600))
    assert health.check(env)[0], "a restart with last run's checkpoint is healthy"
    monkeypatch.setattr(health, "container_started_at", lambda: time.time() - 200)
    assert not health.check(env)[0], "no checkpoint for 200 s is unhealthy"
    assert health.check({**env, "EDGEDRIFT_EDGE_CHECKPOINT_EVERY_S": "100"})[0], "the period scales the limit"
    assert not health.check({**env, "EDGEDRIFT_EDGE_BROKER_URL": "mqtt://mosquitto:1884"})[0]
    assert health.broker_port("mqtts://h") == 8883


# --------------------------------------------------------------------------------------------------
# One mode for the stack, secrets from files, and production refusing the public defaults
# --------------------------------------------------------------------------------------------------

#: Where each non-agent service reads the stack's mode.
MODE_VARIABLES = {
    "cloud": "EDGEDRIFT_CLOUD_MODE",
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
        elif name != "replay":  # a one-shot publisher that reads flags only, no mode
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
