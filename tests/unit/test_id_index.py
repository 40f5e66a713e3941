"""The id index behind the recent samples: ids as exact 64-bit words (ints) or
128-bit digests (strings), an age order, and a hash table that survives insert/evict churn. Every test
runs twice: with the compiled probing of :mod:`edgedrift.kernels` and with the Python reference."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

import numpy as np
import pytest

from edgedrift import kernels
from edgedrift_edge.buffers.id_index import IdIndex, id_key

COMPILED = kernels.MODULE


@pytest.fixture(autouse=True, params=["compiled", "python"])
def probing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Indexes built in the test use the compiled probing, or the Python code (the reference)."""
    if request.param == "compiled" and COMPILED is None:
        pytest.skip("edgedrift._kernels is not built here")
    monkeypatch.setattr(kernels, "MODULE", COMPILED if request.param == "compiled" else None)
    yield request.param


def test_both_probings_give_the_same_index_under_churn(probing: str) -> None:
    """The same adds, batches, removals and renewals through a compiled and a Python index: the same
    slots, evictions, age order and lookups at every step (the table layouts may differ)."""
    if probing != "compiled":
        pytest.skip("compares both probings once")
    rng = np.random.default_rng(11)
    compiled, reference = IdIndex(900), IdIndex(900)
    compiled._kern, reference._kern = COMPILED, None
    next_id = 0
    for _ in range(400):
        op = rng.random()
        if op < 0.4:
            k = int(rng.integers(1, 120))
            words = [id_key(i if i % 5 else f"s{i}") for i in range(next_id, next_id + k)]
            next_id += k
            keys = np.array([w[0] for w in words], np.uint64)
            checks = np.array([w[1] for w in words], np.uint64)
            a, b = compiled.add_many(keys, checks), reference.add_many(keys, checks)
            assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()
        elif op < 0.8:
            key, check = id_key(next_id)
            next_id += 1
            full = len(reference) >= 900
            a_slot = compiled.replace_oldest(key, check) if full else compiled.add(key, check)
            b_slot = reference.replace_oldest(key, check) if full else reference.add(key, check)
            assert a_slot == b_slot
        elif len(reference):
            slot = int(rng.choice(reference.order()))
            if op < 0.9:
                compiled.remove(slot)
                reference.remove(slot)
            else:
                compiled.renew(slot)
                reference.renew(slot)
        order = reference.order()
        assert compiled.order().tolist() == order.tolist()
        probe = np.concatenate([reference.keys[order], np.arange(next_id, next_id + 20, dtype=np.uint64)])
        checks = np.concatenate([reference.checks[order], np.zeros(20, np.uint64)])
        assert compiled.find_many(probe, checks).tolist() == reference.find_many(probe, checks).tolist()


def test_ints_are_exact_and_never_equal_a_string_or_a_large_int() -> None:
    assert id_key(1) == (1, 0) and id_key(0) == (0, 0)
    assert id_key(-1) == ((1 << 64) - 1, 0)
    assert id_key((1 << 63) - 1) == ((1 << 63) - 1, 0)
    words = [id_key(v) for v in (1, "1", -1, "-1", 1 << 64, str(1 << 64), 1 + (1 << 64), "", "é")]
    assert len(set(words)) == len(words), "1 and '1', a large int and its digits: all distinct"
    assert all(check % 2 == 1 for _, check in words[1::2]), "a digest's check word is odd, an int's is 0"
    assert id_key("dev-17") == id_key("dev-17"), "stable (a checkpoint stores the words)"


def test_the_index_matches_an_ordered_dict_under_churn() -> None:
    """Random adds, removals and renewals (with the table growing past its first size) against an
    OrderedDict: every lookup and the age order agree."""
    rng = np.random.default_rng(3)
    capacity = 3000
    index, model = IdIndex(capacity), OrderedDict[int | str, int]()
    for step in range(40_000):
        raw = int(rng.integers(0, 6000))
        sid: int | str = raw if raw % 3 else f"s{raw}"
        key, check = id_key(sid)
        slot = index.find(key, check)
        assert (slot >= 0) == (sid in model)
        op = rng.random()
        if slot >= 0 and op < 0.3:
            index.remove(slot)
            del model[sid]
        elif slot >= 0:
            index.renew(slot)
            model.move_to_end(sid)
        else:
            if len(index) == capacity:
                oldest = index.oldest()
                assert oldest == model[next(iter(model))]
                model.popitem(last=False)
                if op < 0.5:
                    model[sid] = index.replace_oldest(key, check)
                    assert model[sid] == oldest, "the new id takes the oldest's slot"
                    continue
                index.remove(oldest)
            model[sid] = index.add(key, check)
        if step % 5000 == 0:
            assert index.order().tolist() == list(model.values())
    assert len(index) == len(model) and index.order().tolist() == list(model.values())
    for sid, slot in model.items():
        assert index.find(*id_key(sid)) == slot


def test_a_full_index_refuses_to_grow_and_an_empty_one_has_no_oldest() -> None:
    index = IdIndex(2)
    assert index.oldest() == -1 and index.order().size == 0
    index.add(*id_key(1))
    index.add(*id_key("1"))
    with pytest.raises(OverflowError):
        index.add(*id_key(2))
    with pytest.raises(ValueError):
        IdIndex(0)


def test_slots_are_allocated_as_ids_arrive_not_up_front() -> None:
    """A large capacity costs memory only as it fills: the slot arrays double, slots keep their numbers."""
    index = IdIndex(100_000)
    assert index.slots == 1024 and index.keys.size == 1024
    slots = [index.add(*id_key(i)) for i in range(1100)]
    assert index.slots == 2048 and index.keys.size == 2048 and slots == list(range(1100))
    assert [index.find(*id_key(i)) for i in range(1100)] == slots
    small = IdIndex(100)
    assert small.slots == 100, "never more slots than the capacity"


def test_small_indexes_share_their_zero_checks_until_a_string_id_arrives() -> None:
    """A gateway holds two indexes per device: with int ids their check words are one shared read-only
    array, and the links and table are int16; a string id gives that index checks of its own and leaves
    every other index's untouched."""
    a, b = IdIndex(900), IdIndex(900)
    assert a.checks is b.checks and not a.checks.flags.writeable
    assert a._prev.dtype == np.int16 and a._table.dtype == np.int16
    assert IdIndex(40_000)._prev.dtype == np.int32, "slot + 1 beyond int16 needs int32"
    for i in range(900):
        a.add(*id_key(i))
        b.add(*id_key(i))
    slot = a.replace_oldest(*id_key("s-1"))
    assert a.checks is not b.checks and a.checks.flags.writeable
    assert not b.checks.any(), "the shared zeros were not written"
    assert a.find(*id_key("s-1")) == slot and a.find(*id_key(0)) == -1
    a.remove(slot)
    renewed = a.add(*id_key(12345))
    assert renewed == slot and a.checks[slot] == 0, "an int id reusing a string id's slot clears its check"
    assert a.find(*id_key(12345)) == slot and a.find(*id_key("s-1")) == -1
    assert [b.find(*id_key(i)) for i in range(900)] == list(range(900))


@pytest.mark.parametrize("capacity", [900, 150, 5000])
def test_adding_a_batch_equals_adding_its_ids_one_by_one(capacity: int) -> None:
    """``add_many`` (a rebuilt table for small indexes, one id at a time for large ones) against the
    same ids through ``add`` / ``replace_oldest``, with removals in between (labels leaving the join
    buffer) and string ids: the same slots, the same evictions, the same age order, every id found by
    ``find`` and ``find_many`` alike."""
    rng = np.random.default_rng(capacity)
    bulk, single = IdIndex(capacity), IdIndex(capacity)
    next_id = 0
    for _ in range(120):
        k = int(rng.integers(1, min(capacity, 100) + 1))
        sids: list[int | str] = [i if i % 7 else f"s{i}" for i in range(next_id, next_id + k)]
        next_id += k
        words = [id_key(sid) for sid in sids]
        keys = np.array([w[0] for w in words], np.uint64)
        checks = np.array([w[1] for w in words], np.uint64)
        new, gone = bulk.add_many(keys, checks)
        expected_new, expected_gone = [], []
        for key, check in words:
            if len(single) >= capacity:
                expected_gone.append(single.oldest())
                expected_new.append(single.replace_oldest(key, check))
            else:
                expected_new.append(single.add(key, check))
        assert new.tolist() == expected_new and gone.tolist() == expected_gone
        for slot in rng.choice(single.order(), size=min(len(single), 5), replace=False).tolist():
            bulk.remove(slot)
            single.remove(slot)
        order = single.order()
        assert bulk.order().tolist() == order.tolist()
        found = bulk.find_many(single.keys[order], single.checks[order])
        assert found.tolist() == order.tolist()
        assert [bulk.find(int(a), int(b)) for a, b in zip(keys, checks, strict=True)] == [
            single.find(int(a), int(b)) for a, b in zip(keys, checks, strict=True)
        ]
    absent = np.array([id_key(i)[0] for i in range(next_id, next_id + 50)], np.uint64)
    assert (bulk.find_many(absent, np.zeros(50, np.uint64)) == -1).all()


def test_a_batch_whose_run_wraps_past_the_end_of_the_table_is_still_found() -> None:
    """Ids hashing to the table's last positions: their run must wrap to its start (the vectorised
    layout starts after an empty position instead), and every one of them is found."""
    index = IdIndex(500)  # a table of 1,024 positions
    shift = 64 - 10
    tail = [i for i in range(200_000) if ((i * 0x9E3779B97F4A7C15) & ((1 << 64) - 1)) >> shift >= 1020][:12]
    keys = np.array(tail, np.uint64)
    new, _ = index.add_many(keys, np.zeros(len(tail), np.uint64))
    assert [index.find(k, 0) for k in tail] == new.tolist()
    assert index.find_many(keys, np.zeros(len(tail), np.uint64)).tolist() == new.tolist()
    assert (index._table[:8] != 0).sum() >= 12 - 4, "the run went on at the start of the table"


def test_the_compiled_probing_rejects_what_it_cannot_take_with_a_clear_error(probing: str) -> None:
    if probing != "compiled":
        pytest.skip("the compiled functions only")
    assert COMPILED is not None
    index = IdIndex(900)
    slot = index.add(*id_key(7))
    table, keys, checks, shift = index._table, index.keys, index.checks, index._shift
    assert COMPILED.id_find(table, keys, checks, *id_key(7), shift) == slot
    with pytest.raises(ValueError, match="int16 or int32"):
        COMPILED.id_find(table.astype(np.int64), keys, checks, *id_key(7), shift)
    with pytest.raises(ValueError, match="shift"):
        COMPILED.id_find(table, keys, checks, *id_key(7), shift + 1)
    with pytest.raises(ValueError, match="uint64"):
        COMPILED.id_find(table, keys.astype(np.int64), checks, *id_key(7), shift)
    with pytest.raises(ValueError, match="past the words"):
        COMPILED.id_unplace(table, keys, checks, len(keys), shift)
    with pytest.raises(ValueError, match="not in the table"):
        COMPILED.id_unplace_many(table, keys, checks, np.array([slot + 1], np.int64), shift)
    with pytest.raises(ValueError, match=r"\[0, 2\*\*64\)"):
        COMPILED.id_find(table, keys, checks, -1, 0, shift)
    assert index.find(*id_key(7)) == slot, "the failed calls changed nothing"
