"""The cloud trainer as a real server: ``edgedrift-cloud serve`` (uvicorn) in a subprocess."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

PG_ADMIN_URL = os.environ.get("EDGEDRIFT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
OPERATOR = "operator-token-" + "x" * 24
DEVICES = {"dev-a": "secret-of-device-a-0123456789", "dev-b": "secret-of-device-b-0123456789"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CloudServer:
    """``edgedrift-cloud serve`` in a subprocess; ``restart()`` keeps the database."""

    def __init__(self, database_url: str, workdir: Path, **env: str) -> None:
        self.database_url = database_url
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"cloud-{self.port}.log"
        self.env = {
            **os.environ,
            "EDGEDRIFT_CLOUD_MODE": "production",
            "EDGEDRIFT_CLOUD_OPERATOR_TOKEN": OPERATOR,
            "EDGEDRIFT_CLOUD_DEVICES": ",".join(f"{k}={v}" for k, v in DEVICES.items()),
            "EDGEDRIFT_CLOUD_AUTH_CACHE_SECONDS": "0",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, workers: int = 1) -> CloudServer:
        cmd = [
            sys.executable,
            "-m",
            "edgedrift_cloud.cli",
            "serve",
            "--port",
            str(self.port),
            "--database-url",
            self.database_url,
            "--workers",
            str(workers),
        ]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, cwd=self.workdir, env=self.env, stdout=out, stderr=out)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"cloud trainer exited {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"cloud trainer not ready after 30 s:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def client(self, token: str | None) -> httpx.Client:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def logs(self) -> str:
        return self.log.read_text()
