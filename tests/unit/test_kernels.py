"""The compiled per-sample kernels (edgedrift.kernels) against the numpy code they replace: same states to
rounding, same skips, same predictions, recomputes and drift points through the whole edge loop. The
batch kernels: test_newton_batch_kernel.py and test_gateway_batch_kernels.py."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from support.kernels import (
    COMPILED,
    CountingKernels,
    both_paths,
    labeled_stream,
    learner_state,
    needs_kernels,
    task_of,
)

from edgedrift import kernels
from edgedrift.data.generators import sine1plus
from edgedrift.guard import RangeGuard
from edgedrift.learners import AdaptiveSGD, ForgettingNewton, IncrementalLearner
from edgedrift.models.losses import FloatArray, LogisticLoss, Loss
from edgedrift.monitors import DruidMonitor
from edgedrift.protocol import Protocol
from edgedrift.training.linear import train_linear
from edgedrift.window import CountWindow
from edgedrift_eval.runner import RunSpec, run_one

# The huge and NaN rows overflow in the numpy path's size checks, as they should.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


@pytest.fixture
def numpy_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run the numpy reference code: the kernels switched off for the test."""
    monkeypatch.setattr(kernels, "MODULE", None)
    yield


def test_the_kernels_are_built_here() -> None:
    # The suite's first pass builds edgedrift._kernels (scripts/setup.sh, a C compiler is there); a build
    # that fell back to numpy would leave every other test here skipped. The second pass switches them off.
    if os.environ.get("EDGEDRIFT_NO_KERNELS", "") not in ("", "0"):
        assert kernels.MODULE is None and kernels.path() == "numpy"
        pytest.skip("EDGEDRIFT_NO_KERNELS is set")
    assert isinstance(kernels.MODULE, ModuleType) and kernels.path() == "compiled"
    assert issubclass(kernels.LayoutError, ValueError) and kernels.LayoutError is kernels.MODULE.LayoutError
    names = {
        "newton_learn",
        "newton_learn_many",
        "adaptive_learn",
        "grad_track",
        "raw_weights",
        "whitened_sq",
        "grad_track_many",
        "druid_steps",
        "rows_outside",
        "sample_columns",
    }
    assert names <= set(dir(kernels.MODULE))


LEARNERS: dict[str, Callable[[int], IncrementalLearner]] = {
    "newton logistic": lambda d: ForgettingNewton(d, "logistic", forgetting=0.95, prior=0.1),
    "newton squared_hinge unscaled": lambda d: ForgettingNewton(d, "squared_hinge", scale=False),
    "newton squared no forgetting": lambda d: ForgettingNewton(d, "squared", forgetting=1.0),
    "rmsprop logistic": lambda d: AdaptiveSGD(d, "logistic", lr=0.05),
    "adagrad squared_hinge unscaled": lambda d: AdaptiveSGD(
        d, "squared_hinge", method="adagrad", scale=False
    ),
    "rmsprop squared": lambda d: AdaptiveSGD(d, "squared", lr=0.01),
}


@needs_kernels
@pytest.mark.parametrize("name", list(LEARNERS))
@pytest.mark.parametrize("d", [1, 5, 54])
def test_one_step_is_the_numpy_step(name: str, d: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """From the same state, one compiled step lands where the numpy step does, to rounding."""
    X, y = labeled_stream(60, d, seed=d, task=task_of(name))
    warm = LEARNERS[name](d)
    monkeypatch.setattr(kernels, "MODULE", None)
    for i in range(50):
        warm.learn_one(X[i], float(y[i]))
    state = warm
    assert COMPILED is not None
    for i in (50, 51):  # two states: the cyclic prior term on two coordinates
        after = []
        for module in (COMPILED, None):
            monkeypatch.setattr(kernels, "MODULE", module)
            COMPILED.reset()
            learner = copy.deepcopy(state)
            learner.learn_one(X[i], float(y[i]))
            after.append(learner)
            if module is COMPILED:  # the compiled step ran (not the numpy code behind a fallback)
                assert sum(COMPILED.ran.values()) == 1 and not COMPILED.refused
        compiled, reference = (learner_state(learner) for learner in after)
        for key, value in reference.items():
            np.testing.assert_allclose(compiled[key], value, rtol=1e-12, atol=1e-14, err_msg=key)
        state = after[1]


@needs_kernels
@pytest.mark.parametrize("name", list(LEARNERS))
@pytest.mark.parametrize("d", [1, 5])
def test_a_learner_moves_as_its_numpy_code_does(name: str, d: int, monkeypatch: pytest.MonkeyPatch) -> None:
    task = task_of(name)
    X, y = labeled_stream(600, d, seed=d, task=task)

    def run() -> tuple[dict[str, Any], list[float]]:
        learner = LEARNERS[name](d)
        predictions = []
        for x, label in zip(X, y, strict=True):
            predictions.append(learner.predict_one(x))
            learner.learn_one(x, float(label))
        return learner_state(learner), predictions

    (compiled, pred_c), (reference, pred_r) = both_paths(run, monkeypatch)
    assert compiled["skipped"] == reference["skipped"] >= 2  # the huge row and the NaN row
    assert compiled["n"] == reference["n"] == len(y)
    for key, value in reference.items():
        np.testing.assert_allclose(compiled[key], value, rtol=1e-9, atol=1e-12, err_msg=key)
    if task == "classification":
        assert pred_c == pred_r
    else:
        np.testing.assert_allclose(pred_c, pred_r, rtol=1e-9)


@needs_kernels
def test_a_row_the_kernel_does_not_take_runs_the_numpy_code(monkeypatch: pytest.MonkeyPatch) -> None:
    assert COMPILED is not None
    monkeypatch.setattr(kernels, "MODULE", COMPILED)
    X, y = labeled_stream(50, 4, seed=1)
    strided, contiguous = ForgettingNewton(4), ForgettingNewton(4)
    Xf = np.asfortranarray(X)  # its rows are not contiguous
    COMPILED.reset()
    for i in range(40):
        strided.learn_one(Xf[i], float(y[i]))
    assert dict(COMPILED.refused) == {"newton_learn": 40} and not COMPILED.ran
    for i in range(40):
        contiguous.learn_one(X[i], float(y[i]))
    assert dict(COMPILED.ran) == {"newton_learn": 40}
    np.testing.assert_allclose(strided.w, contiguous.w, rtol=1e-9)
    assert strided.n_learned == contiguous.n_learned == 40


class _Replaced:
    """The compiled kernels with one of them replaced (a stand-in for a kernel that changed)."""

    def __init__(self, module: Any, name: str, function: Callable[..., Any]) -> None:
        self._module, self._name, self._function = module, name, function

    def __getattr__(self, name: str) -> Any:
        return self._function if name == self._name else getattr(self._module, name)


def _mismatched(*args: Any) -> Any:
    raise TypeError(f"takes 20 positional arguments but {len(args)} were given")


@needs_kernels
@pytest.mark.parametrize(
    ("kernel", "learner"),
    [
        ("newton_learn", lambda: ForgettingNewton(3)),
        ("adaptive_learn", lambda: AdaptiveSGD(3)),
        ("raw_weights", lambda: ForgettingNewton(3)),
        ("linear_score", lambda: ForgettingNewton(3, scale=False)),
    ],
)
def test_a_kernel_that_no_longer_matches_its_caller_fails_loudly(
    kernel: str, learner: Callable[[], IncrementalLearner], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: a newton_learn that raised TypeError used to fall back to numpy silently, and 41 of 42
    kernel tests still passed. Only LayoutError (an array the kernel does not take) means "run numpy"."""
    monkeypatch.setattr(kernels, "MODULE", _Replaced(kernels.MODULE, kernel, _mismatched))
    model = learner()
    x = np.array([0.5, -1.0, 2.0])
    with pytest.raises(TypeError, match="positional arguments"):
        for _ in range(3):
            model.learn_one(x, 1.0)
            model.predict_one(x)


@needs_kernels
def test_the_comparisons_notice_a_kernel_that_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """both_paths refuses a "compiled" run that ran the numpy code: a kernel that declines every call
    fails the comparison instead of comparing numpy with itself, and so does a run that calls none."""

    def declines(*args: Any) -> int:
        raise kernels.LayoutError("x: expected a C-contiguous float64 array")

    declining = CountingKernels(_Replaced(kernels.MODULE, "newton_learn", declines))
    X, y = labeled_stream(40, 3, seed=4)

    def run() -> FloatArray:
        learner = ForgettingNewton(3)
        for x, label in zip(X, y, strict=True):
            learner.predict_one(x)  # compiled (linear_score): the run does call kernels
            learner.learn_one(x, float(label))
        return learner.w

    with pytest.raises(AssertionError, match="declined"):
        both_paths(run, monkeypatch, declining)
    assert declining.refused["newton_learn"] == len(y) and declining.ran["linear_score"] == len(y)
    with pytest.raises(AssertionError, match="called no kernel"):
        both_paths(lambda: ForgettingNewton(3).w, monkeypatch)


@needs_kernels
@pytest.mark.parametrize("d", [1, 5, 54])
def test_a_prediction_and_the_range_test_are_the_numpy_ones(d: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """score_one (w . x + b) to rounding, and the guard's range test exactly (a NaN is out of range),
    compiled and in numpy."""
    rng = np.random.default_rng(d)
    X, y = labeled_stream(300, d, seed=d)
    guard = RangeGuard(threshold=3.0).fit(X[:100])
    rows = [*X[100:], np.full(d, np.nan), X[0] + 1e6]

    def run() -> tuple[list[float], list[bool]]:
        learner = ForgettingNewton(d)
        for i in range(100):
            learner.learn_one(X[i], float(y[i]))
        return [learner.score_one(x) for x in rows], [guard.check(x, remember=False) for x in rows]

    (scores_c, flags_c), (scores_r, flags_r) = both_paths(run, monkeypatch)
    np.testing.assert_allclose(scores_c, scores_r, rtol=1e-12, atol=1e-12)
    assert flags_c == flags_r and flags_c[-2:] == [True, True] and not all(flags_c)
    assert COMPILED is not None
    assert COMPILED.in_range(rng.normal(size=d), np.full(d, -np.inf), np.full(d, np.inf))


def druid_trace(X: FloatArray, y: FloatArray, loss: Loss) -> tuple[list[float], list[int], dict[str, Any]]:
    """DRUiD over a stream: the statistic after every label, the labels where it fired, its Δg."""
    model = train_linear(X[:200], y[:200], loss.name, C=10.0)
    window = CountWindow(200, n_features=X.shape[1])
    monitor = DruidMonitor(alpha=0.999, t_n=50)
    monitor.reset(model, X[:200], y[:200])
    window.push_many(X[:200], y[:200])
    stats, fired = [], []
    for i in range(200, len(y)):
        error = float(model.predict_one(X[i]) != y[i])
        monitor.update(X[i], float(y[i]), error, window, window.push(X[i], float(y[i])))
        stats.append(monitor.statistic)
        if monitor.drift_detected:
            fired.append(i)
            monitor.num_warnings = 0
    dg = monitor.delta_g
    state = {"vec": dg.vec.copy(), "robust": dg.robust.copy(), "outer": dg.added_outer.copy()}
    state["skipped"] = np.array(dg.n_skipped)
    return stats, fired, state


@needs_kernels
@pytest.mark.parametrize("d", [2, 5, 54])
def test_druid_sees_the_same_statistic_and_drifts(d: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(d)
    X = rng.normal(size=(1500, d))
    w = rng.normal(size=d)
    y = np.where(np.arange(1500) < 700, np.sign(X @ w), np.sign(X @ -w))
    X[900, 0] = np.nan  # a gradient Δg skips (and skips again when the window evicts it)

    (stats_c, fired_c, dg_c), (stats_r, fired_r, dg_r) = both_paths(
        lambda: druid_trace(X, y, LogisticLoss()), monkeypatch
    )
    assert fired_c == fired_r and fired_r  # the flip is found, at the same labels
    assert dg_c["skipped"] == dg_r["skipped"] == 1
    np.testing.assert_allclose(stats_c, stats_r, rtol=1e-7, atol=1e-9)
    for key in ("vec", "robust", "outer"):
        np.testing.assert_allclose(dg_c[key], dg_r[key], rtol=1e-8, atol=1e-9, err_msg=key)


@needs_kernels
@pytest.mark.parametrize("strategy", ["druid", "druid-rmsprop", "newton"])
def test_the_edge_loop_predicts_and_recomputes_as_with_numpy(
    strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = sine1plus(d=5, n_concepts=3, concept_length=3000, seed=3)
    protocol = Protocol(every=10, window=1000)
    spec = RunSpec(strategy, 0.999 if strategy.startswith("druid") else None, 0)

    compiled, reference = both_paths(lambda: run_one(stream, protocol, spec, curves=True), monkeypatch)
    assert compiled.recomputes == reference.recomputes
    assert compiled.recompute_at == reference.recompute_at
    if strategy.startswith("druid"):
        assert reference.recomputes >= 1
    assert compiled.predictions is not None and reference.predictions is not None
    np.testing.assert_array_equal(compiled.predictions, reference.predictions)
