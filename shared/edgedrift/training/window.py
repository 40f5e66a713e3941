"""The one training entry point of the service: a window and its header in, a model document out.

Linear learners train with :class:`LinearTrainer` (LIBLINEAR for every loss, as the offline evaluator
does), shrubs with :func:`train_shrub`. ``C="auto"`` is tuned once, by :func:`tune_C` on the plain
window, and that C serves every rebalancing candidate, so their scores compare the data and not C.

A linear classifier on a one-class window is still trained: LIBLINEAR fits the bias towards the one
class (β is flipped so it scores +1, see :func:`~edgedrift.training.liblinear_fast.solve`), and
the model predicts that class on the window.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from time import perf_counter
from typing import Any, Literal

import numpy as np

from edgedrift.models.losses import FloatArray
from edgedrift.models.tree import predict_tree
from edgedrift.training.linear import LinearTrainer, tune_C
from edgedrift.training.rebalance import Fit, Predictor, prequential, smote, smote_prefix
from edgedrift.training.shrub import train_shrub
from edgedrift.wire import LINEAR_LOSS, WindowError, WindowHeader

TrainDocument = Callable[[FloatArray, FloatArray], dict[str, Any]]


#: Candidate training sets of ``rebalance="select"``, in RebalanceStream's order (Algorithm 1, line 27:
#: ties keep the earliest).
CANDIDATES: tuple[str, ...] = ("batch", "batch+smote", "reset", "reset+smote")
#: Score of a candidate that cannot be built (SMOTE skipped, reset batch too small), as in the reference.
UNBUILT = -1.0
#: The smallest reset batch that is scored: blocked test-then-train needs a few rows per block.
MIN_RESET_ROWS = 10
#: ``C="auto"`` cross-validates over at least two blocks, each needing a row to train on.
MIN_TUNE_ROWS = 2
#: How ``rebalance="select"`` scores a candidate: ``"real"`` tests only the window's own rows (a SMOTE
#: candidate trains on the balanced prefix before each block), ``"augmented"`` is the paper's literal
#: Algorithms 2-4 (test-then-train over the candidate's own rows, synthetic ones included).
Scoring = Literal["real", "augmented"]
SCORINGS: tuple[Scoring, ...] = ("real", "augmented")


@dataclass(frozen=True)
class TrainOutcome:
    """A trained model document and how it was chosen.

    ``chosen`` names the training data of the model (one of :data:`CANDIDATES`; None without
    rebalancing), ``scores`` holds the prequential kappa of each candidate (``rebalance="select"``
    only; −1 for one that could not be built), ``train_ms`` the wall time of rebalancing, tuning,
    selection and the final fit, ``C`` the C actually used by a linear learner, and ``note`` why SMOTE
    did or did not run. With rebalancing the document also carries this record as ``training``.
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
        n_classes=header.n_classes,
    )
    if p.C == "auto":
        trainer = trainer.with_C(tune_C(X, y, trainer).best_C)

    def linear_document(Xt: FloatArray, yt: FloatArray) -> dict[str, Any]:
        return trainer(Xt, yt).to_document()

    def linear_predictor(Xt: FloatArray, yt: FloatArray) -> Predictor:
        return trainer(Xt, yt).predict

    return linear_document, linear_predictor, trainer.C


Rows = tuple[FloatArray, FloatArray]


def _candidates(header: WindowHeader, X: FloatArray, y: FloatArray) -> tuple[dict[str, Rows | None], str]:
    """RebalanceStream's training sets (None where one cannot be built) and a note on SMOTE.

    ``batch`` is the window, ``reset`` its last ``header.reset_rows`` rows (the samples since the first
    warning; only with ``reset_rows``), and ``+smote`` their SMOTE-balanced versions (Algorithms 2-4).
    """
    seed = header.params.seed
    balanced = smote(X, y, seed)
    sets: dict[str, Rows | None] = {
        "batch": (X, y),
        "batch+smote": (balanced.X, balanced.y) if balanced.applied else None,
    }
    notes = [balanced.note]
    r = header.reset_rows
    if r is not None:
        if r < MIN_RESET_ROWS:
            sets["reset"] = sets["reset+smote"] = None
            notes.append(f"reset batch of {r} rows < {MIN_RESET_ROWS}: not scored")
        else:
            Xr, yr = X[-r:], y[-r:]
            reset_bal = smote(Xr, yr, seed)
            sets["reset"] = (Xr, yr)
            sets["reset+smote"] = (reset_bal.X, reset_bal.y) if reset_bal.applied else None
            notes.append(f"reset: {reset_bal.note}")
    return sets, "; ".join(notes)


def _score(name: str, data: Rows, sets: dict[str, Rows | None], fit: Fit, seed: int, scoring: Scoring) -> Any:
    """The prequential run of candidate ``name``: on its own rows (``"augmented"``) or, for a SMOTE
    candidate under ``"real"``, on the real rows it was built from with SMOTE applied to each prefix."""
    if scoring == "augmented" or not name.endswith("+smote"):
        return prequential(fit, *data)
    real = sets[name.removesuffix("+smote")]
    assert real is not None, "a SMOTE candidate is built from a real one"
    return prequential(fit, *real, prepare=smote_prefix(seed))


def train_window(
    header: WindowHeader, X: FloatArray, y: FloatArray, scoring: Scoring = "real"
) -> TrainOutcome:
    """Train the model the header asks for on (X, y); deterministic given ``header.params.seed``.

    ``rebalance="select"`` scores every candidate of :func:`_candidates` by blocked prequential kappa
    (on the window's real rows by default, see :data:`Scoring`) and trains the first best (Algorithm 1,
    lines 22-27). With rebalancing the document
    gets a ``training`` record: ``chosen``, ``scores``, ``note``, ``confusion`` (each scored candidate's
    prequential (TP, FP, FN, TN), larger label positive, for binary labels) and, if
    ``header.return_base``, ``base``: the document trained on the plain window. ``header.class_names``
    are copied into the document.
    """
    start = perf_counter()
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if header.rebalance != "none" and header.task != "classification":
        raise ValueError("rebalance (SMOTE) applies to classification only")
    if header.reset_rows is not None and not 0 <= header.reset_rows <= y.shape[0]:
        raise ValueError(f"reset_rows={header.reset_rows} is outside [0, {y.shape[0]}]")
    if header.params.C == "auto" and y.shape[0] < MIN_TUNE_ROWS:
        raise WindowError("params.C", f"C='auto' needs at least {MIN_TUNE_ROWS} rows, got {y.shape[0]}")
    if scoring not in SCORINGS:
        raise ValueError(f"scoring must be one of {SCORINGS}, got {scoring!r}")
    outcome = _train(header, X, y, start, scoring)
    if header.class_names is not None:
        outcome.document["class_names"] = list(header.class_names)
    check_finite_document(outcome.document)
    return outcome


def check_finite_document(document: Any, path: str = "model") -> None:
    """Refuse a model with a non-finite number (it would predict NaN on the edge and cannot be stored
    as JSON): a :class:`~edgedrift.wire.WindowError` naming the first offending entry."""
    if path == "model" and _all_finite(document):
        return
    if isinstance(document, float) and not np.isfinite(document):
        raise WindowError("X", f"training produced a non-finite {path}: rescale the features or the target")
    if isinstance(document, dict):
        for key, value in document.items():
            check_finite_document(value, f"{path}.{key}")
    elif isinstance(document, list):
        for i, value in enumerate(document):
            check_finite_document(value, f"{path}[{i}]")


def _all_finite(document: Any) -> bool:
    """True when no float in ``document`` is NaN or infinite; may say False for a document that has none
    (then :func:`check_finite_document` walks it entry by entry). Each list of numbers (a tree's node
    arrays, a model's weights) is checked as one array instead of one Python call per number."""
    if isinstance(document, float):
        return math.isfinite(document)
    if isinstance(document, dict):
        return all(_all_finite(v) for v in document.values())
    if isinstance(document, list):
        try:
            values = np.asarray(document, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            return all(_all_finite(v) for v in document)
        return bool(np.isfinite(values).all())
    return True


def _train(
    header: WindowHeader, X: FloatArray, y: FloatArray, start: float, scoring: Scoring
) -> TrainOutcome:
    to_document, to_predictor, C = _learner(header, X, y)
    if header.rebalance == "none":
        document = to_document(X, y)
        train_ms = (perf_counter() - start) * 1000.0
        return TrainOutcome(document, str(document["kind"]), None, None, train_ms, C, None)
    sets, note = _candidates(header, X, y)
    scores: dict[str, float] | None = None
    confusion: dict[str, list[int]] = {}
    if header.rebalance == "smote":
        chosen = "batch" if sets["batch+smote"] is None else "batch+smote"
    else:
        scores = {}
        for name, data in sets.items():
            if data is None:
                scores[name] = UNBUILT
                continue
            run = _score(name, data, sets, to_predictor, header.params.seed, scoring)
            scores[name] = run.kappa
            if run.counts is not None:
                confusion[name] = list(run.counts)
        chosen = max(scores, key=scores.__getitem__)  # the first maximum: ties keep the earlier one
    data = sets[chosen]
    assert data is not None
    document = to_document(*data)
    training: dict[str, Any] = {"chosen": chosen, "scores": scores, "note": note}
    if confusion:
        training["confusion"] = confusion
    if header.return_base:
        training["base"] = dict(document) if chosen == "batch" else to_document(X, y)
    document["training"] = training
    train_ms = (perf_counter() - start) * 1000.0
    return TrainOutcome(document, str(document["kind"]), chosen, scores, train_ms, C, note)
