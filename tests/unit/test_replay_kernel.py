"""The compiled replays of the evaluator's hot loops against the Python they replace: the prequential
replay (``replay_predictions``: ``newton_replay`` / ``adaptive_replay``) against the loop (``predict_one``
then ``learn_one``, row after row), with the same predictions and the same final state bit for bit for
every grid point of the tunable learners, binary and one-vs-rest, so the grid searches choose exactly what
they chose before; a shrub ensemble's compiled descent (``forest_proba_one``) against numpy's."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from support.kernels import both_paths, labeled_stream, learner_state, needs_kernels

from edgedrift.data import sine1plus
from edgedrift.learners import AdaptiveSGD, ForgettingNewton, OneVsRest
from edgedrift.learners.base import IncrementalLearner, OnlineLearner
from edgedrift.learners.online_bls import OnlineBLS
from edgedrift.models.losses import FloatArray
from edgedrift.strategies.retuned import EDGE_DEFAULTS, edge_learner, grid_points, grid_scores, tune_all
from edgedrift.strategies.tuning import evidence_choice, prequential_loop, prequential_scores
from edgedrift_eval.protocol import Protocol
from edgedrift_eval.runner import RunSpec, run_one

pytestmark = [needs_kernels, pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")]


def _state(learner: OnlineLearner) -> list[dict[str, Any]]:
    inner = learner.learners if isinstance(learner, OneVsRest) else [learner]
    assert all(isinstance(lr, IncrementalLearner) for lr in inner)
    return [learner_state(lr) for lr in inner]  # type: ignore[arg-type]


def _assert_same(fast: OnlineLearner, slow: OnlineLearner) -> None:
    for a, b in zip(_state(fast), _state(slow), strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def _replayed(learner: OnlineLearner, X: FloatArray, y: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(compiled replay's scores, the loop's scores) of two copies of the learner; their states agree."""
    slow = copy.deepcopy(learner)
    fast_scores = prequential_scores(learner, X, y)
    slow_scores = prequential_loop(slow, X, y)
    _assert_same(learner, slow)
    return fast_scores, slow_scores


def _codes(n: int, classes: int, seed: int) -> tuple[FloatArray, FloatArray]:
    X, _ = labeled_stream(n, 4, seed)
    rng = np.random.default_rng(seed)
    codes = np.argmax(X[:, :3] / np.array([0.1, 1.0, 10.0]) @ rng.normal(size=(3, classes)), axis=1)
    codes[np.isnan(X).any(axis=1)] = 0
    return X, codes.astype(np.float64)


@pytest.mark.parametrize("name", ["newton", "rmsprop"])
def test_every_grid_point_replays_as_the_loop_binary(name: str) -> None:
    X, y = labeled_stream(600, 4, seed=1)  # a flip, a huge row (skipped) and a NaN row among them
    for params in grid_points(name):
        learner = edge_learner(name, 4, "logistic", "classification", params)
        assert isinstance(learner, IncrementalLearner) and learner.replayable(X, y)
        fast, slow = _replayed(learner, X, y)
        np.testing.assert_array_equal(fast, slow)
    assert 0.5 < fast.mean() < 1.0


@pytest.mark.parametrize("name", ["newton", "rmsprop"])
def test_one_vs_rest_replays_as_the_loop(name: str) -> None:
    X, y = _codes(400, 5, seed=2)
    for params in grid_points(name)[::3]:
        learner = edge_learner(name, 4, "logistic", "classification", params, n_classes=5)
        assert isinstance(learner, OneVsRest)
        fast, slow = _replayed(learner, X, y)
        np.testing.assert_array_equal(fast, slow)
    assert fast.mean() > 0.4  # learns something: 5 classes, chance 0.2


def test_regression_without_a_scaler_and_a_warm_learner() -> None:
    X, y = labeled_stream(500, 3, seed=3, task="regression")
    for learner in (
        ForgettingNewton(3, "squared", forgetting=0.95, scale=False),
        AdaptiveSGD(3, "squared", lr=0.1, method="adagrad"),
    ):
        for xi, yi in zip(X[:50], y[:50], strict=True):  # a state mid-stream, not a fresh learner
            learner.learn_one(xi, float(yi))
        fast, slow = _replayed(learner, X[50:], y[50:])
        np.testing.assert_array_equal(fast, slow)


def test_arrays_the_kernel_does_not_take_run_the_loop() -> None:
    X, y = labeled_stream(200, 3, seed=4)
    learner = ForgettingNewton(3)
    assert learner.replay_predictions(np.asfortranarray(X), y) is None
    assert learner.replay_predictions(X.astype(np.float32), y) is None
    assert learner.n_learned == 0  # nothing learned on a refusal
    Xf = np.asfortranarray(X)
    fast, slow = _replayed(learner, Xf, y)
    np.testing.assert_array_equal(fast, slow)
    ovr = OneVsRest(ForgettingNewton(3), 3)
    assert ovr.replay_predictions(X, np.full(len(y), 7.0)) is None  # no code: the loop raises at it
    with pytest.raises(ValueError):
        prequential_scores(ovr, X, np.full(len(y), 7.0))


@pytest.mark.parametrize("classes", [2, 4])
def test_the_grid_search_chooses_as_before(classes: int) -> None:
    X, y = labeled_stream(800, 4, seed=5) if classes == 2 else _codes(800, classes, seed=5)
    fast = grid_scores("newton", 4, "logistic", "classification", X, y, n_classes=classes)
    slow = [
        (p, prequential_loop(edge_learner("newton", 4, "logistic", "classification", p, classes), X, y))
        for p in grid_points("newton")
    ]
    for (p, a), (q, b) in zip(fast, slow, strict=True):
        assert p == q
        np.testing.assert_array_equal(a, b)
    here = grid_points("newton").index(EDGE_DEFAULTS["newton"])
    assert evidence_choice([s for _, s in fast], here) == evidence_choice([s for _, s in slow], here)
    if classes == 2:
        means = [float(s.mean()) for _, s in slow]
        params, score = tune_all("newton", 4, "logistic", "classification", X, y)
        assert score == max(means) and params == slow[int(np.argmax(means))][0]


def test_a_shrub_ensemble_predicts_as_the_numpy_descent(monkeypatch: pytest.MonkeyPatch) -> None:
    # forest_proba_one (the per-sample descent of every shrub) against PackedForest.proba's numpy code,
    # through a whole run: a new shrub every 5 labels, predictions compared sample for sample.
    stream = sine1plus(concept_length=1000, n_concepts=3, seed=4)
    spec = RunSpec("shrub-ensemble", 5, 2)
    compiled, reference = both_paths(
        lambda: run_one(stream, Protocol(window=500), spec, curves=True), monkeypatch
    )
    assert compiled.recomputes == reference.recomputes == 50
    np.testing.assert_array_equal(compiled.predictions, reference.predictions)
    assert compiled.metrics["accuracy"] > 0.7


@pytest.mark.parametrize("forgetting", [None, 0.99])
def test_online_bls_rotations_match_the_python_loop(
    forgetting: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # givens_update (the Givens loop with scipy's BLAS drot and math.hypot) against the Python loop it
    # replaces: the same factor, weights and predictions, bit for bit, through the ridge restorations.
    rng = np.random.default_rng(6)
    X = rng.normal(size=(160, 3))
    y = np.where(X[:, 0] + X[:, 1] > 0, 1.0, -1.0)
    y[::7] = 2.0  # a third class on the way

    def run() -> tuple[list[float], FloatArray, FloatArray]:
        bls = OnlineBLS(3, n3=60, forgetting=forgetting, seed=1, refactor_every=25)
        preds = []
        for xi, yi in zip(X, y, strict=True):
            preds.append(bls.predict_one(xi))
            bls.learn_one(xi, float(yi))
        return preds, bls.R, bls.W

    compiled, reference = both_paths(run, monkeypatch)
    assert compiled[0] == reference[0]
    np.testing.assert_array_equal(compiled[1], reference[1])
    np.testing.assert_array_equal(compiled[2], reference[2])
    assert np.mean(np.array(compiled[0][80:]) == y[80:]) > 0.6
