"""RebalanceStream and RebalanceStream+ (Bernardo, Della Valle, Bifet, ICDMW 2020) as an edge monitor.

Algorithm 1 per labeled sample, as the reference code does it: ADWIN(δ) watches
the current model's 0/1 error, a second ADWIN(10δ) stands in for the reference ADWIN's warning level
(river's ADWIN has none, §5); ``batch`` holds the labeled samples since the last change and the
*reset batch* the samples since the first warning (a suffix of ``batch``, so only its start is kept).
The current model's prequential 2×2 confusion matrix since its last swap gives κ_L.

On a change (``drift_detected``) the edge loop asks for :meth:`RebalanceMonitor.training_batch` and the
cloud scores the four candidates batch / SMOTE(batch) / reset batch / SMOTE(reset batch) (Algorithms
2-4, ``rebalance="select"`` with ``reset_rows``); :meth:`RebalanceMonitor.accept` keeps the current
model unless the best candidate's kappa beats κ_L (line 27: κ_L comes first, ties keep it). After every
change batch, reset batch and warning start over (lines 30-31), and so do both detectors (river's
ADWIN empties itself after a detection anyway; the reference's MOA ADWIN keeps its shrunken window).

κ_L after a swap: the reference copies the winning candidate's matrix (line 29); the cloud returns each
candidate's blocked test-then-train counts in ``training.confusion`` and the new model's matrix starts
from them (from zero when they are absent). A kept model keeps its matrix.

Modes: ``"rs"`` is RebalanceStream; ``"rs+"`` RebalanceStream+, which also keeps the BASE model (the
plain-batch model the cloud returns as ``training.base``), tracks the prequential kappa of BASE and of
the current model since the last change, and predicts with BASE while it scores better (after
``min_switch`` samples); ``"base"`` is the paper's comparison BASE (Algorithm 5) for a batch learner:
the same ADWIN changes, a plain retrain on the batch, always installed.

Memory is bounded: the batch lives in preallocated ring buffers of ``max_batch`` rows, and a batch that
reaches the cap forces a recompute as if a change happened (MOA's ``-g``; ``stats["reason"]`` says
``"max_batch"``).

Classes: labels ±1 (binary), or with ``n_classes`` = C ≥ 3 the codes 0..C−1. The cloud's SMOTE
(imbalanced-learn) upsamples every minority class to the majority count and scores candidates by C-class
kappa; the matrices here are C×C (:class:`~edgedrift.metrics.MulticlassConfusion`). The cloud returns
confusion counts for binary labels only, so after a multi-class swap κ_L's matrix starts from zero.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from edgedrift.labels import is_multiclass
from edgedrift.metrics import ConfusionMatrix, MulticlassConfusion
from edgedrift.models.document import BatchModel, model_from_document
from edgedrift.models.losses import FloatArray
from edgedrift.monitors.base import Evictions, Monitor
from edgedrift.monitors.hooks import SelectionHook
from edgedrift.monitors.replayable import ReplayableDetector

Mode = Literal["rs", "rs+", "base"]
MODES: tuple[Mode, ...] = ("rs", "rs+", "base")
#: The reference ADWIN's warning level is the same cut test with 10δ (paper, Section II).
WARNING_FACTOR = 10.0


Matrix = ConfusionMatrix | MulticlassConfusion


def _kappa(cm: Matrix) -> float:
    """κ of ``cm``; −1 (the reference's score of a candidate that does not exist) while it is empty."""
    return cm.kappa if cm.n else -1.0


def _matrix(counts: Any) -> ConfusionMatrix:
    """A confusion matrix from a ``training.confusion`` entry (TP, FP, FN, TN); empty if malformed."""
    cm = ConfusionMatrix()
    if isinstance(counts, list | tuple) and len(counts) == 4 and all(isinstance(c, int) for c in counts):
        cm.tp, cm.fp, cm.fn, cm.tn = (max(int(c), 0) for c in counts)
    return cm


class RebalanceMonitor(Monitor, SelectionHook):
    """Algorithm 1 (RebalanceStream), RebalanceStream+ or BASE on the edge, with a cloud batch learner.

    Parameters
    ----------
    delta
        ADWIN's δ for a change; the warning detector uses 10δ (at most 0.5).
    mode
        ``"rs"`` (RebalanceStream), ``"rs+"`` (RebalanceStream+) or ``"base"`` (the paper's BASE).
    max_batch
        The most samples the batch keeps; a full batch forces a recompute.
    min_switch
        RS+: samples since the last change before BASE may take over prediction.
    n_classes
        2 for labels ±1, or C ≥ 3 for the codes 0..C−1.

    Examples
    --------
    The concept rotates at sample 1000; on the change the monitor hands the loop its own batch:

    >>> import numpy as np
    >>> from edgedrift.training.linear import train_linear
    >>> from edgedrift.window import CountWindow
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(3000, 2))
    >>> y = np.where(np.arange(3000) < 1000, np.sign(X[:, 0] + X[:, 1]), np.sign(X[:, 0] - X[:, 1]))
    >>> model = train_linear(X[:200], y[:200], C=10.0)
    >>> window = CountWindow(200, n_features=2)
    >>> monitor = RebalanceMonitor(delta=0.002, mode="rs")
    >>> monitor.reset(model, X[:200], y[:200])
    >>> for i in range(200, 3000):
    ...     error = float(model.predict_one(X[i]) != y[i])
    ...     monitor.update(X[i], y[i], error, window, window.push(X[i], y[i]))
    ...     if monitor.drift_detected:
    ...         break
    >>> X_batch, y_batch, reset_rows = monitor.training_batch()
    >>> i, monitor.stats["reason"], len(y_batch), reset_rows
    (1031, 'change', 832, 0)
    >>> monitor.accept(train_linear(X_batch, y_batch, C=10.0))  # no selection record: installed
    True
    """

    def __init__(
        self,
        delta: float = 0.002,
        mode: Mode = "rs",
        max_batch: int = 50_000,
        min_switch: int = 100,
        n_classes: int = 2,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {delta}")
        if max_batch < 2:
            raise ValueError(f"max_batch must be >= 2, got {max_batch}")
        if n_classes < 2:
            raise ValueError(f"n_classes must be >= 2, got {n_classes}")
        self.n_classes = n_classes
        self.multiclass = is_multiclass(n_classes)
        self.delta = delta
        self.mode = mode
        self.max_batch = max_batch
        self.min_switch = min_switch
        self.name = {"rs": "rebalance-stream", "rs+": "rebalance-stream-plus", "base": "rebalance-base"}[mode]
        self.warning_delta = min(WARNING_FACTOR * delta, 0.5)
        self._change = ReplayableDetector("ADWIN", delta=self.delta)
        self._warning = ReplayableDetector("ADWIN", delta=self.warning_delta)
        # Ring buffers: sample number s (counted since construction) lives in row s % max_batch.
        self._X: FloatArray | None = None
        self._y: FloatArray = np.zeros(self.max_batch)
        self._seen = 0  # labeled samples so far
        self._count = 0  # samples in the batch: numbers seen-count … seen-1
        self._reset_from: int | None = None  # number of the first reset-batch sample
        self._taken = 0  # _seen when the last training batch was handed out
        self.reason: str | None = None
        self._model: BatchModel | None = None
        self._cm_model = self._new_matrix()  # κ_L: the current model since its last swap
        self._cm_current = self._new_matrix()  # RS+: the current model since the last change
        self._cm_base = self._new_matrix()  # RS+: BASE since the last change
        self._base: BatchModel | None = None
        self._next_base: BatchModel | None = None
        self._swap_counts: Matrix | None = None
        self.n_swaps = 0
        self.n_kept = 0
        self.n_forced = 0
        self.last_chosen: str | None = None
        self.last_kappa_l: float | None = None

    # --- Monitor interface ---------------------------------------------------------------------------

    def reset(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        """A model is in place after a recompute (or at start): clear batch, reset batch and warning.

        A kept model (the one already monitored) keeps κ_L's matrix; a new one starts from the winning
        candidate's counts (Algorithm 1, line 29) or from zero.
        """
        if model.task != "classification":
            raise ValueError("RebalanceMonitor needs a classification model")
        if model is not self._model:
            self._cm_model = self._swap_counts if self._swap_counts is not None else self._new_matrix()
        self._swap_counts = None
        self._model = model
        self._base = self._next_base if self.mode == "rs+" else None
        self._next_base = None
        self._cm_current.reset()
        self._cm_base.reset()
        # Samples that arrived after the batch was handed out (an asynchronous recompute) open the next.
        self._count = min(self._count, self._seen - self._taken)
        self._taken = self._seen
        self._reset_from = None
        self._change = ReplayableDetector("ADWIN", delta=self.delta)
        self._warning = ReplayableDetector("ADWIN", delta=self.warning_delta)
        self.warning_detected = False
        self.drift_detected = False
        self.reason = None

    def update(self, x: FloatArray, y: float, error: float, window: Evictions, n_evicted: int) -> None:
        """Algorithm 1, lines 7-16: score the sample, feed both ADWINs, append it to the batch.

        ``error`` is the loop's predictor's 0/1 error; RS+ may predict with BASE, so there the current
        model's own prediction is recomputed (ADWIN and κ_L watch the current model, as in RS). With C
        classes the error does not name the predicted class, so κ_L's matrix gets the model's prediction.
        """
        if self.mode == "rs+" or self.multiclass:
            assert self._model is not None, "reset() with the initial model first"
            y_cur = self._model.predict_one(x)
            err = float(y_cur != y)
            self._cm_current.update(y, y_cur)
            if self._base is not None and self.mode == "rs+":
                self._cm_base.update(y, self._base.predict_one(x))
        else:
            err = float(error != 0.0)
            y_cur = y if err == 0.0 else -y
        self._cm_model.update(y, y_cur)
        self._append(x, y)
        if self.drift_detected:  # a recompute is due but not done yet: only collect
            return
        self._warning.update(err)
        self._change.update(err)
        if self._change.drift_detected:
            self._fire("change")
        elif self._warning.drift_detected and not self.warning_detected:
            # The first warning opens the reset batch with the current sample (reference code).
            self.warning_detected = True
            self._reset_from = self._seen - 1
        elif self._count >= self.max_batch:
            self.n_forced += 1
            self._fire("max_batch")

    def training_batch(self) -> tuple[FloatArray, FloatArray, int | None] | None:
        """The batch since the last change and how many of its last rows are the reset batch.

        ``reset_rows`` is 0 when no warning preceded the change, and None in BASE mode (a plain retrain).
        """
        X, y = self.batch()
        self._taken = self._seen
        return X, y, None if self.mode == "base" else self.reset_rows

    def accept(self, model: BatchModel) -> bool:
        """Algorithm 1, line 27: install the selection only if its kappa beats κ_L (ties keep the model).

        Remembers the selection's BASE model (RS+) and the winner's confusion counts for :meth:`reset`.
        A model without a selection record (a plain trainer, or BASE mode) is always installed.
        """
        self.last_kappa_l = _kappa(self._cm_model)
        training = model.meta.get("training")
        if not isinstance(training, dict):
            return self._accepted(None)
        if self.mode == "rs+" and isinstance(training.get("base"), dict):
            self._next_base = model_from_document(training["base"])
        chosen, scores = training.get("chosen"), training.get("scores")
        self.last_chosen = chosen if isinstance(chosen, str) else None
        if self.mode == "base" or not isinstance(scores, dict) or chosen not in scores:
            return self._accepted(None)
        if float(scores[chosen]) > self.last_kappa_l:
            confusion = training.get("confusion")
            if self.multiclass or not isinstance(confusion, dict):
                return self._accepted(None)
            return self._accepted(_matrix(confusion.get(chosen)))
        self.n_kept += 1
        return False

    def prediction_model(self) -> BatchModel | None:
        """RS+: BASE while its kappa since the last change beats the current model's (after
        ``min_switch`` samples); None (the loop's model) otherwise."""
        if (
            self._base is not None
            and self._cm_base.n >= self.min_switch
            and self._cm_base.kappa > self._cm_current.kappa
        ):
            return self._base
        return None

    @property
    def stats(self) -> dict[str, Any]:
        kappa_l = _kappa(self._cm_model)
        return {
            **super().stats,
            "mode": self.mode,
            "reason": self.reason,
            "batch": self._count,
            "reset_rows": self.reset_rows,
            "kappa_L": round(kappa_l, 6),
            "swaps": self.n_swaps,
            "kept": self.n_kept,
            "forced": self.n_forced,
            "using_base": self.prediction_model() is not None,
        }

    # --- batch bookkeeping ---------------------------------------------------------------------------

    @property
    def batch_size(self) -> int:
        """Samples in the batch (labeled samples since the last change, at most ``max_batch``)."""
        return self._count

    @property
    def reset_rows(self) -> int:
        """Samples in the reset batch: the last ones of the batch, since the first warning (0 if none)."""
        if self._reset_from is None:
            return 0
        return min(self._seen - self._reset_from, self._count)

    @property
    def base_model(self) -> BatchModel | None:
        """RS+: the BASE model (plain batch) of the last selection, accepted or not; None otherwise."""
        return self._base

    @property
    def kappa_l(self) -> float:
        """κ_L: the current model's prequential kappa since its last swap (−1 while empty)."""
        return _kappa(self._cm_model)

    def batch(self) -> tuple[FloatArray, FloatArray]:
        """Copies of the batch rows, oldest first."""
        if self._X is None or self._count == 0:
            d = 0 if self._X is None else self._X.shape[1]
            return np.empty((0, d)), np.empty(0)
        rows = np.arange(self._seen - self._count, self._seen) % self.max_batch
        return self._X[rows], self._y[rows]

    def _append(self, x: FloatArray, y: float) -> None:
        if self._X is None:
            self._X = np.zeros((self.max_batch, np.shape(x)[0]))
        row = self._seen % self.max_batch
        self._X[row] = x
        self._y[row] = y
        self._seen += 1
        self._count = min(self._count + 1, self.max_batch)

    def _new_matrix(self) -> Matrix:
        return MulticlassConfusion(self.n_classes) if self.multiclass else ConfusionMatrix()

    def _fire(self, reason: str) -> None:
        self.drift_detected = True
        self.reason = reason
        self.n_detections += 1

    def _accepted(self, counts: Matrix | None) -> bool:
        self._swap_counts = counts
        self.n_swaps += 1
        return True
