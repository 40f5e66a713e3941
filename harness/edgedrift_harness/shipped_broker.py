"""The shipped broker configuration (``deploy/mosquitto/mosquitto.conf``) run as a local Mosquitto.

The durability benchmark (``bench/broker_durability.py``) and the broker integration tests need the
configuration a deployment runs, not a test broker's: every setting is kept as shipped except what
cannot work outside the container (the listener moves to ``127.0.0.1:PORT``, the password file, ACL and
persistence directory into a work directory) and what a caller overrides on purpose (the previous
persistence settings as a peer, a control without an option). Users get real passwords through
``mosquitto_passwd -b`` and the shipped ACL is copied next to them, as the container's entry point does.
``kill()`` is a SIGKILL (a crash: nothing is saved on the way out); ``start()`` again reuses the port
and the data directory, as a restarted container does.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

from edgedrift_harness.broker import find_mosquitto
from edgedrift_harness.cloud_process import free_port

__all__ = ["SHIPPED_ACL", "SHIPPED_CONF", "ShippedMosquitto", "local_config", "parse_config"]

#: The files a deployment mounts at /mosquitto/config (present in a checkout of the repository).
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "deploy" / "mosquitto"
SHIPPED_CONF = SHIPPED_DIR / "mosquitto.conf"
SHIPPED_ACL = SHIPPED_DIR / "acl"

_START_TIMEOUT_S = 15.0
_STOP_TIMEOUT_S = 10.0


def parse_config(text: str) -> dict[str, list[str]]:
    """Option name -> its values in file order (comments and blank lines dropped)."""
    options: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            options.setdefault(key, []).append(value.strip())
    return options


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
        "listener": f"{port} 127.0.0.1",
        "password_file": str(auth_dir / "passwd"),
        "acl_file": str(auth_dir / "acl"),
        "persistence_location": f"{data_dir}/",
    }
    present = parse_config(shipped)
    for key in moved:
        if key not in present:
            raise ValueError(f"the shipped mosquitto.conf has no {key} line to rewrite")
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
    if os.geteuid() == 0:
        # Started as root, mosquitto drops to its own user, which cannot write a temporary directory.
        lines.append("user root")
    return "\n".join(lines) + "\n"


class ShippedMosquitto:
    """deploy/mosquitto run locally with ``users`` (name -> password); a context manager."""

    def __init__(
        self,
        workdir: Path,
        users: Mapping[str, str],
        *,
        overrides: Mapping[str, str | None] | None = None,
        conf: Path = SHIPPED_CONF,
        acl: Path = SHIPPED_ACL,
        port: int | None = None,
    ) -> None:
        binary = find_mosquitto()
        passwd = shutil.which("mosquitto_passwd")
        if binary is None or passwd is None:
            raise RuntimeError("needs Mosquitto and mosquitto_passwd (apt-get install -y mosquitto)")
        if not users:
            raise ValueError("the shipped configuration admits no anonymous client: give at least one user")
        self.binary = binary
        self.workdir = workdir
        self.port = port or free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        self.data_dir = workdir / "data"
        self.auth_dir = workdir / "auth"
        self.log_path = workdir / "mosquitto.log"
        self.conf_path = workdir / "mosquitto.conf"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.auth_dir.mkdir(parents=True, exist_ok=True)
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
        self.config = local_config(
            conf.read_text(),
            port=self.port,
            data_dir=self.data_dir,
            auth_dir=self.auth_dir,
            overrides=overrides,
        )
        self.conf_path.write_text(self.config)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def options(self) -> dict[str, list[str]]:
        """The options this broker runs with."""
        return parse_config(self.config)

    def start(self) -> Self:
        """Start the broker and return once it accepts connections."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("already running")
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "-c", str(self.conf_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"mosquitto did not listen on {self.port}:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: the broker dies without saving anything."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM: the broker saves its database and exits (idempotent)."""
        self._signal(signal.SIGTERM)

    def _signal(self, sig: int) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(_STOP_TIMEOUT_S)

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("not running")
        return self.proc.pid

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
