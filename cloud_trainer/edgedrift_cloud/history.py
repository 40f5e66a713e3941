"""Each device's labeled history for re-tuning recomputes (``druid-tune``, ``periodic-tune``).

Agents forward the labels their edge learner learned in batches (``POST /v1/devices/{id}/history``);
each batch is one row of ``history_chunks`` (float64 arrays as bytes), never a row per sample, so a fleet
of 10,000 devices holding 20,000 labels each is about 10,000 x (20,000 / batch) rows. Only the newest
chunks that hold the last ``history_labels`` labels within ``history_bytes_per_device`` bytes are kept,
and a batch that would grow the fleet's history beyond ``history_bytes_total`` is refused. A re-tuning
recompute reads them back when its job runs, in the training pool (:func:`retune_job`: never while it
waits for a slot, and never in the service's own process), and runs the evaluator's own search on them
(:func:`retune_window`), so a deployed recompute equals the offline one given the same labels.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from time import perf_counter
from typing import Any

import numpy as np
from sqlalchemy import Engine, delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from edgedrift.models.document import BatchModel, model_from_document
from edgedrift.models.losses import FloatArray
from edgedrift.training.retune import retune_on_history
from edgedrift.training.window import TrainOutcome, train_window
from edgedrift.wire import WindowHeader
from edgedrift_cloud.admission import checkpoint
from edgedrift_cloud.db.engine import make_engine, make_sessionmaker
from edgedrift_cloud.db.rows import upsert
from edgedrift_cloud.db.tables import DeviceCounter, HistoryChunk, utcnow

__all__ = [
    "FleetHistoryBytes",
    "HistoryLimits",
    "HistoryRefusedError",
    "HistorySource",
    "RetuneOutcome",
    "held_labels",
    "load_history",
    "retune_job",
    "retune_window",
    "store_batch",
]

_F64 = np.dtype("<f8")


def chunk_bytes(n: int, d: int) -> int:
    """Bytes of a chunk's arrays: n x d features and n labels, float64."""
    return n * (d + 1) * _F64.itemsize


@dataclass(frozen=True)
class HistoryLimits:
    """How much history one device keeps: the newest ``labels`` labels within ``bytes`` bytes."""

    labels: int
    bytes: int


class HistoryRefusedError(Exception):
    """A batch the history cannot take: ``status`` and ``reason`` of the answer."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail


class FleetHistoryBytes:
    """The fleet's stored history bytes: recounted from the table at most every ``max_age_s`` (one
    scan of the chunks' sizes), plus what this worker stored since."""

    def __init__(self, max_age_s: float = 60.0) -> None:
        self.max_age_s = max_age_s
        self._total = 0
        self._counted_at = -math.inf
        self._lock = threading.Lock()

    def total(self, session: Session) -> int:
        with self._lock:
            if time.monotonic() - self._counted_at >= self.max_age_s:
                size = HistoryChunk.n * (HistoryChunk.d + 1) * _F64.itemsize
                self._total = int(session.scalar(select(func.coalesce(func.sum(size), 0))) or 0)
                self._counted_at = time.monotonic()
            return self._total

    def add(self, growth: int) -> None:
        with self._lock:
            self._total += growth


def _kept(
    rows: Sequence[tuple[int, int, int]], limits: HistoryLimits, d: int | None = None
) -> tuple[list[int], int]:
    """Of a device's chunks (id, n, d), newest first: the ids a history keeps (the newest, while they
    hold fewer than ``limits.labels`` labels and fit in ``limits.bytes``; with ``d``, only those of
    that width before an older width ends the history) and the labels they hold."""
    kept: list[int] = []
    held = size = 0
    for chunk_id, n, width in rows:
        if d is not None and width != d:
            break
        size += chunk_bytes(n, width)
        if held >= limits.labels or size > limits.bytes:
            break
        kept.append(chunk_id)
        held += n
    return kept, min(held, limits.labels)


def _chunk_sizes(session: Session, device_id: str) -> list[tuple[int, int, int]]:
    """The device's chunks (id, n, d), newest first, without their data."""
    query = (
        select(HistoryChunk.id, HistoryChunk.n, HistoryChunk.d)
        .where(HistoryChunk.device_id == device_id)
        .order_by(HistoryChunk.id.desc())
    )
    return [(int(i), int(n), int(d)) for i, n, d in session.execute(query).all()]


def pack(X: FloatArray, y: FloatArray) -> bytes:
    """X (row-major) then y as little-endian float64: what the edge learned, bit for bit."""
    return np.ascontiguousarray(X, dtype=_F64).tobytes() + np.ascontiguousarray(y, dtype=_F64).tobytes()


def unpack(data: bytes, n: int, d: int) -> tuple[FloatArray, FloatArray]:
    """Read-only views of a chunk's bytes (the history's arrays are concatenated copies of them)."""
    values = np.frombuffer(data, dtype=_F64)
    return values[: n * d].reshape(n, d), values[n * d :]


def store_batch(
    session: Session,
    device_id: str,
    batch_id: str,
    X: FloatArray,
    y: FloatArray,
    bytes_in: int,
    limits: HistoryLimits,
    fleet: tuple[FleetHistoryBytes, int | None] | None = None,
) -> tuple[bool, int]:
    """Append a batch (the caller commits): (replayed, labels the history holds now). A batch id seen
    before is not stored again; ``bytes_in`` goes to the device's counters; chunks older than the
    newest ``limits`` hold are deleted. :class:`HistoryRefusedError` for a batch larger than a device's
    byte limit (413 ``history_too_large``), or one that would grow the fleet's history beyond ``fleet``'s
    limit (429 ``history_fleet_full``: a device that replaces its own oldest labels is never refused)."""
    earlier = session.scalar(
        select(HistoryChunk.id).where(HistoryChunk.device_id == device_id, HistoryChunk.batch_id == batch_id)
    )
    if earlier is not None:
        return True, _prune(session, device_id, limits)
    n, d = X.shape
    size = chunk_bytes(n, d)
    if size > limits.bytes:
        detail = f"a batch of {size} bytes is above the history's limit of {limits.bytes} bytes per device"
        raise HistoryRefusedError(413, "history_too_large", detail)
    rows = _chunk_sizes(session, device_id)
    keep = set(_kept([(0, n, d), *rows], limits)[0])
    growth = size - sum(chunk_bytes(m, w) for i, m, w in rows if i not in keep)
    counter, cap = fleet if fleet is not None else (None, None)
    if counter is not None and cap is not None and growth > 0 and counter.total(session) + growth > cap:
        detail = f"the fleet's labeled history is at its limit of {cap} bytes"
        raise HistoryRefusedError(429, "history_fleet_full", detail)
    session.add(HistoryChunk(device_id=device_id, batch_id=batch_id, n=n, d=d, data=pack(X, y)))
    session.flush()
    count_bytes_in(session, device_id, bytes_in)
    held = _prune(session, device_id, limits)
    if counter is not None:
        counter.add(growth)
    return False, held


def count_bytes_in(session: Session, device_id: str, bytes_in: int) -> None:
    """Add forwarded bytes to the device's ``bytes_in`` (the counters windows are counted in)."""
    row = {
        "device_id": device_id,
        "recomputes": 0,
        "bytes_in": bytes_in,
        "bytes_out": 0,
        "train_ms_total": 0.0,
        "heartbeats": 0,
        "last_seen": utcnow(),
    }
    upsert(session, DeviceCounter, [row], add=("bytes_in",))


def _prune(session: Session, device_id: str, limits: HistoryLimits) -> int:
    """Delete the chunks no longer needed for the newest ``limits``; the labels kept."""
    rows = _chunk_sizes(session, device_id)
    kept, held = _kept(rows, limits)
    keep = set(kept)
    stale = [chunk_id for chunk_id, _n, _d in rows if chunk_id not in keep]
    if stale:
        session.execute(delete(HistoryChunk).where(HistoryChunk.id.in_(stale)))
    return held


def held_labels(session: Session, device_id: str, d: int, limits: HistoryLimits) -> int:
    """The labels :func:`load_history` would load, read without their data (what a re-tuning
    recompute is priced on)."""
    return _kept(_chunk_sizes(session, device_id), limits, d)[1]


def load_history(
    session: Session, device_id: str, d: int, limits: HistoryLimits
) -> tuple[FloatArray, FloatArray]:
    """The newest labels of width ``d`` within ``limits``, oldest first (older chunks of another width,
    from before the device re-warmed, end the history). Only the kept chunks' data is read."""
    kept, _ = _kept(_chunk_sizes(session, device_id), limits, d)
    if not kept:
        return np.zeros((0, d)), np.zeros(0)
    chunks = session.execute(
        select(HistoryChunk.n, HistoryChunk.data).where(HistoryChunk.id.in_(kept)).order_by(HistoryChunk.id)
    ).all()
    parts = [unpack(data, n, d) for n, data in chunks]
    X = np.concatenate([p[0] for p in parts])[-limits.labels :]
    y = np.concatenate([p[1] for p in parts])[-limits.labels :]
    return X, y


@dataclass(frozen=True)
class HistorySource:
    """Where a re-tuning job reads its device's history when it runs: the registry's URL and timeouts
    (picklable, for a pool process, which opens an engine of its own once), or, for a pool of threads,
    the service's own sessions."""

    device_id: str
    limits: HistoryLimits
    database_url: str = ""
    timeouts_s: tuple[float, float] = (5.0, 15.0)
    sessions: sessionmaker[Session] | None = None

    def load(self, d: int) -> tuple[FloatArray, FloatArray]:
        sessions = self.sessions or make_sessionmaker(_engine(self.database_url, *self.timeouts_s))
        with sessions() as session:
            return load_history(session, self.device_id, d, self.limits)


@lru_cache(maxsize=4)
def _engine(url: str, connect_timeout_s: float, statement_timeout_s: float) -> Engine:
    """One engine per pool process and registry."""
    return make_engine(url, connect_timeout_s=connect_timeout_s, statement_timeout_s=statement_timeout_s)


def retune_job(source: HistorySource, header: WindowHeader, X: FloatArray, y: FloatArray) -> RetuneOutcome:
    """A re-tuning recompute as a job of the training pool: the device's history is loaded here, when
    the job runs, and the search stops at its next step once the job's client has gone."""
    Xh, yh = source.load(int(X.shape[1]))
    return retune_window(header, X, y, Xh, yh, checkpoint)


@dataclass(frozen=True)
class RetuneOutcome:
    """A re-tuning recompute: the refitted model (as a training outcome) and the edge parameters."""

    outcome: TrainOutcome
    edge: dict[str, Any]


def retune_window(
    header: WindowHeader,
    X: FloatArray,
    y: FloatArray,
    Xh: FloatArray,
    yh: FloatArray,
    stop: Callable[[], None] | None = None,
) -> RetuneOutcome:
    """The evaluator's re-tuning search (:func:`~edgedrift.training.retune.retune_on_history`) over the
    device's history, with the batch model the header asks for; runs in the training pool. ``stop`` is
    the search's checkpoint (it raises to cancel)."""
    assert header.retune is not None
    Xh, yh = fitting_history(header, Xh, yh)
    start = perf_counter()
    plain = header.model_copy(update={"retune": None})
    fitted: list[tuple[BatchModel, TrainOutcome]] = []

    def trainer(Xw: FloatArray, yw: FloatArray) -> BatchModel:
        outcome = train_window(plain, Xw, yw)
        model = model_from_document(outcome.document)
        fitted.append((model, outcome))
        return model

    loss = "logistic" if header.task == "classification" else "squared"
    model, tune = retune_on_history(
        Xh, yh, X, y, trainer, header.retune.learner, loss, header.task,
        window_labels=header.retune.window_labels, current=header.retune.current, checkpoint=stop,
    )  # fmt: skip
    final = next(outcome for m, outcome in fitted if m is model)
    edge = tune.as_document()
    if not math.isfinite(tune.score):
        edge["score"] = None  # JSON has no NaN
    train_ms = (perf_counter() - start) * 1000.0
    return RetuneOutcome(
        TrainOutcome(final.document, final.kind, None, None, train_ms, final.C, final.note), edge
    )


def fitting_history(header: WindowHeader, Xh: FloatArray, yh: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The newest labels of the history that fit the request's task (±1 for a classifier: the search
    trains the header's learner on them), oldest first. Uploads of another task are refused, but a
    registry may hold them from before: one such chunk used to fail every re-tune of the device."""
    if header.task != "classification":
        return Xh, yh
    misfits = np.flatnonzero(np.abs(yh) != 1.0)
    if misfits.size == 0:
        return Xh, yh
    keep = slice(int(misfits[-1]) + 1, None)
    return Xh[keep], yh[keep]
