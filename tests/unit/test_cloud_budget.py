"""The fleet recompute budget: priority by drift evidence, Retry-After spread, and atomic admission in
a real SQLite registry (the integration tests run it on PostgreSQL across two servers)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cloud import seeded_registry

from edgedrift_cloud import budget


def test_evidence_reads_the_monitor_statistics() -> None:
    assert budget.evidence("periodic", {}) == 0.0
    assert budget.evidence("drift", {}) == 1.0
    assert budget.evidence("drift", {"evidence": 3.5}) == 3.5
    assert budget.evidence("manual", {"norm": 6.0, "threshold": 2.0}) == 3.0
    assert budget.evidence("drift", {"evidence": True}) == 1.0
    assert budget.evidence("periodic", {"norm": 1.0, "threshold": 0.0}) == 0.0


def test_stronger_evidence_may_fill_more_of_the_budget() -> None:
    shares = [budget.priority_share(e) for e in (0.0, 0.5, 1.0, 2.0, 10.0)]
    assert shares == sorted(shares) and shares[0] == budget.FLOOR_SHARE and shares[-1] == 1.0
    assert budget.allowed(100, 0.0) == 50 and budget.allowed(100, 5.0) == 100
    assert budget.allowed(1, 0.0) == 1 and budget.allowed(0, 5.0) == 0


@pytest.mark.parametrize("now", [0.0, 12.5, 59.9, 3600.0])
def test_retry_after_points_into_the_next_minute(now: float) -> None:
    to_next = 60.0 - now % 60.0
    assert to_next <= budget.retry_after(now, 0.0) <= to_next + 1
    assert budget.retry_after(now, 1.0) <= to_next + 60


def test_admission_counts_per_minute_and_rolls_back_a_refusal(tmp_path: Path) -> None:
    engine, sessions = seeded_registry(f"sqlite:///{tmp_path / 'r.db'}", ("a", "b", "c", "d"))
    limits = budget.BudgetLimits(fleet=3, per_device=1)
    outcomes = []
    with sessions() as session:
        for device in ("a", "a", "b", "c", "d"):
            outcomes.append(budget.admit(session, limits, device, 2.0, minute=100))
        assert budget.admit(session, limits, "d", 2.0, minute=101) is None
    # a's second is over its own limit; b and c take the rest, d (a first recompute) is refused: it waits.
    assert outcomes == [None, "budget_device", None, None, "budget_fleet"]
    with engine.connect() as conn:
        query = "SELECT scope, admitted FROM recompute_budget WHERE minute = 100"
        rows = {str(scope): int(n) for scope, n in conn.exec_driver_sql(query).all()}
    assert rows == {"fleet": 3, "device:a": 1, "device:b": 1, "device:c": 1, "device:d": 0, "waiting": 1}


def test_self_reported_evidence_cannot_buy_the_fleet_budget(tmp_path: Path) -> None:
    """Issue 28 row 12: a device reporting evidence 2 takes its first recompute and REPEAT_SHARE of the
    fleet's budget at most; a genuinely drifting device's first recompute is still admitted, and once a
    device waits, nobody's second recompute is."""
    devices = ("loud", "drifting", *(f"d{i}" for i in range(10)))
    _engine, sessions = seeded_registry(f"sqlite:///{tmp_path / 'r.db'}", devices)
    limits = budget.BudgetLimits(fleet=10, per_device=None)
    with sessions() as session:
        loud = [budget.admit(session, limits, "loud", 2.0, minute=7) for _ in range(10)]
        assert loud.count(None) == 2, loud  # its first, then repeats while the fleet is under 2.5
        assert budget.admit(session, limits, "drifting", 1.0, minute=7) is None
        firsts = [budget.admit(session, limits, f"d{i}", 2.0, minute=7) for i in range(10)]
        assert firsts.count(None) == 7 and firsts[-1] == "budget_fleet"
        assert budget.admit(session, limits, "loud", 2.0, minute=8) is None
        assert budget.admit(session, limits, "loud", 2.0, minute=8) == "budget_fleet", "devices wait"
