"""The operator's fleet views and the gateways' heartbeat batches run in threads of their own: with
every thread of the pool the devices' requests share held, both still answer."""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread

from edgedrift_cloud.auth import TokenCache
from edgedrift_cloud.db.engine import make_engine, make_sessionmaker
from edgedrift_cloud.dependencies import AppState
from edgedrift_cloud.observability import Metrics
from edgedrift_cloud.settings import CloudSettings


def _state(tmp_path: Path) -> AppState:
    settings = CloudSettings(
        mode="development",
        database_url=f"sqlite:///{tmp_path / 'registry.db'}",
        fleet_view_threads=1,
        heartbeat_threads=1,
    )
    engine = make_engine(settings.database_url)
    sessions = make_sessionmaker(engine)
    return AppState(
        settings=settings,
        engine=engine,
        sessions=sessions,
        metrics=Metrics(sessions, False),
        tokens=TokenCache(0.0),
    )


def test_views_and_heartbeats_answer_while_the_shared_pool_is_held(tmp_path: Path) -> None:
    state = _state(tmp_path)
    release = threading.Event()

    async def main() -> tuple[bool, int, int]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = 1
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(partial(anyio.to_thread.run_sync, release.wait))
            try:
                await anyio.sleep(0.05)
                with anyio.move_on_after(0.3) as shared:
                    await anyio.to_thread.run_sync(lambda: None)
                with anyio.fail_after(5):
                    stored = await state.store_heartbeats(lambda _session: 7)
                    viewed = await state.read_view(lambda _session: 8)
            finally:
                release.set()
        return shared.cancelled_caught, stored, viewed

    try:
        held, stored, viewed = anyio.run(main)
    finally:
        state.engine.dispose()
    assert held, "the shared pool was not exhausted, so the test shows nothing"
    assert (stored, viewed) == (7, 8)
