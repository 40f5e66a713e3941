"""The compiled kernels (edgedrift.kernels) against the numpy code they replace: same states to rounding,
same skips, same predictions, recomputes and drift points through the whole edge loop."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest

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

COMPILED = kernels.MODULE
# The huge and NaN rows overflow in the numpy path's size checks, as they should.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
needs_kernels = pytest.mark.skipif(COMPILED is None, reason="edgedrift._kernels not built")


@pytest.fixture
def numpy_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run the numpy reference code: the kernels switched off for the test."""
    monkeypatch.setattr(kernels, "MODULE", None)
    yield


def both_paths(run: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """``run()`` with the kernels, then with the numpy code."""
    compiled = run()
    monkeypatch.setattr(kernels, "MODULE", None)
    reference = run()
    monkeypatch.setattr(kernels, "MODULE", COMPILED)
    return compiled, reference


def labeled_stream(n: int, d: int, seed: int, task: str = "classification") -> tuple[FloatArray, FloatArray]:
    """Features on different scales with a flip half-way, a huge row and a NaN row among them."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.geomspace(0.1, 100.0, d)
    score = X / np.geomspace(0.1, 100.0, d) @ rng.normal(size=d)
    y = np.where(score > 0, 1.0, -1.0) if task == "classification" else score + 0.1 * rng.normal(size=n)
    y[n // 2 :] *= -1
    X[n // 3] = 1e200  # skipped for its size
    X[n // 3 + 1, 0] = np.nan  # skipped: not finite
    return X, y


def test_the_kernels_are_built_here() -> None:
    # CI builds edgedrift._kernels from source with pip; a build that silently fell back to numpy
    # would leave every other test here skipped.
    if os.environ.get("EDGEDRIFT_NO_KERNELS", "") not in ("", "0"):
        pytest.skip("EDGEDRIFT_NO_KERNELS is set")
    assert isinstance(COMPILED, ModuleType)
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
        "content_keys",
    }
    assert names <= set(dir(COMPILED))


def learner_state(learner: IncrementalLearner) -> dict[str, Any]:
    state: dict[str, Any] = {"w": learner.w.copy(), "skipped": learner.n_skipped, "n": learner.n_learned}
    if isinstance(learner, ForgettingNewton):
        state["P"] = learner.P.copy()
    if learner.scaler is not None:
        state["mean"], state["var"] = learner.scaler.mean.copy(), learner.scaler.var.copy()
        state["scaler_n"] = learner.scaler.n
    return state


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


def task_of(name: str) -> str:
    return "regression" if name.endswith(" squared") or "squared no" in name else "classification"


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
    for i in (50, 51):  # two states: the cyclic prior term on two coordinates
        after = []
        for module in (COMPILED, None):
            monkeypatch.setattr(kernels, "MODULE", module)
            learner = copy.deepcopy(state)
            learner.learn_one(X[i], float(y[i]))
            after.append(learner)
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
def test_a_row_the_kernel_does_not_take_runs_the_numpy_code() -> None:
    X, y = labeled_stream(50, 4, seed=1)
    strided, contiguous = ForgettingNewton(4), ForgettingNewton(4)
    Xf = np.asfortranarray(X)  # its rows are not contiguous
    for i in range(40):
        strided.learn_one(Xf[i], float(y[i]))
        contiguous.learn_one(X[i], float(y[i]))
    np.testing.assert_allclose(strided.w, contiguous.w, rtol=1e-9)
    assert strided.n_learned == contiguous.n_learned == 40


@needs_kernels
def test_the_kernels_reject_arrays_of_the_wrong_shape_with_a_clear_error() -> None:
    assert COMPILED is not None
    learner = ForgettingNewton(3)
    args: list[Any] = [
        np.ones(3), 1.0, 0, learner.w, learner.P, learner.m, learner._xa, learner._Px,
        None, None, None, None, 0.0, 0.0, 1.0, 0.1, 0, 1e-3, 1e50, 1e100, False,
    ]  # fmt: skip
    assert COMPILED.newton_learn(*args) == 0
    args[0] = np.ones(4)
    with pytest.raises(ValueError, match="w: expected a C-contiguous float64 array of 5 values"):
        COMPILED.newton_learn(*args)
    args[0] = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="x: expected"):
        COMPILED.newton_learn(*args)
    with pytest.raises(TypeError, match="21 arguments"):
        COMPILED.newton_learn(*args[:5])
    read_only = np.ones(3)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="raw_w: array is read-only"):
        COMPILED.raw_weights(np.ones(4), np.ones(3), np.ones(3), read_only)
    with pytest.raises(ValueError, match="shape"):
        COMPILED.whitened_sq(np.ones((2, 3)), np.ones(4))
    with pytest.raises(ValueError, match="x: expected a C-contiguous float64 array of 3 values"):
        COMPILED.linear_score(np.ones(3), np.ones(4), 0.0)
    with pytest.raises(ValueError, match="hi: expected"):
        COMPILED.in_range(np.ones(3), np.ones(3), np.ones(2))


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
    assert COMPILED is None or COMPILED.in_range(rng.normal(size=d), np.full(d, -np.inf), np.full(d, np.inf))


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


NEWTONS: dict[str, Callable[[int], ForgettingNewton]] = {
    # a standardiser young for 25 labels: batches of 3 and 10 straddle the end of its per-sample warm-up
    "logistic": lambda d: ForgettingNewton(d, "logistic", forgetting=0.95, prior=0.1, scale_alpha=0.04),
    "squared_hinge unscaled": lambda d: ForgettingNewton(d, "squared_hinge", scale=False),
    "squared no forgetting": lambda d: ForgettingNewton(d, "squared", forgetting=1.0, scale_alpha=0.04),
    "logistic unscaled no forgetting": lambda d: ForgettingNewton(d, "logistic", forgetting=1.0, scale=False),
}


def newton_state(learner: ForgettingNewton) -> dict[str, Any]:
    """learner_state, the standardiser's 1/σ too, and a prediction (the raw-space weights must be rebuilt)."""
    state = learner_state(learner)
    if learner.scaler is not None:
        state["inv_std"] = learner.scaler.inv_std.copy()
    state["score"] = learner.score_one(np.ones(learner.n_features))
    return state


def assert_same_state(compiled: dict[str, Any], reference: dict[str, Any]) -> None:
    """Counts exactly, floats to rounding (relative to each array's scale: P's off-diagonal entries
    cancel)."""
    for key in ("skipped", "n", "scaler_n"):
        assert compiled.get(key) == reference.get(key), key
    for key, value in reference.items():
        atol = 1e-12 * max(1.0, float(np.max(np.abs(value))))
        np.testing.assert_allclose(compiled[key], value, rtol=1e-9, atol=atol, err_msg=key)


def learn_batch_both_ways(learner: ForgettingNewton, X: FloatArray, y: FloatArray) -> tuple[Any, Any]:
    """learn_many(X, y) on copies of learner, compiled and in numpy: the two states after it."""
    compiled, reference = copy.deepcopy(learner), copy.deepcopy(learner)
    compiled.learn_many(X, y)
    kernels.MODULE = None
    try:
        reference.learn_many(X, y)
    finally:
        kernels.MODULE = COMPILED
    return compiled, reference


def batches(n: int, size: int) -> list[slice]:
    return [slice(start, start + size) for start in range(0, n, size)]


@needs_kernels
@pytest.mark.parametrize("name", list(NEWTONS))
@pytest.mark.parametrize("d", [1, 5, 54])
@pytest.mark.parametrize("size", [1, 3, 10])
def test_each_batch_step_is_the_numpy_step(name: str, d: int, size: int) -> None:
    """Along a stream of batches (the huge and the NaN row among them), each compiled learn_many lands where
    the numpy one does from the same state. Step by step: over many batches of the logistic loss at d = 54
    the numpy code alone amplifies a perturbation of P by one ulp to 1e-4."""
    X, y = labeled_stream(30 * size, d, seed=d, task=task_of(name))
    learner = NEWTONS[name](d)
    for rows in batches(len(y), size):
        compiled, reference = learn_batch_both_ways(learner, X[rows], y[rows])
        assert_same_state(newton_state(compiled), newton_state(reference))
        learner = reference
    assert learner.n_skipped >= 2 and learner.n_learned == len(y)


@needs_kernels
@pytest.mark.parametrize("name", list(NEWTONS))
@pytest.mark.parametrize("d", [1, 5])
def test_a_stream_of_batches_moves_the_learner_as_its_numpy_code_does(
    name: str, d: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    X, y = labeled_stream(600, d, seed=d, task=task_of(name))
    sizes = [10, 3, 1, 7]

    def run() -> tuple[dict[str, Any], list[float]]:
        learner, start, scores = NEWTONS[name](d), 0, []
        for i in range(len(y)):
            stop = min(start + sizes[i % len(sizes)], len(y))
            scores.append(learner.score_one(X[start]))
            learner.learn_many(X[start:stop], y[start:stop])
            if stop == len(y):
                return newton_state(learner), scores
            start = stop
        raise AssertionError("unreachable")

    (compiled, scores_c), (reference, scores_r) = both_paths(run, monkeypatch)
    assert reference["skipped"] >= 2 and reference["n"] == len(y)
    assert_same_state(compiled, reference)
    np.testing.assert_allclose(scores_c, scores_r, rtol=1e-9, atol=1e-12)


@needs_kernels
@pytest.mark.parametrize(
    ("d", "size", "forgetting", "woodbury"),
    [
        (54, 10, 0.95, True),  # 10 rows + 10 prior terms < 55
        (5, 10, 0.95, False),
        (5, 3, 1.0, True),  # 3 rows, no prior terms < 6
        (5, 3, 0.95, False),  # 3 rows + 3 prior terms == 6: the information form
        (1, 1, 1.0, True),
        (1, 1, 0.95, False),
    ],
)
def test_the_batch_step_solves_in_the_numpy_code_s_form(
    d: int, size: int, forgetting: float, woodbury: bool
) -> None:
    """From P = 0 the information form inverts a singular matrix and takes no step (all rows skipped);
    Woodbury's solve is regular and installs P = 0 again."""
    X, y = labeled_stream(60, d, seed=d)  # the huge and NaN rows at 20 and 21
    learner = ForgettingNewton(d, forgetting=forgetting)
    learner.learn_many(X[:4], y[:4])
    learner.P[:] = 0.0
    compiled, reference = learn_batch_both_ways(learner, X[5 : 5 + size], y[5 : 5 + size])
    assert_same_state(newton_state(compiled), newton_state(reference))
    assert compiled.n_skipped == reference.n_skipped == learner.n_skipped + (0 if woodbury else size)
    np.testing.assert_array_equal(compiled.P, 0.0)
    np.testing.assert_array_equal(compiled.w, learner.w)


@needs_kernels
def test_a_singular_woodbury_solve_skips_the_batch_as_numpy_does() -> None:
    """x̃ᵀPx̃ = −1/h exactly, so the 1-by-1 Woodbury matrix is 0 (numpy: LinAlgError); the huge row is
    filtered first. Both rows count as skipped, w and P stay."""
    learner = ForgettingNewton(1, "squared", forgetting=1.0, scale=False)
    learner.P[:] = -0.25 * np.eye(2)
    learner.w[:] = [0.5, -0.5]
    X, y = np.array([[1.0], [1e200]]), np.array([0.5, 1.0])
    compiled, reference = learn_batch_both_ways(learner, X, y)
    for after in (compiled, reference):
        assert after.n_skipped == 2 and after.n_learned == 2
        np.testing.assert_array_equal(after.P, learner.P)
        np.testing.assert_array_equal(after.w, learner.w)


@needs_kernels
@pytest.mark.parametrize("d", [5, 54])
def test_a_batch_step_too_large_is_not_taken(d: int) -> None:
    """A prior mean at 1e120 makes ‖step‖² exceed DELTA_SQ_MAX (information form at d = 5, Woodbury at
    d = 54): no step, all rows skipped; the standardiser still takes the rows in, as in numpy."""
    X, y = labeled_stream(100, d, seed=1)
    learner = ForgettingNewton(d)
    learner.learn_many(X[:30], y[:30])
    learner.m[:] = 1e120
    compiled, reference = learn_batch_both_ways(learner, X[50:60], y[50:60])
    assert_same_state(newton_state(compiled), newton_state(reference))
    assert compiled.n_skipped == learner.n_skipped + 10
    np.testing.assert_array_equal(compiled.w, learner.w)
    np.testing.assert_array_equal(compiled.P, learner.P)
    assert compiled.scaler is not None and learner.scaler is not None
    assert compiled.scaler.n == learner.scaler.n + 10


@needs_kernels
@pytest.mark.parametrize(("d", "size"), [(5, 10), (5, 3), (54, 10)])
def test_a_batch_step_to_a_non_finite_p_is_not_taken(d: int, size: int) -> None:
    """P₀₀ = 1e160 on a feature that is always 0: the batch leaves it (information form at d = 5 with 10
    rows, Woodbury otherwise), so ‖P‖² overflows while the step stays small. No step, all rows skipped."""
    X, y = labeled_stream(100, d, seed=1, task="regression")
    X[:, 0] = 0.0
    learner = ForgettingNewton(d, "squared", forgetting=1.0, scale=False)
    learner.learn_many(X[:30], y[:30])
    learner.P[0, :] = learner.P[:, 0] = 0.0
    learner.P[0, 0] = 1e160
    compiled, reference = learn_batch_both_ways(learner, X[50 : 50 + size], y[50 : 50 + size])
    assert_same_state(newton_state(compiled), newton_state(reference))
    assert compiled.n_skipped == learner.n_skipped + size
    np.testing.assert_array_equal(compiled.w, learner.w)
    np.testing.assert_array_equal(compiled.P, learner.P)


@needs_kernels
@pytest.mark.parametrize("seen", [95, 100, 300])
def test_the_standardiser_warms_up_inside_the_batch(seen: int) -> None:
    """With 1/alpha = 100, a batch of 10 after 95 labels takes 5 per-sample updates, then the closed form
    for 5 (weights that differ by 5 %, far beyond rounding); after 100 or 300 only the closed form."""
    X, y = labeled_stream(seen + 10, 5, seed=seen)
    X[(seen + 10) // 3 : (seen + 10) // 3 + 2] = 1.0  # no huge or NaN row here
    learner = ForgettingNewton(5, scale_alpha=0.01)
    kernels.MODULE = None
    try:
        learner.learn_many(X[:seen], y[:seen])
    finally:
        kernels.MODULE = COMPILED
    compiled, reference = learn_batch_both_ways(learner, X[seen:], y[seen:])
    assert_same_state(newton_state(compiled), newton_state(reference))
    assert compiled.scaler is not None and compiled.scaler.n == seen + 10
    closed_form = copy.deepcopy(learner.scaler)
    assert closed_form is not None
    closed_form.n = 100
    closed_form.update_many(X[seen:])
    assert np.allclose(compiled.scaler.mean, closed_form.mean, rtol=1e-9) == (seen >= 100)


@needs_kernels
def test_huge_and_nan_rows_of_a_batch_are_skipped_and_the_others_learned() -> None:
    X, y = labeled_stream(60, 5, seed=2)
    X[40, 2] = 1e200
    X[43, 4] = np.nan
    y[45] = 1e60  # its x is small, its y² too large (alone in its batch)
    X[50:52] = 7e49  # each row's ‖x‖² is 2.45e100 > 1e100: both skipped, no row left
    X[55:57] = 4e49  # each row's ‖x‖² is 0.8e100, the batch's sum too large: the filter keeps all
    learner = ForgettingNewton(5)
    learner.learn_many(X[:30], y[:30])
    for rows, skipped in ((slice(38, 44), 2), (slice(44, 48), 1), (slice(50, 52), 2), (slice(53, 58), 0)):
        compiled, reference = learn_batch_both_ways(learner, X[rows], y[rows])
        assert_same_state(newton_state(compiled), newton_state(reference))
        assert compiled.n_skipped == learner.n_skipped + skipped
        assert compiled.n_learned == learner.n_learned + len(y[rows])
        learner = reference


@needs_kernels
def test_a_batch_the_kernel_does_not_take_runs_the_numpy_code(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = labeled_stream(60, 4, seed=3)
    calls: list[int] = []
    assert COMPILED is not None
    kernel = COMPILED.newton_learn_many

    def counted(*args: Any) -> tuple[int, int]:
        outcome: tuple[int, int] = kernel(*args)  # raises ValueError on a Fortran-ordered X
        calls.append(len(args[1]))
        return outcome

    monkeypatch.setattr(COMPILED, "newton_learn_many", counted)
    strided, contiguous = ForgettingNewton(4), ForgettingNewton(4)
    for rows in batches(60, 10):
        strided.learn_many(np.asfortranarray(X[rows]), y[rows])  # its rows are not contiguous
        contiguous.learn_many(X[rows], y[rows])
    assert calls == [10] * 6  # the kernel took the contiguous batches only
    assert_same_state(newton_state(strided), newton_state(contiguous))


@needs_kernels
def test_newton_learn_many_rejects_arrays_of_the_wrong_shape_with_a_clear_error() -> None:
    assert COMPILED is not None
    learner = ForgettingNewton(3)
    s = learner.scaler
    assert s is not None
    args: list[Any] = [
        np.ones((2, 3)), np.ones(2), 0, learner.w, learner.P, learner.m, s.mean, s.var, s.inv_std,
        0, 0.01, 1e-8, 0.95, 0.1, 0, 1e-3, 1e100, 1e200,
    ]  # fmt: skip
    assert COMPILED.newton_learn_many(*args) == (2, 0)
    for index, value, error, message in [
        (0, np.ones(3), ValueError, "X: expected a 2-D array"),
        (0, np.ones((2, 4)), ValueError, "w: expected a C-contiguous float64 array of 5 values"),
        (0, [[1.0, 2.0, 3.0]], TypeError, "X: expected a numpy array"),
        (1, np.ones(3), ValueError, "y: expected a C-contiguous float64 array of 2 values"),
        (7, None, ValueError, "scaler arrays"),
        (14, 4, ValueError, "j: not a coordinate of w"),
    ]:
        bad = list(args)
        bad[index] = value
        with pytest.raises(error, match=message):
            COMPILED.newton_learn_many(*bad)
    with pytest.raises(TypeError, match="18 arguments"):
        COMPILED.newton_learn_many(*args[:17])


def druid_batches(
    X: FloatArray, y: FloatArray, batch: int, robust: bool = True
) -> tuple[list[tuple[float, int, int, int]], list[int], dict[str, Any]]:
    """DRUiD over a stream fed in labeled batches (``update_many``, a full window evicting as it goes):
    (statistic, tests, exceedances, run) after every batch, the batches where it fired, its Δg."""
    model = train_linear(X[:200], y[:200], "logistic", C=10.0)
    window = CountWindow(200, n_features=X.shape[1])
    monitor = DruidMonitor(alpha=0.999, t_n=30, min_labels=15)
    monitor.reset(model, X[:200], y[:200])
    if not robust:
        monitor.delta_g._metric = None
    window.push_many(X[:200], y[:200])
    trace, fired = [], []
    for start in range(200, len(y), batch):
        Xb, yb = X[start : start + batch], y[start : start + batch]
        errors = (model.predict(Xb) != yb).astype(np.float64)
        monitor.update_many(Xb, yb, errors, window, window.push_many(Xb, yb))
        trace.append((monitor.statistic, monitor.n_tests, monitor.n_exceedances, monitor.num_warnings))
        if monitor.drift_detected:
            fired.append(start)
            monitor.num_warnings = 0
    dg = monitor.delta_g
    state = {name: getattr(dg, name).copy() for name in ("vec", "robust", "added_sum", "added_outer")}
    state["counts"] = np.array([dg.n_skipped, dg.n_added, dg.n_evicted])
    return trace, fired, state


@needs_kernels
@pytest.mark.parametrize("d", [2, 5, 54])
@pytest.mark.parametrize("batch", [1, 7, 40])
def test_druid_batches_see_the_same_statistics_and_drifts(
    d: int, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """grad_track_many and druid_steps against DeltaG.add_many/remove_many and the numpy step test:
    the same tests, exceedances, runs and drift batches, statistics and Δg to rounding."""
    rng = np.random.default_rng(d + batch)
    X = rng.normal(size=(1600, d))
    w = rng.normal(size=d)
    y = np.where(np.arange(1600) < 800, np.sign(X @ w), np.sign(X @ -w))
    X[901, 0] = np.nan  # skipped when added, and again when the window evicts it
    X[950] = 1e200

    (trace_c, fired_c, dg_c), (trace_r, fired_r, dg_r) = both_paths(
        lambda: druid_batches(X, y, batch), monkeypatch
    )
    assert fired_c == fired_r and fired_r  # the flip is found, in the same batch
    assert [t[1:] for t in trace_c] == [t[1:] for t in trace_r]
    np.testing.assert_array_equal(dg_c["counts"], dg_r["counts"])
    assert dg_r["counts"][0] >= 1  # the NaN row
    np.testing.assert_allclose([t[0] for t in trace_c], [t[0] for t in trace_r], rtol=1e-7, atol=1e-9)
    for key in ("vec", "robust", "added_sum", "added_outer"):
        np.testing.assert_allclose(dg_c[key], dg_r[key], rtol=1e-8, atol=1e-9, err_msg=key)


@needs_kernels
def test_delta_g_batches_without_robust_tracking_are_the_numpy_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(600, 4))
    y = np.sign(X @ rng.normal(size=4))

    (_, _, dg_c), (_, _, dg_r) = both_paths(lambda: druid_batches(X, y, 25, robust=False), monkeypatch)
    np.testing.assert_allclose(dg_c["vec"], dg_r["vec"], rtol=1e-9, atol=1e-9)
    assert not dg_c["robust"].any() and not dg_r["robust"].any()
    assert not dg_c["added_outer"].any() and not dg_r["added_outer"].any()


@needs_kernels
def test_druid_steps_counts_runs_across_batches_and_the_warm_up() -> None:
    """Three steps, the first untested (min_labels), the run carried in from the batch before."""
    assert COMPILED is not None
    W = np.eye(2)
    R = np.array([[1.0, 0.0], [0.0, 0.0], [-1.0, 0.0]])
    before = np.zeros(2)
    # n_added 0, n_evicted 0, n_orig 10: counts are 10 + t; stats 1/12 (t = 2), 0 (t = 3)
    tests, exceedances, stat, run, longest = COMPILED.druid_steps(
        before, R, np.zeros((0, 2)), W, 0, 0, 10, 2, 0.05, 4
    )
    assert (tests, exceedances, stat, run, longest) == (2, 1, 0.0, 0, 5)
    # one eviction at the last step, taking the first contribution out again
    tests, _, stat, _, _ = COMPILED.druid_steps(before, R[:2], R[:1], W, 0, 0, 10, 0, 1.0, 0)
    assert tests == 2 and stat == 0.0


@needs_kernels
def test_the_batch_range_test_is_the_numpy_one(monkeypatch: pytest.MonkeyPatch) -> None:
    X, _ = labeled_stream(300, 5, seed=2)
    guard = RangeGuard(threshold=3.0).fit(X[:100])
    rows = np.vstack([X[100:], np.full((1, 5), np.nan), X[:1] + 1e6])

    compiled, reference = both_paths(lambda: guard.outside(rows), monkeypatch)
    np.testing.assert_array_equal(compiled, reference)
    assert compiled[-2:].all() and not compiled.all()


def test_content_keys_are_python_s_hash_of_the_sample() -> None:
    """The digests checkpoints keep: compiled, they must be Python's hash((*x, y, ts)) (NaN y or ts
    stands for none), for every kind of float."""
    from edgedrift_edge.messages import content_keys, content_keys_of

    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 5)) * 10.0 ** rng.integers(-310, 308, size=(500, 5))
    X[::7, 2] = np.round(X[::7, 2])
    X[3] = [0.0, -0.0, np.inf, -np.inf, 5e-324]
    X[4] = [1.0, -1.0, 2.0**62, -(2.0**62), 0.1]
    y = np.where(rng.random(500) < 0.5, np.nan, rng.choice([-1.0, 1.0], 500))
    ts = np.where(rng.random(500) < 0.5, np.nan, rng.random(500) * 1e9)
    expected = content_keys(X.tolist(), y.tolist(), ts.tolist())
    assert content_keys_of(X, y, ts).tolist() == expected
    assert content_keys_of(np.asfortranarray(X), y, ts).tolist() == expected  # not contiguous: in Python
    if COMPILED is not None:
        out = np.zeros(500, np.int64)
        assert COMPILED.content_keys(X, y, ts, -7.7e-311, out) and out.tolist() == expected
        X[9, 1] = np.nan  # hashed by identity in Python: the kernel declines
        assert not COMPILED.content_keys(X, y, ts, -7.7e-311, out)


@needs_kernels
def test_the_batch_kernels_reject_arrays_of_the_wrong_shape_with_a_clear_error() -> None:
    assert COMPILED is not None
    with pytest.raises(ValueError, match="out: expected a writable C-contiguous bool array"):
        COMPILED.rows_outside(np.ones((3, 2)), np.zeros(2), np.ones(2), np.zeros(3, np.int8))
    with pytest.raises(ValueError, match="hi: expected"):
        COMPILED.rows_outside(np.ones((3, 2)), np.zeros(2), np.ones(3), np.zeros(3, bool))
    with pytest.raises(ValueError, match="W must have shape"):
        COMPILED.druid_steps(np.zeros(3), np.zeros((2, 3)), np.zeros((0, 3)), np.eye(2), 0, 0, 1, 0, 1.0, 0)
    with pytest.raises(ValueError, match="more evictions than steps"):
        COMPILED.druid_steps(np.zeros(2), np.zeros((1, 2)), np.zeros((2, 2)), np.eye(2), 0, 0, 1, 0, 1.0, 0)
    with pytest.raises(ValueError, match="out: expected a writable C-contiguous int64 array"):
        COMPILED.content_keys(np.ones((2, 2)), np.ones(2), np.ones(2), 0.0, np.zeros(3, np.int64))
    with pytest.raises(TypeError, match="17 arguments"):
        COMPILED.grad_track_many(np.ones((2, 2)))


BATCHES = [
    {"samples": [{"id": 1, "x": [0.5, -1.0, 2.0]}, {"id": 2, "x": [1, 2, 3], "y": -1, "ts": 1.5}]},
    {"samples": [{"x": [0.5, -1.0, 2.0], "y": 1.0}, {"id": "a-7", "x": [0.0, 0.0, 1e300]}, {"x": [1, 1, 1]}]},
    {"samples": [{"id": 3, "x": [0.5, -1.0]}, {"id": 4, "x": [1.0, 2.0, 3.0]}]},  # a row too short
    {"samples": [{"id": 5, "x": [0.5, -1.0, 2.0], "y": 0.5}]},  # not a class label
    {"samples": [{"id": 6, "x": [0.5, -1.0, 2.0], "y": 2}, {"id": 7, "x": [1.0, 2.0, 3.0]}]},
]


@needs_kernels
@pytest.mark.parametrize("task", ["classification", "regression"])
@pytest.mark.parametrize("message", BATCHES)
def test_a_batch_decodes_to_the_same_samples_and_rejections(
    task: str, message: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """sample_columns against the numpy fast path and the general path (for what it declines)."""
    import json

    from edgedrift_edge.messages import parse_samples

    payload = json.dumps(message).encode()
    compiled, reference = both_paths(lambda: parse_samples(payload, 3, task, 100, None), monkeypatch)
    assert compiled.ids == reference.ids
    assert [(r.id, r.reason) for r in compiled.rejected] == [(r.id, r.reason) for r in reference.rejected]
    for name in ("X", "y", "ts"):
        np.testing.assert_array_equal(getattr(compiled, name), getattr(reference, name), err_msg=name)
    assert compiled.batch and reference.batch


@needs_kernels
def test_sample_columns_fills_the_columns_and_numbers_missing_ids() -> None:
    assert COMPILED is not None
    import msgspec

    from edgedrift_edge.messages import _BATCH

    items = _BATCH.decode(
        b'{"samples": [{"x": [1.0, 2.0]}, {"id": "s", "x": [3.0, 4.0], "y": -1, "ts": 9.0}]}'
    )
    X, y, ts = np.zeros((2, 2)), np.zeros(2), np.zeros(2)
    ids = COMPILED.sample_columns(items.samples, 2, True, 40, msgspec.UNSET, X, y, ts)
    assert ids == [40, "s"]
    assert X.tolist() == [[1.0, 2.0], [3.0, 4.0]] and ts[1] == 9.0 and y[1] == -1.0
    assert np.isnan(y[0]) and np.isnan(ts[0])
    assert COMPILED.sample_columns(items.samples, 3, True, 0, msgspec.UNSET, np.zeros((2, 3)), y, ts) is None
    with pytest.raises(ValueError, match="X: expected a C-contiguous float64 array of 4 values"):
        COMPILED.sample_columns(items.samples, 2, True, 0, msgspec.UNSET, np.zeros(3), y, ts)
