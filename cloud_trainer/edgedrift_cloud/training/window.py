"""The one training entry point of the service: a window and its header in, a model document out.

Linear learners train with :class:`LinearTrainer` (LIBLINEAR for every loss, as the offline evaluator
does), shrubs with :func:`train_shrub`. ``C="auto"`` is tuned once, by :func:`tune_C` on the plain
window, and that C serves every rebalancing candidate, so their scores compare the data and not C.

A linear classifier on a one-class window is still trained: LIBLINEAR fits the bias towards the one
class (β is flipped so it scores +1, see :func:`~edgedrift_cloud.training.liblinear_fast.solve`), and
the model predicts that class on the window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from time import perf_counter
from typing import Any

import numpy as np

from edgedrift.models.losses import FloatArray
from edgedrift.models.tree import predict_tree
from edgedrift.wire import LINEAR_LOSS, WindowHeader
from edgedrift_cloud.training.linear import LinearTrainer, tune_C
from edgedrift_cloud.training.rebalance import Fit, Predictor, prequential_kappa, smote
from edgedrift_cloud.training.shrub import train_shrub

TrainDocument = Callable[[FloatArray, FloatArray], dict[str, Any]]


@dataclass(frozen=True)
class TrainOutcome:
    """A trained model document and how it was chosen.

    ``chosen`` names the training data of the model ("none" or "smote"; None without rebalancing),
    ``scores`` holds the prequential kappa of each candidate (``rebalance="select"`` only), ``train_ms``
    the wall time of rebalancing, tuning, selection and the final fit, ``C`` the C actually used by a
    linear learner, and ``note`` why SMOTE did or did not run.
    """

    document: dict[str, Any]
    kind: str
    chosen: str | None
    scores: dict[str, float] | None
    train_ms: float
    C: float | None
    note: str | None


def _learner(header: WindowHeader, X: FloatArray, y: FloatArray) -> tuple[TrainDocument, Fit, float | None]:
    """(train to a document, train to a predictor, C) for the header's learner; tunes C if asked."""
    p = header.params
    if header.learner == "shrub":

        def shrub_document(Xt: FloatArray, yt: FloatArray) -> dict[str, Any]:
            return train_shrub(
                Xt, yt, header.task, max_depth=p.max_depth, min_samples_leaf=p.min_samples_leaf, seed=p.seed
            )

        def shrub_predictor(Xt: FloatArray, yt: FloatArray) -> Predictor:
            return partial(predict_tree, shrub_document(Xt, yt))

        return shrub_document, shrub_predictor, None
    trainer = LinearTrainer(
        loss=LINEAR_LOSS[header.learner],
        C=1.0 if p.C == "auto" else p.C,
        bias=p.bias,
        standardize=p.standardize,
    )
    if p.C == "auto":
        trainer = trainer.with_C(tune_C(X, y, trainer).best_C)

    def linear_document(Xt: FloatArray, yt: FloatArray) -> dict[str, Any]:
        return trainer(Xt, yt).to_document()

    def linear_predictor(Xt: FloatArray, yt: FloatArray) -> Predictor:
        return trainer(Xt, yt).predict

    return linear_document, linear_predictor, trainer.C


def train_window(header: WindowHeader, X: FloatArray, y: FloatArray) -> TrainOutcome:
    """Train the model the header asks for on (X, y); deterministic given ``header.params.seed``."""
    start = perf_counter()
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if header.rebalance != "none" and header.task != "classification":
        raise ValueError("rebalance (SMOTE) applies to classification only")
    to_document, to_predictor, C = _learner(header, X, y)
    chosen: str | None = None
    scores: dict[str, float] | None = None
    note: str | None = None
    data = (X, y)
    if header.rebalance != "none":
        balanced = smote(X, y, header.params.seed)
        note = balanced.note
        candidates = {"none": data}
        if balanced.applied:
            candidates["smote"] = (balanced.X, balanced.y)
        if header.rebalance == "smote":
            chosen = "smote" if balanced.applied else "none"
        else:
            kappas = {name: prequential_kappa(to_predictor, *cand) for name, cand in candidates.items()}
            chosen = max(candidates, key=kappas.__getitem__)  # the first maximum: ties keep "none"
            scores = kappas
        data = candidates[chosen]
    document = to_document(*data)
    train_ms = (perf_counter() - start) * 1000.0
    return TrainOutcome(document, str(document["kind"]), chosen, scores, train_ms, C, note)
