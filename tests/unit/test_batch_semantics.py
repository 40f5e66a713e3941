"""Per-sample batch semantics on both paths: ``EdgeLoop.process_many`` makes exactly ``process_one``'s
predictions with the compiled kernels and with the numpy code, and ``predict_rows`` (its unlabeled runs)
is ``predict_one`` bit for bit. Every strategy is checked in tests/contract; here the two paths."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from support.kernels import COMPILED, both_paths, labeled_stream, needs_kernels

from edgedrift import kernels
from edgedrift.data import sine1plus
from edgedrift.learners import SGD, AdaptiveSGD, ForgettingNewton, IncrementalLearner, Perceptron
from edgedrift.loop import EdgeLoop
from edgedrift.models.losses import FloatArray
from edgedrift_eval.strategies import STRATEGIES, make_context

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the huge row

LEARNERS: dict[str, Callable[[], IncrementalLearner]] = {
    "newton": lambda: ForgettingNewton(4, forgetting=0.95, prior=0.1),
    "newton squared": lambda: ForgettingNewton(4, "squared", forgetting=0.98),
    "rmsprop": lambda: AdaptiveSGD(4, lr=0.05),
    "sgd unscaled": lambda: SGD(4, lr=0.05),
    "perceptron": lambda: Perceptron(4),
}


@pytest.mark.parametrize("name", list(LEARNERS))
def test_predict_rows_is_predict_one_bit_for_bit(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = labeled_stream(400, 4, seed=7, task="regression" if "squared" in name else "classification")
    rows = np.ascontiguousarray(X[250:])

    def run() -> tuple[FloatArray, FloatArray]:
        learner: IncrementalLearner = LEARNERS[name]()
        for i in range(250):
            learner.learn_one(X[i], float(y[i]))
        return learner.predict_rows(rows), np.array([learner.predict_one(x) for x in rows])

    if COMPILED is None:  # the numpy path only (not built, or EDGEDRIFT_NO_KERNELS=1)
        numpy_rows, numpy_one = run()
    else:
        (compiled, one_by_one), (numpy_rows, numpy_one) = both_paths(run, monkeypatch)
        np.testing.assert_array_equal(compiled, one_by_one)
    np.testing.assert_array_equal(numpy_rows, numpy_one)


@needs_kernels
def test_linear_scores_is_linear_score_per_row() -> None:
    assert COMPILED is not None
    rng = np.random.default_rng(3)
    X, w = rng.normal(size=(50, 7)) * 1e3, rng.normal(size=7)
    out = np.empty(50)
    COMPILED.linear_scores(w, X, 0.25, out)
    assert out.tolist() == [COMPILED.linear_score(w, x, 0.25) for x in X]
    with pytest.raises(ValueError, match="out: expected a writable C-contiguous float64"):
        COMPILED.linear_scores(w, X, 0.25, np.empty(49))
    with pytest.raises(ValueError, match="w: expected"):
        COMPILED.linear_scores(np.ones(6), X, 0.25, out)


def _loop(strategy: str) -> EdgeLoop:
    s = sine1plus(d=3, concept_length=1500, n_concepts=3, seed=11)
    X0, y0 = s.X[:500:10], s.y[:500:10]
    ctx = make_context(X0, y0, "classification", 50)
    loop = STRATEGIES[strategy].build(ctx, 0.5 if strategy.startswith("druid") else None)
    loop.start(ctx.initial_model(), X0, y0, warm_learner=True)
    return loop


@pytest.mark.parametrize("strategy", ["druid", "druid-rmsprop", "newton-tuned", "periodic"])
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_batches_predict_as_process_one_on_both_paths(
    strategy: str, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not compiled:
        monkeypatch.setattr(kernels, "MODULE", None)
    elif kernels.MODULE is None:
        pytest.skip("edgedrift._kernels not built")
    s = sine1plus(d=3, concept_length=1500, n_concepts=3, seed=11)
    X = s.X[500:]
    y = np.where(np.arange(500, len(s)) % 10 == 0, s.y[500:], np.nan)
    seq = _loop(strategy)
    expected = np.array([seq.process_one(x, None if v != v else float(v)) for x, v in zip(X, y, strict=True)])
    for batch in (10, 100):
        bat = _loop(strategy)
        got = np.concatenate(
            [bat.process_many(X[j : j + batch], y[j : j + batch]) for j in range(0, len(y), batch)]
        )
        np.testing.assert_array_equal(got, expected)
        assert bat.counters == seq.counters
        assert [e.sample for e in bat.events] == [e.sample for e in seq.events]
    if strategy != "newton-tuned":  # an incremental learner only: no recomputes
        assert seq.counters.recomputes > 0
