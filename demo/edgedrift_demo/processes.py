"""The demo's processes: the cloud trainer as a subprocess that dies with the demo."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from edgedrift_demo.devices import HEARTBEAT_S
from edgedrift_demo.signals import signals_held
from edgedrift_harness.cloud import CloudProcess

CLOUD_START_S = 60.0


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when the demo dies (even by SIGKILL); Linux only."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the forked child
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def start_cloud(workdir: Path, devices: dict[str, str], operator_token: str) -> CloudProcess:
    """The cloud trainer for the demo (SQLite registry in the work directory). It runs in its own
    session, so a terminal's Ctrl-C reaches only the demo, which stops the agents first (they may be
    talking to the cloud) and then the cloud; and it dies with the demo if the demo is killed."""
    cloud = CloudProcess(
        f"sqlite:///{(workdir / 'registry.db').resolve()}",
        workdir,
        operator_token=operator_token,
        devices=devices,
        log_path=workdir / "cloud.log",
        env={"EDGEDRIFT_CLOUD_DASHBOARD_REFRESH_SECONDS": str(HEARTBEAT_S)},
    )
    with signals_held():
        cloud.spawn(start_new_session=True, preexec_fn=die_with_parent())
    return cloud
