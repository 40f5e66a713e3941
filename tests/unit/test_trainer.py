"""Tests of the cloud trainer: the vectorised LIBLINEAR problem builder and train_linear / tune_C."""

from __future__ import annotations

import os

import numpy as np
import pytest
from liblinear.liblinearutil import train as liblinear_train

from edgedrift.models.linear import LinearModel, Standardizer
from edgedrift.models.losses import get_loss
from edgedrift.training.liblinear_fast import build_problem, solve
from edgedrift.training.linear import DEFAULT_C_GRID, LinearTrainer, train_linear, tune_C

requires_data = pytest.mark.skipif(
    not os.environ.get("EDGEDRIFT_DATA_DIR"),
    reason="EDGEDRIFT_DATA_DIR is not set (point it at the shared data directory holding elec.csv)",
)


def make_data(
    loss: str, n: int, d: int, seed: int, zeros: float = 0.0, first_label: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Random features (a fraction ``zeros`` set to exactly 0) and labels from a noisy linear model."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.3, 3.0, size=d) + rng.normal(size=d)
    if zeros:
        X[rng.random((n, d)) < zeros] = 0.0
    score = X @ rng.normal(size=d) + 0.5 + rng.normal(size=n)
    if get_loss(loss).task == "regression":
        return X, score
    y = np.where(score > 0, 1.0, -1.0)
    if first_label is not None:
        # Put a sample of the wanted class first: LIBLINEAR orders its labels by first occurrence.
        i = int(np.flatnonzero(y == first_label)[0])
        X[[0, i]], y[[0, i]] = X[[i, 0]], y[[i, 0]]
    return X, y


def binding_beta(X: np.ndarray, y: np.ndarray, solver: int, C: float, eps: float | None) -> np.ndarray:
    """β from the official binding: w of get_decfun() plus the bias weight, scoring the +1 class."""
    options = f"-s {solver} -c {C!r} -B 1 -q"
    if eps is not None:
        options += f" -e {eps!r}"
    if solver == 11:
        options += " -p 0"
    m = liblinear_train(y, X, options)
    w, b = m.get_decfun()
    beta = np.append(np.asarray(w, dtype=np.float64), b)
    if solver != 11 and m.get_labels()[0] == -1:
        beta = -beta
    return beta


@pytest.mark.parametrize(("solver", "loss"), [(0, "logistic"), (2, "squared_hinge"), (11, "squared")])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("eps", [None, 1e-6])
@pytest.mark.parametrize("zeros", [0.0, 0.3])
def test_solve_is_bit_identical_to_the_official_binding(
    solver: int, loss: str, seed: int, eps: float | None, zeros: float
) -> None:
    first = [1.0, -1.0, None][seed] if loss != "squared" else None
    X, y = make_data(loss, 150, 5, seed, zeros=zeros, first_label=first)
    C = [0.1, 1.0, 7.5][seed]
    beta = solve(X, y, solver, C, bias=1.0, eps=eps, svr_p=0.0)
    ref = binding_beta(X, y, solver, C, eps)
    assert beta.shape == (6,)
    np.testing.assert_array_equal(beta, ref)


def test_build_problem_layout() -> None:
    X = np.array([[1.5, 0.0], [-2.0, 3.0], [0.25, 4.0]])
    y = np.array([1.0, -1.0, 1.0])
    prob = build_problem(X, y, bias=2.0)
    assert prob.l == 3
    assert prob.n == 3
    assert prob.bias == 2.0
    for i in range(3):
        nodes = [(prob.x[i][k].index, prob.x[i][k].value) for k in range(4)]
        assert nodes == [(1, X[i, 0]), (2, X[i, 1]), (3, 2.0), (-1, 0.0)]
        assert prob.y[i] == y[i]


@pytest.mark.parametrize(("solver", "loss"), [(0, "logistic"), (2, "squared_hinge")])
@pytest.mark.parametrize("label", [1.0, -1.0])
def test_single_class_window_predicts_that_class(solver: int, loss: str, label: float) -> None:
    X_all, _ = make_data(loss, 240, 3, seed=4)
    X, X_new = X_all[:40], X_all[40:]
    y = np.full(40, label)
    beta = solve(X, y, solver, 1.0)
    Xa = np.hstack([X, np.ones((40, 1))])
    assert np.all(np.sign(Xa @ beta) == label)
    model = train_linear(X, y, loss, 1.0)
    np.testing.assert_array_equal(model.predict(X), y)
    # A fresh point from the same distribution is also given the only class seen.
    assert np.mean(model.predict(X_new) == label) > 0.9


def test_solve_orients_beta_to_the_plus_class_when_minus_comes_first() -> None:
    X, y = make_data("logistic", 200, 3, seed=6, first_label=-1.0)
    assert y[0] == -1.0
    model = train_linear(X, y, "logistic", 1.0, eps=1e-8)
    assert np.mean(model.predict(X) == y) > 0.7


@pytest.mark.parametrize("C", [0.01, 1.0, 50.0])
@pytest.mark.parametrize("bias", [1.0, 3.0])
def test_closed_form_equals_liblinear_svr(C: float, bias: float) -> None:
    X, y = make_data("squared", 120, 4, seed=7)
    closed = train_linear(X, y, "squared", C, bias=bias, solver="closed_form")
    lib = train_linear(X, y, "squared", C, bias=bias, eps=1e-12)
    np.testing.assert_allclose(
        closed.beta, lib.beta, rtol=1e-6, atol=1e-9 * float(np.linalg.norm(closed.beta))
    )
    # The closed form satisfies its normal equations exactly: (2C X̃ᵀX̃ + I)β = 2C X̃ᵀy.
    Xa = np.hstack([X, np.full((120, 1), bias)])
    lhs = 2 * C * Xa.T @ (Xa @ closed.beta) + closed.beta
    np.testing.assert_allclose(lhs, 2 * C * Xa.T @ y, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("loss", ["logistic", "squared_hinge", "squared"])
@pytest.mark.parametrize("standardize", [False, True])
@pytest.mark.parametrize("C", [0.1, 10.0])
def test_first_order_optimality(loss: str, standardize: bool, C: float) -> None:
    """At the returned β the gradient of eq. (1), C Σ ∇ℓ + β, vanishes."""
    X, y = make_data(loss, 200, 4, seed=8)
    model = train_linear(X, y, loss, C, standardize=standardize, eps=1e-10)
    grad = C * model.gradient_sum(X, y) + model.beta
    # Scale: the gradient of the loss part at β = 0.
    zero = LinearModel(model.loss, np.zeros_like(model.beta), C, scaler=model.scaler)
    scale = np.linalg.norm(C * zero.gradient_sum(X, y))
    assert np.linalg.norm(grad) <= 1e-7 * scale
    # A perturbed β has a clearly larger objective (it is the minimum, not a stationary saddle).
    worse = LinearModel(model.loss, model.beta + 0.01, C, scaler=model.scaler)
    assert worse.objective(X, y) > model.objective(X, y)


def test_default_eps_is_tight_enough_for_optimality() -> None:
    X, y = make_data("logistic", 200, 4, seed=9)
    loose = train_linear(X, y, "logistic", 1.0)
    tight = train_linear(X, y, "logistic", 1.0, eps=1e-12)
    np.testing.assert_allclose(loose.beta, tight.beta, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("loss", ["logistic", "squared_hinge", "squared"])
def test_standardize_trains_in_the_standardised_space(loss: str) -> None:
    X, y = make_data(loss, 150, 3, seed=10)
    X[:, 1] *= 1000.0
    X[:, 2] += 50.0
    model = train_linear(X, y, loss, 2.0, standardize=True, eps=1e-8)
    assert model.scaler is not None
    ref = Standardizer.fit(X)
    np.testing.assert_allclose(model.scaler.mean, ref.mean)
    np.testing.assert_allclose(model.scaler.scale, ref.scale)
    Z = (X - X.mean(axis=0)) / X.std(axis=0)
    beta = solve(Z, y, get_loss(loss).liblinear_solver, 2.0, eps=1e-8)
    np.testing.assert_allclose(model.beta, beta, rtol=1e-9, atol=1e-12)
    X_new, _ = make_data(loss, 100, 3, seed=11)
    X_new[:, 1] *= 1000.0
    X_new[:, 2] += 50.0
    score = np.hstack([(X_new - X.mean(axis=0)) / X.std(axis=0), np.ones((100, 1))]) @ beta
    if loss == "squared":
        np.testing.assert_allclose(model.predict(X_new), score, rtol=1e-8, atol=1e-8)
    else:
        np.testing.assert_array_equal(model.predict(X_new), np.where(score >= 0, 1.0, -1.0))
    # Without standardisation the model is a different one (the scale matters to the regulariser).
    raw = train_linear(X, y, loss, 2.0, eps=1e-8)
    assert raw.scaler is None
    assert not np.allclose(raw.beta, model.beta)


def test_linear_trainer_forwards_its_settings() -> None:
    X, y = make_data("squared", 80, 3, seed=12)
    trainer = LinearTrainer(loss="squared", C=3.0, bias=2.0, standardize=True, solver="closed_form")
    model = trainer(X, y)
    direct = train_linear(X, y, "squared", 3.0, bias=2.0, standardize=True, solver="closed_form")
    np.testing.assert_array_equal(model.beta, direct.beta)
    assert model.C == 3.0
    assert model.bias == 2.0
    assert model.n_train == 80
    other = trainer.with_C(0.5)
    assert other.C == 0.5
    assert (other.loss, other.bias, other.standardize, other.solver, other.eps) == (
        trainer.loss,
        trainer.bias,
        trainer.standardize,
        trainer.solver,
        trainer.eps,
    )


@requires_data
def test_tune_c_on_elec2_first_window() -> None:
    from edgedrift.data import load_elec2

    stream = load_elec2()
    X, y = stream.X[:2000:10], stream.y[:2000:10]
    assert len(y) == 200
    result = tune_C(X, y, LinearTrainer(loss="logistic"))
    assert 100.0 <= result.best_C <= 10_000.0
    assert set(result.scores) == set(DEFAULT_C_GRID)
    best = result.scores[result.best_C]
    assert best == max(result.scores.values())
    assert result.scores[1.0] < best - 0.1


def test_tune_c_scores_are_blocked_cross_validation() -> None:
    """Recompute the score of one C by hand with contiguous folds."""
    X, y = make_data("logistic", 100, 3, seed=13)
    trainer = LinearTrainer(loss="logistic")
    result = tune_C(X, y, trainer, grid=(0.3, 30.0), folds=4)
    for C in (0.3, 30.0):
        correct = 0
        for k in range(4):
            test = np.zeros(100, dtype=bool)
            test[25 * k : 25 * (k + 1)] = True
            m = train_linear(X[~test], y[~test], "logistic", C)
            correct += int(np.sum(m.predict(X[test]) == y[test]))
        assert result.scores[C] == pytest.approx(correct / 100)


def test_tune_c_ties_go_to_the_smaller_c() -> None:
    # Perfectly separable by a wide margin: every C in the grid scores 100%.
    rng = np.random.default_rng(14)
    y = rng.choice([-1.0, 1.0], size=60)
    X = (y * 5.0)[:, None] + rng.normal(0, 0.1, size=(60, 2))
    result = tune_C(X, y, LinearTrainer(loss="logistic"), grid=(10.0, 1.0, 100.0))
    assert all(s == 1.0 for s in result.scores.values())
    assert result.best_C == 1.0


def test_tune_c_regression_minimises_mse() -> None:
    X, y = make_data("squared", 100, 3, seed=15)
    result = tune_C(X, y, LinearTrainer(loss="squared", solver="closed_form"), grid=(1e-4, 1.0))
    assert all(s < 0 for s in result.scores.values())
    assert result.best_C == 1.0  # almost no regularisation fits this low-noise linear data best


@pytest.mark.parametrize(
    ("X", "y", "loss"),
    [
        (np.zeros((5, 2)), np.array([0.0, 1.0, 1.0, 0.0, 1.0]), "logistic"),
        (np.zeros((5, 2)), np.array([2.0, 1.0, -1.0, 1.0, 1.0]), "squared_hinge"),
        (np.zeros((5, 2)), np.ones(4), "logistic"),
        (np.zeros((5, 2)), np.ones((5, 1)), "logistic"),
        (np.zeros(5), np.ones(5), "logistic"),
        (np.zeros((4, 2)), np.ones(5), "squared"),
        (np.zeros((0, 3)), np.zeros(0), "logistic"),
        (np.zeros((0, 3)), np.zeros(0), "squared"),
    ],
)
def test_bad_input_raises_value_error(X: np.ndarray, y: np.ndarray, loss: str) -> None:
    with pytest.raises(ValueError):
        train_linear(X, y, loss)


def test_solve_rejects_an_empty_window() -> None:
    with pytest.raises(ValueError, match="empty"):
        solve(np.zeros((0, 3)), np.zeros(0), 0, 1.0)


def test_solve_rejects_bad_liblinear_parameters() -> None:
    X, y = make_data("logistic", 20, 2, seed=16)
    with pytest.raises(ValueError, match="LIBLINEAR"):
        solve(X, y, 0, C=1.0, eps=-1.0)


def test_closed_form_needs_the_squared_loss() -> None:
    X, y = make_data("logistic", 20, 2, seed=17)
    with pytest.raises(ValueError, match="squared"):
        train_linear(X, y, "logistic", solver="closed_form")


def test_closed_form_rejects_an_empty_window() -> None:
    with pytest.raises(ValueError):
        train_linear(np.zeros((0, 3)), np.zeros(0), "squared", solver="closed_form")
