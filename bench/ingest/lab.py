"""The processes of the ingest benchmark, as deployed but all on this machine: our own Mosquitto on a free
port (no persistence), the cloud trainer (SQLite, one worker; the agent needs it for its first model
after warm-up and for DRUiD's recomputes), and one agent process per fresh device."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgedrift_harness.agent import AGENT_COMMAND, AgentProcess
from edgedrift_harness.cloud import CloudProcess
from edgedrift_harness.mosquitto import MosquittoProcess, local_mosquitto

OPERATOR = "bench-operator-" + secrets.token_hex(16)


@dataclass(frozen=True)
class Config:
    """The run's settings (see ``bench/mqtt_ingest.py --help``)."""

    samples: int
    memory_samples: int
    window: int
    batch_window: int
    d: int
    seed: int
    startup_runs: int
    exact: bool
    profile: Path | None
    py_spy: list[str]
    qos: list[int]
    #: Experiments: another edgedrift_edge first on the agent's path (a before/after in one run), and the
    #: agent process's GIL switch interval (0: Python's default).
    agent_pythonpath: str = ""
    switch_interval: float = 0.0
    #: Gateway rows (``--json``): devices per row, the sample counts of the RSS readings, the output.
    gateway_devices: list[int] = field(default_factory=list)
    gateway_rss: tuple[int, ...] = (1_000_000, 3_000_000)
    json: Path | None = None
    #: The gateway rows' ``batch_mode`` values: one row per (devices, mode).
    gateway_modes: tuple[str, ...] = ("exact",)
    #: Gateway processes sharing each row's devices.
    gateway_processes: int = 1
    #: The interpreter of the agents and gateways (empty: this one), e.g. a venv holding only
    #: ``pip install ./shared ./edge_agent``, as a gateway host has: the dev venv's extra packages (httpx
    #: imports click, rich and pygments whenever they are installed) cost every process memory.
    agent_python: str = ""


def topic(device: str, kind: str) -> str:
    """``edgedrift/{device}/{kind}``."""
    return f"edgedrift/{device}/{kind}"


class IngestLab:
    """The broker and the cloud trainer (started), and agents for fresh devices."""

    def __init__(self, workdir: Path, cfg: Config) -> None:
        self.workdir = workdir
        self.cfg = cfg
        self.broker: MosquittoProcess = local_mosquitto(workdir / "broker", persistence=False).start()
        self.cloud = CloudProcess(
            f"sqlite:///{workdir / 'registry.db'}",
            workdir,
            operator_token=OPERATOR,
            log_path=workdir / "cloud.log",
            env={"EDGEDRIFT_CLOUD_LOG_LEVEL": "WARNING"},
        )
        try:
            self.cloud.start()
        except BaseException:
            self.broker.stop()
            raise

    def agent(self, qos: int, **settings: Any) -> AgentProcess:
        """``edgedrift-edge run`` (druid, 2000 warm-up samples) for a fresh device, spawned, not yet ready."""
        device, secret = f"bench-{secrets.token_hex(3)}", secrets.token_urlsafe(24)
        self.cloud.register(device, secret)
        values = {
            "device_id": device,
            "device_secret": secret,
            "broker_url": self.broker.url,
            "cloud_url": self.cloud.url,
            "strategy": "druid",
            "warmup_samples": 2000,
            "qos": qos,
            "checkpoint_dir": self.workdir / "state",
            "heartbeat_every_s": 2,
            **({"switch_interval_s": self.cfg.switch_interval} if self.cfg.switch_interval else {}),
            **settings,
        }
        log = self.workdir / f"agent-{device}.log"
        return AgentProcess(log, values, env=self.agent_env(), command=self.agent_command()).spawn()

    def agent_command(self) -> list[str]:
        """How an agent or a gateway starts: ``--agent-python``'s interpreter, or this one."""
        return [self.cfg.agent_python or AGENT_COMMAND[0], *AGENT_COMMAND[1:]]

    def agent_env(self) -> dict[str, str]:
        """What an agent (or a gateway) gets on top of this environment: ``--agent-pythonpath`` first."""
        if not self.cfg.agent_pythonpath:
            return {}
        paths = [self.cfg.agent_pythonpath, os.environ.get("PYTHONPATH", "")]
        return {"PYTHONPATH": os.pathsep.join(filter(None, paths))}

    def close(self) -> None:
        self.cloud.stop()
        self.broker.stop()
