"""The cloud trainer as a child process: ``python -m edgedrift_cloud.cli serve`` on a free port, ready
once ``/readyz`` answers 200. The demo, the benchmarks and the integration tests all start it this way."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Self

import httpx

from edgedrift_harness.ports import HOST, free_port
from edgedrift_harness.processes import log_tail, stop_process, wait_answering

__all__ = ["CloudProcess", "CloudProcessError", "TrainerWorkerProcess"]


def server_tree_env(tree: Path | None) -> dict[str, str]:
    """The environment that runs a cloud from another checkout's source (``--server-tree`` of the benches:
    the tree before a change, measured in the same minutes): its ``cloud_trainer`` and ``shared`` first on
    ``PYTHONPATH``; empty without a tree."""
    if tree is None:
        return {}
    tree = tree.resolve()
    paths = [str(tree / "cloud_trainer"), str(tree / "shared"), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(filter(None, paths))}


def _then_nice(first: Callable[[], object] | None, nice: int) -> None:
    """A child's ``preexec_fn``: the caller's own first (the demo's, say), then ``os.nice(nice)``."""
    if first is not None:
        first()
    os.nice(nice)


class CloudProcessError(RuntimeError):
    """The cloud trainer exited or did not become ready; the message ends with its log's tail."""


class CloudProcess:
    """One ``edgedrift-cloud serve`` process; ``restart()`` keeps port and database."""

    def __init__(
        self,
        database_url: str,
        workdir: Path,
        *,
        operator_token: str,
        devices: dict[str, str] | None = None,
        workers: int = 1,
        log_path: Path | None = None,
        env: dict[str, str] | None = None,
        nice: int = 0,
    ) -> None:
        self.database_url = database_url
        #: Added to the process's niceness at its start (``os.nice``): a bench that runs the cloud on the
        #: cores of the system it measures lets the cloud have only what that system leaves.
        self.nice = nice
        self.workdir = workdir
        self.operator_token = operator_token
        self.workers = workers
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log_path = log_path or workdir / f"cloud-{self.port}.log"
        self.env = {
            **os.environ,
            "EDGEDRIFT_CLOUD_MODE": "production",
            "EDGEDRIFT_CLOUD_OPERATOR_TOKEN": operator_token,
            "EDGEDRIFT_CLOUD_DEVICES": ",".join(f"{d}={s}" for d, s in (devices or {}).items()),
            **(env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def on_sqlite(cls, workdir: Path, devices: dict[str, str], *, operator_token: str, nice: int = 0) -> Self:
        """A cloud on a SQLite file in ``workdir`` with ``devices`` registered and no limit on failed
        authentications (a bench's hundreds of devices all connect from 127.0.0.1)."""
        return cls(
            f"sqlite:///{workdir / 'registry.db'}",
            workdir,
            operator_token=operator_token,
            devices=devices,
            env={"EDGEDRIFT_CLOUD_AUTH_FAILURES_PER_10S": "1000000"},
            nice=nice,
        )

    @property
    def pid(self) -> int:
        """The process id (of the uvicorn supervisor when workers > 1)."""
        assert self.proc is not None, "not started"
        return self.proc.pid

    def spawn(self, **popen: Any) -> None:
        """Start the process (extra ``subprocess.Popen`` arguments pass through); see :meth:`wait_ready`."""
        cmd = [
            sys.executable, "-m", "edgedrift_cloud.cli", "serve", "--host", HOST, "--port", str(self.port),
            "--database-url", self.database_url, "--workers", str(self.workers),
        ]  # fmt: skip
        if self.nice:
            popen["preexec_fn"] = partial(_then_nice, popen.get("preexec_fn"), self.nice)
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=self.workdir, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, **popen,
            )  # fmt: skip

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Return once ``/readyz`` answers 200; :class:`CloudProcessError` if it exits or times out."""
        assert self.proc is not None, "spawn() first"
        if wait_answering(f"{self.url}/readyz", self.proc, timeout):
            return
        if self.proc.poll() is not None:
            code = self.proc.returncode
            raise CloudProcessError(f"the cloud trainer exited with code {code}:\n{self.tail()}")
        self.stop()
        raise CloudProcessError(f"the cloud trainer was not ready within {timeout:.0f} s:\n{self.tail()}")

    def start(self, timeout: float = 60.0) -> Self:
        """Spawn and wait until ready."""
        self.spawn()
        self.wait_ready(timeout)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (uvicorn shuts down gracefully), SIGKILL after ``timeout``; idempotent."""
        proc, self.proc = self.proc, None
        stop_process(proc, timeout)

    def restart(self) -> None:
        """Stop and start again on the same port and database."""
        self.stop()
        self.start()

    def logs(self) -> str:
        """The whole log (empty before the first start)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def tail(self, lines: int = 20) -> str:
        return log_tail(self.log_path, lines, "(no log)")

    def client(self, token: str | None) -> httpx.Client:
        """An HTTP client with ``token`` as bearer credential (None: anonymous)."""
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def register(self, device: str, secret: str) -> None:
        """``PUT /v1/devices/{device}`` as the operator."""
        with self.client(self.operator_token) as op:
            op.put(f"/v1/devices/{device}", json={"secret": secret}).raise_for_status()

    def counters(self, device: str) -> dict[str, Any]:
        """``GET /v1/devices/{device}/counters`` as the operator."""
        with self.client(self.operator_token) as op:
            reply = op.get(f"/v1/devices/{device}/counters")
            reply.raise_for_status()
            return dict(reply.json())


class TrainerWorkerProcess:
    """One ``edgedrift-cloud trainer-worker`` process (training on the queue of
    ``EDGEDRIFT_CLOUD_TRAINING=queue``), ready once it says it consumes the queue."""

    def __init__(
        self, database_url: str, redis_url: str, workdir: Path, env: dict[str, str] | None = None
    ) -> None:
        self.database_url = database_url
        self.redis_url = redis_url
        self.workdir = workdir
        self.env = {**os.environ, "EDGEDRIFT_CLOUD_LOG_JSON": "false", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "trainer-worker.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> Self:
        """Spawn and wait until it consumes the queue."""
        cmd = [
            sys.executable, "-m", "edgedrift_cloud.cli", "trainer-worker",
            "--database-url", self.database_url, "--redis-url", self.redis_url,
        ]  # fmt: skip
        self.log_path = self.workdir / f"trainer-worker-{time.monotonic_ns()}.log"
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                cmd, cwd=self.workdir, env=self.env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise CloudProcessError(
                    f"the trainer worker exited with code {self.proc.returncode}:\n{self.tail()}"
                )
            if b"consuming" in self.log_path.read_bytes():
                return self
            time.sleep(0.05)
        self.stop()
        raise CloudProcessError(f"the trainer worker did not start within {timeout:.0f} s:\n{self.tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (the job in progress finishes), SIGKILL after ``timeout``; idempotent."""
        proc, self.proc = self.proc, None
        stop_process(proc, timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash or the OOM killer would: no clean-up of any kind."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait(10)

    def tail(self, lines: int = 20) -> str:
        return log_tail(self.log_path, lines, "(no log)")
