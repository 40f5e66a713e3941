"""Identifier rules shared by every part, in a module light enough for a command line's parser."""

from __future__ import annotations

#: A device id is a path segment: letters, digits, '_' and '-', no dots or slashes (no path tricks).
DEVICE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
