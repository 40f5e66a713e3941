"""A worker's trust in its cached credentials (``edgedrift_cloud.credential_watch``) on a real PostgreSQL:
a credential change committed by anyone starts a new generation (voiding every cached entry) as soon as the
database delivers its notification (milliseconds; the API's own changes wait for it), a change of another
column does not, and a listening connection that dies makes the worker stop trusting its cache
until it listens again; on SQLite the cache is never trusted."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import text

from edgedrift_cloud.auth import TokenCache
from edgedrift_cloud.credential_watch import CredentialWatch
from edgedrift_cloud.db.engine import make_engine, upgrade


async def heard(watch: CredentialWatch, before: int) -> bool:
    """Whether the watch starts a generation after ``before`` within 2 s."""
    for _ in range(400):
        watch.check()
        if watch.generation != before:
            return True
        await asyncio.sleep(0.005)
    return False


def test_a_committed_change_voids_the_cache_and_a_lost_connection_stops_the_trust(
    postgres_url_fresh: str,
) -> None:
    engine = make_engine(postgres_url_fresh)
    upgrade(engine)
    watch, cache = CredentialWatch(engine), TokenCache(600.0)

    async def scenario() -> None:
        task = asyncio.create_task(watch.keep_listening())
        for _ in range(100):
            if watch.listening:
                break
            await asyncio.sleep(0.05)
        assert watch.check(), "listening: the cache may be trusted"
        cache.put("h-a", "dev-a", watch.generation)
        assert cache.get("h-a", watch.generation) == "dev-a"
        before = watch.generation
        with engine.connect() as conn:
            conn.execute(
                text(
                    "INSERT INTO devices (id, token_hash, model_count, created_at)"
                    " VALUES ('d', 'h', 0, now())"
                )
            )
            conn.commit()
        assert await heard(watch, before), "a registration is heard"
        assert cache.get("h-a", watch.generation) is None, "and voids the cache"
        cache.put("h-a", "dev-a", watch.generation)
        before = watch.generation
        with engine.connect() as conn:
            conn.execute(text("UPDATE devices SET model_count = model_count + 1"))
            conn.commit()
        assert not await heard(watch, before), "other columns: no change"
        assert cache.get("h-a", watch.generation) == "dev-a"
        with engine.connect() as conn:
            conn.execute(text("UPDATE devices SET revoked_at = now()"))
            conn.commit()
        assert await heard(watch, before), "a revocation is heard"
        assert cache.get("h-a", watch.generation) is None, "and voids the cache"
        with engine.connect() as conn:
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
                )
            )
            conn.commit()
        for _ in range(100):
            if not watch.check():
                break
            await asyncio.sleep(0.05)
        assert not watch.listening, "a dead listening connection is noticed: the cache is not trusted"
        for _ in range(200):
            if watch.check():
                break
            await asyncio.sleep(0.05)
        assert watch.check(), "the watch listens again (a new generation: nothing cached before is used)"
        task.cancel()

    try:
        asyncio.run(scenario())
    finally:
        watch.close()
        engine.dispose()


def test_sqlite_never_trusts_a_cache(tmp_path: Path) -> None:
    watch = CredentialWatch(make_engine(f"sqlite:///{tmp_path / 'r.db'}"))
    assert not watch.enabled and not watch.check()
