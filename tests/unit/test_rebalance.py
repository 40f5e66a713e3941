"""Tests of SMOTE rebalancing (RebalanceStream's rule) and the blocked prequential kappa."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from edgedrift.metrics import classification_report
from edgedrift.training.linear import LinearTrainer
from edgedrift.training.rebalance import Predictor, prequential, prequential_kappa, smote


def imbalanced(n: int, minority: int, seed: int, d: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """n samples, ``minority`` of them labelled +1 (shifted by 2 on feature 0), the rest −1, shuffled."""
    rng = np.random.default_rng(seed)
    y = np.full(n, -1.0)
    y[rng.choice(n, size=minority, replace=False)] = 1.0
    X = rng.normal(size=(n, d))
    X[y == 1.0, 0] += 2.0
    return X, y


def test_smote_balances_and_keeps_originals_first() -> None:
    X, y = imbalanced(200, 15, seed=0)
    res = smote(X, y, seed=1)
    assert res.applied and "k=5" in res.note
    classes, counts = np.unique(res.y, return_counts=True)
    np.testing.assert_array_equal(classes, [-1.0, 1.0])
    assert counts[0] == counts[1] == 185
    np.testing.assert_array_equal(res.X[:200], X)
    np.testing.assert_array_equal(res.y[:200], y)
    assert np.all(res.y[200:] == 1.0)
    # Synthetic samples lie inside the minority cloud, not on top of an original.
    minority = X[y == 1.0]
    synthetic = res.X[200:]
    assert synthetic[:, 0].mean() > 1.0 > X[y == -1.0, 0].mean()
    assert synthetic[:, 0].min() >= minority[:, 0].min() and synthetic[:, 0].max() <= minority[:, 0].max()


def test_smote_is_seeded() -> None:
    X, y = imbalanced(100, 10, seed=2)
    a, b, c = smote(X, y, seed=7), smote(X, y, seed=7), smote(X, y, seed=8)
    np.testing.assert_array_equal(a.X, b.X)
    assert not np.array_equal(a.X, c.X)


def test_smote_with_three_minority_samples_interpolates_with_two_neighbours() -> None:
    # k = min(5, 3 − 1) = 2: every synthetic sample lies on a segment between two of the three originals.
    X, y = imbalanced(40, 3, seed=3, d=2)
    res = smote(X, y, seed=0)
    assert res.applied and "k=2" in res.note
    P = X[y == 1.0]
    for s in res.X[40:]:
        on_segment = False
        for i in range(3):
            for j in range(3):
                if i == j:
                    continue
                u, v = P[j] - P[i], s - P[i]
                g = float(u @ v) / float(u @ u)
                on_segment |= bool(-1e-9 <= g <= 1 + 1e-9 and np.allclose(P[i] + g * u, s, atol=1e-9))
        assert on_segment


def test_smote_balances_every_minority_class() -> None:
    rng = np.random.default_rng(4)
    y = np.repeat([0.0, 1.0, 2.0], [60, 12, 4])
    X = rng.normal(size=(76, 2)) + y[:, None]
    res = smote(X, y, seed=0)
    assert res.applied and "k=3" in res.note
    np.testing.assert_array_equal(np.unique(res.y, return_counts=True)[1], [60, 60, 60])
    np.testing.assert_array_equal(res.X[:76], X)


@pytest.mark.parametrize(
    ("y", "reason"),
    [
        (np.array([1.0] * 30 + [-1.0]), "single sample"),
        (np.array([0.0] * 20 + [1.0] * 5 + [2.0]), "single sample"),
        (np.full(31, -1.0), "fewer than 2 classes"),
        (np.array([1.0, -1.0] * 15), "already balanced"),
    ],
)
def test_smote_skips_without_raising(y: np.ndarray, reason: str) -> None:
    X = np.random.default_rng(5).normal(size=(y.size, 2))
    res = smote(X, y, seed=0)
    assert not res.applied and reason in res.note
    assert np.array_equal(res.X, X) and np.array_equal(res.y, y)


def linear_fit(X: np.ndarray, y: np.ndarray) -> Predictor:
    return LinearTrainer(loss="logistic", C=1.0)(X, y).predict


def test_prequential_kappa_is_blocked_test_then_train() -> None:
    X, y = imbalanced(250, 60, seed=6)
    edges = np.linspace(0, 250, 6).astype(int)
    preds = [linear_fit(X[: edges[b]], y[: edges[b]])(X[edges[b] : edges[b + 1]]) for b in range(1, 5)]
    expected = classification_report(y[edges[1] :], np.concatenate(preds))["kappa"]
    assert prequential_kappa(linear_fit, X, y) == pytest.approx(expected, abs=1e-12)
    assert 0.3 < expected < 1.0


def test_one_class_prefix_predicts_that_class() -> None:
    X = np.random.default_rng(7).normal(size=(100, 2))
    y = np.concatenate([np.full(50, 1.0), np.full(50, -1.0)])
    seen: list[int] = []

    def fit(Xt: np.ndarray, yt: np.ndarray) -> Predictor:
        assert np.unique(yt).size == 2, "fit must not be called on a one-class prefix"
        seen.append(yt.size)
        return lambda Z: np.full(Z.shape[0], -1.0)

    # Blocks of 20: prefixes of 20 and 40 hold +1 only and predict +1; prefixes of 60 and 80 call fit.
    kappa = prequential_kappa(fit, X, y, blocks=5)
    assert seen == [60, 80]
    y_pred = np.concatenate([np.full(40, 1.0), np.full(40, -1.0)])
    assert kappa == pytest.approx(classification_report(y[20:], y_pred)["kappa"])
    assert kappa > 0.5


def test_multiclass_kappa_and_label_names() -> None:
    rng = np.random.default_rng(8)
    y = rng.integers(0, 3, size=120).astype(float)
    noisy = np.where(rng.random(120) < 0.3, rng.integers(0, 3, size=120).astype(float), y)
    X = np.column_stack([y + rng.normal(scale=0.8, size=120), np.arange(120.0)])  # column 1: row id

    def lookup(Xt: np.ndarray, yt: np.ndarray) -> Predictor:
        return lambda Z: noisy[Z[:, 1].astype(int)]

    kappa = prequential_kappa(lookup, X, y, blocks=4)
    assert kappa == pytest.approx(cohen_kappa_score(y[30:], noisy[30:]))
    assert 0.3 < kappa < 1.0
    # Binary labels named 0/1 give the same kappa as their ±1 image.
    yb = (y > 0).astype(float)
    assert prequential_kappa(linear_fit_01, X[:, :1], yb) == pytest.approx(
        prequential_kappa(linear_fit, X[:, :1], np.where(yb > 0, 1.0, -1.0))
    )


def linear_fit_01(X: np.ndarray, y: np.ndarray) -> Predictor:
    model = LinearTrainer(loss="logistic", C=1.0)(X, np.where(y > 0, 1.0, -1.0))
    return lambda Z: (model.predict(Z) > 0).astype(float)


def test_prequential_kappa_degenerate_inputs() -> None:
    X = np.zeros((1, 2))
    assert prequential_kappa(linear_fit, X, np.array([1.0])) == 0.0
    with pytest.raises(ValueError, match="blocks"):
        prequential_kappa(linear_fit, X, np.array([1.0]), blocks=1)
    # All-correct predictions of a single class: chance agreement is 1, kappa is 0 (not NaN).
    assert prequential_kappa(linear_fit, np.zeros((10, 2)), np.full(10, -1.0)) == 0.0


def test_prepare_rebalances_each_prefix_and_only_real_rows_are_tested() -> None:
    X, y = imbalanced(250, 40, seed=9)
    edges = np.linspace(0, 250, 6).astype(int)
    prefixes: list[int] = []

    def prepare(Xt: np.ndarray, yt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        prefixes.append(yt.size)
        res = smote(Xt, yt, seed=3)
        return res.X, res.y

    run = prequential(linear_fit, X, y, prepare=prepare)
    assert prefixes == [int(e) for e in edges[1:5]]
    preds = [
        linear_fit(*prepare(X[: edges[b]], y[: edges[b]]))(X[edges[b] : edges[b + 1]]) for b in range(1, 5)
    ]
    expected = classification_report(y[edges[1] :], np.concatenate(preds))
    assert run.kappa == pytest.approx(expected["kappa"], abs=1e-12)
    assert run.counts is not None and sum(run.counts) == 250 - int(edges[1])
    # Balancing every prefix moves the decision towards the minority: more +1 predictions than without.
    plain = prequential(linear_fit, X, y)
    assert plain.counts is not None and run.counts[0] + run.counts[1] > plain.counts[0] + plain.counts[1]
