"""Whether a worker may trust the device credentials it cached: a PostgreSQL connection of its own that
``LISTEN``s on the channel the database notifies at every credential change (migration 0009's trigger on
the devices table: any insert, delete, rotation or revocation, whoever makes it), so a rotated or revoked
secret is forgotten in every worker when the change commits, not when a cache entry expires.

:meth:`CredentialWatch.check` is called before a cached credential is used: it reads what the connection
received without waiting (a non-blocking read of its socket, no round trip to the database) and answers
whether the caches may be used. They may not when the connection is down or silent: every worker sends a
``ping`` notification of its own every :data:`PING_S` seconds and stops trusting its caches when its own
ping has not come back within :data:`STALE_S` (a connection that died without a word delivers nothing).
SQLite has no notifications: there the watch never listens and the service asks the registry every time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import Any

import anyio
import psycopg
from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger("edgedrift_cloud.credentials")

#: The channel migration 0009's trigger notifies.
CHANNEL = "edgedrift_credentials"
#: Seconds between a worker's pings of its own listening connection.
PING_S = 2.0
#: Without its own ping back for this long, a worker stops trusting its cached credentials.
STALE_S = 3 * PING_S


class CredentialWatch:
    """A worker's listening connection and what it heard (``generation`` grows at every change heard, every
    reconnection and every loss of the connection: a cache entry looked up under an older generation is
    not stored)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.enabled = engine.dialect.name == "postgresql"
        self.generation = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._ping = f"ping:{os.getpid()}:{id(self)}:"
        #: When (monotonic s, this process's clock) the newest ping heard back was sent.
        self._heard_ping = 0.0

    @property
    def listening(self) -> bool:
        return self._conn is not None

    def check(self) -> bool:
        """Read the notifications that arrived (never waits); True when the caches may be trusted."""
        conn = self._conn
        if conn is None:
            return False
        try:
            conn.pgconn.consume_input()
            changed = False
            while (note := conn.pgconn.notifies()) is not None:
                payload = note.extra.decode(errors="replace")
                if payload.startswith(self._ping):
                    self._heard_ping = max(self._heard_ping, float(payload.removeprefix(self._ping)))
                elif not payload.startswith("ping:"):
                    changed = True
        except (psycopg.Error, ValueError) as exc:
            self._lost(f"listening connection failed: {exc}")
            return False
        if changed:
            self.generation += 1
        if time.monotonic() - self._heard_ping > STALE_S:
            self._lost("listening connection is silent")
            return False
        return True

    def _lost(self, reason: str) -> None:
        conn, self._conn = self._conn, None
        self.generation += 1
        log.warning("credential cache off until the database's notifications come back: %s", reason)
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                conn.close()

    def _connect(self) -> psycopg.Connection[Any]:
        """A connection of the engine's (its connect arguments and timeouts), out of its pool, listening."""
        raw = self.engine.raw_connection()
        conn: psycopg.Connection[Any] = raw.driver_connection  # type: ignore[assignment]
        raw.detach()
        conn.autocommit = True
        conn.execute(f"LISTEN {CHANNEL}")
        return conn

    def _send_ping(self) -> None:
        payload = f"{self._ping}{time.monotonic():.6f}"
        with self.engine.connect() as db:
            db.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": CHANNEL, "payload": payload})
            db.commit()

    async def keep_listening(self) -> None:
        """Connect (again, after a loss) and ping, for as long as the worker runs: a background task."""
        while self.enabled:
            if self._conn is None:
                try:
                    conn = await anyio.to_thread.run_sync(self._connect)
                except Exception as exc:  # the task retries whatever went wrong
                    log.warning("cannot listen for credential changes: %s", exc)
                else:
                    self._conn, self._heard_ping = conn, time.monotonic()
                    self.generation += 1
            with contextlib.suppress(SQLAlchemyError, psycopg.Error, OSError):
                await anyio.to_thread.run_sync(self._send_ping)
            await asyncio.sleep(PING_S)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                conn.close()
