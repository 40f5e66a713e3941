"""Statistics on the wire: a training request's ``monitor`` and a heartbeat's ``extra``, typed and bounded.

A device names its statistics and sends their values; each is a bounded number, a flag or a short
printable text, at most :data:`MAX_STATS` of them under short names, so nothing one device stores can
grow without bound or break a reader: PostgreSQL's JSON cannot turn ``\\u0000`` into text (one such value
failed every fleet read), a 400-digit integer or ``1e400`` breaks its casts and Python's ``float``. Values
read back from the registry go through :func:`readable`, which leaves out what a registry written before
these limits may hold. :mod:`edgedrift.wire` re-exports every name.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, Strict, TypeAdapter, ValidationError, with_config
from pydantic.config import JsonDict
from typing_extensions import TypedDict

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


def _not_bool_or_text(value: object) -> object:
    """Numbers of the wire are JSON numbers: a bool or a numeric string is refused, as the schema says,
    where pydantic's lax mode would convert it (3.0 stays a valid integer, as in JSON Schema)."""
    if isinstance(value, bool | str | bytes):
        raise ValueError(f"must be a number, not {type(value).__name__}")
    return value


#: Marks a numeric field of a request, after its bounds (so the JSON schema keeps them):
#: ``Annotated[int, Field(ge=0), NUMBER]`` takes ``3`` or ``3.0``, not ``true`` or ``"3"``.
NUMBER = BeforeValidator(_not_bool_or_text)
#: Bounds of a statistic: numbers every database column and JSON reader takes, short printable text.
MAX_STAT_ABS = 1e300
MAX_STAT_TEXT = 128
#: Entries of a statistics map (a version's ``monitor``, a heartbeat's ``extra``).
MAX_STATS = 32
#: Strict, so a text of digits stays a text (and is bounded as one) instead of becoming a number.
StatFloat = Annotated[float, Strict(), Field(allow_inf_nan=False, ge=-MAX_STAT_ABS, le=MAX_STAT_ABS)]
StatInt = Annotated[int, Strict(), Field(ge=-(2**63), le=2**63 - 1)]
StatText = Annotated[str, Field(max_length=MAX_STAT_TEXT, pattern=r"^[^\x00-\x1f\x7f]*$")]
StatValue = StatFloat | StatInt | bool | StatText | None
NAME_PATTERN = r"^[A-Za-z0-9_.:\-]+$"
ShortText = Annotated[str, Field(max_length=64, pattern=NAME_PATTERN)]
#: A statistics map of a request (a training request's ``monitor``).
Stats = Annotated[dict[ShortText, StatValue], Field(max_length=MAX_STATS)]


def _stat_names(stats: dict[str, Any]) -> dict[str, Any]:
    """At most :data:`MAX_STATS` entries with short names (the keys of ``extra_items`` are not checked by
    the type itself)."""
    if len(stats) > MAX_STATS:
        raise ValueError(f"at most {MAX_STATS} entries, got {len(stats)}")
    for name in stats:
        if len(name) > 64 or not re.match(NAME_PATTERN, name):
            raise ValueError(f"entry name {name[:70]!r} is not 1-64 letters, digits or '_.:-'")
    return stats


def stat_number(value: object) -> float | None:
    """A stored statistic as a finite float within :data:`MAX_STAT_ABS`, else None (a bool, a string, an
    integer too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) > MAX_STAT_ABS:
        return None
    number = float(value)
    return number if math.isfinite(number) and abs(number) <= MAX_STAT_ABS else None


def readable(adapter: TypeAdapter[Any]) -> Callable[[Any], dict[str, Any]]:
    """A stored statistics map as the current types read it: each entry that does not validate alone
    (stored before a limit existed) is left out, so no stored value can fail a read."""

    def keep_valid(stored: Any) -> dict[str, Any]:
        if not isinstance(stored, dict):
            return {}
        kept: dict[str, Any] = {}
        for name, value in stored.items():
            if len(kept) == MAX_STATS:
                break
            try:
                kept.update(adapter.validate_python({name: value}))
            except ValidationError:
                continue
        return kept

    return keep_valid


Count64 = Annotated[int, Field(ge=0, le=INT64_MAX), NUMBER]


@with_config(extra="allow")
class HeartbeatExtra(TypedDict, total=False, extra_items=StatValue):  # type: ignore[call-arg]
    """A heartbeat's statistics beyond the counters: the ones the agent sends (its heartbeat's ``extra``)
    are typed, any other is a bounded :data:`StatValue`. ``rmse`` is what the fleet views sort and show
    for a regression device; ``macro_f1`` and ``n_classes`` what they show beside the accuracy of a
    device configured with classes; ``silent`` what makes a device ``silent`` in them."""

    phase: ShortText
    rmse: Annotated[float, Field(ge=0, le=MAX_STAT_ABS, allow_inf_nan=False), NUMBER] | None
    macro_f1: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False), NUMBER] | None
    n_classes: Annotated[int, Field(ge=2, le=INT32_MAX), NUMBER]
    label_misses: Count64
    duplicates: Count64
    outliers: Count64
    id_reused: Count64
    #: The agent received nothing for this device for ``silent_after_s`` while connected (the fleet
    #: views' ``silent`` status: often a broker ACL that does not grant the gateway the device).
    silent: Annotated[bool, Strict()]


#: The statistics map of a request in JSON Schema terms (what :func:`_stat_names` checks).
_STATS_SCHEMA: JsonDict = {
    "maxProperties": MAX_STATS,
    "propertyNames": {"maxLength": 64, "pattern": NAME_PATTERN},
}
Extra = Annotated[HeartbeatExtra, AfterValidator(_stat_names), Field(json_schema_extra=_STATS_SCHEMA)]


#: A statistics map read back from the registry (entries stored before today's limits are left out).
StoredStats = Annotated[dict[str, StatValue], BeforeValidator(readable(TypeAdapter(Stats)))]
