"""Wire contract between edge agents and the cloud trainer (REST, version ``/v1``).

Both sides import these pydantic models, so a field renamed here breaks the build on both sides
rather than in production. A training window travels either as JSON (:class:`TrainRequest`) or as the
compact binary body of :func:`encode_window` (content type :data:`WINDOW_CONTENT_TYPE`): a small JSON
header with every field except ``X``/``y``, then the arrays as little-endian float32 (or float64).

Binary layout::

    b"EDW1" | uint32 LE header length | header JSON (utf-8) | X (n·d values, row-major) | y (n values)
"""

from __future__ import annotations

import json
import struct
from datetime import datetime
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    Strict,
    TypeAdapter,
    model_validator,
)
from pydantic.config import JsonDict

from edgedrift.ids import DEVICE_ID_PATTERN as DEVICE_ID_PATTERN
from edgedrift.limits import MAX_FEATURES as MAX_FEATURES
from edgedrift.models.losses import FloatArray
from edgedrift.wire_stats import INT64_MAX as INT64_MAX
from edgedrift.wire_stats import NUMBER as NUMBER
from edgedrift.wire_stats import Extra, HeartbeatExtra, ShortText, Stats, StoredStats, readable
from edgedrift.wire_stats import StatValue as StatValue

API_VERSION = "v1"
WINDOW_CONTENT_TYPE = "application/x-edgedrift-window"
WINDOW_MAGIC = b"EDW1"

Task = Literal["classification", "regression"]
#: ``logistic`` = LIBLINEAR -s 0, ``svm`` = -s 2 (squared hinge), ``ridge`` = -s 11 / closed form,
#: ``shrub`` = a depth-limited CART tree (scikit-learn) exported as a JSON tree document.
Learner = Literal["logistic", "svm", "ridge", "shrub"]
Rebalance = Literal["none", "smote", "select"]
Encoding = Literal["json", "binary"]

LINEAR_LOSS: dict[str, str] = {"logistic": "logistic", "svm": "squared_hinge", "ridge": "squared"}
LEARNER_TASKS: dict[str, tuple[str, ...]] = {
    "logistic": ("classification",),
    "svm": ("classification",),
    "ridge": ("regression",),
    "shrub": ("classification", "regression"),
}

#: Most classes a classification window may have (a shrub's labels, a one-vs-rest model's columns).
MAX_CLASSES = 256
#: Bound of ``n`` and ``d`` in a binary header (the body length check refuses anything that does not fit).
MAX_COUNT = 2**31 - 1
#: Largest magnitude of a window value: squares and sums of squares stay finite in float64 and values
#: fit float32 (CART splits), so no trainer overflows to a non-finite model.
MAX_ABS_VALUE = 1e30
#: Upper bounds of heartbeat counters: the registry's INTEGER and BIGINT columns.
INT32_MAX = 2**31 - 1


#: A class name on the wire: printable text (an integer class is sent as its decimal string).
ClassNameText = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]*$")]
#: A flag of a request: JSON ``true`` or ``false`` only.
Flag = Annotated[bool, Strict()]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


class WireModel(BaseModel):
    """Base for every wire message: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class LearnerParams(WireModel):
    """Hyper-parameters. ``C="auto"`` tunes C by blocked cross-validation on the window."""

    C: Annotated[float, Field(gt=0, le=1e12, allow_inf_nan=False), NUMBER] | Literal["auto"] = 1.0
    bias: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False), NUMBER] = 1.0
    standardize: Flag = False
    max_depth: Annotated[int, Field(ge=1, le=16), NUMBER] = 4
    min_samples_leaf: Annotated[int, Field(ge=1, le=10_000), NUMBER] = 1
    seed: Annotated[int, Field(ge=0, le=2**31 - 1), NUMBER] = 0


def _when(field: str, value: JsonDict, then: dict[str, JsonValue]) -> JsonDict:
    """JSON Schema's ``if``/``then``: when ``field`` is given and matches ``value``, ``then`` holds."""
    return {
        "if": {"properties": {field: value}, "required": [field]},
        "then": {"properties": then, "required": list(then)},
    }


#: The header rules of ``WindowHeader._learner_fits_task`` in JSON Schema, so a request the schema allows
#: is one the validator allows.
HEADER_RULES: list[JsonValue] = [
    *(
        _when("learner", {"const": learner}, {"task": {"enum": list(tasks)}})
        for learner, tasks in LEARNER_TASKS.items()
    ),
    _when("rebalance", {"enum": ["smote", "select"]}, {"task": {"const": "classification"}}),
    _when("reset_rows", {"type": "integer"}, {"rebalance": {"const": "select"}}),
    _when("n_classes", {"type": "integer"}, {"task": {"const": "classification"}}),
    _when("class_names", {"type": "array"}, {"task": {"const": "classification"}}),
    _when("return_base", {"const": True}, {"rebalance": {"enum": ["smote", "select"]}}),
    {
        "if": {"properties": {"retune": {"type": "object"}}, "required": ["retune"]},
        "then": {
            "properties": {
                "learner": {"enum": ["logistic", "svm", "ridge"]},
                "rebalance": {"const": "none"},
                "params": {"properties": {"C": {"type": "number"}}},
            }
        },
    },
]


#: Edge learners a re-tuning recompute can tune (:data:`edgedrift.strategies.retuned.EDGE_GRIDS`).
TunableLearner = Literal["newton", "rmsprop"]


class RetuneRequest(WireModel):
    """Asks a recompute to re-tune the edge learner over the device's stored labeled history
    (``druid-tune``, ``periodic-tune``): the cloud refits the batch model on a window length validated on
    the history and returns the learner's hyper-parameters in the response's ``edge``."""

    learner: TunableLearner
    #: Labels the edge's window holds (the edge warms a re-tuned learner on them).
    window_labels: Annotated[int, Field(ge=1, le=MAX_COUNT), NUMBER] = 200
    #: The edge learner's parameters now: the search keeps them unless it finds clearly better ones.
    current: Annotated[dict[ShortText, Annotated[FiniteFloat, NUMBER]], Field(max_length=8)] | None = None


class WindowHeader(WireModel):
    """Everything about a training request except the arrays.

    ``reset_rows`` (``rebalance="select"`` only, at most n) says that the last ``reset_rows`` rows form
    RebalanceStream's reset batch (the samples since the first warning), which adds the candidates
    ``reset`` and ``reset+smote``; ``return_base`` asks for the model trained on the plain window too,
    in the document's ``training.base`` (RebalanceStream+). ``n_classes`` (classification only) is the
    task's number of classes C: absent or 2, the labels are ±1; C ≥ 3, they are the codes 0..C−1 and a
    linear learner trains one-vs-rest over all C classes, also those the window misses. ``class_names``
    (classification only) names the classes in code order (C names, or 2 for −1, +1); the cloud copies
    them into the model document, so a model says which class each column predicts.
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra={"allOf": HEADER_RULES})

    task: Task
    learner: Learner
    params: LearnerParams = Field(default_factory=LearnerParams)
    rebalance: Rebalance = "none"
    reset_rows: Annotated[int, Field(ge=0, le=MAX_COUNT), NUMBER] | None = None
    n_classes: Annotated[int, Field(ge=2, le=MAX_CLASSES), NUMBER] | None = None
    class_names: Annotated[list[ClassNameText], Field(min_length=2, max_length=MAX_CLASSES)] | None = None
    return_base: Flag = False
    reason: ShortText = "manual"
    monitor: Stats = Field(default_factory=dict)
    request_id: ShortText | None = None
    #: Re-tune the edge learner on the device's history (off by default).
    retune: RetuneRequest | None = None

    @model_validator(mode="after")
    def _learner_fits_task(self) -> WindowHeader:
        if self.task not in LEARNER_TASKS[self.learner]:
            raise ValueError(f"learner {self.learner!r} does not do {self.task}")
        if self.rebalance != "none" and self.task != "classification":
            raise ValueError("rebalance (SMOTE) applies to classification only")
        if self.n_classes is not None and self.task != "classification":
            raise ValueError("n_classes applies to classification only")
        if self.class_names is not None:
            if self.task != "classification":
                raise ValueError("class_names applies to classification only")
            if len(self.class_names) != (self.n_classes or 2):
                raise ValueError(
                    f"class_names: {len(self.class_names)} names for {self.n_classes or 2} classes"
                )
            if len(set(self.class_names)) != len(self.class_names):
                raise ValueError("class_names must be distinct")
        if self.reset_rows is not None and self.rebalance != "select":
            raise ValueError(f"reset_rows needs rebalance='select', got rebalance={self.rebalance!r}")
        if self.return_base and self.rebalance == "none":
            raise ValueError("return_base needs rebalance='smote' or 'select'")
        if self.retune is not None and (self.learner == "shrub" or self.rebalance != "none"):
            raise ValueError("retune needs a linear learner without rebalancing")
        if self.retune is not None and self.params.C == "auto":
            raise ValueError("retune needs a fixed C (the first model's)")
        return self


#: One value of a JSON window: a number (strict, so checked in pydantic's core at no cost per value)
#: within the magnitude every trainer handles.
WindowValue = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-MAX_ABS_VALUE, le=MAX_ABS_VALUE)]


class TrainRequest(WindowHeader):
    """A window to train on: X is n×d, y has n labels (±1 for linear classifiers, class ids for shrubs)."""

    X: Annotated[list[Annotated[list[WindowValue], Field(min_length=1)]], Field(min_length=1)]
    y: Annotated[list[WindowValue], Field(min_length=1)]


class StoredModel(WireModel):
    """The fields every view of one stored model version shares: the registry's row, a list entry, the
    reply to a training request. The views are built from the row with
    ``model_validate(row, from_attributes=True)``, so a field is named once here and once in the table."""

    version: int
    sha256: str
    learner: Learner
    rebalance: Rebalance
    reason: str
    n: int
    d: int
    train_ms: float
    bytes_in: int
    bytes_out: int
    encoding: Encoding
    created_at: datetime


class TrainResponse(StoredModel):
    """A stored model version and what the recompute cost."""

    device_id: str
    #: The model document (a JSON document whose schema is :mod:`edgedrift.models.document`'s).
    model: dict[str, Any]
    chosen: str | None = None
    scores: dict[str, float] | None = None
    replayed: bool = False
    #: The device is pinned: this is its pinned version, not a new one (nothing was trained).
    pinned: bool = False
    #: A re-tuning recompute's edge parameters (:meth:`edgedrift.strategies.channel.EdgeTune.as_document`).
    edge: dict[str, Any] | None = None


class ModelInfo(StoredModel):
    """One registry entry without its document."""

    kind: str
    task: Task
    requested_by: str
    monitor: StoredStats


class ModelVersion(ModelInfo):
    """A registry entry with its model document."""

    device_id: str
    model: dict[str, Any]


#: Largest body of a history upload (``POST /v1/devices/{id}/history``): the cloud answers 413 past it, and
#: the agent splits a batch of labels into parts that fit (:func:`history_rows`).
HISTORY_BODY_BYTES = 1 << 20
#: Room :func:`history_rows` leaves for the magic, the length and the JSON header of a history body.
HISTORY_HEADER_BYTES = 1024


def history_rows(d: int) -> int:
    """Labeled rows of ``d`` features (float64) one history body of :data:`HISTORY_BODY_BYTES` holds."""
    return max(1, (HISTORY_BODY_BYTES - HISTORY_HEADER_BYTES) // (8 * (d + 1)))


class HistoryStored(WireModel):
    """The answer to a batch of labeled samples forwarded to the device's history."""

    device_id: str
    batch_id: str
    #: Labels of this batch; ``replayed``: the batch id was stored before, nothing was added.
    n: int
    replayed: bool = False
    #: Labels the device's history holds now (at most the cloud's ``history_labels``).
    labels: int


class Heartbeat(WireModel):
    """An edge agent's periodic report, stored as a time series for the dashboard. Counters are bounded
    by their registry columns (BIGINT or INTEGER), so an out-of-range value is a 422, not a 500; the
    statistics in ``extra`` are typed and bounded (:class:`HeartbeatExtra`)."""

    samples: Annotated[int, Field(ge=0, le=INT64_MAX), NUMBER]
    labeled: Annotated[int, Field(ge=0, le=INT64_MAX), NUMBER] = 0
    accuracy: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False), NUMBER] | None = None
    accuracy_window: Annotated[int, Field(ge=0, le=INT32_MAX), NUMBER] = 0
    warnings: Annotated[int, Field(ge=0, le=INT32_MAX), NUMBER] = 0
    drift_events: Annotated[int, Field(ge=0, le=INT32_MAX), NUMBER] = 0
    recomputes_requested: Annotated[int, Field(ge=0, le=INT32_MAX), NUMBER] = 0
    model_version: Annotated[int, Field(ge=0, le=INT32_MAX), NUMBER] | None = None
    dropped: Annotated[int, Field(ge=0, le=INT64_MAX), NUMBER] = 0
    rejected: Annotated[int, Field(ge=0, le=INT64_MAX), NUMBER] = 0
    extra: Extra = Field(default_factory=lambda: HeartbeatExtra())


#: Most heartbeats in one batch request (a gateway sends its devices' in chunks of at most this many).
MAX_HEARTBEAT_BATCH = 10_000


class DeviceHeartbeat(WireModel):
    """One device's heartbeat in a batch."""

    device_id: Annotated[str, Field(pattern=DEVICE_ID_PATTERN)]
    heartbeat: Heartbeat


class HeartbeatBatch(WireModel):
    """Many devices' heartbeats in one request (``/v1/bulk/heartbeats``, ``/v1/gateways/{id}/heartbeats``)."""

    heartbeats: Annotated[list[DeviceHeartbeat], Field(min_length=1, max_length=MAX_HEARTBEAT_BATCH)]


class HeartbeatsStored(WireModel):
    stored: int


class GatewayHeartbeatsStored(HeartbeatsStored):
    """A gateway's batch: the beats of the devices it serves are stored; ``refused`` names the others
    (unassigned between the gateway's last sync and this batch), of which nothing is stored."""

    refused: list[str] = Field(default_factory=list)


class HeartbeatRecord(Heartbeat):
    """A stored heartbeat (its ``extra`` read with :func:`readable`)."""

    extra: Annotated[HeartbeatExtra, BeforeValidator(readable(TypeAdapter(Extra)))] = Field(
        default_factory=lambda: HeartbeatExtra()
    )
    received_at: datetime


class DeviceCounters(WireModel):
    """Per-device recompute counters, read from the registry (they survive restarts)."""

    device_id: str
    recomputes: int
    bytes_in: int
    bytes_out: int
    train_ms_total: float
    reasons: dict[str, int]
    latest_version: int | None
    last_recompute_at: datetime | None
    last_reason: str | None
    heartbeats: int
    last_seen: datetime | None


def window_arrays(req: TrainRequest) -> tuple[FloatArray, FloatArray]:
    """X and y of a JSON request as float64 arrays (shape checks are :func:`check_window`'s job)."""
    d = len(req.X[0]) if req.X else 0
    if any(len(row) != d for row in req.X):
        bad = next(i for i, row in enumerate(req.X) if len(row) != d)
        raise WindowError("X", f"row {bad} has {len(req.X[bad])} values, row 0 has {d}")
    X = np.asarray(req.X, dtype=np.float64).reshape(len(req.X), d)
    return X, np.asarray(req.y, dtype=np.float64)


class WindowError(ValueError):
    """A window that cannot be trained on; ``field`` names the offending field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason

    def __reduce__(self) -> tuple[type[WindowError], tuple[str, str]]:
        """Picklable with both fields (a training process raises it to the server process)."""
        return WindowError, (self.field, self.reason)


def check_window(
    header: WindowHeader, X: FloatArray, y: FloatArray, *, max_rows: int, max_features: int
) -> None:
    """Shape, size, finiteness and label checks shared by the JSON and binary paths."""
    if X.ndim != 2:
        raise WindowError("X", "must be a list of rows")
    n, d = X.shape
    if n == 0:
        raise WindowError("X", "the window is empty")
    if n > max_rows:
        raise WindowError("X", f"{n} rows exceed the limit of {max_rows}")
    if d == 0:
        raise WindowError("X", "rows have no features")
    if d > max_features:
        raise WindowError("X", f"{d} features exceed the limit of {max_features}")
    if y.shape != (n,):
        raise WindowError("y", f"has {y.size} labels for {n} rows")
    if header.reset_rows is not None and header.reset_rows > n:
        raise WindowError("reset_rows", f"{header.reset_rows} exceeds the {n} rows of the window")
    if not np.isfinite(X).all():
        i, j = np.argwhere(~np.isfinite(X))[0]
        raise WindowError("X", f"X[{i}][{j}] is not a finite number")
    if not np.isfinite(y).all():
        raise WindowError("y", f"y[{int(np.argmax(~np.isfinite(y)))}] is not a finite number")
    if np.abs(X).max() > MAX_ABS_VALUE:
        i, j = np.argwhere(np.abs(X) > MAX_ABS_VALUE)[0]
        raise WindowError("X", f"|X[{i}][{j}]| exceeds {MAX_ABS_VALUE:g}: rescale the features")
    if np.abs(y).max() > MAX_ABS_VALUE:
        raise WindowError(
            "y", f"|y[{int(np.argmax(np.abs(y)))}]| exceeds {MAX_ABS_VALUE:g}: rescale the target"
        )
    if header.task == "classification":
        C = header.n_classes
        if header.learner in ("logistic", "svm") and C is not None and C >= 3:
            bad = (y < 0) | (y >= C) | (y != np.round(y))
            if bad.any():
                i = int(np.argmax(bad))
                raise WindowError("y", f"labels of {C} classes must be the codes 0..{C - 1}; y[{i}] = {y[i]}")
        elif header.learner in ("logistic", "svm"):
            if not np.all(np.abs(y) == 1.0):
                raise WindowError("y", "labels of a linear classifier must be -1 or +1")
        elif not np.all(y == np.round(y)):
            raise WindowError("y", "class labels must be integers")
        elif np.unique(y).size > MAX_CLASSES:
            raise WindowError("y", f"more than {MAX_CLASSES} classes")


def encode_window(header: WindowHeader, X: FloatArray, y: FloatArray, dtype: str = "float32") -> bytes:
    """The compact binary body: 4 bytes per value with float32 instead of ~10–20 as JSON text."""
    if dtype not in ("float32", "float64"):
        raise ValueError("dtype must be float32 or float64")
    X = np.ascontiguousarray(X, dtype=np.dtype(dtype).newbyteorder("<"))
    y = np.ascontiguousarray(y, dtype=np.dtype(dtype).newbyteorder("<"))
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"X must be (n, d) and y (n,), got {X.shape} and {y.shape}")
    meta = header.model_dump(mode="json", exclude_defaults=True)
    meta.update(task=header.task, learner=header.learner, n=int(X.shape[0]), d=int(X.shape[1]), dtype=dtype)
    head = json.dumps(meta, separators=(",", ":")).encode()
    return WINDOW_MAGIC + struct.pack("<I", len(head)) + head + X.tobytes() + y.tobytes()


def decode_window(body: bytes, *, max_header: int = 65_536) -> tuple[WindowHeader, FloatArray, FloatArray]:
    """Parse :func:`encode_window` output; every malformation is a :class:`WindowError`."""
    if len(body) < 8 or body[:4] != WINDOW_MAGIC:
        raise WindowError("body", "not an EdgeDrift window (bad magic; expected b'EDW1')")
    (hlen,) = struct.unpack_from("<I", body, 4)
    if hlen > max_header or 8 + hlen > len(body):
        raise WindowError("body", f"header length {hlen} is out of range")
    try:
        meta = json.loads(body[8 : 8 + hlen], parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
        raise WindowError("header", f"not valid JSON ({exc})") from None
    except RecursionError:
        raise WindowError("header", "nested too deeply") from None
    if not isinstance(meta, dict):
        raise WindowError("header", "must be a JSON object")
    n, d = _count(meta, "n"), _count(meta, "d")
    dtype = meta.pop("dtype", "float32")
    if dtype not in ("float32", "float64"):
        raise WindowError("header.dtype", f"{dtype!r} is not float32 or float64")
    header = WindowHeader.model_validate(meta)
    dt = np.dtype(dtype).newbyteorder("<")
    expected = 8 + hlen + (n * d + n) * dt.itemsize
    if len(body) != expected:
        raise WindowError("body", f"{len(body)} bytes, expected {expected} for n={n}, d={d}, {dtype}")
    data = np.frombuffer(body, dtype=dt, offset=8 + hlen).astype(np.float64)
    return header, data[: n * d].reshape(n, d), data[n * d :]


def _no_constant(name: str) -> float:
    """``json.loads`` hook: NaN and ±Infinity are not JSON numbers."""
    raise ValueError(f"{name} is not a JSON number")


def _count(meta: dict[str, Any], field: str) -> int:
    """An integer count ``n`` or ``d`` of the binary header (a float such as 1e400 is refused)."""
    value = meta.pop(field, None)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_COUNT:
        raise WindowError(f"header.{field}", f"must be an integer in [0, {MAX_COUNT}], got {value!r:.40}")
    return value
