"""Theorem 1 and Lemma 1 hold on random window pairs, for all three losses of Table 1."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from edgedrift.bounds import (
    argmax_certain,
    distance_bound,
    prediction_bounds,
    radius_vector_tikhonov,
    tikhonov_distance_bound,
)
from edgedrift.models.linear import LinearModel
from edgedrift.models.losses import get_loss
from edgedrift.monitors.gradient import DeltaG
from edgedrift.training.liblinear_fast import solve
from edgedrift.training.linear import train_linear
from edgedrift.window import CountWindow

TIGHT = 1e-10


def make_stream(seed: int, n: int, d: int, loss: str, shift: float) -> tuple[np.ndarray, np.ndarray]:
    """Samples whose concept moves by ``shift`` halfway, so Δg is sometimes large, sometimes small."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.2, 3.0, size=d)
    w = rng.normal(size=d)
    w2 = w + shift * rng.normal(size=d)
    score = np.where(np.arange(n) < n // 2, X @ w, X @ w2) + 0.3
    if loss == "squared":
        return X, score + rng.normal(size=n)
    flip = rng.random(n) < 0.1
    return X, np.where((score > 0) ^ flip, 1.0, -1.0)


def fit(X: np.ndarray, y: np.ndarray, loss: str, C: float) -> LinearModel:
    if loss == "squared":
        return train_linear(X, y, loss, C, solver="closed_form")
    return train_linear(X, y, loss, C, eps=TIGHT)


def slide_window(
    beta1: LinearModel, X: np.ndarray, y: np.ndarray, n1: int, slide: int
) -> tuple[DeltaG, np.ndarray, np.ndarray]:
    """Δg of β₁ (trained on the first n1 rows) after a window of n1 labels slid ``slide`` rows, and that
    window's contents."""
    window = CountWindow(n1, X.shape[1])
    for i in range(n1):
        window.push(X[i], y[i])
    dg = DeltaG()
    dg.reset(beta1, X[:n1], y[:n1])
    for i in range(n1, n1 + slide):
        k = window.push(X[i], y[i])
        dg.remove(window.evicted_X, window.evicted_y, k)
        dg.add(X[i], y[i])
    X2, y2 = window.contents()
    return dg, X2, y2


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    loss=st.sampled_from(["logistic", "squared_hinge", "squared"]),
    d=st.integers(1, 6),
    n1=st.integers(20, 120),
    slide=st.integers(1, 150),
    shift=st.floats(0.0, 3.0),
    C1=st.sampled_from([0.01, 0.1, 1.0, 10.0]),
    c_ratio=st.sampled_from([1.0, 0.5, 2.0]),
)
def test_model_distance_and_prediction_bounds(
    seed: int, loss: str, d: int, n1: int, slide: int, shift: float, C1: float, c_ratio: float
) -> None:
    X, y = make_stream(seed, n1 + slide + 40, d, loss, shift)
    beta1 = fit(X[:n1], y[:n1], loss, C1)
    dg, X2, y2 = slide_window(beta1, X, y, n1, slide)
    C2 = C1 * c_ratio
    beta2 = fit(X2, y2, loss, C2)

    r = dg.radius(C2)
    gap = float(np.linalg.norm(beta1.beta - beta2.beta))
    assert gap <= distance_bound(r) * (1 + 1e-6) + 1e-7

    Xq = beta1.augment(X[n1 + slide :])
    lower, upper = prediction_bounds(Xq, beta1.beta, r)
    score2 = Xq @ beta2.beta
    tol = 1e-6 * (1 + np.abs(score2))
    assert np.all(lower <= score2 + tol) and np.all(score2 <= upper + tol)


def test_delta_g_equals_direct_gradient_difference() -> None:
    X, y = make_stream(3, 300, 4, "logistic", 1.0)
    model = fit(X[:100], y[:100], "logistic", 1.0)
    window = CountWindow(100, 4)
    for i in range(100):
        window.push(X[i], y[i])
    dg = DeltaG()
    dg.reset(model, X[:100], y[:100])
    for i in range(100, 170):
        dg.remove(window.evicted_X, window.evicted_y, window.push(X[i], y[i]))
        dg.add(X[i], y[i])
    direct = model.gradient_sum(X[100:170], y[100:170]) - model.gradient_sum(X[:70], y[:70])
    np.testing.assert_allclose(dg.vec, direct, rtol=1e-10, atol=1e-10)
    assert dg.n_new_in_window == 70 and dg.n_removed == 70


def test_radius_is_table_1_at_the_exact_optimum() -> None:
    """With C₁ = C₂ and an exact β₁ the residual vanishes and r = (C/2)Δg (Table 1)."""
    X, y = make_stream(5, 200, 3, "squared", 0.5)
    model = fit(X[:150], y[:150], "squared", 0.5)
    dg = DeltaG()
    dg.reset(model, X[:150], y[:150])
    assert np.linalg.norm(dg.residual) < 1e-9
    dg.add(X[150], y[150])
    np.testing.assert_allclose(dg.radius(), 0.25 * dg.vec, atol=1e-9)


def test_scaled_model_bound_is_computed_in_its_training_space() -> None:
    X, y = make_stream(11, 400, 3, "logistic", 2.0)
    X[:, 0] *= 100.0
    b1 = train_linear(X[:150], y[:150], "logistic", 1.0, eps=TIGHT, standardize=True)
    dg = DeltaG()
    dg.reset(b1, X[:150], y[:150])
    for i in range(150, 250):
        dg.add(X[i], y[i])
    dg.remove(X[:100], y[:100], 100)
    # β₂ solves eq. (1) on the new window in β₁'s frozen feature space.
    Z = (X[100:250] - b1.scaler.mean) / b1.scaler.scale  # type: ignore[union-attr]
    beta2 = solve(Z, y[100:250], 0, 1.0, eps=TIGHT)
    assert np.linalg.norm(b1.beta - beta2) <= distance_bound(dg.radius()) * (1 + 1e-6)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), C=st.sampled_from([0.1, 1.0, 10.0]))
def test_tikhonov_bound_holds_in_the_A_norm(seed: int, C: float) -> None:
    """Regulariser ½‖Aβ‖² with A = diag(a): solved by the substitution γ = Aβ (features x̃/a)."""
    rng = np.random.default_rng(seed)
    d = 3
    a = rng.uniform(0.2, 5.0, size=d + 1)
    X, y = make_stream(seed, 260, d, "logistic", 2.0)

    def solve_tikhonov(Xw: np.ndarray, yw: np.ndarray) -> np.ndarray:
        return solve(Xw / a[:-1], yw, 0, C, bias=1.0 / a[-1], eps=TIGHT) / a

    beta1 = solve_tikhonov(X[:120], y[:120])
    beta2 = solve_tikhonov(X[60:180], y[60:180])
    loss = get_loss("logistic")

    def grad_sum(Xw: np.ndarray, yw: np.ndarray) -> np.ndarray:
        Xa = np.hstack([Xw, np.ones((len(yw), 1))])
        return Xa.T @ loss.dz(yw, Xa @ beta1)

    delta_g = grad_sum(X[120:180], y[120:180]) - grad_sum(X[:60], y[:60])
    A = np.diag(a)
    r = radius_vector_tikhonov(beta1, delta_g, A.T @ A, C)
    assert np.linalg.norm(A @ (beta1 - beta2)) <= tikhonov_distance_bound(r, A) * (1 + 1e-6) + 1e-8


def make_multiclass_stream(
    seed: int, n: int, d: int, n_classes: int, shift: float
) -> tuple[np.ndarray, np.ndarray]:
    """Codes 0..C−1 from the argmax of C noisy linear scores whose weights move by ``shift`` halfway."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.2, 3.0, size=d)
    W = rng.normal(size=(d, n_classes))
    W2 = W + shift * rng.normal(size=(d, n_classes))
    scores = np.where((np.arange(n) < n // 2)[:, None], X @ W, X @ W2) + rng.normal(size=(n, n_classes))
    return X, np.argmax(scores, axis=1).astype(np.float64)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    loss=st.sampled_from(["logistic", "squared_hinge"]),
    n_classes=st.sampled_from([3, 10]),
    d=st.integers(1, 5),
    n1=st.integers(20, 120),
    slide=st.integers(1, 150),
    shift=st.floats(0.0, 3.0),
    C1=st.sampled_from([0.01, 0.1, 1.0, 10.0]),
    c_ratio=st.sampled_from([1.0, 0.5, 2.0]),
)
def test_multiclass_distance_and_prediction_bounds(
    seed: int, loss: str, n_classes: int, d: int, n1: int, slide: int, shift: float, C1: float, c_ratio: float
) -> None:
    """One-vs-rest (C = 3 and 10, windows that may miss classes): ‖B₁ − B₂‖_F ≤ 2‖R‖_F for exact LIBLINEAR
    solutions, every column within its own ball, and Lemma 1's bounds per column; a certain argmax
    (:func:`argmax_certain`) is β₂'s argmax."""
    X, y = make_multiclass_stream(seed, n1 + slide + 40, d, n_classes, shift)
    beta1 = train_linear(X[:n1], y[:n1], loss, C1, eps=TIGHT, n_classes=n_classes)
    dg, X2, y2 = slide_window(beta1, X, y, n1, slide)
    C2 = C1 * c_ratio
    beta2 = train_linear(X2, y2, loss, C2, eps=TIGHT, n_classes=n_classes)

    R = dg.radius(C2)
    assert R.shape == (d + 1, n_classes)
    gap = float(np.linalg.norm(beta1.beta - beta2.beta))
    assert gap <= distance_bound(R) * (1 + 1e-6) + 1e-7
    column_gaps = np.linalg.norm(beta1.beta - beta2.beta, axis=0)
    assert np.all(column_gaps <= 2 * np.linalg.norm(R, axis=0) * (1 + 1e-6) + 1e-7)

    Xq = beta1.augment(X[n1 + slide :])
    lower, upper = prediction_bounds(Xq, beta1.beta, R)
    score2 = Xq @ beta2.beta
    tol = 1e-6 * (1 + np.abs(score2))
    assert np.all(lower <= score2 + tol) and np.all(score2 <= upper + tol)
    certain = argmax_certain(lower, upper)
    np.testing.assert_array_equal(np.argmax(lower, axis=1)[certain], np.argmax(score2, axis=1)[certain])


def test_multiclass_delta_g_equals_direct_gradient_difference() -> None:
    X, y = make_multiclass_stream(3, 300, 4, 5, 1.0)
    model = train_linear(X[:100], y[:100], "logistic", 1.0, n_classes=5)
    window = CountWindow(100, 4)
    window.push_many(X[:100], y[:100])
    dg = DeltaG()
    dg.reset(model, X[:100], y[:100])
    for i in range(100, 170):
        dg.remove(window.evicted_X, window.evicted_y, window.push(X[i], y[i]))
        dg.add(X[i], y[i])
    direct = model.gradient_sum(X[100:170], y[100:170]) - model.gradient_sum(X[:70], y[:70])
    np.testing.assert_allclose(dg.vec.reshape(direct.shape), direct, atol=1e-10)
    many = DeltaG()
    many.reset(model, X[:100], y[:100])
    many.add_many(X[100:170], y[100:170])
    many.remove_many(X[:70], y[:70])
    np.testing.assert_allclose(many.vec, dg.vec, atol=1e-10)
    rows = model.gradients(X[100:103], y[100:103])
    np.testing.assert_allclose(rows.sum(axis=0), model.gradient_sum(X[100:103], y[100:103]).reshape(-1))
