"""One device's session and what it owns: raw messages in, predictions and events out, no I/O
(:class:`DeviceSession`, its parts beside it). The public names of an application that embeds a device
(docs/embedding.md) are importable from here.

``DeviceSession`` is imported on first use (PEP 562): the buffers it owns use this package's message
types, so importing it here eagerly would make ``import edgedrift_edge.buffers.id_index`` circular."""

from typing import TYPE_CHECKING, Any

from edgedrift_edge.session.ledger import Counters, Event, Output, Prediction, SessionConfig

if TYPE_CHECKING:
    from edgedrift_edge.session.device_session import DeviceSession

__all__ = ["Counters", "DeviceSession", "Event", "Output", "Prediction", "SessionConfig"]


def __getattr__(name: str) -> Any:
    if name == "DeviceSession":
        from edgedrift_edge.session.device_session import DeviceSession

        return DeviceSession
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
