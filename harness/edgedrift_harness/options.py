"""Command-line options of the benchmarks: one way to read repeated ``KEY=VALUE`` flags."""

from __future__ import annotations


def key_values(flag: str, items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` items of a repeated ``flag`` as a dict (a later key wins); exits with a clear message
    on an item without ``=`` or without a key."""
    parsed: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{flag} {item!r}: expected KEY=VALUE")
        parsed[key] = value
    return parsed
