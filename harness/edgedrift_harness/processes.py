"""Child processes: stopping one (a signal, then SIGKILL when it does not exit) and the tail of its log."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

__all__ = ["log_tail", "stop_process"]


def stop_process(
    proc: subprocess.Popen[bytes] | None, timeout: float = 30.0, sig: int = signal.SIGTERM
) -> int | None:
    """Send ``sig`` (SIGTERM: a clean stop) and wait; SIGKILL after ``timeout``. The exit code (None for no
    process); a process that already exited is only reaped."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    return proc.returncode


def log_tail(path: Path, lines: int = 30, empty: str = "(empty log)") -> str:
    """The last ``lines`` lines of a log file (``empty`` when it is missing or empty)."""
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:]) or empty
