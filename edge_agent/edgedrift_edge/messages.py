"""Parsing and checking MQTT payloads (wire contract in docs/edge-agent.md).

In: ``{"id": 17, "x": [...], "y": 1, "ts": ...}`` (``y`` absent or null = unlabeled) or a batch
``{"samples": [...]}``; late labels ``{"id": 17, "y": 1}`` or ``{"labels": [...]}``. A bad sample in a
batch is rejected on its own: the good ones are kept. Every rejection carries a reason that names the
field, which the agent publishes as an event and counts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from edgedrift.models.losses import FloatArray

SAMPLE_FIELDS = frozenset({"id", "x", "y", "ts"})
LABEL_FIELDS = frozenset({"id", "y"})
SampleId = int | str


@dataclass
class Rejection:
    """One refused sample or message."""

    reason: str
    id: SampleId | None = None


@dataclass
class Samples:
    """The valid samples of one message; ``y`` is NaN where unlabeled."""

    ids: list[SampleId]
    X: FloatArray
    y: FloatArray
    ts: FloatArray
    batch: bool
    rejected: list[Rejection] = field(default_factory=list)


class MessageError(ValueError):
    """The whole message is unusable (not JSON, not an object, ...)."""


def _load(payload: bytes) -> dict[str, Any]:
    try:
        data = json.loads(payload)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MessageError(f"malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MessageError(f"expected a JSON object, got {type(data).__name__}")
    return data


def _check_id(value: Any) -> SampleId:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"id must be an integer or a string, got {type(value).__name__}")
    if isinstance(value, str) and not 0 < len(value) <= 64:
        raise ValueError("id must be 1 to 64 characters")
    return value


def check_label(y: Any, task: str) -> float:
    """A finite label that fits the task: ±1 for classification, any real for regression."""
    if isinstance(y, bool) or not isinstance(y, int | float):
        raise ValueError(f"y must be a number, got {type(y).__name__}")
    label = float(y)
    if not math.isfinite(label):
        raise ValueError("y is not a finite number")
    if task == "classification" and label not in (-1.0, 1.0):
        raise ValueError(f"y must be -1 or +1 for classification, got {label:g}")
    return label


def _sample(item: Any, d: int | None, task: str, seq: int) -> tuple[SampleId, list[float], float, float]:
    if not isinstance(item, dict):
        raise ValueError(f"a sample must be a JSON object, got {type(item).__name__}")
    if not SAMPLE_FIELDS.issuperset(item):
        raise ValueError(f"unknown field {sorted(set(item) - SAMPLE_FIELDS)[0]!r}")
    sid = _check_id(item["id"]) if "id" in item else seq
    x = item.get("x")
    if not isinstance(x, list) or not x:
        raise ValueError("x must be a non-empty list of numbers")
    if d is not None and len(x) != d:
        raise ValueError(f"x has {len(x)} values, expected {d}")
    y = item.get("y")
    label = math.nan if y is None else check_label(y, task)
    ts = item.get("ts")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts)):
        raise ValueError("ts must be a finite number")
    return sid, x, label, math.nan if ts is None else float(ts)


def parse_samples(payload: bytes, d: int | None, task: str, next_seq: int) -> Samples:
    """Valid samples of a single or batch message plus the rejections; ``d`` None = take it from the first."""
    data = _load(payload)
    batch = "samples" in data
    if batch:
        if set(data) != {"samples"}:
            extra = sorted(set(data) - {"samples"})[0]
            raise MessageError(f"unknown field {extra!r} next to 'samples'")
        items = data["samples"]
        if not isinstance(items, list):
            raise MessageError("'samples' must be a list")
    else:
        items = [data]
    if d is not None:
        known = _parse_known_width(items, d, task, next_seq, batch)
        if known is not None:
            return known
    ids: list[SampleId] = []
    rows: list[list[float]] = []
    ys: list[float] = []
    tss: list[float] = []
    rejected: list[Rejection] = []
    for k, item in enumerate(items):
        try:
            sid, x, label, ts = _sample(item, d, task, next_seq + k)
            row = np.asarray(x, dtype=np.float64)
        except (ValueError, TypeError) as exc:
            rejected.append(Rejection(_reason(exc), _raw_id(item)))
            continue
        if not np.isfinite(row).all():
            rejected.append(Rejection("x contains NaN or inf", sid))
            continue
        if d is None:
            d = len(x)
        ids.append(sid)
        rows.append(x)
        ys.append(label)
        tss.append(ts)
    X = np.asarray(rows, dtype=np.float64).reshape(len(rows), d or 0)
    return Samples(ids, X, np.asarray(ys), np.asarray(tss), batch, rejected)


def _parse_known_width(items: list[Any], d: int, task: str, next_seq: int, batch: bool) -> Samples | None:
    """The same result as the per-row loop of :func:`parse_samples` once ``d`` is known, with one numpy
    conversion and one finiteness check for the whole message instead of one per row (the per-row
    conversions dominated the agent's batch path). None when the rows do not convert as one (d, ) block
    -- then the per-row loop runs and decides, so malformed rows are rejected exactly as before."""
    ids: list[SampleId] = []
    rows: list[list[float]] = []
    ys: list[float] = []
    tss: list[float] = []
    positions: list[int] = []
    rejected: list[tuple[int, Rejection]] = []
    for k, item in enumerate(items):
        try:
            sid, x, label, ts = _sample(item, d, task, next_seq + k)
        except (ValueError, TypeError) as exc:
            rejected.append((k, Rejection(_reason(exc), _raw_id(item))))
            continue
        ids.append(sid)
        rows.append(x)
        ys.append(label)
        tss.append(ts)
        positions.append(k)
    if not rows:
        return None
    try:
        X = np.array(rows, dtype=np.float64)
    except Exception:
        return None
    if X.shape != (len(rows), d):
        return None
    finite = np.isfinite(X).all(axis=1)
    if not finite.all():
        keep = cast(list[bool], finite.tolist())
        rejected.extend(
            (k, Rejection("x contains NaN or inf", sid))
            for k, sid, ok in zip(positions, ids, keep, strict=True)
            if not ok
        )
        rejected.sort(key=lambda r: r[0])
        ids = [sid for sid, ok in zip(ids, keep, strict=True) if ok]
        ys = [v for v, ok in zip(ys, keep, strict=True) if ok]
        tss = [v for v, ok in zip(tss, keep, strict=True) if ok]
        X = X[finite]
    return Samples(ids, X, np.asarray(ys), np.asarray(tss), batch, [r for _, r in rejected])


def _raw_id(item: Any) -> SampleId | None:
    """The id of a refused item, when it has a usable one (for the rejection event)."""
    raw = item.get("id") if isinstance(item, dict) else None
    return raw if isinstance(raw, int | str) else None


def _reason(exc: Exception) -> str:
    text = str(exc)
    if isinstance(exc, TypeError) or "could not convert" in text:
        return "x must be a list of numbers"
    return text


def parse_labels(payload: bytes, task: str) -> tuple[list[tuple[SampleId, float]], list[Rejection]]:
    """Late labels of a single or batch label message."""
    data = _load(payload)
    items = data["labels"] if set(data) == {"labels"} else [data]
    if not isinstance(items, list):
        raise MessageError("'labels' must be a list")
    good: list[tuple[SampleId, float]] = []
    rejected: list[Rejection] = []
    for item in items:
        try:
            if not isinstance(item, dict):
                raise ValueError("a label must be a JSON object")
            unknown = set(item) - LABEL_FIELDS
            if unknown:
                raise ValueError(f"unknown field {sorted(unknown)[0]!r}")
            if "id" not in item or "y" not in item:
                raise ValueError("a label needs 'id' and 'y'")
            good.append((_check_id(item["id"]), check_label(item["y"], task)))
        except ValueError as exc:
            rejected.append(Rejection(str(exc), _raw_id(item)))
    return good, rejected
