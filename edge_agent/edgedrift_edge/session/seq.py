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

A gap is not a drop yet: a broker can deliver a device's messages out of order. Mosquitto (2.0.11 and
2.0.21 alike, ``db__message_insert``) sends a message that arrives for a connected client at once when
its in-flight window has room, ahead of older messages still queued for that client, so after a
gateway's restart a quiet device's newest sample can come before its older ones. The missing ``seq``
ranges therefore wait ``seq_grace_s`` (:class:`~edgedrift_edge.session.ledger.SessionConfig`) for
their samples: a sample that comes late leaves its range (and is handled as any other), and only what
is still missing then counts in ``broker_dropped`` (:meth:`SeqCheck.settle`, called at every message
and by the agent's housekeeping). Counting at once and then handling the late sample counted it twice (61
samples of 15 quiet devices in one run of ``bench/gateway_fairness.py``). The counted ranges are reported
in the session's ``dropped`` summary, at most one event a second: a publisher whose ``seq`` skips at every
message (a bug) opened a range per message, and each was an event and an MQTT publish of its own.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable
from typing import Any

from edgedrift_edge.session.event_summary import EventSummaries
from edgedrift_edge.session.ledger import Counters, SessionConfig

#: Why samples count in ``broker_dropped`` (the ``dropped`` event's reason).
BROKER_DROP_REASON = (
    "samples missing from the publisher's seq: dropped before they reached the gateway (the broker's "
    "queue for the gateway was full, e.g. another device's backlog while the gateway was away)"
)

#: Gaps a device keeps open at most: past this many the oldest counts at once, so a publisher whose ``seq``
#: jumps back and forth costs a bounded list and bounded scans, whatever it sends.
MAX_GAPS = 64


class SeqCheck:
    """The ``seq`` check of one device (see the module docstring)."""

    def __init__(
        self,
        config: SessionConfig,
        counters: Counters,
        summaries: EventSummaries,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.counters = counters
        self.summaries = summaries
        self.clock = clock
        #: The ``seq`` the next message should carry (None: no message with a ``seq`` seen yet).
        self.expected: int | None = None
        #: Samples since the last checked message that the gateway accounted for without handling them.
        self.skipped = 0
        #: Samples a gateway refused at intake, as (seq, count) ranges ahead of the last checked message.
        self.refused: deque[tuple[int, int]] = deque()
        #: Missing samples not counted yet, as [first, end) ``seq`` ranges with when they went missing,
        #: oldest first (at most :data:`MAX_GAPS`); a sample that comes within the grace leaves its gap.
        self.gaps: list[tuple[int, int, float]] = []

    def accounted(self, seq: int, window: int) -> bool:
        """Whether the sample numbered ``seq`` was accounted for already: refused before, or among the
        ``window`` samples before the expected ``seq`` (a redelivery after a reconnect or a restart: at
        most the broker's window of unacknowledged messages; further back is a publisher that restarted
        its count), unless it is missing from a gap (a late sample, never seen). Logarithmic in the ranges
        kept: it runs for every refused message of a flood."""
        ranges = self.refused
        i = bisect.bisect_right(ranges, seq, key=lambda r: r[0]) - 1
        if i >= 0 and seq < ranges[i][0] + ranges[i][1]:
            return True
        if any(first <= seq < end for first, end, _ in self.gaps):
            return False
        return self.expected is not None and self.expected - window <= seq < self.expected

    def refuse(self, seq: int, count: int) -> None:
        """A gateway refused ``count`` samples from ``seq`` on (its fair share) before they were handled;
        the ranges stay sorted by ``seq`` (adjacent ones merged). Refused samples that a gap missed are
        accounted for now: they leave the gap."""
        if self.expected is not None and seq < self.expected:
            self.arrived(seq, count)
            return
        ranges = self.refused
        if ranges and ranges[-1][0] + ranges[-1][1] == seq:
            ranges[-1] = (ranges[-1][0], ranges[-1][1] + count)
        elif not ranges or ranges[-1][0] < seq:
            ranges.append((seq, count))
        else:  # behind the newest range (a publisher that restarted its count)
            bisect.insort(ranges, (seq, count), key=lambda r: r[0])

    def check(self, seq: int | None, count: int) -> None:
        """A message of ``count`` samples that carries ``seq``: note what went missing before it, fill the
        gaps it was missing from if it comes late, count the gaps past their grace. Only the refused
        ranges at the front (before this message) are read and let go."""
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
            if seq < expected:
                self.arrived(seq, count)
            lost = seq - expected - skipped
            if lost > 0:
                self.gaps.append((seq - lost, seq, self.clock()))
                if len(self.gaps) > MAX_GAPS:
                    self._count(self.gaps.pop(0))
        if expected is None or seq + count > expected:
            self.expected = seq + count
        self.settle()

    def arrived(self, seq: int, count: int) -> None:
        """Samples ``seq`` .. ``seq + count - 1`` came (handled or refused) after they went missing: out of
        the gaps (a redelivery of samples that were never missing changes nothing)."""
        end = seq + count
        kept: list[tuple[int, int, float]] = []
        for first, stop, noticed in self.gaps:
            if stop <= seq or end <= first:
                kept.append((first, stop, noticed))
                continue
            if first < seq:
                kept.append((first, seq, noticed))
            if end < stop:
                kept.append((end, stop, noticed))
        self.gaps = kept

    def settle(self, now: float | None = None) -> None:
        """Count the gaps that waited ``seq_grace_s`` in ``broker_dropped`` (of ``dropped``: the device adds
        it there), reported in the ``dropped`` summary (its count, the first ranges, the total)."""
        if not self.gaps:
            return
        now = self.clock() if now is None else now
        due = now - self.config.seq_grace_s
        while self.gaps and self.gaps[0][2] <= due:
            self._count(self.gaps.pop(0))

    def _count(self, gap: tuple[int, int, float]) -> None:
        first, end, _ = gap
        self.counters.broker_dropped += end - first
        self.summaries.add(
            "dropped",
            BROKER_DROP_REASON,
            count=end - first,
            item=(first, end - 1),
            latest={"total": self.counters.broker_dropped},
        )

    def snapshot(self, tree: dict[str, Any]) -> None:
        """Into a checkpoint tree (the gaps without their times: a restart gives them a new grace)."""
        tree["wire_seq"] = self.expected
        tree["seq_accounted"] = [self.skipped, [list(r) for r in self.refused]]
        tree["seq_gaps"] = [[first, end] for first, end, _ in self.gaps]

    def restore(self, tree: dict[str, Any]) -> None:
        """From a checkpoint tree (a checkpoint written before issue 30 row 2 has none of the keys, one
        written before the grace has no gaps)."""
        self.expected = tree.get("wire_seq")
        skipped, refused = tree.get("seq_accounted") or (0, [])
        self.skipped, self.refused = int(skipped), deque((int(s), int(c)) for s, c in refused)
        now = self.clock()
        self.gaps = [(int(first), int(end), now) for first, end in tree.get("seq_gaps") or []]
