"""Tests of edgedrift.learners: the online standardiser and the incremental learners."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
import pytest

from edgedrift.learners import (
    SGD,
    AdaptiveSGD,
    EWStandardizer,
    ForgettingNewton,
    IncrementalLearner,
    Perceptron,
)
from edgedrift.models.linear import LinearModel, Standardizer
from edgedrift.models.losses import get_loss
from edgedrift.training.linear import train_linear

W_TRUE = np.array([1.5, -2.0, 0.5, 1.0])


def logistic_stream(n: int, seed: int, steep: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Stationary stream: y ~ Bernoulli(σ(steep·(xᵀw + 0.5))) as ±1."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, W_TRUE.size))
    p = 1.0 / (1.0 + np.exp(-steep * (X @ W_TRUE + 0.5)))
    return X, np.where(rng.random(n) < p, 1.0, -1.0)


def separable_stream(
    n: int, seed: int, margin: float, badly_scaled: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Linearly separable samples with |x̃ᵀw| ≥ margin; returns X, y and the separator w̃ = (w, b)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(4 * n, 4))
    w = np.array([1.0, -1.0, 0.5, 0.8])
    if badly_scaled:
        X[:, 1] *= 1000.0
        X[:, 2] += 3.0
        w = np.array([1.0, 0.002, -1.0, 0.5])
    b = 0.3 if not badly_scaled else 3.0
    s = X @ w + b
    keep = np.abs(s) >= margin
    X, s = X[keep][:n], s[keep][:n]
    assert len(s) == n
    return X, np.where(s > 0, 1.0, -1.0), np.append(w, b)


def prequential(learner: IncrementalLearner, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Test-then-train: per-sample correctness (classification)."""
    correct = np.empty(len(y), dtype=bool)
    for i in range(len(y)):
        correct[i] = learner.predict_one(X[i]) == y[i]
        learner.learn_one(X[i], float(y[i]))
    return correct


# --- EWStandardizer ------------------------------------------------------------------------------------


def test_ew_standardizer_starts_as_the_running_mean_and_variance() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(3.0, 2.0, size=(50, 3)) * np.array([1.0, 10.0, 0.1])
    s = EWStandardizer(3, alpha=0.02)  # 1/alpha = 50 samples of exact running moments
    for k in range(50):
        s.update(X[k])
        np.testing.assert_allclose(s.mean, X[: k + 1].mean(axis=0), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(s.var, X[: k + 1].var(axis=0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s.inv_std, 1.0 / np.sqrt(X.var(axis=0) + s.eps), rtol=1e-9)
    out = np.empty(3)
    s.transform_into(X[7], out)
    np.testing.assert_allclose(out, (X[7] - X.mean(axis=0)) / np.sqrt(X.var(axis=0) + s.eps), rtol=1e-9)


def test_ew_standardizer_weights_the_newest_sample_by_alpha() -> None:
    s = EWStandardizer(1, alpha=0.1)
    for _ in range(20):
        s.update(np.array([1.0]))
    m, v = float(s.mean[0]), float(s.var[0])
    s.update(np.array([5.0]))
    delta = 5.0 - m
    assert s.mean[0] == pytest.approx(m + 0.1 * delta)
    assert s.var[0] == pytest.approx(0.9 * (v + 0.1 * delta**2))


@pytest.mark.parametrize("alpha", [0.01, 0.05])
def test_ew_standardizer_follows_a_mean_jump(alpha: float) -> None:
    rng = np.random.default_rng(1)
    before = int(3 / alpha)
    after = int(10 / alpha)
    sd = np.array([1.0, 4.0])
    new_mean = np.array([10.0, 50.0])
    X = np.vstack([rng.normal(0.0, 1.0, (before, 2)) * sd, rng.normal(0.0, 1.0, (after, 2)) * sd + new_mean])
    s = EWStandardizer(2, alpha=alpha)
    for i in range(before):
        s.update(X[i])
    assert np.all(np.abs(s.mean) < 0.5 * sd)
    assert np.all(np.abs(s.mean - new_mean) > 5.0)
    for i in range(before, before + int(5 / alpha)):
        s.update(X[i])
    # e^-5 of the jump is left plus EW noise of about sd·sqrt(alpha/2).
    assert np.all(np.abs(s.mean - new_mean) < 0.01 * np.abs(new_mean) + 4 * sd * np.sqrt(alpha / 2))
    for i in range(before + int(5 / alpha), before + after):
        s.update(X[i])
    np.testing.assert_allclose(np.sqrt(s.var), sd, rtol=0.25)
    assert np.all(np.abs(s.mean - new_mean) < 4 * sd * np.sqrt(alpha / 2))


def test_ew_standardizer_rejects_bad_alpha() -> None:
    for alpha in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError):
            EWStandardizer(2, alpha=alpha)


# --- ForgettingNewton ----------------------------------------------------------------------------------


@pytest.mark.parametrize("prior", [1.0, 0.1])
def test_forgetting_newton_without_forgetting_reaches_the_batch_optimum(prior: float) -> None:
    X, y = logistic_stream(3000, seed=2)
    learner = ForgettingNewton(4, "logistic", forgetting=1.0, prior=prior, scale=False)
    for xi, yi in zip(X, y, strict=True):
        learner.learn_one(xi, float(yi))
    batch = train_linear(X, y, "logistic", C=1.0 / prior, eps=1e-10)
    assert np.linalg.norm(learner.w - batch.beta) <= 0.05 * np.linalg.norm(batch.beta)


@pytest.mark.parametrize("prior", [0.5, 4.0])
@pytest.mark.parametrize("bias_shift", [0.0, 3.0])
def test_forgetting_newton_squared_without_forgetting_is_exact_ridge(prior: float, bias_shift: float) -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 3)) * np.array([1.0, 3.0, 0.3]) + bias_shift
    y = X @ np.array([0.5, -1.0, 2.0]) + 1.0 + rng.normal(size=400)
    learner = ForgettingNewton(3, "squared", forgetting=1.0, prior=prior, scale=False)
    for k, (xi, yi) in enumerate(zip(X, y, strict=True)):
        learner.learn_one(xi, float(yi))
        if k in (0, 5, 50, 399):
            ridge = train_linear(X[: k + 1], y[: k + 1], "squared", C=1.0 / prior, solver="closed_form")
            np.testing.assert_allclose(learner.w, ridge.beta, rtol=1e-8, atol=1e-10)
            # P is the inverse Hessian of  Σ(y − x̃ᵀw)² + (a₀/2)‖w‖².
            Xa = np.hstack([X[: k + 1], np.ones((k + 1, 1))])
            H = 2.0 * Xa.T @ Xa + prior * np.eye(4)
            np.testing.assert_allclose(learner.P @ H, np.eye(4), atol=1e-8)


@pytest.mark.parametrize("forgetting", [0.9, 0.98])
def test_forgetting_newton_squared_is_rls_with_forgetting(forgetting: float) -> None:
    """With λ < 1 each update is an exact Newton step on a quadratic, so w is the exact minimiser of
    Σᵢ λ^{t−i}(yᵢ − x̃ᵢᵀw)² + λᵗ(a₀/2)‖w‖² + Σₖ λ^{t−k}(ρ/2)w_{j(k)}², ρ = a₀(1 − λ)(d+1), j(k) = k mod (d+1):
    the discounted least squares of RLS plus the prior mass given back one coordinate per label."""
    rng = np.random.default_rng(4)
    n, d, a0 = 300, 3, 0.7
    X = rng.normal(size=(n, d)) + 1.0
    beta_t = np.where(np.arange(n)[:, None] < n // 2, [1.0, -1.0, 0.5], [-2.0, 0.5, 1.0])
    y = np.sum(X * beta_t, axis=1) + 0.1 * rng.normal(size=n)
    learner = ForgettingNewton(d, "squared", forgetting=forgetting, prior=a0, scale=False)
    rho = a0 * (1.0 - forgetting) * (d + 1)
    for t in range(1, n + 1):
        learner.learn_one(X[t - 1], float(y[t - 1]))
        if t in (1, 2, 7, 60, 150, 300):
            k = np.arange(1, t + 1)
            lam = forgetting ** (t - k)
            Xa = np.hstack([X[:t], np.ones((t, 1))])
            H = 2.0 * (Xa * lam[:, None]).T @ Xa + forgetting**t * a0 * np.eye(d + 1)
            for kk in k:
                j = (kk - 1) % (d + 1)
                H[j, j] += forgetting ** (t - kk) * rho
            w = np.linalg.solve(H, 2.0 * (Xa * lam[:, None]).T @ y[:t])
            np.testing.assert_allclose(learner.w, w, rtol=1e-7, atol=1e-9)
            np.testing.assert_allclose(learner.P, np.linalg.inv(H), rtol=1e-6, atol=1e-10)
    # After the change, the forgetting learner follows the new concept.
    np.testing.assert_allclose(learner.w[:d], [-2.0, 0.5, 1.0], atol=0.2)


def drifting_stream(n: int, flip_at: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A slowly rotating separator with 5% label noise and an abrupt label flip at ``flip_at``."""
    rng = np.random.default_rng(seed)
    centre = np.array([0.0, 2.0, 1.0])
    sd = np.array([1.0, 5.0, 0.2])
    X = rng.normal(size=(n, 3)) * sd + centre
    ang = np.linspace(0.0, 3.0 * np.pi, n)
    W = np.stack([np.cos(ang), np.sin(ang), np.ones(n)], axis=1) / sd
    y = np.where(np.einsum("ij,ij->i", X - centre, W) > 0, 1.0, -1.0)
    y[flip_at:] *= -1.0
    y[rng.random(n) < 0.05] *= -1.0
    return X, y


@pytest.mark.parametrize("forgetting", [0.9, 0.95])
def test_forgetting_newton_stays_positive_definite_and_recovers_from_a_flip(forgetting: float) -> None:
    n, flip = 20_000, 12_000
    X, y = drifting_stream(n, flip, seed=5)
    learner = ForgettingNewton(3, "logistic", forgetting=forgetting)
    correct = np.empty(n, dtype=bool)
    for i in range(n):
        correct[i] = learner.predict_one(X[i]) == y[i]
        learner.learn_one(X[i], float(y[i]))
        if i % 500 == 499:
            P = learner.P
            np.testing.assert_allclose(P, P.T, rtol=1e-9, atol=1e-12 * np.abs(P).max())
            assert np.linalg.eigvalsh(0.5 * (P + P.T)).min() > 0.0
            assert np.all(np.isfinite(learner.w))
    before = correct[flip - 1000 : flip].mean()
    assert before > 0.8
    assert correct[flip : flip + 10].mean() < 0.5  # the flip hurts at first
    assert correct[flip + 100 : flip + 400].mean() > before - 0.05


def test_forgetting_newton_rejects_bad_parameters() -> None:
    for kwargs in ({"forgetting": 0.0}, {"forgetting": 1.01}, {"prior": 0.0}, {"prior": -1.0}):
        with pytest.raises(ValueError):
            ForgettingNewton(2, **kwargs)  # type: ignore[arg-type]


def test_forgetting_newton_anchor_moves_the_prior_mean() -> None:
    """After anchor(model) the learner is shrunk towards the model, not towards 0."""
    rng = np.random.default_rng(6)
    model = LinearModel(get_loss("squared"), np.array([2.0, -1.0, 3.0]), C=1.0)
    learner = ForgettingNewton(2, "squared", forgetting=0.5, prior=50.0, scale=False)
    learner.anchor(model)
    np.testing.assert_array_equal(learner.m, [2.0, -1.0, 3.0])
    # Targets from the anchored model itself: the strong prior and the data agree, so w stays there.
    for _ in range(200):
        x = rng.normal(size=2)
        learner.learn_one(x, model.predict_one(x))
    np.testing.assert_allclose(learner.w, [2.0, -1.0, 3.0], atol=1e-8)


# --- first-order learners ------------------------------------------------------------------------------


def test_sgd_on_a_stationary_stream_approaches_the_batch_model() -> None:
    X, y = logistic_stream(4000, seed=7, steep=2.0)
    half = 2000
    batch = train_linear(X[:half], y[:half], "logistic", C=1.0)
    batch_acc = float(np.mean(batch.predict(X[half:]) == y[half:]))
    learner = SGD(4, "logistic", lr=0.05, schedule="inverse", l2=1e-4)
    correct = prequential(learner, X, y)
    assert correct[half:].mean() > batch_acc - 0.02
    # The learned direction agrees with the batch one.
    cos = learner.w @ batch.beta / (np.linalg.norm(learner.w) * np.linalg.norm(batch.beta))
    assert cos > 0.98


def test_sgd_step_sizes() -> None:
    s = SGD(2, lr=0.5, schedule="constant")
    assert s.step_size() == 0.5
    s = SGD(2, lr=0.5, schedule="inverse", l2=0.1)
    assert s.step_size() == pytest.approx(0.5 / (1 + 0.5 * 0.1 * 1))
    s = SGD(2, lr=0.5, schedule="invscaling", power_t=0.5)
    s.learn_one(np.zeros(2), 1.0)
    s.learn_one(np.zeros(2), 1.0)
    assert s.step_size() == pytest.approx(0.5 / 3**0.5)


def test_sgd_single_step_matches_the_formula() -> None:
    s = SGD(2, "squared", lr=0.1, schedule="constant", l2=0.5)
    s.w[:] = [1.0, 2.0, 3.0]
    x = np.array([0.5, -1.0])
    s.learn_one(x, 4.0)
    xa = np.array([0.5, -1.0, 1.0])
    w0 = np.array([1.0, 2.0, 3.0])
    c = -2.0 * (4.0 - xa @ w0)
    expected = w0.copy()
    expected[:-1] *= 1.0 - 0.1 * 0.5  # the bias weight is not decayed
    expected -= 0.1 * c * xa
    np.testing.assert_allclose(s.w, expected)


@pytest.mark.parametrize("method", ["rmsprop", "adagrad"])
def test_adaptive_sgd_learns_badly_scaled_separable_stream(method: Literal["rmsprop", "adagrad"]) -> None:
    X, y, _ = separable_stream(3000, seed=8, margin=0.2, badly_scaled=True)
    learner = AdaptiveSGD(4, "logistic", method=method)
    correct = prequential(learner, X, y)
    assert correct.mean() > 0.95
    assert correct[1000:].mean() > 0.97


def test_adaptive_sgd_accumulators() -> None:
    a = AdaptiveSGD(1, "squared", lr=0.1, method="adagrad", scale=False, eps=0.0)
    a.learn_one(np.array([2.0]), 1.0)  # w = 0: g = -2·1·(2, 1)
    np.testing.assert_allclose(a._v, [16.0, 4.0])
    np.testing.assert_allclose(a.w, [0.1, 0.1])  # −η g/√v = η·sign
    r = AdaptiveSGD(1, "squared", lr=0.1, method="rmsprop", rho=0.9, scale=False, eps=0.0)
    r.learn_one(np.array([2.0]), 1.0)
    np.testing.assert_allclose(r._v, [1.6, 0.4])
    np.testing.assert_allclose(r.w, 0.1 * np.array([4.0, 2.0]) / np.sqrt([1.6, 0.4]))


def test_perceptron_stops_making_mistakes_on_a_separable_stream() -> None:
    """Passes over a separable set: finitely many mistakes (Novikoff's bound), then none at all."""
    n, passes = 500, 30
    X, y, w_sep = separable_stream(n, seed=9, margin=0.3)
    learner = Perceptron(4, scale=False)
    mistakes_per_pass = []
    for _ in range(passes):
        mistakes_per_pass.append(int(np.sum(~prequential(learner, X, y))))
    total = sum(mistakes_per_pass)
    Xa = np.hstack([X, np.ones((n, 1))])
    R = np.max(np.linalg.norm(Xa, axis=1))
    gamma = np.min(y * (Xa @ w_sep)) / np.linalg.norm(w_sep)
    assert 0 < total <= (R / gamma) ** 2
    first_clean = mistakes_per_pass.index(0)
    assert first_clean < passes // 2
    # Once a whole pass is clean, it stays clean: the weights have converged.
    assert all(m == 0 for m in mistakes_per_pass[first_clean:])
    w = learner.w.copy()
    prequential(learner, X, y)
    np.testing.assert_array_equal(learner.w, w)
    # And it classifies fresh samples from the same separable distribution well.
    X2, y2, _ = separable_stream(1000, seed=10, margin=0.3)
    assert np.mean(learner.predict_many(X2) == y2) > 0.97


def test_perceptron_updates_only_on_mistakes() -> None:
    p = Perceptron(2, lr=0.5, scale=False)
    p.learn_one(np.array([1.0, 2.0]), 1.0)  # score 0 counts as a mistake
    np.testing.assert_allclose(p.w, [0.5, 1.0, 0.5])
    p.learn_one(np.array([1.0, 1.0]), 1.0)  # correct: no change
    np.testing.assert_allclose(p.w, [0.5, 1.0, 0.5])
    p.learn_one(np.array([1.0, 1.0]), -1.0)  # mistake
    np.testing.assert_allclose(p.w, [0.0, 0.5, 0.0])


# --- anchor, predict_many, clone -----------------------------------------------------------------------


LEARNER_FACTORIES: dict[str, Callable[[bool], IncrementalLearner]] = {
    "sgd": lambda scale: SGD(3, "logistic", lr=0.1, scale=scale),
    "rmsprop": lambda scale: AdaptiveSGD(3, "logistic", method="rmsprop", scale=scale),
    "adagrad": lambda scale: AdaptiveSGD(3, "logistic", method="adagrad", scale=scale),
    "newton": lambda scale: ForgettingNewton(3, "logistic", forgetting=0.9, scale=scale),
    "perceptron": lambda scale: Perceptron(3, scale=scale),
    "newton-squared": lambda scale: ForgettingNewton(3, "squared", forgetting=0.95, scale=scale),
    "sgd-squared": lambda scale: SGD(3, "squared", lr=0.01, scale=scale),
}


def random_model(loss: str, scaled: bool, seed: int) -> LinearModel:
    rng = np.random.default_rng(seed)
    scaler = Standardizer(mean=rng.normal(0, 2, 3), scale=rng.uniform(0.5, 3.0, 3)) if scaled else None
    return LinearModel(get_loss(loss), rng.normal(size=4), C=1.0, bias=1.5, scaler=scaler)


@pytest.mark.parametrize("name", sorted(LEARNER_FACTORIES))
@pytest.mark.parametrize("scale", [False, True])
@pytest.mark.parametrize("model_scaled", [False, True])
def test_anchor_reproduces_the_model(name: str, scale: bool, model_scaled: bool) -> None:
    rng = np.random.default_rng(11)
    learner = LEARNER_FACTORIES[name](scale)
    # Warm the learner (and its EW scaler) on data with a non-trivial mean and spread.
    for _ in range(300):
        x = rng.normal(size=3) * np.array([1.0, 10.0, 0.1]) + np.array([5.0, -3.0, 0.0])
        learner.learn_one(x, float(rng.choice([-1.0, 1.0])))
    loss = "squared" if "squared" in name else "logistic"
    model = random_model(loss, model_scaled, seed=12)
    learner.anchor(model)
    X = rng.normal(size=(500, 3)) * np.array([1.0, 10.0, 0.1]) + np.array([5.0, -3.0, 0.0])
    scores = np.array([learner.score_one(x) for x in X])
    np.testing.assert_allclose(scores, model.decision_function(X), rtol=1e-9, atol=1e-9)
    preds = np.array([learner.predict_one(x) for x in X])
    if loss == "squared":
        np.testing.assert_allclose(preds, model.predict(X), rtol=1e-9, atol=1e-9)
    else:
        np.testing.assert_array_equal(preds, [model.predict_one(x) for x in X])
    np.testing.assert_allclose(learner.predict_many(X), model.predict(X), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", sorted(LEARNER_FACTORIES))
def test_predict_many_agrees_with_predict_one(name: str) -> None:
    learner = LEARNER_FACTORIES[name](True)
    X, y = logistic_stream(300, seed=13)
    X = X[:, :3] * np.array([1.0, 50.0, 0.01])
    for xi, yi in zip(X[:200], y[:200], strict=True):
        learner.learn_one(xi, float(yi))
    many = learner.predict_many(X[200:])
    one = np.array([learner.predict_one(x) for x in X[200:]])
    np.testing.assert_allclose(many, one, rtol=1e-12, atol=1e-12)


def hyper_parameters(learner: IncrementalLearner) -> dict[str, object]:
    """The learner's __init__ arguments (read back from the signature) and what it derived from them."""
    out = learner._get_params()
    out["order"] = learner.order
    if learner.scaler is not None:
        out["scaler"] = learner.scaler._get_params()
    return out


@pytest.mark.parametrize("name", sorted(LEARNER_FACTORIES))
@pytest.mark.parametrize("scale", [False, True])
def test_clone_is_untrained_with_equal_hyper_parameters(name: str, scale: bool) -> None:
    X, y = logistic_stream(400, seed=14)
    X = X[:, :3] * np.array([1.0, 20.0, 1.0]) + 2.0
    trained = LEARNER_FACTORIES[name](scale)
    for xi, yi in zip(X[:300], y[:300], strict=True):
        trained.learn_one(xi, float(yi))
    w_before = trained.w.copy()
    clone = trained.clone()
    assert type(clone) is type(trained)
    assert clone.n_learned == 0
    np.testing.assert_array_equal(clone.w, 0.0)
    assert hyper_parameters(clone) == hyper_parameters(trained)
    assert (clone.scaler is None) == (not scale)
    # The original is untouched and shares no state with the clone.
    np.testing.assert_array_equal(trained.w, w_before)
    assert trained.n_learned == 300
    # "Untrained" means exactly like a fresh learner: both learn the same from the same data.
    fresh = LEARNER_FACTORIES[name](scale)
    for xi, yi in zip(X[300:], y[300:], strict=True):
        clone.learn_one(xi, float(yi))
        fresh.learn_one(xi, float(yi))
    np.testing.assert_array_equal(clone.w, fresh.w)
    np.testing.assert_array_equal(trained.w, w_before)


def test_squared_loss_learner_can_serve_a_classifier() -> None:
    learner = ForgettingNewton(4, "squared", forgetting=1.0, prior=1.0, scale=False, task="classification")
    assert learner.task == "classification"
    X, y = logistic_stream(1000, seed=15, steep=3.0)
    correct = prequential(learner, X, y)
    assert set(np.unique([learner.predict_one(x) for x in X[:50]])) <= {-1.0, 1.0}
    assert correct[500:].mean() > 0.85
