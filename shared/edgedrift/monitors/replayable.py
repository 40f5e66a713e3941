"""river drift detectors that can be checkpointed: a wrapper that records what the detector was fed.

river 0.26 keeps ADWIN's window in a Rust object that can be neither pickled nor inspected, so a
snapshot cannot copy a detector's state. :class:`ReplayableDetector` builds a river detector, forwards
``update(x)``, ``drift_detected`` and ``warning_detected``, and records the detector's inputs. Its
snapshot (:mod:`edgedrift.state`) keeps the detector's class name, its constructor parameters (river's
``_get_params()``) and the inputs; restoring looks the class up by name among the drift detectors of
``river.drift`` and ``river.drift.binary`` (nothing else can be named), rebuilds it with those parameters
and replays the inputs, so the restored detector's state, ADWIN's buckets included, is the same.

The inputs live in a growable numpy buffer: uint8 while they are all 0/1 (the error stream of a
classifier), float64 from the first other value. ADWIN, DDM and EDDM start over on the first update
after a drift, so for them the buffer is cleared then, and holds the inputs since the detector last
started. A non-finite input is skipped and counted (``n_skipped``): it would poison the detector's
running statistics for good.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from edgedrift.models.losses import FloatArray
from edgedrift.state import StateError

__all__ = ["ReplayableDetector", "detector_classes"]

#: Detectors whose update() resets them when the previous update detected a drift (checked in tests).
_RESETS_ON_DRIFT = frozenset({"ADWIN", "DDM", "EDDM"})
_PARAM_TYPES = (bool, int, float, str, type(None))
_INITIAL_CAPACITY = 64


@lru_cache(maxsize=1)
def detector_classes() -> dict[str, type]:
    """The river drift detector classes of ``river.drift`` and ``river.drift.binary``, by class name:
    the only classes a snapshot can make a :class:`ReplayableDetector` build."""
    from river import base, drift
    from river.drift import binary

    return {
        name: obj
        for module in (drift, binary)
        for name, obj in vars(module).items()
        if isinstance(obj, type) and issubclass(obj, base.DriftDetector | base.BinaryDriftDetector)
    }


def _check_params(kind: str, params: object) -> dict[str, Any]:
    if not isinstance(params, dict) or not all(
        isinstance(k, str) and type(v) in _PARAM_TYPES for k, v in params.items()
    ):
        raise StateError(f"{kind}: constructor parameters must be a dict of scalars, got {params!r}")
    return params


class ReplayableDetector:
    """A river drift detector (by class and parameters) that records its inputs so it can be restored.

    ``ReplayableDetector(drift.ADWIN, delta=0.01)`` or ``ReplayableDetector("ADWIN", delta=0.01)``.
    """

    _state_transient: ClassVar[tuple[str, ...]] = ("_det",)

    def __init__(self, detector: type | str, **params: Any) -> None:
        kind = detector if isinstance(detector, str) else detector.__name__
        cls = detector_classes().get(kind)
        if cls is None or (not isinstance(detector, str) and detector is not cls):
            raise TypeError(f"{detector!r} is not a drift detector of river.drift or river.drift.binary")
        det = cls(**params)
        self.kind = kind
        self.params = _check_params(kind, dict(det._get_params()))
        self._det: Any = det
        self._resets = kind in _RESETS_ON_DRIFT
        self._buf: np.ndarray = np.zeros(_INITIAL_CAPACITY, dtype=np.uint8)
        self._binary = True
        self._n = 0
        self.n_skipped = 0

    @property
    def drift_detected(self) -> bool:
        return bool(self._det.drift_detected)

    @property
    def warning_detected(self) -> bool:
        """The detector's warning flag (False for detectors without a warning level, e.g. ADWIN)."""
        return bool(getattr(self._det, "warning_detected", False))

    @property
    def detector(self) -> Any:
        """The wrapped river detector (read it; feed it only through :meth:`update`)."""
        return self._det

    @property
    def n_inputs(self) -> int:
        """Inputs recorded: those a restore replays."""
        return self._n

    def inputs(self) -> FloatArray:
        """A copy of the recorded inputs, oldest first."""
        return self._buf[: self._n].astype(np.float64)

    def update(self, x: float) -> None:
        """Feed one value to the detector (a non-finite one is skipped and counted)."""
        if not -math.inf < x < math.inf:
            self.n_skipped += 1
            return
        det = self._det
        if self._resets and det.drift_detected:
            self._n = 0  # this update starts the detector over: the earlier inputs no longer matter
        det.update(x)
        n, buf = self._n, self._buf
        if n == len(buf) or (self._binary and x != 0.0 and x != 1.0):
            buf = self._grow(x)
        buf[n] = x
        self._n = n + 1

    def _grow(self, x: float) -> np.ndarray:
        """Double the buffer when full; switch it to float64 at the first input other than 0/1."""
        n, buf = self._n, self._buf
        if self._binary and x != 0.0 and x != 1.0:
            self._binary = False
            buf = buf.astype(np.float64)
        if n == len(buf):
            grown = np.zeros(2 * n, dtype=buf.dtype)
            grown[:n] = buf
            buf = grown
        self._buf = buf
        return buf

    def _state_restored(self) -> None:
        """After :func:`edgedrift.state.loads`: rebuild the detector and replay the recorded inputs."""
        kind = self.kind
        cls = detector_classes().get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise StateError(f"{kind!r} is not a drift detector of river.drift or river.drift.binary")
        params = _check_params(kind, self.params)
        buf, n = self._buf, self._n
        if not (
            isinstance(buf, np.ndarray)
            and buf.ndim == 1
            and buf.dtype in (np.uint8, np.float64)
            and len(buf) > 0
            and type(n) is int
            and 0 <= n <= len(buf)
        ):
            raise StateError(f"{kind}: the recorded inputs are malformed")
        try:
            det = cls(**params)
        except (TypeError, ValueError) as exc:
            raise StateError(f"{kind}: cannot rebuild the detector: {exc}") from None
        update = det.update
        for v in buf[:n].tolist():
            update(float(v))
        self._det = det
        self._resets = kind in _RESETS_ON_DRIFT
        self._binary = buf.dtype == np.uint8

    def __getstate__(self) -> dict[str, Any]:
        """Pickle and deepcopy support: everything but the detector, which is rebuilt by replay."""
        return {k: v for k, v in vars(self).items() if k != "_det"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._state_restored()
