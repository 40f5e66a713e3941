"""``edgedrift-cloud trainer-worker``: a training worker process that consumes the queue of
:mod:`edgedrift_cloud.job_queue` and stores each job's version in the registry.

One job at a time per process (one Dramatiq worker thread, a prefetch of one: a waiting job stays on
the queue for an idle worker rather than behind a busy one); scale by running more processes. A job
runs at most once to a version whatever happens to the worker running it: before it trains it looks for
the version of its request id in the registry (a worker killed after storing and before marking the job
done), and the registry's unique (device, request id) keeps a second run from storing twice.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from edgedrift.training.window import TrainOutcome, train_window
from edgedrift.wire import Encoding, decode_window
from edgedrift_cloud import budget, history, recompute
from edgedrift_cloud.admission import JobCancelledError, watching
from edgedrift_cloud.db.engine import make_engine, make_sessionmaker
from edgedrift_cloud.job_queue import ACTOR, FINAL, QUEUE, Job, Keys, make_broker
from edgedrift_cloud.settings import CloudSettings

log = logging.getLogger("edgedrift.trainer_worker")
#: How often a running job checks that somebody still waits for it.
WATCH_POLL_S = 0.5
#: Dramatiq's idle poll ceiling: with a prefetch of one, a finished job's acknowledgement and the next
#: fetch wait for the consumer's current backoff, which grows up to this while a job runs.
WORKER_TIMEOUT_MS = 100


class _Watch:
    """Whether a job's watch key is gone, asked of Redis at most every WATCH_POLL_S."""

    def __init__(self, client: Any, key: str) -> None:
        self.client, self.key = client, key
        self.checked = time.monotonic()
        self.gone_now = False

    def gone(self) -> bool:
        if not self.gone_now and time.monotonic() - self.checked >= WATCH_POLL_S:
            self.checked = time.monotonic()
            self.gone_now = not self.client.exists(self.key)
        return self.gone_now


class JobRunner:
    """Runs one job of the queue: the Dramatiq actor's function."""

    def __init__(self, settings: CloudSettings) -> None:
        import redis

        self.settings = settings
        self.keys = Keys(settings.jobs_namespace)
        self.client: Any = redis.Redis.from_url(settings.jobs_redis_url)
        engine = make_engine(
            settings.database_url,
            connect_timeout_s=settings.database_connect_timeout_s,
            statement_timeout_s=settings.database_statement_timeout_s,
        )
        self.sessions = make_sessionmaker(engine)
        self.limits = budget.BudgetLimits(
            settings.recompute_budget_per_minute, settings.recompute_budget_per_device_per_minute
        )
        self.history_limits = history.HistoryLimits(
            settings.history_labels, settings.history_bytes_per_device
        )

    def __call__(self, key: str) -> None:
        fields: dict[bytes, bytes] = self.client.hgetall(key)
        job = Job.of(fields)
        if job is None or job.state in FINAL:
            return
        device_id = fields[b"device"].decode()
        minute = int(fields[b"minute"])
        header, X, y = decode_window(fields[b"window"])
        assert header.request_id is not None  # the API gives every queued job one
        with self.sessions() as session:
            from edgedrift_cloud import registry

            earlier = registry.model_by_request_id(session, device_id, header.request_id)
        if earlier is not None:
            self._finish(key, "done", version=str(earlier.version))
            return
        watch = _Watch(self.client, f"{key}:watch")
        if not self.client.exists(watch.key):
            self._cancelled(key, device_id, minute)
            return
        self.client.hset(key, mapping={"state": "running", "worker": str(os.getpid())})
        self.client.hincrby(key, "attempts", 1)
        try:
            with watching(watch.gone):
                outcome, edge = self._train(device_id, header, X, y)
        except JobCancelledError:
            self._cancelled(key, device_id, minute)
            return
        except Exception as exc:
            log.exception("training job failed", extra={"device": device_id, "job": key})
            recompute.refund(self.sessions, self.limits, device_id, minute)
            self._finish(key, "failed", error=f"{type(exc).__name__}: {exc}"[:500])
            return
        new = recompute.new_model(
            device_id, header, outcome, X, size=int(fields[b"size"]),
            encoding=_encoding(fields[b"encoding"].decode()), requested_by=fields[b"requested_by"].decode(),
            fingerprint=job.fingerprint, edge=edge,
        )  # fmt: skip
        try:
            record, replayed = recompute.store_once(self.sessions, new)
        except Exception as exc:  # the database failed or refused: the job is over, the client told
            log.exception("storing a trained job failed", extra={"device": device_id, "job": key})
            recompute.refund(self.sessions, self.limits, device_id, minute)
            self._finish(key, "failed", error=f"{type(exc).__name__}: {exc}"[:500])
            return
        if not replayed:
            recompute.log_stored(log, device_id, record, header, outcome, retuned=edge is not None)
        self._finish(key, "done", version=str(record.version))

    def _train(
        self, device_id: str, header: Any, X: Any, y: Any
    ) -> tuple[TrainOutcome, dict[str, Any] | None]:
        if header.retune is None:
            return train_window(header, X, y), None
        source = history.HistorySource(device_id, self.history_limits, sessions=self.sessions)
        done = history.retune_job(source, header, X, y)
        return done.outcome, done.edge

    def _cancelled(self, key: str, device_id: str, minute: int) -> None:
        recompute.refund(self.sessions, self.limits, device_id, minute)
        self._finish(key, "cancelled")
        log.info("training job cancelled: nobody waits for it", extra={"device": device_id, "job": key})

    def _finish(self, key: str, state: str, **fields: str) -> None:
        self.client.hset(key, mapping={"state": state, **fields})


def _encoding(value: str) -> Encoding:
    return "json" if value == "json" else "binary"


def run(settings: CloudSettings, alive_file: Path | None = None) -> int:
    """Consume the training queue until SIGTERM or SIGINT; the job in progress then finishes. Every
    second while Dramatiq's consumer and worker threads live, ``alive_file`` is touched (a container's
    liveness probe checks that it is fresh: the process has no HTTP port)."""
    import dramatiq
    from dramatiq import Worker

    broker = make_broker(settings.jobs_redis_url, settings.jobs_namespace, settings.jobs_heartbeat_timeout_s)
    runner = JobRunner(settings)
    dramatiq.Actor(runner, broker=broker, actor_name=ACTOR, queue_name=QUEUE, priority=0, options={})
    if settings.training_nice > 0:
        os.nice(settings.training_nice)
    worker = Worker(broker, worker_threads=1, worker_timeout=WORKER_TIMEOUT_MS)
    worker.queue_prefetch = 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda _s, _f: stop.set())
    worker.start()
    print(
        f"edgedrift-cloud: trainer worker {os.getpid()} consuming {settings.jobs_namespace}:{QUEUE}",
        flush=True,
    )
    while not stop.wait(1.0):
        threads = [*worker.consumers.values(), *worker.workers]
        if alive_file is not None and all(t.is_alive() for t in threads):
            alive_file.touch()
    worker.stop(timeout=600_000)
    broker.close()
    return 0
