"""The join buffer: unlabeled samples by id, oldest evicted first, rows returned exactly, checkpoints in
the current and the former (OrderedDict) shape."""

from __future__ import annotations

import numpy as np

from edgedrift import state
from edgedrift_edge.id_index import id_key
from edgedrift_edge.join_buffer import JoinBuffer


def row(i: int, d: int = 3) -> np.ndarray:
    return np.arange(d) + i / 7


def test_the_oldest_entry_is_evicted_first_and_each_eviction_is_counted() -> None:
    buffer = JoinBuffer(3, 3)
    assert [buffer.push(i, row(i), i / 3) for i in range(5)] == [0, 0, 0, 1, 1]
    assert len(buffer) == 3 and 0 not in buffer and 1 not in buffer
    assert buffer.pop(1) is None
    entry = buffer.pop(2)
    assert entry is not None
    x, y_hat = entry
    assert x.tolist() == row(2).tolist() and y_hat == 2 / 3, "exactly the row and prediction kept"
    assert buffer.pop(2) is None and len(buffer) == 2
    assert buffer.push(5, row(5), 0.0) == 0, "a label freed a place: nothing evicted"
    assert buffer.push(6, row(6), 0.0) == 1 and 3 not in buffer and 4 in buffer


def test_an_int_id_and_the_same_digits_as_a_string_are_two_entries() -> None:
    buffer = JoinBuffer(4, 3)
    buffer.push(1, row(1), 0.1)
    buffer.push("1", row(2), 0.2)
    assert len(buffer) == 2
    string = buffer.pop("1")
    assert string is not None and string[0].tolist() == row(2).tolist() and string[1] == 0.2
    number = buffer.pop(1)
    assert number is not None and number[0].tolist() == row(1).tolist() and number[1] == 0.1


def test_a_reused_id_keeps_its_place_with_the_new_values() -> None:
    buffer = JoinBuffer(2, 3)
    buffer.push("a", row(1), 0.1)
    buffer.push("b", row(2), 0.2)
    assert buffer.push("a", row(3), 0.3) == 0, "known id: updated in place, nothing evicted"
    assert buffer.push("c", row(4), 0.4) == 1
    assert "a" not in buffer and "b" in buffer, "'a' kept its (oldest) place, as the OrderedDict did"


def test_a_popped_row_is_a_writable_copy() -> None:
    buffer = JoinBuffer(2, 3)
    buffer.push(7, row(7), 0.5)
    buffer.push(8, row(8), 0.5)
    entry = buffer.pop(7)
    assert entry is not None
    entry[0][0] = 99.0
    other = buffer.pop(8)
    assert other is not None and other[0].tolist() == row(8).tolist()


def test_rows_of_another_width_wait_aside_until_the_width_is_locked() -> None:
    buffer = JoinBuffer(4)  # width unknown: the first row's width is the matrix's for now
    buffer.push(1, row(1, 2), 0.1)
    buffer.push(2, row(2, 3), 0.2)
    buffer.push(3, row(3, 3), 0.3)
    assert buffer.width == 2
    buffer.lock_width(3)
    assert buffer.width == 3
    for i, d in ((2, 3), (1, 2), (3, 3)):
        entry = buffer.pop(i)
        assert entry is not None and entry[0].tolist() == row(i, d).tolist()


def test_a_checkpoint_round_trips_and_resumes_into_a_smaller_buffer() -> None:
    buffer = JoinBuffer(5, 3)
    for i in range(7):
        buffer.push(i if i % 2 else f"s{i}", row(i), np.nan if i == 6 else i / 3)
    buffer.pop(3)
    tree, _ = state.loads(state.dumps(buffer.snapshot()))
    assert isinstance(tree, dict)
    same, dropped = JoinBuffer.restore(tree, 5, 3)
    assert dropped == 0 and same.snapshot()["X"].tolist() == buffer.snapshot()["X"].tolist()
    small, dropped = JoinBuffer.restore(tree, 2, 3)
    assert dropped == 2 and len(small) == 2 and 5 in small and "s6" in small and "s4" not in small
    entry = small.pop("s6")
    assert entry is not None and entry[0].tolist() == row(6).tolist() and np.isnan(entry[1])


def test_a_checkpoint_in_the_former_shape_restores() -> None:
    """``{"ids", "X", "y_hat"}`` as the OrderedDict buffer wrote it (ids as they came, oldest first)."""
    old = {"ids": [4, "4", "x"], "X": np.array([row(4), row(5), row(6)]), "y_hat": np.array([0.4, 0.5, 0.6])}
    buffer, dropped = JoinBuffer.restore(old, 2, 3)
    assert dropped == 1 and 4 not in buffer
    assert buffer.snapshot()["id_keys"].tolist() == [id_key("4")[0], id_key("x")[0]]
    entry = buffer.pop("4")
    assert entry is not None and entry[0].tolist() == row(5).tolist() and entry[1] == 0.5
    ragged = {"ids": [1, 2], "X": [row(1, 2), row(2, 3)], "y_hat": np.array([0.1, 0.2])}
    buffer, _ = JoinBuffer.restore(ragged, 4, None)
    entry = buffer.pop(1)
    assert entry is not None and entry[0].tolist() == row(1, 2).tolist()
    empty, dropped = JoinBuffer.restore({"ids": [], "X": np.zeros((0, 0)), "y_hat": np.zeros(0)}, 4, 3)
    assert len(empty) == 0 and dropped == 0


def test_rows_and_predictions_survive_the_arrays_growing() -> None:
    buffer = JoinBuffer(3000, 3)
    assert buffer.index.slots == 1024, "allocated as entries arrive"
    for i in range(3000):
        assert buffer.push(i, row(i), i / 3) == 0
    assert buffer.index.slots == 3000
    for i in range(3000):
        entry = buffer.pop(i)
        assert entry is not None and entry[0].tolist() == row(i).tolist() and entry[1] == i / 3
