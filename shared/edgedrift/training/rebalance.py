"""SMOTE rebalancing of a window and the prequential kappa used to choose between candidates.

Follows RebalanceStream (Bernardo et al., ICDMW 2020): SMOTE runs only when
the window has at least two classes and every minority class has more than one sample, with
k = min(5, smallest minority count − 1) neighbours; it upsamples every minority class to the majority
count, and the output holds the originals (in their order) followed by the synthetic samples.

A candidate is scored by the Cohen's kappa of blocked test-then-train (Algorithms 2-4, with blocks
instead of single samples for a batch learner). The paper scores a SMOTE candidate on its own augmented
data, whose last rows are all synthetic minority samples; that inflates its kappa, so SMOTE wins almost
every selection even where the stream's prior makes the balanced model worse (``docs/benchmarks.md``,
"RebalanceStream against its paper"). :func:`prequential` with ``prepare`` scores it on the real rows
instead: each block is predicted by the model trained on the SMOTE-balanced prefix before it.

The reference code also skips SMOTE unless the share of *label 0* exceeds 0.1. In its data label 0 is
the majority class (MOA's ImbalancedStream gives the first ratio, 0.6-0.9, to class 0), so that test
never binds there; it is not applied here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from imblearn.over_sampling import SMOTE
from sklearn.metrics import cohen_kappa_score

from edgedrift.metrics import ConfusionMatrix
from edgedrift.models.losses import FloatArray

#: Predicts labels for a batch of rows.
Predictor = Callable[[FloatArray], FloatArray]
#: Trains on (X, y) and returns the trained model's :data:`Predictor`.
Fit = Callable[[FloatArray, FloatArray], Predictor]
#: Turns a training prefix into the rows a candidate trains on (e.g. :func:`smote_prefix`).
Prepare = Callable[[FloatArray, FloatArray], tuple[FloatArray, FloatArray]]

MAX_NEIGHBORS = 5


@dataclass(frozen=True)
class SmoteResult:
    """The (possibly) rebalanced window; ``applied`` is False when SMOTE could not or need not run."""

    X: FloatArray
    y: FloatArray
    applied: bool
    note: str


def smote(X: FloatArray, y: FloatArray, seed: int) -> SmoteResult:
    """Upsample every minority class to the majority count with SMOTE; originals first, then synthetic.

    Never raises for a window SMOTE cannot handle (one class, a minority class with a single sample,
    already balanced): it returns the window unchanged with ``applied=False`` and the reason in ``note``.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"X must be (n, d) and y (n,), got {X.shape} and {y.shape}")
    classes, counts = np.unique(y, return_counts=True)
    if classes.size < 2:
        return SmoteResult(X, y, False, "SMOTE skipped: the window holds fewer than 2 classes")
    majority = int(counts.max())
    minority = counts < majority
    if not minority.any():
        return SmoteResult(X, y, False, "SMOTE skipped: the classes are already balanced")
    smallest = int(counts[minority].min())
    if smallest <= 1:
        return SmoteResult(X, y, False, "SMOTE skipped: a minority class has a single sample")
    k = min(MAX_NEIGHBORS, smallest - 1)
    X_res, y_res = SMOTE(sampling_strategy="auto", k_neighbors=k, random_state=seed).fit_resample(X, y)
    X_out = np.asarray(X_res, dtype=np.float64)
    y_out = np.asarray(y_res, dtype=np.float64)
    n_new = X_out.shape[0] - X.shape[0]
    return SmoteResult(X_out, y_out, True, f"SMOTE k={k}: {n_new} synthetic samples appended")


def smote_prefix(seed: int) -> Prepare:
    """A :data:`Prepare` that SMOTE-balances a prefix (unchanged where :func:`smote` cannot run)."""

    def prepare(X: FloatArray, y: FloatArray) -> tuple[FloatArray, FloatArray]:
        res = smote(X, y, seed)
        return res.X, res.y

    return prepare


def _binary_matrix(y_true: FloatArray, y_pred: FloatArray) -> ConfusionMatrix | None:
    """The 2×2 matrix with the larger label as the positive class; None if more than 2 labels occur."""
    labels = np.unique(np.concatenate([y_true, y_pred]))
    if labels.size > 2:
        return None
    # Kappa does not depend on which class is called positive: map to the ±1 of edgedrift.metrics.
    cm = ConfusionMatrix()
    cm.update_many(np.where(y_true == labels[-1], 1.0, -1.0), np.where(y_pred == labels[-1], 1.0, -1.0))
    return cm


@dataclass(frozen=True)
class Prequential:
    """Outcome of a blocked test-then-train run: kappa and, for binary labels, the confusion counts.

    ``counts`` is (TP, FP, FN, TN) with the larger label as positive (None for more than 2 labels or
    when nothing could be tested); RebalanceStream copies a winning candidate's matrix (Algorithm 1,
    line 29), so the cloud returns it with the selection.
    """

    kappa: float
    counts: tuple[int, int, int, int] | None


def prequential(
    fit: Fit, X: FloatArray, y: FloatArray, blocks: int = 5, prepare: Prepare | None = None
) -> Prequential:
    """Blocked test-then-train over (X, y) in order (the batch form of Algorithms 2-4).

    The data is cut into ``blocks`` contiguous blocks; block b ≥ 1 is predicted by ``fit`` trained on
    blocks 0 … b−1, passed through ``prepare`` first when given (a one-class prefix predicts its
    class), and kappa is taken over all predictions at once. So with ``prepare`` only real rows are
    tested and nothing synthetic is built from a row before that row is predicted. With fewer than 2
    samples nothing can be tested and the score is 0.
    """
    if isinstance(blocks, bool) or int(blocks) != blocks or blocks < 2:
        raise ValueError(f"blocks must be an integer >= 2, got {blocks!r}")
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = y.shape[0]
    blocks = min(int(blocks), n)
    if blocks < 2:
        return Prequential(0.0, None)
    edges = np.linspace(0, n, blocks + 1).astype(int)
    preds: list[FloatArray] = []
    for b in range(1, blocks):
        lo, hi = int(edges[b]), int(edges[b + 1])
        seen = np.unique(y[:lo])
        if seen.size == 1:
            preds.append(np.full(hi - lo, seen[0]))
        else:
            Xt, yt = (X[:lo], y[:lo]) if prepare is None else prepare(X[:lo], y[:lo])
            preds.append(np.asarray(fit(Xt, yt)(X[lo:hi]), dtype=np.float64))
    y_true, y_pred = y[int(edges[1]) :], np.concatenate(preds)
    cm = _binary_matrix(y_true, y_pred)
    if cm is None:
        return Prequential(float(cohen_kappa_score(y_true, y_pred, replace_undefined_by=0.0)), None)
    return Prequential(cm.kappa, cm.counts)


def prequential_kappa(
    fit: Fit, X: FloatArray, y: FloatArray, blocks: int = 5, prepare: Prepare | None = None
) -> float:
    """Kappa of :func:`prequential` (blocked test-then-train over (X, y) in order)."""
    return prequential(fit, X, y, blocks, prepare).kappa
