"""The forgetting-Newton mini-batch kernel (``newton_learn_many``) against ``ForgettingNewton.learn_many``'s
numpy code: both solve forms, the standardiser's warm-up inside a batch, the steps not taken, the rows
skipped."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from support.kernels import COMPILED, both_paths, labeled_stream, learner_state, needs_kernels, task_of

from edgedrift import kernels
from edgedrift.learners import ForgettingNewton
from edgedrift.models.losses import FloatArray

# The huge and NaN rows overflow in the numpy path's size checks, as they should.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


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
    """learn_many(X, y) on copies of learner, compiled (the kernel must run) and in numpy: the two states
    after it."""
    assert COMPILED is not None
    compiled, reference = copy.deepcopy(learner), copy.deepcopy(learner)
    saved = kernels.MODULE
    try:
        kernels.MODULE = COMPILED
        COMPILED.reset()
        compiled.learn_many(X, y)
        assert COMPILED.ran["newton_learn_many"] == 1 and not COMPILED.refused, "the kernel did not run"
        kernels.MODULE = None
        reference.learn_many(X, y)
    finally:
        kernels.MODULE = saved
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
    saved, kernels.MODULE = kernels.MODULE, None
    try:
        learner.learn_many(X[:seen], y[:seen])
    finally:
        kernels.MODULE = saved
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
    assert COMPILED is not None
    monkeypatch.setattr(kernels, "MODULE", COMPILED)
    COMPILED.reset()
    strided, contiguous = ForgettingNewton(4), ForgettingNewton(4)
    for rows in batches(60, 10):
        strided.learn_many(np.asfortranarray(X[rows]), y[rows])  # its rows are not contiguous
        contiguous.learn_many(X[rows], y[rows])
    # the kernel took the contiguous batches and declined the others (LayoutError: numpy ran)
    assert COMPILED.ran["newton_learn_many"] == 6 and COMPILED.refused["newton_learn_many"] == 6
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
        (0, [[1.0, 2.0, 3.0]], kernels.LayoutError, "X: expected a numpy array"),
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
