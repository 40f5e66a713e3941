"""Identifier rules shared by every part, in a module light enough for a command line's parser."""

from __future__ import annotations

import re

#: A device id is a path segment: letters, digits, '_' and '-', no dots or slashes (no path tricks).
DEVICE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
#: The longest device id.
MAX_DEVICE_ID = 64

_DEVICE_ID = re.compile(DEVICE_ID_PATTERN)


def device_id_problem(value: object) -> str | None:
    """Why ``value`` cannot be a device id, None when it can. A device id names MQTT topics (where '+',
    '#' and '/' are wildcards or levels) and a checkpoint file (where '/' and '..' leave the directory),
    so every source of ids (a flag, a file, the cloud's list) goes through this one check."""
    if not isinstance(value, str):
        return f"a device id must be a string, got {type(value).__name__}"
    if not value:
        return "a device id must not be empty"
    if len(value) > MAX_DEVICE_ID:
        return f"a device id has at most {MAX_DEVICE_ID} characters, this one {len(value)}"
    if _DEVICE_ID.fullmatch(value) is None:
        return "a device id is letters, digits, '_' and '-', starting with a letter or a digit"
    return None


def topic_prefix_problem(value: str) -> str | None:
    """Why ``value`` cannot be the first level(s) of EdgeDrift's topics, None when it can: the agent, the
    gateway and the replay subscribe and publish below it, so a wildcard ('+', '#') makes the broker refuse
    every publish, and a leading '$' names the broker's own topics."""
    if not value or len(value) > 128:
        return "a topic prefix is 1 to 128 characters"
    if any(c in value for c in "+#\x00"):
        return "a topic prefix must not hold an MQTT wildcard ('+', '#') or a NUL character"
    if value.startswith("$") or "" in value.split("/"):
        return "a topic prefix must not start with '$' nor hold an empty level ('a//b', '/a', 'a/')"
    return None


def shown_id(value: object, limit: int = 40) -> str:
    """A refused id as it may be shown in a log line or an event: its repr, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
