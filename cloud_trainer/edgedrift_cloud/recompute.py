"""What a recompute does once it is admitted, wherever it runs: in the API's own pool
(``EDGEDRIFT_CLOUD_TRAINING=inline``) or in a training worker that took it from the queue
(:mod:`edgedrift_cloud.trainer_worker`). The new version from a training's outcome, the store that a
repeated ``request_id`` finds instead of storing twice, and the budget given back when no version came
of an admitted recompute."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from edgedrift.models.losses import FloatArray
from edgedrift.training.window import TrainOutcome
from edgedrift.wire import Encoding, WindowHeader
from edgedrift_cloud import budget, registry
from edgedrift_cloud.db.tables import ModelRecord


class RequestIdReusedError(Exception):
    """A ``request_id`` came back with another window (the API answers 409)."""

    def __init__(self, earlier: ModelRecord) -> None:
        super().__init__(
            f"request_id {earlier.request_id!r} was used for another window (version {earlier.version}); "
            "an idempotency key must not be reused with a different body"
        )


def check_same_request(earlier: ModelRecord, fingerprint: str | None) -> None:
    """:class:`RequestIdReusedError` when a request_id comes back with another body."""
    if (
        earlier.request_sha256 is not None
        and fingerprint is not None
        and earlier.request_sha256 != fingerprint
    ):
        raise RequestIdReusedError(earlier)


def store_once(sessions: sessionmaker[Session], new: registry.NewModel) -> tuple[ModelRecord, bool]:
    """Insert in one transaction: (the record, False); a concurrent or earlier store of the same
    request_id (a retried request, a job run again after its worker died) returns (that version, True)."""
    with sessions() as session:
        try:
            record = registry.store_model(session, new)
            session.commit()
            return record, False
        except IntegrityError:
            session.rollback()
            if new.request_id is None:
                raise
            earlier = registry.model_by_request_id(session, new.device_id, new.request_id)
            if earlier is None:
                raise
            check_same_request(earlier, new.request_sha256)
            return earlier, True


def refund(sessions: sessionmaker[Session], limits: budget.BudgetLimits, device_id: str, minute: int) -> None:
    """The budget back when an admitted recompute produced no version (it failed, was cancelled, or its
    client left)."""
    if limits.enabled:
        with sessions() as session:
            budget.refund(session, limits, device_id, minute)


def new_model(
    device_id: str,
    header: WindowHeader,
    outcome: TrainOutcome,
    X: FloatArray,
    *,
    size: int,
    encoding: Encoding,
    requested_by: str,
    fingerprint: str,
    edge: dict[str, Any] | None,
) -> registry.NewModel:
    """The registry row of a trained window."""
    return registry.NewModel(
        device_id=device_id,
        document=outcome.document,
        kind=outcome.kind,
        learner=header.learner,
        task=header.task,
        rebalance=header.rebalance,
        chosen=outcome.chosen,
        scores=outcome.scores,
        n=int(X.shape[0]),
        d=int(X.shape[1]),
        train_ms=outcome.train_ms,
        bytes_in=size,
        encoding=encoding,
        reason=header.reason,
        requested_by=requested_by,
        monitor=dict(header.monitor),
        request_id=header.request_id,
        request_sha256=fingerprint,
        edge=edge,
    )


def log_stored(
    log: logging.Logger,
    device_id: str,
    record: ModelRecord,
    header: WindowHeader,
    outcome: TrainOutcome,
    **extra: Any,
) -> None:
    """The one log line of a newly stored recompute (the API's inline path and the training worker)."""
    fields = {"device": device_id, "version": record.version, "learner": header.learner}
    fields |= {"reason": header.reason, "n": record.n, "d": record.d, "train_ms": round(outcome.train_ms, 3)}
    log.info("recompute", extra={**fields, **extra})
