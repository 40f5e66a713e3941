"""The tests' servers as containers (testcontainers) instead of local binaries, on request.

With ``EDGEDRIFT_TEST_CONTAINERS=1`` every :class:`~edgedrift_harness.mosquitto.MosquittoProcess` runs its
broker in a container of ``eclipse-mosquitto:2`` (:func:`mosquitto_container`) and
:func:`~edgedrift_harness.postgres.postgres_server` starts a ``postgres:16-alpine`` container
(:func:`postgres_container`); unset, the local binaries run as before. The broker container shares the host's
network and sees the broker's work directory (and every directory its configuration names) at the same
path, so the configuration, the port and the data directory are the local process's, line for line: a
restart keeps the port and the persisted sessions, ``kill()`` is a SIGKILL of the broker.

:func:`engine_problem` says in a second why containers cannot run here (no engine answers, or an image
is missing); the container tests skip with that reason. Ryuk, testcontainers' reaper, is off unless
``TESTCONTAINERS_RYUK_DISABLED`` says otherwise: its image comes from a registry, and every container
here is removed by the context manager or the broker that started it.

testcontainers is the harness's ``containers`` extra (``pip install 'edgedrift-harness[containers]'``),
imported only when containers are used.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from edgedrift_harness.ports import HOST

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

__all__ = [
    "ENV",
    "MOSQUITTO_IMAGE",
    "POSTGRES_IMAGE",
    "ContainerError",
    "ContainerProcess",
    "engine_problem",
    "mosquitto_container",
    "postgres_container",
    "requested",
]

#: Set to 1 to run the tests' Mosquitto and PostgreSQL as containers.
ENV = "EDGEDRIFT_TEST_CONTAINERS"
MOSQUITTO_IMAGE = "eclipse-mosquitto:2"
#: The compose override's image (on machines without a registry, deploy/smoke/postgres built under this tag).
POSTGRES_IMAGE = "postgres:16-alpine"
_ENGINE_TIMEOUT_S = 3


class ContainerError(RuntimeError):
    """No Docker engine answers, an image is missing, or a container did not start."""


def requested() -> bool:
    """Whether ``EDGEDRIFT_TEST_CONTAINERS`` asks for containers."""
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes")


def engine_problem(images: Iterable[str] = ()) -> str | None:
    """Why containers of ``images`` cannot run here (None when an engine answers and holds them all).

    Quick without an engine: the client fails at once when the socket is absent or refuses."""
    try:
        import docker
        from docker.errors import DockerException, ImageNotFound
    except ImportError:
        return "testcontainers is not installed (pip install 'edgedrift-harness[containers]')"
    try:
        client = docker.from_env(timeout=_ENGINE_TIMEOUT_S)
    except DockerException as exc:
        return f"no Docker engine answers ({exc})"
    try:
        client.ping()
        missing = []
        for image in images:
            try:
                client.images.get(image)
            except ImageNotFound:
                missing.append(image)
    except DockerException as exc:
        return f"the Docker engine does not answer ({exc})"
    finally:
        client.close()
    return f"images missing from the engine: {', '.join(missing)}" if missing else None


def _require(images: Iterable[str]) -> None:
    problem = engine_problem(images)
    if problem is not None:
        raise ContainerError(f"{ENV}=1 but {problem}")
    from testcontainers.core.config import testcontainers_config

    if "TESTCONTAINERS_RYUK_DISABLED" not in os.environ:
        testcontainers_config.ryuk_disabled = True


class ContainerProcess:
    """A started container seen as a child process (``poll``, ``send_signal``, ``wait``, ``kill``,
    ``returncode``, ``pid``), so :func:`~edgedrift_harness.processes.stop_process` stops it; its output is
    appended to ``log_path`` as it comes. The container is removed once it has exited and been waited for."""

    def __init__(self, container: DockerContainer, log_path: Path) -> None:
        self._container = container
        self._wrapped = container.get_wrapped_container()
        self.returncode: int | None = None
        self._removed = False
        self._log_thread = threading.Thread(
            target=self._follow_logs, args=(log_path,), name="container-log", daemon=True
        )
        self._log_thread.start()

    @property
    def id(self) -> str:
        """The container's id."""
        return str(self._wrapped.id)

    @property
    def pid(self) -> int:
        """The host's process id of the container's first process."""
        self._wrapped.reload()
        return int(self._wrapped.attrs["State"]["Pid"])

    def _follow_logs(self, log_path: Path) -> None:
        from docker.errors import DockerException

        with contextlib.suppress(DockerException), log_path.open("ab") as log:
            for chunk in self._wrapped.logs(stream=True, follow=True):
                log.write(chunk)
                log.flush()

    def poll(self) -> int | None:
        """The exit code once the container has exited (then it is removed), else None; -9 for a
        container removed by someone else."""
        from docker.errors import NotFound

        if self.returncode is None:
            try:
                self._wrapped.reload()
            except NotFound:
                self.returncode = -signal.SIGKILL
                self._remove()
                return self.returncode
            state = self._wrapped.attrs["State"]
            if state["Status"] in ("exited", "dead"):
                self.returncode = int(state["ExitCode"])
                self._remove()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        from docker.errors import APIError

        with contextlib.suppress(APIError):  # it has exited meanwhile
            self._wrapped.kill(signal=int(sig))

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the container to exit; :class:`subprocess.TimeoutExpired` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self._container.image), timeout or 0.0)
            time.sleep(0.05)
        return code

    def _remove(self) -> None:
        from docker.errors import NotFound

        if not self._removed:
            self._removed = True
            with contextlib.suppress(NotFound):
                self._container.stop()
            self._log_thread.join(timeout=5)


def _mounts(workdir: Path, config: str) -> list[Path]:
    """``workdir`` and every directory an absolute path of ``config`` lies in (outside ``workdir``)."""
    found = [workdir.resolve()]
    for line in config.splitlines():
        if line.strip().startswith("#"):
            continue
        for token in line.split()[1:]:
            if token.startswith("/"):
                path = Path(token).resolve()
                directory = path if path.is_dir() else path.parent
                if not any(directory.is_relative_to(d) for d in found):
                    found.append(directory)
    return found


def mosquitto_container(workdir: Path, conf_path: Path, log_path: Path) -> ContainerProcess:
    """Mosquitto of ``eclipse-mosquitto:2`` started with ``conf_path`` on the host's network, as this
    process's user, with the directories of its configuration mounted at the same paths."""
    _require([MOSQUITTO_IMAGE])
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(MOSQUITTO_IMAGE).with_command(["/usr/sbin/mosquitto", "-c", str(conf_path)])
    for directory in _mounts(workdir, conf_path.read_text()):
        container.with_volume_mapping(str(directory), str(directory), "rw")
    container.with_kwargs(network_mode="host", user=f"{os.getuid()}:{os.getgid()}")
    return ContainerProcess(container.start(), log_path)


@contextlib.contextmanager
def postgres_container(image: str = POSTGRES_IMAGE) -> Iterator[str]:
    """The admin URL (``postgresql://postgres:...@127.0.0.1:PORT/test``) of a PostgreSQL container that
    lives for the ``with`` block, its port published on the host by the engine."""
    _require([image])
    from testcontainers.community.postgres import PostgresContainer

    password = secrets.token_hex(12)
    server = PostgresContainer(image, username="postgres", password=password, dbname="test", driver=None)
    try:
        server.start()
    except Exception as exc:
        server.stop()
        raise ContainerError(f"the PostgreSQL container did not start: {exc}") from exc
    try:
        yield server.get_connection_url(host=HOST)
    finally:
        server.stop()
