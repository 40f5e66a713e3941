"""Issue 30 row 4: the phases of a hand-over the cloud lets each gateway take
(``edgedrift_cloud.gateway_registry``, on a SQLite registry)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from edgedrift_cloud import gateway_registry as reg
from edgedrift_cloud.db.engine import make_engine, upgrade


def test_the_cloud_takes_the_steps_in_order_and_only_from_their_gateway(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'r.db'}")
    upgrade(engine)
    with Session(engine) as s:
        for g in ("g1", "g2", "g3"):
            reg.upsert_gateway(s, g, f"{g}-secret-0123456789")
        reg.assign(s, "g1", ["d"])
        s.commit()
        assert reg.sync(s, "g1", set())[0][2] is None  # no hand-over: a secret, no flag
        assert reg.assign(s, "g2", ["d"]) == (0, 1)
        s.commit()
        assert reg.sync(s, "g1", {"d"}) == [("d", None, "record")]  # still served by the source
        assert reg.sync(s, "g2", set()) == [("d", None, "wait")]  # no secret rotated: g1 still uses it
        assert reg.serving(s, "g1") == {"d"}
        with pytest.raises(reg.HandoverConflictError):
            reg.assign(s, "g3", ["d"])  # one move at a time
        with pytest.raises(reg.HandoverConflictError):
            reg.advance(s, "g2", "d", "subscribed")  # the target before the source records
        with pytest.raises(reg.HandoverConflictError):
            reg.advance(s, "g3", "d", "recording")  # not a party
        reg.advance(s, "g1", "d", "recording")
        reg.advance(s, "g1", "d", "recording")  # again: harmless
        assert reg.sync(s, "g2", set()) == [("d", None, "hold")]
        with pytest.raises(reg.HandoverConflictError):
            reg.release(s, "g1", "d", b"state")  # before the target subscribed
        reg.advance(s, "g2", "d", "subscribed")
        assert reg.sync(s, "g1", {"d"}) == [("d", None, "release")]
        with pytest.raises(reg.HandoverConflictError):
            reg.take(s, "g2", "d")  # nothing left yet
        reg.release(s, "g1", "d", b"state")
        assert reg.sync(s, "g1", {"d"}) == [] and reg.serving(s, "g1") == set()
        assert reg.sync(s, "g2", set()) == [("d", None, "take")]
        state, secret = reg.take(s, "g2", "d")
        assert state == b"state" and secret
        s.commit()
        assert reg.sync(s, "g2", {"d"}) == [("d", None, None)]  # over: g2 holds the new secret


def test_unassigning_the_target_calls_the_move_off(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'r.db'}")
    upgrade(engine)
    with Session(engine) as s:
        for g in ("g1", "g2"):
            reg.upsert_gateway(s, g, f"{g}-secret-0123456789")
        reg.assign(s, "g1", ["d"])
        reg.assign(s, "g2", ["d"])
        assert reg.unassign(s, "g2", "d")
        s.commit()
        assert reg.sync(s, "g1", {"d"}) == [] and reg.sync(s, "g2", set()) == []
        reg.assign(s, "g1", ["d"])  # assigned anew: no move left to wait for
        assert reg.sync(s, "g1", {"d"}) == [("d", None, None)]
