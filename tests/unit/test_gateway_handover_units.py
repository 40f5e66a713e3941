"""Issue 30 row 4, the pure part of a hand-over: which held messages the source handled already
(``edgedrift_edge.handover.moves``)."""

from __future__ import annotations

from edgedrift_edge.handover.moves import Incoming, overlap
from edgedrift_edge.session.messages import message_digest as digest
from edgedrift_edge.transport.connection import Inbound


def test_overlap_is_the_longest_start_of_the_held_that_ends_the_handled() -> None:
    assert overlap(list("cde"), list("abcd")) == 2
    assert overlap(list("abcd"), list("abcd")) == 4
    assert overlap(list("xyz"), list("abc")) == 0  # no overlap: the target subscribed after the release
    assert overlap([], list("ab")) == overlap(list("ab"), []) == 0
    # repeated contents: only a run that reaches the end of the handled counts
    assert overlap(list("aab"), list("baa")) == 2
    assert overlap(list("ab"), list("aba")) == 1


def test_incoming_skips_the_overlap_per_topic_and_keeps_the_order() -> None:
    def msg(kind: str, body: bytes) -> tuple[str, Inbound]:
        return kind, Inbound(f"edgedrift/d/{kind}", body, 0, 0, 0)

    held = Incoming(
        [msg("samples", b"s3"), msg("labels", b"l1"), msg("samples", b"s4"), msg("labels", b"l2")]
    )
    notes = {"samples": [digest(b"s2"), digest(b"s3")], "labels": [digest(b"l0")]}
    rest, skipped = held.split(notes)
    assert skipped == 1
    assert [m.payload for _, m in rest] == [b"l1", b"s4", b"l2"]
