"""The duplicate window: the newest ids and their content keys; the session's deduplication keeps the
semantics of the former OrderedDict window exactly, batches included; checkpoints in both shapes."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from edgedrift import state
from edgedrift_edge.id_index import id_key
from edgedrift_edge.id_window import IdWindow
from edgedrift_edge.ledger import SessionConfig
from edgedrift_edge.messages import SampleId, Samples, content_keys
from edgedrift_edge.recompute import RecomputeRequest, TrainedModel
from edgedrift_edge.session import DeviceSession


def test_the_newest_ids_stay_and_a_renewed_id_becomes_the_newest() -> None:
    window = IdWindow(3)
    for i in range(3):
        window.put(i, 10 + i)
    window.put(0, 99)  # a reused id: the newest, with its new content key
    window.put(3, 13)
    assert 1 not in window and window.get(1) is None
    assert [window.get(i) for i in (0, 2, 3)] == [99, 12, 13]
    window.put("3", 33)
    assert window.get(3) == 13 and window.get("3") == 33, "1 and '1' are two ids"
    assert 2 not in window


def test_a_checkpoint_round_trips_and_the_former_shape_restores() -> None:
    window = IdWindow(4)
    ids: list[int | str] = [1, "1", "b", 2**70, -5]
    for i, sid in enumerate(ids):
        window.put(sid, -i)
    tree, _ = state.loads(state.dumps(window.snapshot()))
    assert isinstance(tree, dict)
    again = IdWindow.restore(tree, 4)
    assert [again.get(s) for s in ("1", "b", 2**70, -5, 1)] == [-1, -2, -3, -4, None]
    small = IdWindow.restore(tree, 2)
    assert len(small) == 2 and small.get(-5) == -4 and small.get(2**70) == -3 and "b" not in small
    old = {"ids": [7, "7", 8], "keys": np.array([70, 71, 80], dtype=np.int64)}
    former = IdWindow.restore(old, 2)
    assert len(former) == 2 and 7 not in former and former.get("7") == 71 and former.get(8) == 80


def train(request: RecomputeRequest) -> TrainedModel:  # never reached: the session stays in warm-up
    raise AssertionError("no model in this test")


def reference_dedup(
    recent: OrderedDict[SampleId, int], ids: list[SampleId], keys: list[int], window: int
) -> tuple[list[int], list[int]]:
    """The former OrderedDict algorithm, verbatim in substance."""
    keep, repeats = [], []
    for i, sid in enumerate(ids):
        old = recent.get(sid)
        if old is None:
            keep.append(i)
        elif old == keys[i]:
            repeats.append(i)
            continue
        else:
            keep.append(i)
            recent.move_to_end(sid)
        recent[sid] = keys[i]
    while len(recent) > window:
        recent.popitem(last=False)
    return keep, repeats


def test_the_sessions_deduplication_equals_the_former_ordered_dict_on_random_batches() -> None:
    """Batches that repeat, reuse and re-send old ids (also ids the batch's own new ids push out of the
    window): the same samples kept and repeated, the same window afterwards, the same id_reused count."""
    rng = np.random.default_rng(11)
    window = 20
    session = DeviceSession(
        SessionConfig("dev-1", n_features=2, warmup_samples=10**9, dedup_window=window), train, lambda: 0.0
    )
    recent: OrderedDict[SampleId, int] = OrderedDict()
    reused = 0
    for _ in range(400):
        n = int(rng.integers(1, 12))
        ids: list[SampleId] = [int(v) if v % 2 else str(v) for v in rng.integers(0, 45, size=n)]
        X = rng.integers(0, 2, size=(n, 2)).astype(float)  # few contents: redeliveries are frequent
        y, ts = np.full(n, np.nan), np.zeros(n)
        keys = content_keys(X.tolist(), y.tolist(), ts.tolist())
        before = dict(recent)
        keep, repeats = reference_dedup(recent, ids, keys, window)
        reused += sum(1 for i in keep if ids[i] in before or ids[i] in ids[:i])
        got_keep, got_repeats = session._dedup(Samples(ids, X, y, ts, batch=n > 1))
        assert (list(range(n)) if got_keep is None else got_keep) == keep
        assert got_repeats == repeats
        assert len(session.recent_ids) == len(recent)
        assert all(session.recent_ids.get(sid) == key for sid, key in recent.items())
        order = session.recent_ids.snapshot()["id_keys"].tolist()
        assert order == [id_key(sid)[0] for sid in recent], "the same age order"
    assert session.counters.id_reused == reused > 0


def test_content_keys_survive_the_arrays_growing() -> None:
    window = IdWindow(3000)
    assert window.index.slots == 1024
    for i in range(3000):
        window.put(f"id-{i}", 7 * i)
    assert window.index.slots == 3000 and len(window) == 3000
    assert [window.get(f"id-{i}") for i in range(3000)] == [7 * i for i in range(3000)]
    window.put("one more", 1)
    assert window.get("id-0") is None and window.get("id-1") == 7
