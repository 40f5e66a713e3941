"""``py-spy record`` around a phase of a benchmark (py-spy is not a project dependency: pass its path)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path


def py_spy_record(py_spy: list[str], pid: int, out: Path, *flags: str) -> Callable[[], None]:
    """Start recording ``pid`` as raw stacks into ``out``; the returned function stops it (SIGINT)."""
    proc = subprocess.Popen(
        [*py_spy, "--pid", str(pid), *flags, "--format", "raw", "--output", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def stop() -> None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    return stop
