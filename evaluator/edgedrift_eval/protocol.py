"""Evaluation protocols live in :mod:`edgedrift.protocol` so the replay command shares the label schedule."""

from edgedrift.protocol import PROTOCOLS, Protocol, get_protocol

__all__ = ["PROTOCOLS", "Protocol", "get_protocol"]
