"""A gateway's housekeeping visits its devices in slices (``buffers/sweep.py``): every device once a
round, a round within ``round_s`` of turns, a small gateway's devices all at every turn, and the devices
added or removed meanwhile seen at the next round."""

from __future__ import annotations

from collections import Counter

from edgedrift_edge.agent import SWEEP_MIN, SWEEP_S, TURN_S
from edgedrift_edge.buffers.sweep import Sweep


def test_each_of_1000_devices_is_visited_once_a_round_of_ten_turns() -> None:
    devices = [f"d{i}" for i in range(1000)]
    sweep = Sweep(lambda: devices, TURN_S, SWEEP_S, SWEEP_MIN)
    turns = [sweep.turn() for _ in range(10)]
    assert [len(t) for t in turns] == [100] * 10  # a tenth of the devices a turn, not all of them
    assert [d for t in turns for d in t] == devices  # once each, in order
    assert sweep.turn() == devices[:100]  # the next round


def test_a_small_gateway_visits_every_device_at_every_turn() -> None:
    devices = [f"d{i}" for i in range(SWEEP_MIN)]
    sweep = Sweep(lambda: devices, TURN_S, SWEEP_S, SWEEP_MIN)
    assert sweep.turn() == devices and sweep.turn() == devices
    single = Sweep(lambda: ["only"], TURN_S, SWEEP_S, SWEEP_MIN)
    assert single.turn() == ["only"] and single.turn() == ["only"]


def test_devices_added_during_a_round_come_at_the_next_and_every_device_can_be_asked_for() -> None:
    devices = [f"d{i}" for i in range(100)]
    sweep = Sweep(lambda: list(devices), 0.05, 0.5, 10)
    first = sweep.turn()
    devices.append("new")
    rest = [d for _ in range(9) for d in sweep.turn()]
    assert "new" not in first + rest and Counter(first + rest) == Counter(devices[:100])
    assert "new" in [d for _ in range(11) for d in sweep.turn()]
    sweep.turn()
    sweep.everything_next()
    assert sweep.turn() == devices  # heartbeat_now: all at once
    assert len(sweep.turn()) == 11  # then a new round in slices
