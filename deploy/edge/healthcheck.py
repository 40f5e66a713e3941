"""HEALTHCHECK of the edge image: the agent holds its broker connection and its worker is alive.

* Connected: an ESTABLISHED TCP connection to the port of ``EDGEDRIFT_EDGE_BROKER_URL`` in
  ``/proc/net/tcp`` or ``/proc/net/tcp6`` (the container's own network namespace: every connection there
  is the agent's). The agent reconnects by itself, so a broker outage shows as unhealthy until it is back.
* Alive: the agent's worker writes a checkpoint into ``EDGEDRIFT_EDGE_CHECKPOINT_DIR`` every
  ``EDGEDRIFT_EDGE_CHECKPOINT_EVERY_S`` seconds (30 by default), busy or idle. The newest file there, or
  the container's start when it is newer (a fresh start has not checkpointed yet, a restart finds the
  previous run's file), must be younger than three periods (at least 60 s).

Exit 0 = healthy, 1 = unhealthy; one line on stdout says why (``docker inspect`` shows it).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

TCP_ESTABLISHED = "01"
TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def broker_port(url: str) -> int:
    parts = urlsplit(url)
    return parts.port or (8883 if parts.scheme in ("mqtts", "ssl") else 1883)


def established_remote_ports(tables: Iterable[str] = TABLES) -> set[int]:
    """Remote ports of every ESTABLISHED TCP connection (IPv4 and IPv6)."""
    ports: set[int] = set()
    for table in tables:
        try:
            lines = Path(table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == TCP_ESTABLISHED:
                ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


def container_started_at() -> float:
    """Wall-clock start of PID 1 (the container's init) from /proc, or 0 when unknown."""
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        stat = Path("/proc/1/stat").read_text()
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        return time.time() - uptime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def newest_checkpoint(directory: str) -> float:
    """mtime of the newest file in the checkpoint directory, or 0 when there is none."""
    try:
        return max((p.stat().st_mtime for p in Path(directory).iterdir() if p.is_file()), default=0.0)
    except OSError:
        return 0.0


def check(environ: Mapping[str, str]) -> tuple[bool, str]:
    port = broker_port(environ.get("EDGEDRIFT_EDGE_BROKER_URL") or "mqtt://127.0.0.1:1883")
    if port not in established_remote_ports():
        return False, f"unhealthy: no established connection to the broker port {port}"
    every = float(environ.get("EDGEDRIFT_EDGE_CHECKPOINT_EVERY_S") or 30)
    directory = environ.get("EDGEDRIFT_EDGE_CHECKPOINT_DIR") or "edgedrift-state"
    max_age = max(3 * every, 60.0)
    age = time.time() - max(newest_checkpoint(directory), container_started_at())
    if age > max_age:
        return False, f"unhealthy: no checkpoint in {directory} for {age:.0f} s (expected every {every:g} s)"
    return True, f"healthy: connected to the broker port {port}, last sign of life {age:.0f} s ago"


def main() -> int:
    healthy, message = check(os.environ)
    print(message)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
