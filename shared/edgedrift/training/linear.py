"""Batch training of the linear models of eq. (1), and C tuning on the first window.

This is the one training entry point shared by the cloud service and the offline evaluator, so that a
recompute in a replay and a recompute in a deployment produce the same model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from edgedrift.labels import check_codes, is_multiclass
from edgedrift.models.linear import LinearModel, Standardizer
from edgedrift.models.losses import FloatArray, get_loss
from edgedrift.training.liblinear_fast import solve, solve_one_vs_rest

Solver = Literal["liblinear", "closed_form"]

#: C grid for tuning: 10⁻² … 10⁶. On ELEC2 the best C is 10²–10⁴ and C = 1 loses 10+ points.
DEFAULT_C_GRID: tuple[float, ...] = tuple(10.0**k for k in range(-2, 7))
#: LIBLINEAR stopping tolerance. Tighter than LIBLINEAR's default (0.01) so that β₁ is close to the
#: optimum; the monitors also correct for the remaining optimality residual (see DruidMonitor).
DEFAULT_EPS = 1e-4


@dataclass(frozen=True)
class LinearTrainer:
    """Trains a :class:`LinearModel` on a window: ``trainer(X, y) -> model``.

    ``n_classes`` (C ≥ 3) trains a one-vs-rest model of the codes 0..C−1 (a window may miss a class, so
    the trainer is told C rather than counting the labels); None or 2: labels ±1.
    """

    loss: str = "logistic"
    C: float = 1.0
    bias: float = 1.0
    standardize: bool = False
    eps: float = DEFAULT_EPS
    solver: Solver = "liblinear"
    n_classes: int | None = None

    def __call__(self, X: FloatArray, y: FloatArray) -> LinearModel:
        return train_linear(
            X,
            y,
            loss=self.loss,
            C=self.C,
            bias=self.bias,
            standardize=self.standardize,
            eps=self.eps,
            solver=self.solver,
            n_classes=self.n_classes,
        )

    def with_C(self, C: float) -> LinearTrainer:
        return LinearTrainer(self.loss, C, self.bias, self.standardize, self.eps, self.solver, self.n_classes)


def train_linear(
    X: FloatArray,
    y: FloatArray,
    loss: str = "logistic",
    C: float = 1.0,
    *,
    bias: float = 1.0,
    standardize: bool = False,
    eps: float = DEFAULT_EPS,
    solver: Solver = "liblinear",
    n_classes: int | None = None,
) -> LinearModel:
    """Minimise C Σ ℓ(yᵢ, x̃ᵢᵀβ) + ½‖β‖² over the window (X, y); see :mod:`edgedrift.models.linear`.

    ``solver="closed_form"`` (squared loss only) solves (2C X̃ᵀX̃ + I) β = 2C X̃ᵀy exactly. With
    ``n_classes`` ≥ 3 the labels are the codes 0..C−1 and the model is one-vs-rest (β is (d+1, C), see
    :func:`~edgedrift.training.liblinear_fast.solve_one_vs_rest`); the classification losses only.
    """
    loss_fn = get_loss(loss)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"X must be (n, d) and y (n,), got {X.shape} and {y.shape}")
    if X.shape[0] == 0:
        raise ValueError("cannot train on an empty window")
    multi = n_classes is not None and is_multiclass(n_classes)
    if multi and loss_fn.task != "classification":
        raise ValueError(f"n_classes={n_classes} needs a classification loss, not {loss!r}")
    if multi:
        assert n_classes is not None
        check_codes(y, n_classes, "train_linear")
    elif loss_fn.task == "classification" and not np.all(np.abs(y) == 1.0):
        raise ValueError("classification labels must be -1 or +1 (codes 0..C-1 need n_classes=C)")
    scaler = Standardizer.fit(X) if standardize else None
    Z = X if scaler is None else (X - scaler.mean) / scaler.scale
    if multi:
        assert n_classes is not None
        if solver != "liblinear":
            raise ValueError("a multi-class model trains with LIBLINEAR")
        beta = solve_one_vs_rest(Z, y, n_classes, loss_fn.liblinear_solver, C, bias=bias, eps=eps)
    elif solver == "closed_form":
        if loss_fn.name != "squared":
            raise ValueError("the closed form exists for the squared loss only")
        Za = np.hstack([Z, np.full((Z.shape[0], 1), bias)])
        A = 2.0 * C * (Za.T @ Za)
        A[np.diag_indices_from(A)] += 1.0
        beta = np.linalg.solve(A, 2.0 * C * (Za.T @ y))
    else:
        beta = solve(Z, y, loss_fn.liblinear_solver, C, bias=bias, eps=eps)
    return LinearModel(loss=loss_fn, beta=beta, C=C, bias=bias, scaler=scaler, n_train=int(X.shape[0]))


@dataclass(frozen=True)
class TuneResult:
    """Outcome of :func:`tune_C`: the chosen C and the validation score of every grid value."""

    best_C: float
    scores: dict[float, float] = field(default_factory=dict)


def tune_C(
    X: FloatArray,
    y: FloatArray,
    trainer: LinearTrainer,
    grid: Sequence[float] = DEFAULT_C_GRID,
    folds: int = 5,
) -> TuneResult:
    """Pick C by blocked k-fold cross-validation on one window (the paper tunes on the first window).

    Folds are contiguous blocks, so a stream's autocorrelation leaks less than with shuffled folds.
    Score: accuracy for classification, −MSE for regression. Ties go to the smaller C (more regularised).
    """
    n = X.shape[0]
    folds = max(2, min(folds, n // 2))
    edges = np.linspace(0, n, folds + 1).astype(int)
    task = get_loss(trainer.loss).task
    scores: dict[float, float] = {}
    for C in grid:
        total = 0.0
        for k in range(folds):
            test = np.zeros(n, dtype=bool)
            test[edges[k] : edges[k + 1]] = True
            y_train = y[~test]
            if task == "classification" and np.unique(y_train).size < 2:
                pred = np.full(int(test.sum()), y_train[0])
            else:
                pred = trainer.with_C(C)(X[~test], y_train).predict(X[test])
            if task == "classification":
                total += float(np.sum(pred == y[test]))
            else:
                total -= float(np.sum((pred - y[test]) ** 2))
        scores[C] = total / n
    best = max(grid, key=lambda c: (scores[c], -c))
    return TuneResult(best_C=float(best), scores=scores)
