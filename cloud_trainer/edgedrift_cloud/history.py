"""Each device's labeled history for re-tuning recomputes (``druid-tune``, ``periodic-tune``).

Agents forward the labels their edge learner learned in batches (``POST /v1/devices/{id}/history``);
each batch is one row of ``history_chunks`` (float64 arrays as bytes), never a row per sample, so a fleet
of 10,000 devices holding 20,000 labels each is about 10,000 x (20,000 / batch) rows. Only the newest
chunks that hold the last ``history_labels`` labels are kept. A re-tuning recompute reads them back
(:func:`load_history`) and runs the evaluator's own search on them (:func:`retune_window`, in the
training pool), so a deployed recompute equals the offline one given the same labels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import numpy as np
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from edgedrift.models.document import BatchModel, model_from_document
from edgedrift.models.losses import FloatArray
from edgedrift.training.retune import retune_on_history
from edgedrift.training.window import TrainOutcome, train_window
from edgedrift.wire import WindowHeader
from edgedrift_cloud.db.rows import upsert
from edgedrift_cloud.db.tables import DeviceCounter, HistoryChunk, utcnow

__all__ = ["RetuneOutcome", "load_history", "retune_window", "store_batch"]

_F64 = np.dtype("<f8")


def pack(X: FloatArray, y: FloatArray) -> bytes:
    """X (row-major) then y as little-endian float64: what the edge learned, bit for bit."""
    return np.ascontiguousarray(X, dtype=_F64).tobytes() + np.ascontiguousarray(y, dtype=_F64).tobytes()


def unpack(data: bytes, n: int, d: int) -> tuple[FloatArray, FloatArray]:
    values = np.frombuffer(data, dtype=_F64).astype(np.float64)
    return values[: n * d].reshape(n, d), values[n * d :]


def store_batch(
    session: Session,
    device_id: str,
    batch_id: str,
    X: FloatArray,
    y: FloatArray,
    bytes_in: int,
    capacity: int,
) -> tuple[bool, int]:
    """Append a batch (the caller commits): (replayed, labels the history holds now). A batch id seen
    before is not stored again; ``bytes_in`` goes to the device's counters; chunks older than the
    newest ``capacity`` labels are deleted."""
    earlier = session.scalar(
        select(HistoryChunk.id).where(HistoryChunk.device_id == device_id, HistoryChunk.batch_id == batch_id)
    )
    if earlier is not None:
        return True, _prune(session, device_id, capacity)
    n, d = X.shape
    session.add(HistoryChunk(device_id=device_id, batch_id=batch_id, n=n, d=d, data=pack(X, y)))
    session.flush()
    count_bytes_in(session, device_id, bytes_in)
    return False, _prune(session, device_id, capacity)


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


def _prune(session: Session, device_id: str, capacity: int) -> int:
    """Delete the chunks no longer needed for the newest ``capacity`` labels; the labels kept."""
    rows = session.execute(
        select(HistoryChunk.id, HistoryChunk.n)
        .where(HistoryChunk.device_id == device_id)
        .order_by(HistoryChunk.id.desc())
    ).all()
    held, stale = 0, []
    for chunk_id, n in rows:
        if held >= capacity:
            stale.append(chunk_id)
        else:
            held += n
    if stale:
        session.execute(delete(HistoryChunk).where(HistoryChunk.id.in_(stale)))
    return min(held, capacity)


def load_history(session: Session, device_id: str, d: int, capacity: int) -> tuple[FloatArray, FloatArray]:
    """The newest ``capacity`` labels of width ``d``, oldest first (older chunks of another width, from
    before the device re-warmed, end the history)."""
    chunks = session.execute(
        select(HistoryChunk.n, HistoryChunk.d, HistoryChunk.data)
        .where(HistoryChunk.device_id == device_id)
        .order_by(HistoryChunk.id.desc())
    ).all()
    parts: list[tuple[FloatArray, FloatArray]] = []
    held = 0
    for n, width, data in chunks:
        if width != d or held >= capacity:
            break
        parts.append(unpack(data, n, width))
        held += n
    if not parts:
        return np.zeros((0, d)), np.zeros(0)
    parts.reverse()
    X = np.concatenate([p[0] for p in parts])[-capacity:]
    y = np.concatenate([p[1] for p in parts])[-capacity:]
    return X, y


@dataclass(frozen=True)
class RetuneOutcome:
    """A re-tuning recompute: the refitted model (as a training outcome) and the edge parameters."""

    outcome: TrainOutcome
    edge: dict[str, Any]


def retune_window(
    header: WindowHeader, X: FloatArray, y: FloatArray, Xh: FloatArray, yh: FloatArray
) -> RetuneOutcome:
    """The evaluator's re-tuning search (:func:`~edgedrift.training.retune.retune_on_history`) over the
    device's history, with the batch model the header asks for; runs in the training pool."""
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
        window_labels=header.retune.window_labels, current=header.retune.current,
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
