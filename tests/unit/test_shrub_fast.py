"""The shrub trainer's builder path grows, node for node, the tree ``DecisionTreeClassifier.fit`` grows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

from edgedrift.training import shrub
from edgedrift.training.shrub import train_shrub


def _estimator_document(
    X: np.ndarray, y: np.ndarray, monkeypatch: pytest.MonkeyPatch, **kw: Any
) -> dict[str, Any]:
    with monkeypatch.context() as m:
        m.setattr(shrub, "FAST_FIT", False)
        return train_shrub(X, y, "classification", **kw)


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    for key in ("feature", "threshold", "left", "right", "value", "classes", "max_depth", "n_features"):
        assert a[key] == b[key], key


@pytest.mark.parametrize("trial", range(60))
def test_builder_path_grows_the_estimators_tree(trial: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random windows as a Shrub Ensemble sees them (32 rows, ties, duplicated rows and columns, 2-5
    classes, every seed and leaf size): the same nodes, thresholds, class probabilities and depth."""
    rng = np.random.default_rng(trial)
    n, d = int(rng.integers(2, 64)), int(rng.integers(1, 9))
    X = rng.normal(size=(n, d))
    X[:, 0] = np.round(X[:, 0])  # ties: the seed decides between equally good splits
    if d > 1:
        X[:, -1] = X[:, 0]
    X[n // 2 :] = X[: n - n // 2] if trial % 3 == 0 else X[n // 2 :]
    labels = [-1.0, 1.0] if trial % 2 else [0.0, 1.0, 2.0, 3.0, 4.0][: int(rng.integers(1, 6))]
    y = rng.choice(labels, size=n)
    kw = {"max_depth": int(rng.integers(1, 9)), "min_samples_leaf": int(rng.integers(1, 4)), "seed": trial}
    fast = train_shrub(X, y, "classification", **kw)
    _same(fast, _estimator_document(X, y, monkeypatch, **kw))


def test_builder_path_is_the_one_taken() -> None:
    """The path is live (not silently the estimator): the builder is importable from this scikit-learn."""
    assert shrub.FAST_FIT


def test_seed_draw_is_the_random_states_first_draw() -> None:
    """The splitter's seed is the integer a fresh RandomState(seed) draws, as check_random_state gives."""
    for seed in (0, 1, 7, 2**31):
        assert shrub._SeedDraw(seed).randint(0, 0x7FFFFFFF) == np.random.RandomState(seed).randint(
            0, 0x7FFFFFFF
        )


@pytest.mark.parametrize(
    ("X", "y", "error"),
    [
        (np.array([[np.inf], [0.0]]), np.array([0.0, 1.0]), ValueError),
        (np.array([[0.0], [1.0]]), np.array([0.5, 1.0]), ValueError),
    ],
)
def test_inputs_the_estimator_refuses_are_refused(X: np.ndarray, y: np.ndarray, error: type) -> None:
    """Infinite features and continuous targets go to the estimator, which refuses them as before."""
    with pytest.raises(error):
        train_shrub(X, y, "classification")


def test_missing_values_take_the_estimators_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """NaN features: the estimator's missing-value splitter, as before (same document either way)."""
    X = np.array([[0.0], [np.nan], [2.0], [3.0], [np.nan], [5.0]])
    y = np.array([0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    _same(train_shrub(X, y, "classification"), _estimator_document(X, y, monkeypatch))
    est = DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, y)
    assert train_shrub(X, y, "classification")["feature"][0] == int(est.tree_.feature[0])


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ({"coef": [1.0, float("nan")], "n": 3}, "model.coef[1]"),
        ({"value": [[0.5, 0.5], [float("inf"), 0.0]]}, "model.value[1][0]"),
        ({"names": ["a", "b"], "scaler": {"scale": [1.0, None, -float("inf")]}}, "model.scaler.scale[2]"),
        ({"t": float("nan")}, "model.t"),
    ],
)
def test_finite_check_names_the_first_bad_entry(document: dict[str, Any], path: str) -> None:
    """The array fast path of the document check still names the first non-finite entry."""
    from edgedrift.training.window import check_finite_document
    from edgedrift.wire import WindowError

    with pytest.raises(WindowError, match=path.replace("[", r"\[").replace("]", r"\]")):
        check_finite_document(document)


def test_finite_check_passes_what_the_entry_walk_passes() -> None:
    """None, strings, huge integers and ragged lists are not non-finite floats: no error, as before."""
    from edgedrift.training.window import check_finite_document

    check_finite_document({"a": [None, 1.0], "b": ["nan", "x"], "c": [10**400, 1], "d": [[1.0], [2.0, 3.0]]})
