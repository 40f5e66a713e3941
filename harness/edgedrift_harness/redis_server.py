"""A throwaway ``redis-server`` on a free port (Debian's ``redis-server``), no persistence: the training
queue's tests and benchmarks start their own, so a test that kills workers or flushes keys shares
nothing with another."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Self

from edgedrift_harness.ports import HOST, free_port
from edgedrift_harness.processes import log_tail, stop_process

__all__ = ["RedisServer", "redis_available"]


def redis_available() -> bool:
    """Whether ``redis-server`` is installed."""
    return shutil.which("redis-server") is not None


class RedisServer:
    """``redis-server`` on a free port of the loopback; :attr:`url` once started."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"redis://{HOST}:{self.port}/0"
        self.log_path = workdir / f"redis-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> Self:
        """Spawn and wait until it answers PING."""
        cmd = [
            "redis-server", "--port", str(self.port), "--bind", HOST, "--save", "", "--appendonly", "no",
            "--dir", str(self.workdir), "--logfile", str(self.log_path),
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited:\n{log_tail(self.log_path)}")
            probe = subprocess.run(
                ["redis-cli", "-h", HOST, "-p", str(self.port), "ping"], capture_output=True, check=False
            )
            if probe.stdout.strip() == b"PONG":
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer within {timeout:.0f} s:\n{log_tail(self.log_path)}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        stop_process(proc, 10.0)
