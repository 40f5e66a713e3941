"""A device's recent samples: the newest ids with their content keys (deduplication) and the rows and
predictions of the unlabeled ones (late labels' join), in one window. The session's deduplication keeps
the semantics of the former OrderedDict window exactly, batches included; checkpoints in the current
shape and in the former two trees (the join buffer's and the duplicate window's, both of their shapes)."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from edgedrift import state
from edgedrift_edge.buffers.id_index import id_key
from edgedrift_edge.buffers.recent_samples import RecentSamples
from edgedrift_edge.session.dedup import sort_samples
from edgedrift_edge.session.device_session import DeviceSession
from edgedrift_edge.session.ledger import SessionConfig
from edgedrift_edge.session.messages import CONTENT_HASH, UNKNOWN_CONTENT, SampleId, Samples, content_keys
from edgedrift_edge.session.trainer import RecomputeRequest, TrainedModel


def row(i: int, d: int = 3) -> np.ndarray:
    return np.arange(d) + i / 7


def unlabeled(window: RecentSamples, sid: SampleId, x: np.ndarray, y_hat: float) -> int:
    """Put ``sid`` as the newest sample and remember its row, as the session does; the evictions."""
    evicted = window.put(sid, hash(sid))
    window.remember(window.index.find(*id_key(sid)), x, y_hat)
    return evicted


def test_the_newest_ids_stay_and_a_renewed_id_becomes_the_newest() -> None:
    window = RecentSamples(3)
    for i in range(3):
        window.put(i, 10 + i)
    window.put(0, 99)  # a reused id: the newest, with its new content key
    window.put(3, 13)
    assert 1 not in window and window.get(1) is None
    assert [window.get(i) for i in (0, 2, 3)] == [99, 12, 13]
    window.put("3", 33)
    assert window.get(3) == 13 and window.get("3") == 33, "1 and '1' are two ids"
    assert 2 not in window


def test_an_unlabeled_sample_joins_its_label_once_and_leaves_with_its_id() -> None:
    window = RecentSamples(3, 3)
    assert [unlabeled(window, i, row(i), i / 3) for i in range(5)] == [0, 0, 0, 1, 1]
    assert window.waiting == 3 and 0 not in window and 1 not in window
    assert window.take(1) is None, "evicted with its id"
    entry = window.take(2)
    assert entry is not None
    x, y_hat = entry
    assert x.tolist() == row(2).tolist() and y_hat == 2 / 3, "exactly the row and prediction kept"
    assert window.take(2) is None and window.waiting == 2, "a label joins once"
    assert 2 in window and window.get(2) == hash(2), "the id stays: a redelivery is still recognised"
    assert unlabeled(window, 5, row(5), 0.0) == 0, "the labeled sample's id left: no unlabeled evicted"
    window.put(6, 6)  # a labeled sample: pushes out 3, which awaited its label
    assert window.waiting == 2 and 3 not in window and window.awaits(4) and not window.awaits(6)


def test_an_int_id_and_the_same_digits_as_a_string_are_two_entries() -> None:
    window = RecentSamples(4, 3)
    unlabeled(window, 1, row(1), 0.1)
    unlabeled(window, "1", row(2), 0.2)
    assert len(window) == 2 and window.waiting == 2
    string = window.take("1")
    assert string is not None and string[0].tolist() == row(2).tolist() and string[1] == 0.2
    number = window.take(1)
    assert number is not None and number[0].tolist() == row(1).tolist() and number[1] == 0.1


def test_a_reused_id_drops_the_former_row_counted_and_becomes_the_newest() -> None:
    window = RecentSamples(2, 3)
    unlabeled(window, "a", row(1), 0.1)
    unlabeled(window, "b", row(2), 0.2)
    assert window.put("a", 7) == 1, "the former sample's label can no longer join: counted"
    assert not window.awaits("a") and window.waiting == 1 and window.get("a") == 7
    window.remember(window.index.find(*id_key("a")), row(3), 0.3)
    assert unlabeled(window, "c", row(4), 0.4) == 1, "'b' is now the oldest: it leaves"
    assert "b" not in window and window.waiting == 2
    for sid, i, y_hat in (("a", 3, 0.3), ("c", 4, 0.4)):
        entry = window.take(sid)
        assert entry is not None and entry[0].tolist() == row(i).tolist() and entry[1] == y_hat


def test_a_taken_row_is_a_writable_copy() -> None:
    window = RecentSamples(2, 3)
    unlabeled(window, 7, row(7), 0.5)
    unlabeled(window, 8, row(8), 0.5)
    entry = window.take(7)
    assert entry is not None
    entry[0][0] = 99.0
    other = window.take(8)
    assert other is not None and other[0].tolist() == row(8).tolist()


def test_rows_of_another_width_wait_aside_until_the_width_is_locked() -> None:
    window = RecentSamples(4)  # width unknown: the first row's width is the matrix's for now
    unlabeled(window, 1, row(1, 2), 0.1)
    unlabeled(window, 2, row(2, 3), 0.2)
    unlabeled(window, 3, row(3, 3), 0.3)
    assert window.width == 2
    window.lock_width(3)
    assert window.width == 3
    for i, d in ((2, 3), (1, 2), (3, 3)):
        entry = window.take(i)
        assert entry is not None and entry[0].tolist() == row(i, d).tolist()


def test_a_batch_puts_and_remembers_in_one_pass_as_one_by_one() -> None:
    """``put_many`` + ``remember_many`` against ``put_words`` + ``remember``, the window full and
    evicting, with unlabeled samples pushed out: the same ids, contents, rows and evictions."""
    rng = np.random.default_rng(3)
    fast, slow = RecentSamples(50, 3), RecentSamples(50, 3)
    fast_evicted = slow_evicted = 0
    for start in range(0, 400, 40):
        ids = np.arange(start, start + 40)
        X, y_hat = rng.normal(size=(40, 3)), rng.normal(size=40)
        waiting = np.flatnonzero(rng.random(40) < 0.8)
        keys, checks = ids.astype(np.int64).view(np.uint64), np.zeros(40, np.uint64)
        slots, evicted = fast.put_many(keys, checks, ids * 3)
        fast.remember_many(slots[waiting], X[waiting], y_hat[waiting])
        fast_evicted += evicted
        for i, sid in enumerate(ids.tolist()):
            slow_evicted += slow.put_words(sid, 0, 3 * sid, absent=True)
            if i in set(waiting.tolist()):
                slow.remember(slow.index.find(sid, 0), X[i], float(y_hat[i]))
    assert fast_evicted == slow_evicted > 0 and fast.waiting == slow.waiting
    a, b = fast.snapshot(), slow.snapshot()
    assert all(np.array_equal(a[k], b[k]) for k in a), "the same window"


def test_a_checkpoint_round_trips_and_resumes_into_a_smaller_window() -> None:
    window = RecentSamples(5, 3)
    for i in range(7):
        unlabeled(window, i if i % 2 else f"s{i}", row(i), np.nan if i == 6 else i / 3)
    window.take(3)
    window.put(7, 70)  # labeled: remembered without a row
    tree, _ = state.loads(state.dumps(window.snapshot()))
    assert isinstance(tree, dict)
    same, dropped = RecentSamples.restore(tree, 5, 3)
    again = same.snapshot()
    assert again.pop("content_hash") == tree["content_hash"] == CONTENT_HASH
    assert dropped == 0 and all(np.array_equal(again[k], tree[k], equal_nan=True) for k in again)
    assert same.get(7) == 70 and same.get(3) == hash(3) and not same.awaits(3)
    small, dropped = RecentSamples.restore(tree, 2, 3)
    assert dropped == 2 and len(small) == 2 and "s6" in small and 7 in small and 5 not in small, "s4 and 5"
    entry = small.take("s6")
    assert entry is not None and entry[0].tolist() == row(6).tolist() and np.isnan(entry[1])


def test_the_former_two_trees_restore_in_both_of_their_shapes() -> None:
    """The former duplicate window (``{"id_keys", "id_checks", "keys"}`` or ``{"ids", "keys"}``) and join
    buffer (``{"id_keys", "id_checks", "X", "y_hat"}`` or ``{"ids", "X", "y_hat"}``)."""
    ids: list[SampleId] = [1, "1", "b", 2**70, -5]
    words = [id_key(sid) for sid in ids]
    recent_ids = {
        "id_keys": np.array([k for k, _ in words], np.uint64),
        "id_checks": np.array([c for _, c in words], np.uint64),
        "keys": -np.arange(5, dtype=np.int64),
    }
    joins = {"ids": ["1", 2**70, "gone"], "X": np.array([row(1), row(2), row(3)]), "y_hat": np.arange(3.0)}
    window, dropped = RecentSamples.restore_former(joins, recent_ids, 4, 3)
    assert dropped == 1, "'gone' is not among the window's ids"
    # Python's tuple hash then: the digests are dropped (unknown), the ids kept
    assert [window.get(s) for s in ("1", "b", 2**70, -5, 1)] == [UNKNOWN_CONTENT] * 4 + [None]
    entry = window.take(2**70)
    assert entry is not None and entry[0].tolist() == row(2).tolist() and entry[1] == 1.0
    old_recent = {"ids": [7, "7", 8], "keys": np.array([70, 71, 80], dtype=np.int64)}
    ragged = {"ids": [7, 8], "X": [row(7, 2), row(8, 3)], "y_hat": np.array([0.7, 0.8])}
    former, dropped = RecentSamples.restore_former(ragged, old_recent, 2, None)
    assert dropped == 1 and len(former) == 2 and 7 not in former and former.get("7") == UNKNOWN_CONTENT
    entry = former.take(8)
    assert entry is not None and entry[0].tolist() == row(8, 3).tolist() and entry[1] == 0.8
    empty = {"ids": [], "X": np.zeros((0, 0)), "y_hat": np.zeros(0)}
    none, dropped = RecentSamples.restore_former(empty, {"ids": [], "keys": np.zeros(0, np.int64)}, 4, 3)
    assert len(none) == 0 and dropped == 0


def test_rows_and_predictions_survive_the_arrays_growing() -> None:
    window = RecentSamples(3000, 3)
    assert window.index.slots == 1024, "allocated as entries arrive"
    for i in range(3000):
        assert unlabeled(window, i, row(i), i / 3) == 0
    assert window.index.slots == 3000
    for i in range(3000):
        entry = window.take(i)
        assert entry is not None and entry[0].tolist() == row(i).tolist() and entry[1] == i / 3


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
        SessionConfig("dev-1", n_features=2, warmup_samples=10**9, recent_samples=window), train, lambda: 0.0
    )
    recent: OrderedDict[SampleId, int] = OrderedDict()
    reused = counted = 0
    for _ in range(400):
        n = int(rng.integers(1, 12))
        ids: list[SampleId] = [int(v) if v % 2 else str(v) for v in rng.integers(0, 45, size=n)]
        X = rng.integers(0, 2, size=(n, 2)).astype(float)  # few contents: redeliveries are frequent
        y, ts = np.full(n, np.nan), np.zeros(n)
        keys = content_keys(X.tolist(), y.tolist(), ts.tolist())
        before = dict(recent)
        keep, repeats = reference_dedup(recent, ids, keys, window)
        reused += sum(1 for i in keep if ids[i] in before or ids[i] in ids[:i])
        found = sort_samples(session.recent_samples, Samples(ids, X, y, ts, batch=n > 1))
        assert (list(range(n)) if found.keep is None else found.keep) == keep
        assert found.repeats == repeats
        counted += len(found.reused)
        assert len(session.recent_samples) == len(recent)
        assert all(session.recent_samples.get(sid) == key for sid, key in recent.items())
        order = session.recent_samples.snapshot()["id_keys"].tolist()
        assert order == [id_key(sid)[0] for sid in recent], "the same age order"
    assert counted == reused > 0


def test_content_keys_survive_the_arrays_growing() -> None:
    window = RecentSamples(3000)
    assert window.index.slots == 1024
    for i in range(3000):
        window.put(f"id-{i}", 7 * i)
    assert window.index.slots == 3000 and len(window) == 3000
    assert [window.get(f"id-{i}") for i in range(3000)] == [7 * i for i in range(3000)]
    window.put("one more", 1)
    assert window.get("id-0") is None and window.get("id-1") == 7
