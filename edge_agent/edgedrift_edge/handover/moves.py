"""Moving a device from one gateway to another without losing a message or its state (issue 30 row 4).

Before, the source unsubscribed at its next sync and the target subscribed at its own: what the broker
received in between went to nobody (100 samples lost at 10 samples/s), and the target started the device
cold (a second warm-up, a second initial recompute, counters from zero). Now the cloud keeps a hand-over
whose phase the two gateways advance (``edgedrift_cloud.gateway_registry``):

1. *record*: the source goes on serving the device and notes the digest of every message it handles;
2. *hold*: the target subscribes, and once the broker acknowledged the subscription it says so; what
   arrives is acknowledged and held, not handled;
3. *release*: the source unsubscribes; after the broker's UNSUBACK nothing more of the device reaches it;
   it handles everything received before, then leaves the device's checkpoint (with its notes) at the
   cloud and forgets the device;
4. *take*: the target takes the checkpoint and the device's fresh secret, continues the session from it
   (model, learner, recent samples, counters: no second warm-up or initial recompute) and handles the
   held messages, skipping those the source handled.

Between the target's subscription and the source's unsubscription the broker sends every message to
both, so each message reaches at least one of them. The broker keeps the order of one topic's messages
for every subscriber, so the held messages the source handled too are exactly the longest run at their
start that equals the end of the source's notes (:func:`overlap`), per topic: nothing is answered twice.
While a hand-over runs both gateways ask the cloud every :data:`HANDOVER_SYNC_S` seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from edgedrift_edge.session.messages import message_digest
from edgedrift_edge.transport.connection import Inbound

#: Seconds between a gateway's syncs while a hand-over of one of its devices runs.
HANDOVER_SYNC_S = 0.5
#: Seconds before a step the cloud did not take is asked again.
RETRY_S = 1.0
#: Messages a target holds for one device at most; beyond, they are dropped and counted.
MAX_HELD = 100_000


def overlap(held: Sequence[str], handled: Sequence[str]) -> int:
    """How many messages at the start of ``held`` (the target's, in arrival order) the source handled:
    the largest ``k`` with ``held[:k] == handled[-k:]`` (0 when the subscriptions did not overlap).

    >>> overlap(["c", "d", "e"], ["a", "b", "c", "d"])
    2
    >>> overlap(["x"], ["a", "b"])
    0
    """
    if not held or not handled:
        return 0
    first = held[0]
    n = len(handled)
    for start in range(max(0, n - len(held)), n):  # the longest candidate first
        if handled[start] == first and list(held[: n - start]) == list(handled[start:]):
            return n - start
    return 0


@dataclass
class Outgoing:
    """The source's side of a hand-over: the digests of the messages it handled since it began
    recording, per topic, and where it is."""

    handled: dict[str, list[str]] = field(default_factory=lambda: {"samples": [], "labels": []})
    reported: bool = False  # the cloud knows this gateway records
    releasing: bool = False  # unsubscribed: finishing what it received
    busy: bool = False  # a call to the cloud is on its way
    retry_at: float = 0.0  # a failed step is asked again from then on (time.monotonic)

    def note(self, kind: str, payload: bytes) -> None:
        self.handled.setdefault(kind, []).append(message_digest(payload))


@dataclass
class Incoming:
    """The target's side: what it holds since it subscribed (topic kind, message), in arrival order."""

    held: list[tuple[str, Inbound]] = field(default_factory=list)
    reported: bool = False  # the cloud knows this gateway subscribed
    busy: bool = False
    retry_at: float = 0.0
    dropped: int = 0  # held messages beyond MAX_HELD: items dropped

    def split(self, notes: dict[str, list[str]]) -> tuple[list[tuple[str, Inbound]], int]:
        """The held messages the source did not handle (in arrival order) and how many it did."""
        skip: set[int] = set()
        for kind in {k for k, _ in self.held}:
            mine = [i for i, (k, _) in enumerate(self.held) if k == kind]
            n = overlap([message_digest(self.held[i][1].payload) for i in mine], notes.get(kind, []))
            skip.update(mine[:n])
        rest = [item for i, item in enumerate(self.held) if i not in skip]
        return rest, len(skip)
