"""The agent's watchdog thread: ``degraded`` (status and event) when messages wait and the worker has not
finished one for ``watchdog_s``, ``recovered`` when it moves again, and the agent's death when the worker
thread is gone (a component that cannot work never keeps reporting ``online``)."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgedrift_edge.agent import EdgeAgent

log = logging.getLogger("edgedrift_edge")


def watch(agent: EdgeAgent, worker: threading.Thread) -> None:
    """Degraded when work waits and nothing moves for ``watchdog_s``; error when ``worker`` is gone."""
    last_progress, since = agent.progress, time.monotonic()
    while not agent.stopping.wait(min(1.0, agent.settings.watchdog_s / 4)):
        if not worker.is_alive() and agent.fatal is None:
            agent.die("the worker thread is gone")
            return
        now = time.monotonic()
        if agent.progress != last_progress or not agent.waiting:
            last_progress, since = agent.progress, now
            if agent.degraded:
                agent.degraded = None
                agent.event_all("recovered", "work is progressing again")
                agent.publish_all_status(None)
        elif now - since >= agent.settings.watchdog_s and not agent.degraded:
            agent.degraded = f"{agent.waiting} messages queued, no progress for {now - since:.0f} s"
            log.error("degraded: %s", agent.degraded)
            agent.event_all("degraded", agent.degraded)
            agent.publish_all_status("degraded")
