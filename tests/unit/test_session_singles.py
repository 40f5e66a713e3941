"""A device's queued single-sample messages handled together (``DeviceSession.singles`` and
``handle_singles``, what a gateway's worker does with a queue after a restart) give what ``handle`` gives
them one by one: the same predictions, counters and state, whatever else the queue holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.sessions import D, gateway, running, sample, train

from edgedrift import state
from edgedrift_edge.device import session_config
from edgedrift_edge.session.device_session import DeviceSession, Output
from edgedrift_edge.session.trainer import RecomputeRequest, TrainedModel


def rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    return X, np.where(X @ np.array([1.0, -1.0, 0.5]) + 0.2 * rng.normal(size=n) > 0, 1.0, -1.0)


def queue(seed: int) -> list[bytes]:
    """Single samples (a third unlabeled, each with the publisher's ``seq``, now and then a gap: samples
    the broker dropped), a concept change that makes the monitor recompute, and now and then what must
    not be grouped: a redelivery, a reused id, a batch, a sample of another width, bad JSON."""
    rng = np.random.default_rng(seed)
    X, y = rows(900, seed)
    y[450:] = -y[450:]  # the concept flips
    out: list[bytes] = []
    seq = 0
    for i in range(900):
        label = None if i % 3 == 0 else float(y[i])
        seq += 1 + (rng.random() < 0.02) * int(rng.integers(1, 4))
        out.append(sample(1000 + i, X[i], label)[:-1] + b', "seq": %d}' % seq)
        r = rng.random()
        if r < 0.02:
            out.append(out[-1 - int(rng.integers(0, min(20, len(out))))])  # a redelivery
        elif r < 0.03:
            out.append(sample(1000 + i - 5, X[i - 1], float(y[i])))  # a reused id, other content
        elif r < 0.04:
            items = [{"id": 90_000 + i * 10 + k, "x": X[k].tolist(), "y": float(y[k])} for k in range(3)]
            out.append(json.dumps({"samples": items}).encode())
        elif r < 0.045:
            out.append(b"{not json")
        elif r < 0.05:
            out.append(json.dumps({"id": 5000 + i, "x": [1.0] * (D + 1)}).encode())  # another width
    return out


def warmed(tmp_path: Path, **kw: Any) -> DeviceSession:
    return running(gateway(tmp_path, **kw))[0]


def together(s: DeviceSession, payloads: list[bytes], sizes: list[int]) -> tuple[list[Output], int]:
    """The gateway worker's way: each chunk's leading singles in one call, the rest one by one."""
    outs: list[Output] = []
    grouped = 0
    at = 0
    for size in sizes:
        chunk = payloads[at : at + size]
        at += size
        while chunk:
            singles = s.singles("samples", chunk) if len(chunk) > 1 else []
            if len(singles) < 2:
                outs.append(s.handle("samples", chunk[0]))
                chunk = chunk[1:]
                continue
            outs += s.handle_singles(singles)
            grouped += len(singles)
            chunk = chunk[len(singles) :]
    return outs, grouped


def state_of(s: DeviceSession) -> bytes:
    """The session's checkpoint without its epoch (a random id per session, which also names a pending
    request) and the loop's flags of its last ``process_many`` call (an output of that call, not state)."""
    assert s.loop is not None
    s.loop.last_outliers = s.loop.last_incremental = np.zeros(0, dtype=bool)
    tree = s.snapshot()
    epoch = tree.pop("epoch")
    if tree.get("pending"):
        tree["pending"] = {**tree["pending"], "request_id": tree["pending"]["request_id"].replace(epoch, "")}
    return state.dumps(tree)


@pytest.mark.parametrize(
    ("seed", "strategy"),
    [(0, {}), (1, {}), (2, {"strategy": "periodic", "strategy_param": 25}), (3, {"strategy": "predsign"})],
)
def test_singles_together_predict_count_and_learn_as_one_by_one(
    seed: int, strategy: dict[str, Any], tmp_path: Path
) -> None:
    payloads = queue(seed)
    a, b = warmed(tmp_path, **strategy), warmed(tmp_path, **strategy)
    one_by_one = [a.handle("samples", p) for p in payloads]
    rng = np.random.default_rng(seed + 10)
    sizes = rng.integers(1, 40, size=len(payloads)).tolist()
    grouped_outs, grouped = together(b, payloads, sizes)

    assert grouped > len(payloads) // 2  # the path under test took most of the queue
    assert [o.predictions for o in grouped_outs] == [o.predictions for o in one_by_one]
    assert [o.batch for o in grouped_outs] == [o.batch for o in one_by_one]
    assert b.counters == a.counters
    assert a.seq.gaps and a.seq.gaps == b.seq.gaps  # the gaps the seqs showed, found in the same places
    assert a.loop is not None and b.loop is not None
    if strategy.get("strategy") == "periodic":  # a recompute every 25 labels: some in a group's middle
        assert a.loop.counters.recomputes > 10
    assert b.loop.counters.recomputes == a.loop.counters.recomputes
    assert b.model_version == a.model_version
    assert state_of(b) == state_of(a)
    X, y = rows(200, seed + 50)
    after = [sample(20_000 + i, X[i], None if i % 2 else float(y[i])) for i in range(200)]
    assert [b.handle("samples", p).predictions for p in after] == [
        a.handle("samples", p).predictions for p in after
    ]
    rejected = [e for o in one_by_one for e in o.events if e["type"] == "rejected"]
    rejected_b = [e for o in grouped_outs for e in o.events if e["type"] == "rejected"]
    assert rejected_b == rejected  # each bad message rejected alone, by its own digest


def test_singles_together_through_the_warm_up_and_the_wait_for_the_first_model(tmp_path: Path) -> None:
    """A fresh device's queue (a restart's, when the warm-up ends while the gateway was away): grouped, it
    warms up, asks for its first model, waits for it (answered later, as the cloud does) and runs on it
    exactly as one by one; with a cloud that answers at once the model comes in a group's middle."""
    asked: dict[int, list[RecomputeRequest]] = {0: [], 1: []}

    def later(k: int) -> Any:
        def trainer(request: RecomputeRequest) -> TrainedModel | None:
            asked[k].append(request)
            return None

        return trainer

    payloads = queue(7)
    config = session_config(gateway(tmp_path), "dev-1")
    a, b = DeviceSession(config, later(0), lambda: 0.0), DeviceSession(config, later(1), lambda: 0.0)
    sizes = np.random.default_rng(17).integers(1, 40, size=len(payloads)).tolist()
    first, rest = payloads[:300], payloads[300:]
    one_by_one = [a.handle("samples", p) for p in first]
    grouped_outs, grouped = together(b, first, sizes)
    assert grouped > len(first) // 2
    assert a.phase == b.phase == "awaiting_model" and len(asked[0]) == len(asked[1]) == 1
    assert [o.predictions for o in grouped_outs] == [o.predictions for o in one_by_one]
    assert b.counters == a.counters
    a.install(train(asked[0][0]))
    b.install(train(asked[1][0]))
    assert (a.phase, b.phase) == ("running", "running")
    one_by_one = [a.handle("samples", p) for p in rest]
    grouped_outs, _ = together(b, rest, sizes)
    assert [o.predictions for o in grouped_outs] == [o.predictions for o in one_by_one]
    assert b.counters == a.counters
    assert state_of(b) == state_of(a)

    sync_a, sync_b = DeviceSession(config, train, lambda: 0.0), DeviceSession(config, train, lambda: 0.0)
    one_by_one = [sync_a.handle("samples", p) for p in payloads]
    grouped_outs, grouped = together(sync_b, payloads, sizes)
    assert grouped > len(payloads) // 2 and sync_b.phase == "running"
    assert [o.predictions for o in grouped_outs] == [o.predictions for o in one_by_one]
    assert sync_b.counters == sync_a.counters
    assert state_of(sync_b) == state_of(sync_a)


def test_singles_stops_at_what_handle_must_take_and_changes_nothing(tmp_path: Path) -> None:
    s = warmed(tmp_path)
    X, y = rows(10, 5)
    before = state_of(s)
    fresh = [sample(500 + i, X[i], float(y[i])) for i in range(4)]
    assert len(s.singles("samples", fresh)) == 4
    assert len(s.singles("samples", [*fresh[:2], fresh[0], *fresh[2:]])) == 2  # an id twice
    assert len(s.singles("samples", [fresh[0], sample(3, X[0])])) == 1  # an id already seen
    assert len(s.singles("samples", [fresh[0], b"[]", fresh[1]])) == 1
    assert s.singles("labels", fresh) == []
    assert state_of(s) == before
    assert s.counters.messages == 100
