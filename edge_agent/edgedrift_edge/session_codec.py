"""The session's checkpoint codec: large buffers as a few arrays, a pending request as plain data, and
the monitor statistics the cloud stores; and the compact form of a join-buffer entry."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from edgedrift.models.losses import FloatArray
from edgedrift.strategies import TrainSpec
from edgedrift.wire import RetuneRequest
from edgedrift_edge.recompute import LabelBatch, RecomputeRequest

_FLOAT64 = struct.Struct("=d")


def pack_join(x: FloatArray, y_hat: float) -> bytes:
    """An unlabeled sample's row and its prediction as one bytes object of d + 1 float64s: about 80 bytes
    for d = 5, where a tuple of an array view and a float holds about 300 (a gateway keeps many)."""
    return np.asarray(x, dtype=np.float64).tobytes() + _FLOAT64.pack(y_hat)


def unpack_join(packed: bytes) -> tuple[FloatArray, float]:
    """The row (a fresh, writable array) and the prediction of :func:`pack_join`."""
    values = np.frombuffer(packed, dtype=np.float64).copy()
    return values[:-1], float(values[-1])


def unpack_joins(entries: list[bytes]) -> tuple[FloatArray | list[FloatArray], FloatArray]:
    """The rows (as :func:`pack_rows` packs them) and the predictions of many :func:`pack_join` entries:
    one matrix in one step when they have one width (a checkpoint of 50,000 entries in milliseconds)."""
    if entries and len({len(e) for e in entries}) == 1:
        values = np.frombuffer(b"".join(entries), dtype=np.float64).reshape(len(entries), -1)
        return values[:, :-1].copy(), values[:, -1].copy()
    pairs = [unpack_join(e) for e in entries]
    return pack_rows([x for x, _ in pairs]), np.fromiter((p for _, p in pairs), np.float64, len(pairs))


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
        }
    )


def scalar_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """Monitor stats the API stores: up to 32 finite scalars with short names (numpy scalars converted)."""
    out: dict[str, Any] = {}
    for key, value in stats.items():
        if len(out) == 32:
            break
        name = "".join(c if c.isalnum() or c in "_.:-" else "_" for c in str(key))[:64] or "_"
        if isinstance(value, bool | np.bool_):
            out[name] = bool(value)
        elif isinstance(value, int | np.integer):
            out[name] = int(value)
        elif isinstance(value, float | np.floating) and math.isfinite(float(value)):
            out[name] = float(value)
        elif isinstance(value, str):
            out[name] = value[:256]
    return out
