"""Which devices a gateway's housekeeping turn visits: a round over every device, in slices.

Housekeeping (counters, events due, heartbeats, checkpoints, silence) runs every ``turn_s``. Visiting
every device at every turn cost a 1,000-device gateway a quarter of its worker, busy or idle; here a turn
visits the next slice of a round, sized so that the round ends within ``round_s``, and at least ``least``
devices (a small gateway's all). A round that ends starts over with the devices of that moment. Pure: no
clock, no threads; the agent's worker alone calls it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class Sweep(Generic[T]):
    """Slices of rounds over ``members()`` (a fresh sequence at each round's start)."""

    def __init__(self, members: Callable[[], Sequence[T]], turn_s: float, round_s: float, least: int) -> None:
        self.members = members
        self.turns_per_round = max(1, round(round_s / turn_s))
        self.least = least
        self._left: list[T] = []  # this round's members still to visit, the next one last
        self._size = least  # members a turn of this round visits
        self._all = False

    def everything_next(self) -> None:
        """The next turn visits every member (and a new round starts after it)."""
        self._all = True

    def turn(self) -> list[T]:
        """The members this turn visits, in the round's order."""
        if self._all:
            self._all, self._left = False, []
            return list(self.members())
        if not self._left:
            self._left = list(self.members())
            self._left.reverse()
            self._size = max(self.least, math.ceil(len(self._left) / self.turns_per_round))
        turn = self._left[-self._size :]
        del self._left[-self._size :]
        turn.reverse()
        return turn
