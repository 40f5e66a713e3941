"""Samples the broker dropped, told from the gaps in a publisher's ``seq`` (issue 30 row 2): a collaborator
owned by :class:`~edgedrift_edge.session.DeviceSession`.

The broker keeps one queue per client, and a gateway is one client: while it is away (a restart), one
device's backlog can fill that queue, and the broker then drops the next messages of *every* device of
the gateway, without a word to the gateway (Mosquitto counts them in ``$SYS``, for the whole broker, not
per device or client). A publisher that numbers its samples (``seq``: its count of the device's samples
before this message) lets the session see such a drop: a message whose ``seq`` is past the next one
expected follows a gap, and the samples in it that the gateway accounted for itself are not the
broker's: those rejected whole in their turn (:attr:`SeqCheck.skipped`, in order) and those a gateway refused
at intake for its fair share (:attr:`SeqCheck.refused`, by their ``seq``: they are refused before the
device's queued messages, which come earlier in the stream, are handled). The rest count in
``broker_dropped`` (and ``dropped``: the ledger published = predicted + rejected + dropped holds) with a
``dropped`` event naming the range. A message at or before the expected ``seq`` (a redelivery, a
publisher that restarted its count) moves nothing back; a device whose publisher sends no ``seq`` is not
checked, nor one whose agent subscribes with QoS 0 (its inbox drops are the transport's to count, and it
could not tell them from the broker's).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable
from typing import Any

from edgedrift_edge.session.ledger import Counters, SessionConfig

#: Why samples count in ``broker_dropped`` (the ``dropped`` event's reason).
BROKER_DROP_REASON = (
    "samples missing from the publisher's seq: dropped before they reached the gateway (the broker's "
    "queue for the gateway was full, e.g. another device's backlog while the gateway was away)"
)


class SeqCheck:
    """The ``seq`` check of one device (see the module docstring)."""

    def __init__(self, config: SessionConfig, counters: Counters, emit: Callable[..., None]) -> None:
        self.config = config
        self.counters = counters
        self.emit = emit
        #: The ``seq`` the next message should carry (None: no message with a ``seq`` seen yet).
        self.expected: int | None = None
        #: Samples since the last checked message that the gateway accounted for without handling them.
        self.skipped = 0
        #: Samples a gateway refused at intake, as (seq, count) ranges ahead of the last checked message.
        self.refused: deque[tuple[int, int]] = deque()

    def accounted(self, seq: int, window: int) -> bool:
        """Whether the sample numbered ``seq`` was accounted for already: refused before, or among the
        ``window`` samples before the expected ``seq`` (a redelivery after a reconnect or a restart: at
        most the broker's window of unacknowledged messages; further back is a publisher that restarted
        its count). Logarithmic in the ranges kept: it runs for every refused message of a flood."""
        ranges = self.refused
        i = bisect.bisect_right(ranges, seq, key=lambda r: r[0]) - 1
        if i >= 0 and seq < ranges[i][0] + ranges[i][1]:
            return True
        return self.expected is not None and self.expected - window <= seq < self.expected

    def refuse(self, seq: int, count: int) -> None:
        """A gateway refused ``count`` samples from ``seq`` on (its fair share) before they were handled;
        the ranges stay sorted by ``seq`` (adjacent ones merged)."""
        ranges = self.refused
        if ranges and ranges[-1][0] + ranges[-1][1] == seq:
            ranges[-1] = (ranges[-1][0], ranges[-1][1] + count)
        elif not ranges or ranges[-1][0] < seq:
            ranges.append((seq, count))
        else:  # behind the newest range (a publisher that restarted its count)
            bisect.insort(ranges, (seq, count), key=lambda r: r[0])

    def check(self, seq: int | None, count: int) -> None:
        """A message of ``count`` samples that carries ``seq``: count what the broker dropped before it.
        Only the ranges at the front (before this message) are read and let go."""
        skipped, self.skipped = self.skipped, 0
        if seq is None or not self.config.check_seq:
            return
        expected = self.expected
        ranges = self.refused
        low = seq if expected is None else expected
        while ranges and ranges[0][0] < seq:
            start, n = ranges[0]
            skipped += max(0, min(start + n, seq) - max(start, low))
            if start + n > seq + count:  # reaches past this message: kept for the next one
                break
            ranges.popleft()
        if expected is not None:
            lost = seq - expected - skipped
            if lost > 0:
                self.counters.broker_dropped += lost
                self.emit(
                    "dropped",
                    count=lost,
                    total=self.counters.broker_dropped,
                    first_seq=expected + skipped,
                    last_seq=seq - 1,
                    reason=BROKER_DROP_REASON,
                )
        if expected is None or seq + count > expected:
            self.expected = seq + count

    def snapshot(self, tree: dict[str, Any]) -> None:
        """Into a checkpoint tree."""
        tree["wire_seq"] = self.expected
        tree["seq_accounted"] = [self.skipped, [list(r) for r in self.refused]]

    def restore(self, tree: dict[str, Any]) -> None:
        """From a checkpoint tree (a checkpoint written before issue 30 row 2 has neither key)."""
        self.expected = tree.get("wire_seq")
        skipped, refused = tree.get("seq_accounted") or (0, [])
        self.skipped, self.refused = int(skipped), deque((int(s), int(c)) for s, c in refused)
