"""Parsing and checking MQTT payloads (wire contract in docs/edge-agent.md).

In: ``{"id": 17, "x": [...], "y": 1, "ts": ..., "seq": 41}`` (``y`` absent or null = unlabeled) or a batch
``{"samples": [...]}``; late labels ``{"id": 17, "y": 1}`` or ``{"labels": [...]}``. A device configured
with ``classes`` takes its labels by class name (``"y": "oak"`` or ``"y": 3``); they become the codes of
:mod:`edgedrift.labels` here, so the core only sees codes, and a name outside the classes is rejected. A
bad sample in a batch is rejected on its own: the good ones are kept. Every rejection carries a reason
that names the field; the session counts each one and publishes one summary event per message. A batch
above the per-message item cap is refused as a whole, with its item count (so the ledger still adds up).
``seq`` (optional, at a message's top level: ``{"samples": [...], "seq": 41}`` for a batch) is the
publisher's count of the device's samples before this message; the session tells from its gaps the
samples the broker dropped (:mod:`~edgedrift_edge.session.seq`).

The module is a little over 500 lines: it holds the payload contract's two parsers, which must agree (the
fast one decoded and checked by msgspec, the general one that words each rejection), side by side.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
import sys
from dataclasses import dataclass, field
from typing import Annotated, Any, cast

import msgspec
import numpy as np
import numpy.typing as npt

from edgedrift import kernels
from edgedrift.labels import ClassLabels
from edgedrift.limits import MAX_FEATURES
from edgedrift.models.losses import FloatArray

SAMPLE_FIELDS = frozenset({"id", "x", "y", "ts", "seq"})
#: The largest ``seq``: a publisher's count of samples, as the wire's counters bounded by a BIGINT.
MAX_SEQ = 2**63 - 1
LABEL_FIELDS = frozenset({"id", "y"})
SampleId = int | str


@dataclass
class Rejection:
    """One refused sample or message."""

    reason: str
    id: SampleId | None = None


@dataclass
class Samples:
    """The valid samples of one message; ``y`` is NaN where unlabeled.

    ``X`` is the (n, d) block once the width is known; before (``d`` None) rows may differ in width and
    only ``rows`` is set (``X`` is then an empty (0, 0) array).
    """

    ids: list[SampleId]
    X: FloatArray
    y: FloatArray
    ts: FloatArray
    batch: bool
    rejected: list[Rejection] = field(default_factory=list)
    rows: list[FloatArray] | None = None
    #: The publisher's count of this device's samples before this message (``seq``), or None.
    seq: int | None = None

    def row(self, i: int) -> FloatArray:
        return self.X[i] if self.rows is None else self.rows[i]

    def subset(self, keep: list[int]) -> Samples:
        """The samples at positions ``keep`` (rejections are not carried over)."""
        return Samples(
            [self.ids[i] for i in keep],
            self.X[keep] if self.rows is None else self.X,
            self.y[keep],
            self.ts[keep],
            self.batch,
            rows=None if self.rows is None else [self.rows[i] for i in keep],
        )


#: The scheme of the content digests, saved beside them in a checkpoint (``recent_samples``): digests of
#: another scheme, or of none recorded (Python's tuple hash, before this scheme), are dropped when one is
#: loaded.
CONTENT_HASH = "blake2b-64/f64le"
#: The digest of a sample whose content is not known (it came from a checkpoint of another scheme): a
#: repeat of its id counts as a redelivery. A computed digest is never 0 (its lowest bit is set).
UNKNOWN_CONTENT = 0


#: Rows from which :func:`content_keys_of` lays the batch out with numpy (fewer: row by row in Python, which
#: costs less than numpy's per-call overhead; both give the same digests).
_VECTOR_ROWS = 8


def message_digest(payload: bytes) -> str:
    """A message's content digest, as events name it (``message``) and a hand-over notes it: 8 bytes of
    BLAKE2b in hex."""
    return hashlib.blake2b(payload, digest_size=8).hexdigest()


def _digest(values: list[float]) -> int:
    """The digest of one sample's ``(*x, y, ts)`` (see :func:`content_keys_of`)."""
    canonical = [v + 0.0 if v == v else math.nan for v in values]  # -0.0 as 0.0, every NaN as one NaN
    raw = struct.pack(f"<{len(canonical)}d", *canonical)
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little", signed=True) | 1


def content_keys(rows: list[list[float]], ys: list[float], tss: list[float]) -> list[int]:
    """:func:`content_keys_of` of rows that may differ in width (before a device's width is known)."""
    return [_digest([*row, y, t]) for row, y, t in zip(rows, ys, tss, strict=True)]


def content_keys_of(X: FloatArray, y: FloatArray, ts: FloatArray) -> npt.NDArray[np.int64]:
    """Digests of samples' content, to tell a QoS-1 redelivery (same id, same content) from a reused id
    (a sensor that rebooted and counts from 0 again): for each row of X (n, d) with its label and time
    (NaN: none), the first 8 bytes of BLAKE2b over ``(*x, y, ts)`` as little-endian float64 (-0.0 as 0.0,
    every NaN as one NaN), lowest bit set. The same on every platform and interpreter, so the digests a
    checkpoint keeps mean the same after a restart or an upgrade (:data:`CONTENT_HASH`)."""
    n = len(y)
    if n < _VECTOR_ROWS:
        return np.array(content_keys(X.tolist(), y.tolist(), ts.tolist()), dtype=np.int64)
    values = np.empty((n, X.shape[1] + 2), dtype="<f8")
    values[:, :-2] = X
    values[:, -2] = y
    values[:, -1] = ts
    values += 0.0  # -0.0 becomes 0.0
    values[np.isnan(values)] = np.nan
    raw, step, blake2b = memoryview(values.tobytes()), values.shape[1] * 8, hashlib.blake2b
    digests = b"".join([blake2b(raw[i : i + step], digest_size=8).digest() for i in range(0, len(raw), step)])
    return np.frombuffer(digests, dtype="<i8").astype(np.int64) | 1


class MessageError(ValueError):
    """The whole message is unusable (not JSON, not an object, too many items, ...); ``count`` is how
    many samples it carried when that is known (1 otherwise)."""

    def __init__(self, message: str, count: int = 1) -> None:
        super().__init__(message)
        self.count = count


class _Sample(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """The schema of a sample, checked while msgspec decodes (the fast path of :func:`parse_samples`)."""

    x: list[float]
    id: int | Annotated[str, msgspec.Meta(min_length=1, max_length=64)] | msgspec.UnsetType = msgspec.UNSET
    y: float | None = None
    ts: float | None = None
    seq: Annotated[int, msgspec.Meta(ge=0, le=MAX_SEQ)] | None = None


class _Batch(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    samples: list[_Sample]
    seq: Annotated[int, msgspec.Meta(ge=0, le=MAX_SEQ)] | None = None


_SAMPLE = msgspec.json.Decoder(_Sample)
_BATCH = msgspec.json.Decoder(_Batch)


def _coded(y: FloatArray, classes: ClassLabels) -> FloatArray | None:
    """Numeric class names (NaN: unlabeled) as their codes; None if one is not a class."""
    out = y.copy()
    for i, v in enumerate(y.tolist()):
        if v == v:
            try:
                out[i] = classes.encode_one(v)
            except ValueError:
                return None
    return out


def _fast(
    payload: bytes,
    d: int,
    task: str,
    next_seq: int,
    max_items: int | None,
    classes: ClassLabels | None = None,
) -> Samples | None:
    """A message whose every sample is valid, decoded and checked in C (msgspec: JSON types, unknown
    fields, id length, numbers in range, so finite); the width and the labels checked with numpy. None
    when anything is off: then the general path reads it again and words each rejection. With
    ``classes``, numeric labels are names, coded here (a text label takes the general path)."""
    try:
        batch = b'"samples"' in payload
        top = _BATCH.decode(payload) if batch else _SAMPLE.decode(payload)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    items = top.samples if isinstance(top, _Batch) else [top]
    samples = _fast_items(items, batch, d, task, next_seq, max_items, classes)
    if samples is not None:
        samples.seq = top.seq
    return samples


def _fast_items(
    items: list[_Sample],
    batch: bool,
    d: int,
    task: str,
    next_seq: int,
    max_items: int | None,
    classes: ClassLabels | None,
) -> Samples | None:
    """:func:`_fast` once decoded."""
    n = len(items)
    if max_items is not None and n > max_items:
        raise MessageError(f"batch of {n} samples exceeds the cap of {max_items} per message", n)
    if n == 1:  # without numpy's per-call overhead for the checks
        one = items[0]
        if classes is not None:
            if len(one.x) != d:
                return None
            y_one = np.array([math.nan if one.y is None else one.y])
            coded = _coded(y_one, classes)
            if coded is None:
                return None
        elif len(one.x) != d or (task == "classification" and one.y not in (None, 1.0, -1.0)):
            return None
        else:
            coded = np.array([math.nan if one.y is None else one.y])
        sid: SampleId = next_seq if one.id is msgspec.UNSET else one.id
        ts1 = math.nan if one.ts is None else one.ts
        return Samples([sid], np.array(one.x, dtype=np.float64).reshape(1, d), coded, np.array([ts1]), batch)
    if not n:
        return None
    signs = task == "classification" and classes is None  # labels must be ±1
    k = kernels.MODULE
    if k is not None:
        X, y, ts = np.empty((n, d)), np.empty(n), np.empty(n)
        columns = k.sample_columns(items, d, signs, next_seq, msgspec.UNSET, X, y, ts)
        if columns is None:
            return None
        if classes is not None:
            coded = _coded(y, classes)
            if coded is None:
                return None
            y = coded
        return Samples(columns, X, y, ts, batch)
    try:
        X = np.array([s.x for s in items], dtype=np.float64)
    except ValueError:  # rows of different widths
        return None
    if X.shape != (n, d):
        return None
    nan = math.nan
    y = np.array([nan if s.y is None else s.y for s in items])
    if signs and not np.all((y == 1.0) | (y == -1.0) | np.isnan(y)):
        return None
    if classes is not None:
        coded = _coded(y, classes)
        if coded is None:
            return None
        y = coded
    ts = np.array([nan if s.ts is None else s.ts for s in items])
    unset = msgspec.UNSET
    ids: list[SampleId] = [next_seq + k if s.id is unset else s.id for k, s in enumerate(items)]
    return Samples(ids, X, y, ts, batch)


#: The largest float: a JSON integer beyond it has no float value.
_FLOAT_MAX = sys.float_info.max


def _finite(value: Any) -> float | None:
    """``value`` as a float when it is a JSON number (not a bool) with a finite float value; else None. A
    400-digit integer is a valid JSON number: ``float()`` and ``math.isfinite`` raise OverflowError on it,
    which ended the handling of its message as an internal error (and a device sending it repeatedly was
    taken out of service)."""
    if type(value) is float:
        return value if math.isfinite(value) else None
    if type(value) is int and -_FLOAT_MAX <= value <= _FLOAT_MAX:
        return float(value)
    return None


def _load(payload: bytes) -> dict[str, Any]:
    try:
        data = json.loads(payload)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MessageError(f"malformed JSON: {exc}") from None
    except RecursionError:
        raise MessageError("malformed JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise MessageError(f"expected a JSON object, got {type(data).__name__}")
    return data


def _check_id(value: Any) -> SampleId:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"id must be an integer or a string, got {type(value).__name__}")
    if isinstance(value, str) and not 0 < len(value) <= 64:
        raise ValueError("id must be 1 to 64 characters")
    return value


def check_label(y: Any, task: str, classes: ClassLabels | None = None) -> float:
    """A finite label that fits the task: ±1 for classification, any real for regression; with
    ``classes``, one of their names (a string or a number), returned as its code."""
    if classes is not None:
        try:
            return classes.encode_one(y)
        except ValueError as exc:
            raise ValueError(f"y: {exc}") from None
    if isinstance(y, bool) or not isinstance(y, int | float):
        raise ValueError(f"y must be a number, got {type(y).__name__}")
    label = _finite(y)
    if label is None:
        raise ValueError("y is not a finite number")
    if task == "classification" and label not in (-1.0, 1.0):
        raise ValueError(
            f"y must be -1 or +1 for classification, got {label:g} (other labels: set classes, e.g. 0,1)"
        )
    return label


def _sample(
    item: Any, d: int | None, task: str, seq: int, classes: ClassLabels | None = None
) -> tuple[SampleId, list[float], float, float]:
    """One sample's fields, checked; ValueError naming the field. ``type(v) is int`` fast paths keep the
    common case cheap (they also exclude bools, which are ints to isinstance)."""
    if type(item) is not dict:
        raise ValueError(f"a sample must be a JSON object, got {type(item).__name__}")
    if not SAMPLE_FIELDS.issuperset(item):
        raise ValueError(f"unknown field {sorted(set(item) - SAMPLE_FIELDS)[0]!r}")
    sid = item.get("id", seq)
    if type(sid) is not int:
        sid = _check_id(sid)
    x = item.get("x")
    if type(x) is not list or not x:
        raise ValueError("x must be a non-empty list of numbers")
    if d is not None and len(x) != d:
        raise ValueError(f"x has {len(x)} values, expected {d}")
    if len(x) > MAX_FEATURES:
        raise ValueError(f"x has {len(x)} values, more than the limit of {MAX_FEATURES} features")
    for v in x:  # JSON numbers only, as the fast path's decoder: numpy turned "1" and true into 1.0
        if type(v) is not float and _finite(v) is None:
            raise ValueError("x contains NaN or inf" if type(v) is int else "x must be a list of numbers")
    y = item.get("y")
    if y is None:
        label = math.nan
    elif (
        (type(y) is int or type(y) is float)
        and (y == 1 or y == -1)
        and task == "classification"
        and classes is None
    ):
        label = float(y)
    else:
        label = check_label(y, task, classes)
    ts = item.get("ts")
    if ts is None:
        return sid, x, label, math.nan
    stamp = _finite(ts)
    if stamp is None:
        raise ValueError("ts must be a finite number")
    return sid, x, label, stamp


def parse_samples(
    payload: bytes,
    d: int | None,
    task: str,
    next_seq: int,
    max_items: int | None = None,
    classes: ClassLabels | None = None,
) -> Samples:
    """Valid samples of a single or batch message plus the rejections.

    ``d`` None: the width is not decided yet, rows of any width are kept (in ``rows``). A batch of more
    than ``max_items`` samples raises :class:`MessageError` with its count. ``classes``: the labels are
    class names, returned as their codes.
    """
    if d is not None:
        fast = _fast(payload, d, task, next_seq, max_items, classes)
        if fast is not None:
            return fast
    data = _load(payload)
    seq = data.pop("seq", None)
    if seq is not None and (type(seq) is not int or not 0 <= seq <= MAX_SEQ):
        raise MessageError(
            f"seq must be an integer from 0 to 2^63 - 1, got {seq!r}"[:200], _count_decoded(data)
        )
    samples = _parse_data(data, d, task, next_seq, max_items, classes)
    samples.seq = seq
    return samples


def _count_decoded(data: Any) -> int:
    """The items of a decoded message: a batch's samples or labels (at least 1), else one."""
    for key in ("samples", "labels"):
        if isinstance(data, dict) and isinstance(data.get(key), list):
            return max(len(data[key]), 1)
    return 1


def _parse_data(
    data: dict[str, Any],
    d: int | None,
    task: str,
    next_seq: int,
    max_items: int | None,
    classes: ClassLabels | None,
) -> Samples:
    """:func:`parse_samples` once decoded (``seq`` taken out)."""
    batch = "samples" in data
    if batch:
        if set(data) != {"samples"}:
            extra = sorted(set(data) - {"samples"})[0]
            raise MessageError(f"unknown field {extra!r} next to 'samples'")
        items = data["samples"]
        if not isinstance(items, list):
            raise MessageError("'samples' must be a list")
        if max_items is not None and len(items) > max_items:
            raise MessageError(
                f"batch of {len(items)} samples exceeds the cap of {max_items} per message", len(items)
            )
    else:
        items = [data]
    if d is not None:
        if len(items) == 1:
            single = _parse_single(items[0], d, task, next_seq, batch, classes)
            if single is not None:
                return single
        known = _parse_known_width(items, d, task, next_seq, batch, classes)
        if known is not None:
            return known
    ids: list[SampleId] = []
    rows: list[FloatArray] = []
    ys: list[float] = []
    tss: list[float] = []
    rejected: list[Rejection] = []
    for k, item in enumerate(items):
        try:
            sid, x, label, ts = _sample(item, d, task, next_seq + k, classes)
            row = np.asarray(x, dtype=np.float64)
        except (ValueError, TypeError) as exc:
            rejected.append(Rejection(_reason(exc), _raw_id(item)))
            continue
        if not np.isfinite(row).all():
            rejected.append(Rejection("x contains NaN or inf", sid))
            continue
        ids.append(sid)
        rows.append(row)
        ys.append(label)
        tss.append(ts)
    y_arr, ts_arr = np.asarray(ys, dtype=np.float64), np.asarray(tss, dtype=np.float64)
    if d is None:
        return Samples(ids, np.zeros((0, 0)), y_arr, ts_arr, batch, rejected, rows=rows)
    X = np.asarray(rows, dtype=np.float64).reshape(len(rows), d)
    return Samples(ids, X, y_arr, ts_arr, batch, rejected)


def _parse_single(
    item: Any, d: int, task: str, seq: int, batch: bool, classes: ClassLabels | None = None
) -> Samples | None:
    """The common case, one valid sample of the known width, without numpy's per-call overhead for the
    checks; None when anything is off (then the general path decides and words the rejection)."""
    try:
        sid, x, label, ts = _sample(item, d, task, seq, classes)  # x: JSON numbers with float values
        if not all(map(math.isfinite, x)):
            return None
    except (ValueError, TypeError):
        return None
    X = np.array(x, dtype=np.float64).reshape(1, d)
    return Samples([sid], X, np.array([label]), np.array([ts]), batch)


def _parse_known_width(
    items: list[Any], d: int, task: str, next_seq: int, batch: bool, classes: ClassLabels | None = None
) -> Samples | None:
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
            sid, x, label, ts = _sample(item, d, task, next_seq + k, classes)
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


_SEQ = re.compile(rb'"seq"\s*:\s*(\d{1,18})\b')


def single_seq(payload: bytes) -> int | None:
    """The ``seq`` of a single-sample message without parsing it (a flood's refusal stays cheap)."""
    found = _SEQ.search(payload)
    return None if found is None else int(found.group(1))


def refused_items(payload: bytes) -> tuple[int, int | None]:
    """A batch message's item count (as :func:`count_items`) and its top-level ``seq`` (None: none)."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return 1, None
    seq = data.get("seq") if isinstance(data, dict) else None
    return _count_decoded(data), seq if type(seq) is int and 0 <= seq <= MAX_SEQ else None


def count_items(payload: bytes) -> int:
    """How many samples (or labels) a message carries, as far as it can be told (1 when it cannot):
    the count of a message whose handling failed, so that the ledger still adds up."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return 1
    return _count_decoded(data)


def parse_labels(
    payload: bytes, task: str, max_items: int | None = None, classes: ClassLabels | None = None
) -> tuple[list[tuple[SampleId, float]], list[Rejection]]:
    """Late labels of a single or batch label message (a batch above ``max_items`` is refused whole);
    ``classes``: the labels are class names, returned as their codes."""
    data = _load(payload)
    items = data["labels"] if set(data) == {"labels"} else [data]
    if not isinstance(items, list):
        raise MessageError("'labels' must be a list")
    if max_items is not None and len(items) > max_items:
        raise MessageError(
            f"batch of {len(items)} labels exceeds the cap of {max_items} per message", len(items)
        )
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
            good.append((_check_id(item["id"]), check_label(item["y"], task, classes)))
        except ValueError as exc:
            rejected.append(Rejection(str(exc), _raw_id(item)))
    return good, rejected
