"""Start-up of the agent: spawn -> its ``ready`` line, -> its retained ``online`` status, -> its first
prediction of a probe sample published every 5 ms from the spawn on; and what importing costs."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from edgedrift_edge.transport.mqtt import make_client
from edgedrift_harness.mqtt import Subscriber
from edgedrift_harness.proc import rss_mb
from ingest.lab import IngestLab, topic


@dataclass
class Startup:
    """Seconds from the spawn to each milestone, and VmRSS MB when ready."""

    ready: float
    online: float
    first_prediction: float
    rss_ready: float


class Watch(Subscriber):
    """Status, events and the first prediction of every device, with the time each was first seen."""

    def __init__(self, url: str, predictions: bool) -> None:
        self.first: dict[tuple[str, str], float] = {}
        self.status: dict[str, dict[str, Any]] = {}
        self.events: dict[str, Counter[str]] = {}
        kinds = ("status", "events", "predictions") if predictions else ("status", "events")
        super().__init__(url, [(topic("+", k), 1) for k in kinds], timeout=10)

    def handle(self, to: str, payload: bytes) -> None:
        t = time.monotonic()
        _, device, kind = to.split("/")
        if not payload:
            return
        doc = json.loads(payload)
        if kind == "status":
            self.status[device] = doc
            if doc.get("state") == "online":
                self.first.setdefault((device, "online"), t)
        elif kind == "events":
            self.events.setdefault(device, Counter())[doc.get("type", "?")] += 1
        else:
            self.first.setdefault((device, "prediction"), t)


def run_startup(lab: IngestLab, runs: int, d: int) -> list[Startup]:
    """``runs`` spawns of a fresh agent, one after the other."""
    watch = Watch(lab.broker.url, predictions=True)
    probe = make_client(lab.broker.url, f"bench-probe-{time.time_ns()}", clean_session=True)
    probe.connect("127.0.0.1", lab.broker.port)
    probe.loop_start()
    out = []
    try:
        for _ in range(runs):
            agent = lab.agent(1)
            k = 0
            while (agent.device, "prediction") not in watch.first:
                if time.monotonic() - agent.t_spawn > 30:
                    raise RuntimeError(f"no prediction 30 s after the spawn, see {agent.log}")
                sample = {"id": k, "x": [0.5] * d}
                probe.publish(topic(agent.device, "samples"), json.dumps(sample), qos=0)
                k += 1
                time.sleep(0.005)
            ready = agent.wait_ready()
            rss = rss_mb(agent.pid)
            out.append(
                Startup(
                    ready,
                    watch.first.get((agent.device, "online"), math.nan) - agent.t_spawn,
                    watch.first[(agent.device, "prediction")] - agent.t_spawn,
                    rss,
                )
            )
            agent.stop(60)
            time.sleep(0.2)
    finally:
        probe.disconnect()
        probe.loop_stop()
        watch.close()
    return out


def import_seconds(runs: int) -> tuple[float, float]:
    """Median wall time of a bare interpreter, and of one that imports the agent (what startup pays)."""

    def timed(code: str) -> float:
        t = time.monotonic()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.monotonic() - t

    bare = statistics.median(timed("pass") for _ in range(runs))
    agent = statistics.median(
        timed("import edgedrift_edge.cli, edgedrift_edge.agent, edgedrift_edge.settings") for _ in range(runs)
    )
    return bare, agent
