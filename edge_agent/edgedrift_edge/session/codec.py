"""The session's checkpoint codec: rows as one matrix, a pending request as plain data, and the monitor
statistics the cloud stores (the recent samples write their own arrays:
:mod:`~edgedrift_edge.buffers.recent_samples`)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from edgedrift.models.losses import FloatArray
from edgedrift.strategies import TrainSpec
from edgedrift.wire import RetuneRequest
from edgedrift.wire_stats import MAX_STAT_TEXT, MAX_STATS, stat_number
from edgedrift_edge.session.trainer import LabelBatch, RecomputeRequest


def pack_rows(rows: list[FloatArray]) -> FloatArray | list[FloatArray]:
    """Rows of one width as one matrix; rows of several widths (before the width is known) as a list."""
    if not rows:
        return np.zeros((0, 0))
    width = len(rows[0])
    if all(len(r) == width for r in rows):
        return np.array(rows, dtype=np.float64).reshape(len(rows), width)
    return list(rows)


def unpack_rows(packed: FloatArray | list[FloatArray]) -> list[FloatArray]:
    return list(packed) if isinstance(packed, list) else [row.copy() for row in packed]


def request_fields(request: RecomputeRequest) -> dict[str, Any]:
    spec = request.spec
    return {
        "request_id": request.request_id,
        "X": request.X,
        "y": request.y,
        "task": request.task,
        "loss": request.loss,
        "C": request.C,
        "reason": request.reason,
        "spec": [spec.learner, dict(spec.params), spec.rebalance, spec.return_base],
        "stats": dict(request.stats),
        "reset_rows": request.reset_rows,
        "initial": request.initial,
        "retune": None if request.retune is None else request.retune.model_dump(),
        "history": [[b.batch_id, b.X, b.y] for b in request.history],
        "n_classes": request.n_classes,
        "class_names": None if request.class_names is None else list(request.class_names),
    }


def request_from_fields(values: dict[str, Any]) -> RecomputeRequest:
    learner, params, rebalance, return_base = values["spec"]
    spec = TrainSpec(learner, dict(params), rebalance, bool(return_base))
    retune = values.get("retune")
    history = tuple(LabelBatch(str(i), X, y) for i, X, y in values.get("history", []))
    return RecomputeRequest(
        **{
            **values,
            "spec": spec,
            "retune": None if retune is None else RetuneRequest.model_validate(retune),
            "history": history,
            "class_names": None if values.get("class_names") is None else tuple(values["class_names"]),
        }
    )


def scalar_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """Monitor stats the API stores (:data:`edgedrift.wire.StatValue`): up to 32 scalars with short names
    (numpy scalars converted), numbers within the wire's bounds, text short and without control
    characters."""
    out: dict[str, Any] = {}
    for key, value in stats.items():
        if len(out) == MAX_STATS:
            break
        name = "".join(c if c.isalnum() or c in "_.:-" else "_" for c in str(key))[:64] or "_"
        if isinstance(value, bool | np.bool_):
            out[name] = bool(value)
        elif isinstance(value, int | np.integer) and abs(int(value)) < 2**63:
            out[name] = int(value)
        elif isinstance(value, int | float | np.number) and stat_number(float(value)) is not None:
            out[name] = float(value)
        elif isinstance(value, str):
            out[name] = _CONTROL.sub("", value)[:MAX_STAT_TEXT]
    return out


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
