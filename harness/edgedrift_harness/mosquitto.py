"""Mosquitto as a child process: one :class:`MosquittoProcess` and the configurations the project runs.

* :func:`local_mosquitto`: an anonymous broker of the tests and the benchmarks (persistent sessions
  survive a restart; queues deep enough for a replay burst);
* :func:`demo_mosquitto`: the demo's broker (no persistence, everything logged);
* :class:`ShippedMosquitto`: the shipped ``deploy/mosquitto/mosquitto.conf`` run locally. Every setting is
  kept as shipped except what cannot work outside the container (the listener moves to ``127.0.0.1:PORT``,
  the password file, ACL and persistence directory into a work directory) and what a caller overrides on
  purpose (the previous persistence settings as a peer, a control without an option). Users get real
  passwords through ``mosquitto_passwd -b`` and the shipped ACL is copied next to them, as the container's
  entry point does (or the entry point itself has written that directory).

``kill()`` is a SIGKILL (a crash: nothing is saved on the way out); ``start()`` again (or ``restart()``)
reuses the port and the data directory, as a restarted container does. With ``EDGEDRIFT_TEST_CONTAINERS=1``
each of them runs the broker of the ``eclipse-mosquitto:2`` image instead of the local binary, with the same
configuration, port and directories (:mod:`edgedrift_harness.containers`).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Self

from edgedrift_harness import containers
from edgedrift_harness.ports import HOST, free_port, wait_listening
from edgedrift_harness.processes import Process, ServerProcess, stop_process

__all__ = [
    "SHIPPED_ACL",
    "SHIPPED_CONF",
    "BrokerError",
    "MosquittoProcess",
    "ShippedMosquitto",
    "as_root",
    "demo_mosquitto",
    "find_mosquitto",
    "local_config",
    "local_mosquitto",
    "make_certs",
    "parse_config",
    "save_window_s",
    "supports_websockets",
    "tls_listeners",
]

#: The files a deployment mounts at /mosquitto/config (present in a checkout of the repository).
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "deploy" / "mosquitto"
SHIPPED_CONF = SHIPPED_DIR / "mosquitto.conf"
SHIPPED_ACL = SHIPPED_DIR / "acl"

_MOSQUITTO_FALLBACK = "/usr/sbin/mosquitto"
_RUNNING = re.compile(rb"mosquitto version \S+ running")
_START_TIMEOUT_S = 15.0
_STOP_TIMEOUT_S = 10.0
_PORT_ATTEMPTS = 3


class BrokerError(RuntimeError):
    """A broker could not be started or reached."""


def find_mosquitto() -> str | None:
    """Path of the Mosquitto binary, or None when it is not installed."""
    found = shutil.which("mosquitto")
    if found is not None:
        return found
    return _MOSQUITTO_FALLBACK if Path(_MOSQUITTO_FALLBACK).is_file() else None


def parse_config(text: str) -> dict[str, list[str]]:
    """Option name -> its values in file order (comments and blank lines dropped)."""
    options: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            options.setdefault(key, []).append(value.strip())
    return options


def save_window_s(options: dict[str, list[str]]) -> float:
    """Seconds before a SIGKILL whose acknowledged messages a broker with these options may lose: twice its
    ``autosave_interval`` (a save once more than that many whole seconds passed since the last one).
    A save every N changes has no window in seconds: ValueError."""
    if options.get("autosave_on_changes", ["false"])[0] == "true":
        raise ValueError("autosave_on_changes: the window is a number of changes, not of seconds")
    return 2.0 * int(options["autosave_interval"][0])


def as_root() -> str:
    """Started as root, mosquitto drops to its own user, which cannot write a temporary directory."""
    return "user root\n" if os.geteuid() == 0 else ""


class MosquittoProcess(ServerProcess):
    """One Mosquitto with the configuration ``config(port)`` in ``workdir``; a context manager.

    The port is chosen once (another process may take it before Mosquitto binds it: the first start then
    retries on a new port); later starts keep it, and the data directory, as a restarted broker does.
    """

    def __init__(self, workdir: Path, config: Callable[[int], str], *, port: int | None = None) -> None:
        self.in_container = containers.requested()
        self.binary: str | None = None  # the container's, in a container
        if not self.in_container:
            self.binary = find_mosquitto()
            if self.binary is None:
                raise BrokerError("needs Mosquitto (apt-get install -y mosquitto)")
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.conf_path = workdir / "mosquitto.conf"
        self.log_path = workdir / "mosquitto.log"
        self._render = config
        self._port_fixed = port is not None
        self.proc: Process | None = None
        self._configure(port or free_port())

    def _configure(self, port: int) -> None:
        self.port = port
        self.url = f"mqtt://{HOST}:{port}"
        self.config = self._render(port)
        self.conf_path.write_text(self.config)

    @property
    def options(self) -> dict[str, list[str]]:
        """The options this broker runs with."""
        return parse_config(self.config)

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise BrokerError("not running")
        return self.proc.pid

    def start(self, timeout: float = _START_TIMEOUT_S) -> Self:
        """Start the broker and return once it listens (and has logged that it runs, or stayed up 1 s)."""
        if self.proc is not None and self.proc.poll() is None:
            raise BrokerError("already running")
        for attempt in range(_PORT_ATTEMPTS):
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            if self._spawn_and_wait(offset, timeout):
                self._port_fixed = True
                return self
            text = self.log_tail()
            in_use = b"Address already in use" in self.log_path.read_bytes()[offset:]
            if not in_use or self._port_fixed or attempt == _PORT_ATTEMPTS - 1:
                code = None if self.proc is None else self.proc.returncode
                self.kill()
                raise BrokerError(
                    f"mosquitto did not listen on {HOST}:{self.port} within {timeout:.0f} s "
                    f"(exit code {code}); its log:\n{text}"
                )
            self._configure(free_port())  # lost the race for the port: try another
        raise AssertionError("unreachable")

    def _spawn(self) -> Process:
        if self.in_container or self.binary is None:
            try:
                return containers.mosquitto_container(self.workdir, self.conf_path, self.log_path)
            except containers.ContainerError as exc:
                raise BrokerError(str(exc)) from exc
        with self.log_path.open("ab") as log:
            return subprocess.Popen(
                [self.binary, "-c", str(self.conf_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )

    def _spawn_and_wait(self, offset: int, timeout: float) -> bool:
        self.proc = proc = self._spawn()
        started = time.monotonic()

        def running() -> bool:
            # A connection alone could reach another process that took the port first: also wait for the
            # "mosquitto version X running" line (logged once its listeners are bound), or, should a future
            # version word it differently, for it to have stayed up for a second.
            return (
                bool(_RUNNING.search(self.log_path.read_bytes()[offset:])) or time.monotonic() - started > 1
            )

        return wait_listening(self.port, timeout, ready=running, alive=lambda: proc.poll() is None)

    def stop(self, timeout: float = _STOP_TIMEOUT_S) -> None:
        """SIGTERM: the broker saves its database and exits (idempotent)."""
        proc, self.proc = self.proc, None
        stop_process(proc, timeout)

    def kill(self) -> None:
        """SIGKILL: the broker dies without saving anything."""
        proc, self.proc = self.proc, None
        stop_process(proc, _STOP_TIMEOUT_S, signal.SIGKILL)

    def restart(self) -> Self:
        """Stop (cleanly) and start again on the same port and data directory."""
        self.stop()
        return self.start()


def local_mosquitto(workdir: Path, *, persistence: bool = True, port: int | None = None) -> MosquittoProcess:
    """An anonymous broker on 127.0.0.1 (not started); with ``persistence`` QoS-1 sessions survive a
    restart (saved every second). Deep queues and 1,000 messages in flight: a replay burst is neither
    dropped nor throttled by the broker."""
    data = workdir / "data"

    def config(port: int) -> str:
        saved = (
            f"persistence true\npersistence_location {data}/\nautosave_interval 1\n" if persistence else ""
        )
        return (
            f"listener {port} {HOST}\nallow_anonymous true\n{saved}"
            "max_queued_messages 100000\nmax_inflight_messages 1000\n" + as_root()
        )

    if persistence:
        data.mkdir(parents=True, exist_ok=True)
    return MosquittoProcess(workdir, config, port=port)


def demo_mosquitto(workdir: Path) -> MosquittoProcess:
    """The demo's broker (not started): anonymous, no persistence, every notice in its log."""

    def config(port: int) -> str:
        return (
            f"listener {port} {HOST}\n"
            "allow_anonymous true\n"
            "persistence false\n"
            # Mosquitto's default (1000 queued QoS-1/2 messages per client) silently drops a replay burst
            # that a slow subscriber has not acknowledged yet; the embedded broker has no such limit.
            "max_queued_messages 100000\n"
            "log_dest stderr\n"
            "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n"
        )

    return MosquittoProcess(workdir, config)


def local_config(
    shipped: str,
    *,
    port: int,
    data_dir: Path,
    auth_dir: Path,
    overrides: Mapping[str, str | None] | None = None,
) -> str:
    """``shipped`` with the listener on ``127.0.0.1:port`` and the auth and data paths moved.

    ``overrides`` sets an option (replacing every line of it, or appending it) or removes it (None).
    Everything else stays line for line, so a setting added to the shipped file reaches every caller.
    """
    wanted = dict(overrides or {})
    moved = {
        "listener": f"{port} {HOST}",
        "password_file": str(auth_dir / "passwd"),
        "acl_file": str(auth_dir / "acl"),
        "persistence_location": f"{data_dir}/",
        "include_dir": str(auth_dir / "conf.d"),
    }
    present = parse_config(shipped)
    for key in moved:
        if key not in present and key != "include_dir":
            raise ValueError(f"the shipped mosquitto.conf has no {key} line to rewrite")
    (auth_dir / "conf.d").mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    for raw in shipped.splitlines():
        key = raw.strip().partition(" ")[0] if not raw.strip().startswith("#") else ""
        if key in wanted:
            value = wanted.pop(key)
            if value is not None:
                lines.append(f"{key} {value}")
        elif key in moved:
            lines.append(f"{key} {moved[key]}")
        elif key not in (overrides or {}):
            lines.append(raw)
    lines += [f"{key} {value}" for key, value in wanted.items() if value is not None]
    return "\n".join(lines) + "\n" + as_root()


def make_certs(out: Path, server: str, ids: list[str]) -> Path:
    """A CA, a server certificate for ``server`` and one client certificate per id in ``out``, made by the
    shipped deploy/mosquitto/make-certs.sh (returns ``out``)."""
    subprocess.run(
        ["sh", str(SHIPPED_DIR / "make-certs.sh"), str(out), server, *ids],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def supports_websockets(binary: str | None = None) -> bool:
    """Whether this Mosquitto was built with WebSockets (linked to libwebsockets)."""
    binary = binary or find_mosquitto()
    if binary is None or shutil.which("ldd") is None:
        return False
    linked = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False).stdout
    return "libwebsockets" in linked


def tls_listeners(shipped: str, *, certs: Path, tls_port: int, wss_port: int | None) -> str:
    """The shipped tls.conf for a local broker: its listeners on ``127.0.0.1`` at the given ports (the
    WebSockets one dropped when ``wss_port`` is None) and its certificates taken from ``certs``."""
    blocks: list[list[str]] = []
    for raw in shipped.splitlines():
        line = raw.strip()
        if line.startswith("listener "):
            blocks.append([])
        if blocks and line and not line.startswith("#"):
            blocks[-1].append(line)
    out: list[str] = []
    for block in blocks:
        websockets = "protocol websockets" in block
        port = wss_port if websockets else tls_port
        if port is None:
            continue
        for line in block:
            key, _, value = line.partition(" ")
            if key == "listener":
                line = f"listener {port} {HOST}"
            elif key in ("cafile", "certfile", "keyfile"):
                line = f"{key} {certs / Path(value).name}"
            out.append(line)
    return "\n".join(out) + "\n"


class ShippedMosquitto(MosquittoProcess):
    """deploy/mosquitto run locally (not started) with ``users`` (name -> password), or with the password
    file and ACL that the shipped entry point wrote into ``workdir/auth`` when ``users`` is None.

    With ``certs`` (a directory written by deploy/mosquitto/make-certs.sh) the shipped mutual-TLS listeners
    (tls.conf) run too, on :attr:`tls_port` and, when this Mosquitto has WebSockets, :attr:`wss_port`."""

    def __init__(
        self,
        workdir: Path,
        users: Mapping[str, str] | None,
        *,
        overrides: Mapping[str, str | None] | None = None,
        conf: Path = SHIPPED_CONF,
        acl: Path = SHIPPED_ACL,
        port: int | None = None,
        certs: Path | None = None,
    ) -> None:
        self.data_dir = workdir / "data"
        self.auth_dir = workdir / "auth"
        self.tls_port: int | None = None
        self.wss_port: int | None = None
        if certs is not None:
            self.tls_port = free_port()
            self.wss_port = free_port() if supports_websockets() else None
            (self.auth_dir / "conf.d").mkdir(parents=True, exist_ok=True)
            (self.auth_dir / "conf.d" / "tls.conf").write_text(
                tls_listeners(
                    (SHIPPED_DIR / "tls.conf").read_text(),
                    certs=certs,
                    tls_port=self.tls_port,
                    wss_port=self.wss_port,
                )
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.auth_dir.mkdir(parents=True, exist_ok=True)
        if users is not None:
            self._write_users(users, acl)
        elif not (self.auth_dir / "passwd").exists():
            raise BrokerError(f"no users given and no password file in {self.auth_dir}")
        shipped = conf.read_text()

        def config(port: int) -> str:
            return local_config(
                shipped, port=port, data_dir=self.data_dir, auth_dir=self.auth_dir, overrides=overrides
            )

        super().__init__(workdir, config, port=port)

    @classmethod
    def anonymous(cls, workdir: Path, overrides: Mapping[str, str | None] | None = None) -> ShippedMosquitto:
        """The shipped configuration (its queue, in-flight and persistence settings) admitting anonymous
        clients: without its password file, ACL and user-name client ids (a bench's many devices)."""
        return cls(
            workdir,
            {"bench": "bench-password-0123456789"},  # written, not read: the password file is left out
            overrides={
                "allow_anonymous": "true",
                "password_file": None,
                "acl_file": None,
                "use_username_as_clientid": "false",  # anonymous clients have no user name
                **(overrides or {}),
            },
        )

    def _write_users(self, users: Mapping[str, str], acl: Path) -> None:
        passwd = shutil.which("mosquitto_passwd")
        if passwd is None:
            raise BrokerError("needs mosquitto_passwd (apt-get install -y mosquitto)")
        if not users:
            raise ValueError("the shipped configuration admits no anonymous client: give at least one user")
        password_file = self.auth_dir / "passwd"
        password_file.unlink(missing_ok=True)
        for user, password in users.items():
            create = [] if password_file.exists() else ["-c"]
            subprocess.run(
                [passwd, *create, "-b", str(password_file), user, password],
                check=True,
                capture_output=True,
                timeout=30,
            )
        password_file.chmod(0o600)
        shutil.copyfile(acl, self.auth_dir / "acl")
