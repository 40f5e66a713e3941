"""The edge agent as a child process: ``python -m edgedrift_edge.cli run`` configured through its
``EDGEDRIFT_EDGE_*`` variables, as a deployment starts it. Its stderr goes to a log file; its stdout is
read line by line (and appended to the same log), so the moment it prints ``ready`` is known to the
millisecond."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from edgedrift_harness.processes import log_tail, stop_process

__all__ = ["IMAGE_ENVIRONMENT", "AgentProcess", "agent_environment"]

AGENT_COMMAND = [sys.executable, "-m", "edgedrift_edge.cli", "run"]
#: What the edge image's environment sets for the agent besides its settings (deploy/edge/Dockerfile): two
#: glibc malloc arenas. This process's own value wins.
IMAGE_ENVIRONMENT = {"MALLOC_ARENA_MAX": "2"}


def agent_environment(settings: Mapping[str, Any]) -> dict[str, str]:
    """The image's environment (:data:`IMAGE_ENVIRONMENT`), this process's on top, plus
    ``EDGEDRIFT_EDGE_<NAME>`` for every setting (None: left out)."""
    return {
        **IMAGE_ENVIRONMENT,
        **os.environ,
        **{f"EDGEDRIFT_EDGE_{k.upper()}": str(v) for k, v in settings.items() if v is not None},
    }


class AgentProcess:
    """One agent process for ``settings["device_id"]`` (or a gateway's ``settings["gateway_id"]``);
    ``start()`` again after a stop or a kill resumes it with the same settings (and checkpoint directory)."""

    def __init__(
        self,
        log: Path,
        settings: Mapping[str, Any],
        *,
        env: Mapping[str, str] | None = None,
        command: list[str] | None = None,
    ) -> None:
        self.device = str(settings.get("device_id") or settings["gateway_id"])
        self.log = log
        self.env = {**agent_environment(settings), **(env or {})}
        self.command = command or AGENT_COMMAND
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready = threading.Event()
        self.t_spawn = math.nan
        self.t_ready = math.nan

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("not started")
        return self.proc.pid

    def spawn(self, command: list[str] | None = None) -> Self:
        """Start the process (``command`` instead of the usual one, e.g. under a wrapper); see
        :meth:`wait_ready`."""
        self.ready.clear()
        self.t_ready = math.nan
        self.t_spawn = time.monotonic()
        with self.log.open("ab") as err:
            self.proc = proc = subprocess.Popen(
                command or self.command,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        threading.Thread(target=self._read_stdout, args=(proc,), daemon=True).start()
        return self

    def _read_stdout(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with self.log.open("ab") as out:
            for line in proc.stdout:
                if b"ready" in line and not self.ready.is_set():
                    self.t_ready = time.monotonic()
                    self.ready.set()
                out.write(line)
                out.flush()

    def wait_ready(self, timeout: float = 30.0) -> float:
        """Seconds from the spawn to the ``ready`` line; RuntimeError (with the log's tail) when the
        process exits first or the timeout passes."""
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.05):
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"agent exited with {self.proc.returncode}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent not ready within {timeout:.0f} s:\n{self.tail()}")
        return self.t_ready - self.t_spawn

    def start(self, timeout: float = 30.0, command: list[str] | None = None) -> Self:
        """Spawn and wait until ready."""
        self.spawn(command)
        self.wait_ready(timeout)
        return self

    def kill(self) -> None:
        """SIGKILL: no checkpoint on the way out."""
        stop_process(self.proc, 30.0, signal.SIGKILL)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and the exit code (SIGKILL after ``timeout``)."""
        code = stop_process(self.proc, timeout)
        return 0 if code is None else int(code)

    def tail(self, lines: int = 30) -> str:
        return log_tail(self.log, lines, "")
