"""The demo's live progress view: one line per device, refreshed in place on a terminal."""

from __future__ import annotations

import shutil
import time
from typing import TextIO

from edgedrift_demo.devices import PROTOCOL, DeviceRun
from edgedrift_edge.agent import EdgeAgent
from edgedrift_harness.mqtt import PredictionCollector

TTY_REFRESH_S = 0.5
LOG_REFRESH_S = 5.0


def recent_metric(agent: EdgeAgent) -> str:
    """Recent accuracy (classification) or RMSE (regression) over the agent's last labeled samples."""
    st = agent.session
    accuracy, rmse = st.quality.accuracy(), st.quality.rmse()
    if accuracy is not None:
        return f"acc {accuracy:.3f}"
    return "-" if rmse is None else f"rmse {rmse:.3f}"


def status_line(run: DeviceRun, collector: PredictionCollector, now: float) -> str:
    """One device's progress line."""
    agent = run.agent
    if agent is None:
        return f"  {run.spec.device_id:<6} starting"
    st = agent.session
    done = st.counters.samples
    pct = 100.0 * done / max(run.n, 1)
    rate = done / max((run.finished or now) - run.started, 1e-9)
    loop = st.loop
    if st.phase != "running":
        learning = f"warm-up {min(done, PROTOCOL.window)}/{PROTOCOL.window}"
    else:
        learning = f"{recent_metric(agent)} (last {len(st.quality)} labels)"
    recomputes = loop.counters.recomputes if loop is not None else 0
    version = "-" if st.model_version is None else f"v{st.model_version}"
    return (
        f"  {run.spec.device_id:<6} {done:>7,}/{run.n:<7,} {pct:5.1f}%  {learning:<30} "
        f"recomputes {recomputes:<3} model {version:<4} queue {agent.waiting:>6,}  "
        f"{rate:>6,.0f}/s  published {collector.received(run.spec.device_id):,}"
    )


class LiveView:
    """One line per device: redrawn in place ~2x/s on a terminal, a block every few seconds in a log."""

    def __init__(self, out: TextIO, runs: list[DeviceRun], collector: PredictionCollector) -> None:
        self.out, self.runs, self.collector = out, runs, collector
        self.tty = out.isatty()
        self.drawn = 0
        self.last = 0.0
        self.t0 = time.monotonic()

    def render(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < (TTY_REFRESH_S if self.tty else LOG_REFRESH_S):
            return
        self.last = now
        lines = [status_line(r, self.collector, now) for r in self.runs]
        if self.tty:
            width = shutil.get_terminal_size((160, 24)).columns - 1
            if self.drawn:
                self.out.write(f"\x1b[{self.drawn}F")
            self.out.write("".join(f"\x1b[2K{line[:width]}\n" for line in lines))
            self.drawn = len(lines)
        else:
            self.out.write(f"[{now - self.t0:6.1f} s]\n" + "".join(f"{line}\n" for line in lines))
        self.out.flush()
