"""The agent's watchdog thread: ``degraded`` (status and event) when messages wait and the worker has not
finished one for ``watchdog_s``, or checkpoints wait that long for the disk; ``recovered`` when it moves
again; the agent's death when the worker thread is gone (a component that cannot work never keeps
reporting ``online``)."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgedrift_edge.agent import EdgeAgent

log = logging.getLogger("edgedrift_edge")


def watch(agent: EdgeAgent, worker: threading.Thread) -> None:
    """Degraded when work (or a checkpoint) waits and nothing moves for ``watchdog_s``; error when
    ``worker`` is gone."""
    last_progress, since = agent.progress, time.monotonic()
    while not agent.stopping.wait(min(1.0, agent.settings.watchdog_s / 4)):
        if not worker.is_alive() and agent.fatal is None:
            agent.die("the worker thread is gone")
            return
        now = time.monotonic()
        if agent.progress != last_progress or not agent.waiting:
            last_progress, since = agent.progress, now
        stalled = agent.checkpoints.stalled_s(now)
        if now - since >= agent.settings.watchdog_s:
            problem: str | None = f"{agent.waiting} messages queued, no progress for {now - since:.0f} s"
        elif stalled >= agent.settings.watchdog_s:
            problem = f"checkpoints not written for {stalled:.0f} s: the disk does not answer"
        else:
            problem = None
        if problem is None and agent.degraded:
            agent.degraded = None
            agent.event_all("recovered", "work is progressing again")
            agent.publish_all_status(None)
        elif problem is not None and not agent.degraded:
            agent.degraded = problem
            log.error("degraded: %s", agent.degraded)
            agent.event_all("degraded", agent.degraded)
            agent.publish_all_status("degraded")
