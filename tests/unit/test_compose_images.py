"""The images, checked without a Docker engine: build inputs exist and enter the context, images run as a
non-root user in exec form, the edge image stays slim, every command is accepted by its CLI
(``<script> <subcommand> ... --help``), and the edge image's healthcheck follows the broker connection and
the checkpoints."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from support.compose import (
    CLOUD_DOCKERFILE,
    EDGE_DOCKERFILE,
    EDGES,
    HEAVY_DISTRIBUTIONS,
    HEAVY_MODULES,
    PROJECTS,
    SERVICES,
    WITH_POSTGRES,
    dockerfile_env,
    dockerfile_of,
    effective_command,
    image_commands,
)
from support.dockerfiles import (
    ROOT,
    console_scripts,
    copies,
    exec_form,
    final_stage,
    in_build_context,
    instructions,
    only,
    pip_installed_projects,
    pyproject,
    required,
    source_files,
)


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
def test_the_core_is_compiled_with_a_compiler_and_the_python_headers(dockerfile: Path) -> None:
    """edgedrift-core builds its C kernels when pip installs it: the stage that installs shared/ must first
    install gcc, and python3-dev where the base lacks Python.h (a Debian python3 base does; a missing
    header fails the build with 'Python.h: No such file or directory')."""
    assert "shared" in pip_installed_projects(dockerfile)
    runs = [i for i in instructions(dockerfile) if i.keyword == "RUN"]
    install = next(i for i in runs if re.search(r"pip install .*\./shared", i.args))
    before = [i.args for i in runs if i.stage == install.stage and runs.index(i) < runs.index(install)]
    apt = " ".join(a for a in before if "apt-get install" in a)
    assert re.search(r"\b(gcc|build-essential)\b", apt), f"{dockerfile.name}: no C compiler before pip"
    assert "python3-dev" in apt and "Python.h" in apt, f"{dockerfile.name}: no Python headers before pip"


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
    # tracing: the OpenTelemetry SDK and OTLP exporter, so OTEL_EXPORTER_OTLP_ENDPOINT turns traces on;
    # jobs: Dramatiq and Redis, so the same image runs the trainer-worker service.
    assert pip_installed_projects(CLOUD_DOCKERFILE) == {"shared": set(), "cloud_trainer": {"tracing", "jobs"}}
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
