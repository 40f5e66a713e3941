"""RabbitMQ with its MQTT plugin as a child process: a throwaway node of its own, beside the Mosquitto of
:mod:`edgedrift_harness.mosquitto` and with the same interface (``start``, ``stop``, ``kill``, ``restart``,
``port``, ``url``, ``log_tail``, a context manager).

The node never touches a system RabbitMQ: its own node name (``edgedrift-<random>@localhost``), Erlang
distribution and MQTT ports picked free, its cookie in ``HOME`` = the work directory, its Mnesia and log
directories, enabled-plugins file, configuration and environment file all in the work directory.

:func:`shipped_config` is the broker's configuration (``deploy/rabbitmq/rabbitmq.conf``, the file the
k8s StatefulSet mounts, with the listener moved to ``127.0.0.1:PORT``): durable MQTT sessions on quorum
queues (``mqtt.durable_queue_type = quorum``, RabbitMQ 3.10 and later), no anonymous login. Users come
from a definitions file loaded at boot (:func:`definitions`): the same ACL model as the shipped Mosquitto
ACL (``deploy/mosquitto/acl`` and ``entrypoint.sh``), as topic permissions on ``amq.topic``, where an MQTT
topic ``a/b/c`` is the routing key ``a.b.c``; vhost permissions confine each user's queues to its own
client id (Mosquitto's ``use_username_as_clientid`` has no RabbitMQ equivalent). With ``certs`` (a
directory of deploy/mosquitto/make-certs.sh) a mutual-TLS listener logs clients in by their certificate's
common name, as the Mosquitto TLS listener does.

``kill()`` is a SIGKILL of the whole process group (the start script, the Erlang VM and its helpers);
``start()`` again reuses the ports, node name and data directory, as a restarted pod does.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from edgedrift_harness.mosquitto import BrokerError
from edgedrift_harness.ports import HOST, free_port, wait_listening
from edgedrift_harness.processes import ServerProcess

__all__ = [
    "SHIPPED_RABBITMQ_CONF",
    "RabbitMQProcess",
    "definitions",
    "find_rabbitmq",
    "password_hash",
    "shipped_config",
    "topic_regex",
    "user_permissions",
]

SHIPPED_DIR = Path(__file__).resolve().parents[2] / "deploy" / "rabbitmq"
SHIPPED_RABBITMQ_CONF = SHIPPED_DIR / "rabbitmq.conf"

_FALLBACK = "/usr/lib/rabbitmq/bin/rabbitmq-server"
_STARTED = re.compile(rb"Server startup complete")
_START_TIMEOUT_S = 90.0
_STOP_TIMEOUT_S = 30.0
#: The ACL's special users (deploy/mosquitto/acl); every other user name is a device id.
REPLAY, OPERATOR = "replay", "operator"
#: The lines of the shipped file that only make sense in a cluster (peer discovery on Kubernetes).
_CLUSTER_ONLY = ("cluster_formation.", "cluster_name")


def find_rabbitmq() -> str | None:
    """Path of RabbitMQ's start script, or None when it is not installed."""
    if Path(_FALLBACK).is_file():
        return _FALLBACK
    return shutil.which("rabbitmq-server")


def parse_conf(text: str) -> dict[str, str]:
    """``key = value`` lines of a rabbitmq.conf (comments and blank lines dropped)."""
    options: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            options[key.strip()] = value.strip()
    return options


def shipped_config(
    port: int, *, tls_port: int | None = None, certs: Path | None = None, definitions_file: Path
) -> str:
    """deploy/rabbitmq/rabbitmq.conf for one local node: the MQTT listener on ``127.0.0.1:port``, no AMQP
    listener, no peer discovery, the users from ``definitions_file``, the log on standard output, and
    with ``certs`` the mutual-TLS listener on ``tls_port``."""
    lines: list[str] = []
    for raw in SHIPPED_RABBITMQ_CONF.read_text().splitlines():
        key = raw.partition("=")[0].strip()
        if raw.strip().startswith("#") or not raw.strip():
            continue
        if key.startswith(_CLUSTER_ONLY) or key.startswith(("mqtt.listeners.", "listeners.")):
            continue
        if key.startswith(("ssl_options.", "log.", "load_definitions")):
            continue
        lines.append(raw.strip())
    lines += [
        "listeners.tcp = none",
        f"mqtt.listeners.tcp.default = {HOST}:{port}",
        f"load_definitions = {definitions_file}",
        "log.console = true",
        "log.console.level = info",
        "log.file = false",
    ]
    if certs is not None and tls_port is not None:
        lines += [
            f"mqtt.listeners.ssl.default = {HOST}:{tls_port}",
            f"ssl_options.cacertfile = {certs / 'ca.crt'}",
            f"ssl_options.certfile = {certs / 'server.crt'}",
            f"ssl_options.keyfile = {certs / 'server.key'}",
            "ssl_options.verify = verify_peer",
            "ssl_options.fail_if_no_peer_cert = true",
            "mqtt.ssl_cert_login = true",
            "ssl_cert_login_from = common_name",
        ]
    return "\n".join(lines) + "\n"


def password_hash(password: str, salt: bytes | None = None) -> str:
    """RabbitMQ's ``rabbit_password_hashing_sha256``: base64(salt + sha256(salt + password))."""
    salt = secrets.token_bytes(4) if salt is None else salt
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def topic_regex(filters: Sequence[str]) -> str:
    """A topic-permission regex matching the routing keys (and, for reads, the binding keys) of MQTT topic
    filters: ``/`` is ``.``, ``+`` one level, ``#`` the rest; no filter: nothing matches."""
    if not filters:
        return "^$"
    parts = []
    for f in filters:
        levels = []
        for level in f.split("/"):
            if level == "+":
                levels.append(r"[^.]+")
            elif level == "#":
                levels.append(r".*")
            else:
                levels.append(re.escape(level))
        parts.append(r"\.".join(levels))
    return "^(" + "|".join(parts) + ")$"


def user_permissions(user: str, devices: Sequence[str] | None = None) -> dict[str, Any]:
    """The shipped ACL for ``user``: read/write MQTT topic filters and the client ids whose session queues
    it may own. ``replay`` publishes every device's samples and labels, ``operator`` reads everything, a
    gateway (``devices`` given) the topics of its devices plus its own status, any other user is a device
    with its own topics."""
    if user == REPLAY:
        return {"read": [], "write": ["edgedrift/+/samples", "edgedrift/+/labels"], "client": "pub-.*"}
    if user == OPERATOR:
        return {"read": ["edgedrift/#"], "write": [], "client": ".*"}
    served = [user] if devices is None else list(devices)
    read = [f"edgedrift/{d}/{kind}" for d in served for kind in ("samples", "labels")]
    write = [f"edgedrift/{d}/{kind}" for d in served for kind in ("predictions", "events", "status")]
    if devices is not None:
        write.append(f"edgedrift/gateways/{user}/status")
        return {"read": read, "write": write, "client": re.escape(f"edgedrift-gateway-{user}")}
    return {"read": read, "write": write, "client": re.escape(f"edgedrift-agent-{user}")}


def definitions(
    users: Mapping[str, str], gateways: Mapping[str, Sequence[str]] | None = None
) -> dict[str, Any]:
    """The definitions file of ``users`` (name -> password; a name in ``gateways`` is a gateway serving
    those devices): users, vhost permissions on their own session queues only, topic permissions."""
    gateways = gateways or {}
    out: dict[str, Any] = {
        "vhosts": [{"name": "/"}],
        "users": [],
        "permissions": [],
        "topic_permissions": [],
        # Mosquitto's max_queued_messages: a session queue keeps at most this many messages.
        "policies": [
            {
                "vhost": "/",
                "name": "mqtt-sessions",
                "pattern": "^mqtt-subscription-",
                "apply-to": "queues",
                "priority": 0,
                "definition": {"max-length": 100_000},
            }
        ],
    }
    for user, password in users.items():
        acl = user_permissions(user, gateways.get(user))
        queues = f"mqtt-subscription-({acl['client']})qos[01]"
        out["users"].append(
            {
                "name": user,
                "password_hash": password_hash(password),
                "hashing_algorithm": "rabbit_password_hashing_sha256",
                "tags": [],
            }
        )
        out["permissions"].append(
            {
                "user": user,
                "vhost": "/",
                "configure": f"^{queues}$",
                "write": rf"^(amq\.topic|{queues})$",
                "read": rf"^(amq\.topic|{queues})$",
            }
        )
        out["topic_permissions"].append(
            {
                "user": user,
                "vhost": "/",
                "exchange": "amq.topic",
                "write": topic_regex(acl["write"]),
                "read": topic_regex(acl["read"]),
            }
        )
    return out


class RabbitMQProcess(ServerProcess):
    """One RabbitMQ node with the shipped configuration in ``workdir``; ``users`` (name -> password) and
    ``gateways`` (gateway user -> its devices) as in the shipped Mosquitto ACL; a context manager."""

    def __init__(
        self,
        workdir: Path,
        users: Mapping[str, str],
        *,
        gateways: Mapping[str, Sequence[str]] | None = None,
        certs: Path | None = None,
    ) -> None:
        binary = find_rabbitmq()
        if binary is None:
            raise BrokerError("needs RabbitMQ (apt-get install -y rabbitmq-server)")
        if not users:
            raise ValueError("the shipped configuration admits no anonymous client: give at least one user")
        self.binary = binary
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.node = f"edgedrift-{secrets.token_hex(4)}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self.tls_port: int | None = free_port() if certs is not None else None
        self.url = f"mqtt://{HOST}:{self.port}"
        self.log_path = workdir / "rabbitmq.log"
        self.data_dir = workdir / "mnesia"
        self.conf_path = workdir / "rabbitmq.conf"
        defs = workdir / "definitions.json"
        defs.write_text(json.dumps(definitions(users, gateways), indent=1))
        defs.chmod(0o600)
        self.config = shipped_config(self.port, tls_port=self.tls_port, certs=certs, definitions_file=defs)
        self.conf_path.write_text(self.config)
        (workdir / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
        (workdir / "rabbitmq-env.conf").write_text("")
        cookie = workdir / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(secrets.token_hex(16))
            cookie.chmod(0o400)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def options(self) -> dict[str, str]:
        """The options this node runs with."""
        return parse_conf(self.config)

    @property
    def pid(self) -> int:
        """The Erlang VM's process id (the start script's child)."""
        if self.proc is None:
            raise BrokerError("not running")
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        pids = children.read_text().split() if children.exists() else []
        return int(pids[0]) if pids else self.proc.pid

    def env(self) -> dict[str, str]:
        """The environment of this node's start script and CLI tools (nothing of a system node)."""
        w = self.workdir
        return {
            **os.environ,
            "HOME": str(w),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.data_dir),
            "RABBITMQ_LOG_BASE": str(w / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(w / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.conf_path),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(w / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(w / "rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": str(w / "rabbitmq.pid"),
        }

    def start(self, timeout: float = _START_TIMEOUT_S) -> Self:
        """Start the node and return once its MQTT listener accepts connections and it logged its start."""
        if self.proc is not None and self.proc.poll() is None:
            raise BrokerError("already running")
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.proc = proc = subprocess.Popen(
                [self.binary],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=self.env(),
                start_new_session=True,  # one process group: kill() reaches the Erlang VM too
            )

        def started() -> bool:
            return bool(_STARTED.search(self.log_path.read_bytes()[offset:]))

        if not wait_listening(self.port, timeout, ready=started, alive=lambda: proc.poll() is None):
            code = proc.poll()
            text = self.log_tail()
            self.kill()
            raise BrokerError(
                f"rabbitmq did not listen on {HOST}:{self.port} within {timeout:.0f} s (exit code {code}); "
                f"its log:\n{text}"
            )
        return self

    def _signal_group(self, sig: int) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = _STOP_TIMEOUT_S) -> None:
        """SIGTERM: the node shuts down cleanly (idempotent); SIGKILL after ``timeout``."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the start script stops the VM and waits for it
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                proc.wait(timeout)
        self._signal_group(signal.SIGKILL)  # anything left of the group
        self.proc = None

    def kill(self) -> None:
        """SIGKILL to the whole node: it dies without flushing anything."""
        proc = self.proc
        if proc is None:
            return
        self._signal_group(signal.SIGKILL)
        proc.wait(_STOP_TIMEOUT_S)
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        while wait_listening(self.port, 0.0) and time.monotonic() < deadline:
            time.sleep(0.05)  # the VM (a grandchild) is reaped by init a moment later
        self.proc = None

    def restart(self) -> Self:
        """Stop (cleanly) and start again on the same ports, node name and data directory."""
        self.stop()
        return self.start()

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """``rabbitmqctl`` against this node (its output; BrokerError when it fails)."""
        ctl = Path(self.binary).with_name("rabbitmqctl")
        out = subprocess.run(
            [str(ctl), "-n", self.node, "-q", *args],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            check=False,
        )
        if out.returncode != 0:
            raise BrokerError(f"rabbitmqctl {' '.join(args)} failed: {out.stderr.strip()}")
        return out.stdout

    def queues(self) -> list[dict[str, Any]]:
        """Name, type, durability and message count of every queue."""
        text = self.ctl("list_queues", "name", "type", "durable", "messages", "--formatter", "json")
        rows: list[dict[str, Any]] = json.loads(text)
        return rows
