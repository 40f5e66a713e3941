"""One device's session and what it owns: raw messages in, predictions and events out, no I/O
(:class:`DeviceSession`, its parts beside it). The public names of an application that embeds a device
(docs/embedding.md) are importable from here."""

from edgedrift_edge.session.device_session import DeviceSession
from edgedrift_edge.session.ledger import Counters, Event, Output, Prediction, SessionConfig

__all__ = ["Counters", "DeviceSession", "Event", "Output", "Prediction", "SessionConfig"]
