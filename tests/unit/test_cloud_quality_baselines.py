"""The quality series' arithmetic without a server: each device's baseline and what counts as a fall,
the fleet histograms' cumulative buckets, and a snapshot read once per period however many scrapes."""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import event

from edgedrift_cloud import registry
from edgedrift_cloud.db.engine import make_engine, make_sessionmaker, upgrade
from edgedrift_cloud.db.tables import HeartbeatRecord
from edgedrift_cloud.quality_metrics import (
    Baselines,
    DeviceQuality,
    QualityCollector,
    QualityConfig,
    _histogram,
)


def device(name: str, quality: float, task: str = "classification", status: str = "online") -> DeviceQuality:
    regression = task == "regression"
    return DeviceQuality(
        device_id=name,
        status=status,
        drifting=False,
        task=task,
        accuracy=None if regression else quality,
        rmse=quality if regression else None,
        running_version=None,
        latest_version=None,
        last_recompute_at=None,
        last_seen=None,
    )


def test_a_fall_is_measured_against_the_device_s_own_moving_baseline() -> None:
    book = Baselines(QualityConfig(accuracy_drop=0.1, rmse_rise=0.5, baseline_s=100.0))
    assert book.update([device("a", 0.9), device("r", 0.2, "regression")], now=0.0) == (
        {"a": 0.9, "r": 0.2},
        set(),
    )
    before, falling = book.update([device("a", 0.85), device("r", 0.25, "regression")], now=10.0)
    assert before == {"a": 0.9, "r": 0.2} and falling == set(), "small moves are no fall"
    _, falling = book.update([device("a", 0.7), device("r", 0.4, "regression")], now=20.0)
    assert falling == {"a", "r"}
    # a sustained new level becomes the baseline after a few time constants: the fall is over
    for step in range(3, 40):
        _, falling = book.update([device("a", 0.7), device("r", 0.4, "regression")], now=10.0 * step)
    assert falling == set()


def test_devices_not_heard_from_keep_their_baseline_and_gone_ones_are_forgotten() -> None:
    book = Baselines(QualityConfig(baseline_s=1.0))
    book.update([device("a", 0.9), device("b", 0.9)], now=0.0)
    before, falling = book.update([device("a", 0.1, status="stale")], now=100.0)
    assert before == {} and falling == set()
    before, falling = book.update([device("a", 0.5)], now=200.0)
    assert before == {"a": 0.9} and falling == {"a"}
    before, _ = book.update([device("b", 0.9)], now=300.0)
    assert before == {"b": 0.9}, "b was forgotten while it was gone"


def test_histogram_buckets_are_cumulative() -> None:
    registry_ = CollectorRegistry()
    family = _histogram("h", "h.", [0.55, 0.6, 0.95, 2.0], (0.5, 0.6, 1.0))

    class One:
        def collect(self) -> list[object]:
            return [family]

    registry_.register(One())  # type: ignore[arg-type]
    text = generate_latest(registry_).decode()
    samples = {
        (s.name, s.labels.get("le")): s.value for f in text_string_to_metric_families(text) for s in f.samples
    }
    assert samples[("h_bucket", "0.5")] == 0 and samples[("h_bucket", "0.6")] == 2
    assert samples[("h_bucket", "1.0")] == 3 and samples[("h_bucket", "+Inf")] == 4
    assert samples[("h_count", None)] == 4 and abs(samples[("h_sum", None)] - 4.1) < 1e-12


def test_the_snapshot_is_read_once_per_period(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'r.db'}")
    upgrade(engine)
    sessions = make_sessionmaker(engine)
    with sessions() as session:
        registry.upsert_device(session, "dev-1", "secret-of-device-dev-1-0123456789")
        session.commit()
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    collector = QualityCollector(sessions, QualityConfig(max_age_s=3600.0))
    first = collector.snapshot()
    read = len(statements)
    for _ in range(5):
        assert collector.snapshot() is first
    assert len(statements) == read, "a scrape within the period read the database"
    assert first is not None and [d.device_id for d in first.devices] == ["dev-1"]
    assert HeartbeatRecord.__tablename__ in " ".join(statements)


def test_a_stale_snapshot_is_served_while_one_thread_reads_the_next(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'r.db'}")
    upgrade(engine)
    collector = QualityCollector(make_sessionmaker(engine), QualityConfig(max_age_s=0.2))
    first = collector.snapshot()
    time.sleep(0.3)
    assert collector.snapshot() is first, "a stale snapshot is answered at once"
    deadline = time.monotonic() + 10
    while collector.snapshot() is first and time.monotonic() < deadline:
        time.sleep(0.01)
    second = collector.snapshot()
    assert second is not first and second is not None and second.read_at > first.read_at  # type: ignore[union-attr]
