"""Tests of the shrub (depth-limited CART) document: export from sklearn, numpy prediction, validation."""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from edgedrift.models.document import predict_document
from edgedrift.models.linear import MODEL_FORMAT, LinearModel
from edgedrift.models.losses import get_loss
from edgedrift.models.tree import predict_proba_tree, predict_tree, validate_tree_document
from edgedrift.training.shrub import train_shrub


def make_data(n: int, d: int, n_classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian features; labels from a noisy nonlinear rule (classes 0 … k−1, or real values for k = 0)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    score = np.sin(2 * X[:, 0]) + X[:, 1] * X[:, -1] + 0.3 * rng.normal(size=n)
    if n_classes == 0:
        return X, score
    cuts = np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1])
    return X, np.searchsorted(cuts, score).astype(np.float64)


def sklearn_tree(
    X: np.ndarray, y: np.ndarray, task: str, max_depth: int, min_samples_leaf: int = 1
) -> DecisionTreeClassifier | DecisionTreeRegressor:
    cls = DecisionTreeClassifier if task == "classification" else DecisionTreeRegressor
    return cls(max_depth=max_depth, min_samples_leaf=min_samples_leaf, random_state=0).fit(X, y)


def with_ties(doc: dict[str, Any], X: np.ndarray) -> np.ndarray:
    """Rows of X where, row by row, the tested feature of one split node is set exactly to its threshold."""
    T = X[: len(doc["feature"])].copy()
    for i, (f, t) in enumerate(zip(doc["feature"], doc["threshold"], strict=True)):
        if f >= 0:
            T[i, f] = t
    return T


@pytest.mark.parametrize(
    ("task", "n_classes", "max_depth", "min_leaf"),
    [
        ("classification", 2, 4, 1),
        ("classification", 3, 5, 1),
        ("classification", 3, 3, 7),
        ("regression", 0, 4, 1),
        ("regression", 0, 6, 5),
    ],
)
def test_prediction_equals_sklearn(task: str, n_classes: int, max_depth: int, min_leaf: int) -> None:
    X, y = make_data(400, 4, n_classes, seed=n_classes + max_depth)
    doc = train_shrub(X, y, task, max_depth=max_depth, min_samples_leaf=min_leaf)  # type: ignore[arg-type]
    est = sklearn_tree(X, y, task, max_depth, min_leaf)
    assert len(doc["feature"]) == est.tree_.node_count > 7
    assert doc["max_depth"] == est.tree_.max_depth <= max_depth
    X_test = np.random.default_rng(99).normal(size=(3000, 4)) * 1.5
    for Z in (X, X_test, with_ties(doc, X_test)):
        np.testing.assert_array_equal(predict_tree(doc, Z), est.predict(Z))
        np.testing.assert_array_equal(predict_document(doc, Z), est.predict(Z))
    if task == "classification":
        assert doc["classes"] == [float(c) for c in range(n_classes)]
        np.testing.assert_allclose(
            predict_proba_tree(doc, X_test), est.predict_proba(X_test), rtol=0, atol=1e-12
        )


def test_tie_at_threshold_goes_left() -> None:
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    doc = train_shrub(X, np.array([0.0, 0.0, 1.0, 1.0]), "classification", max_depth=1)
    assert doc["threshold"][0] == 1.5
    above = float(np.nextafter(np.float32(1.5), np.float32(2.0)))  # the next value in float32
    np.testing.assert_array_equal(predict_tree(doc, np.array([[1.5], [above]])), [0.0, 1.0])


def test_features_are_compared_in_float32_like_sklearn() -> None:
    # Two adjacent float32 values: the threshold is their exact midpoint, which rounds half-to-even to the
    # upper value in float32, so scikit-learn sends x == threshold right although x <= threshold in float64.
    a = np.float32(1e6) + np.float32(0.0625)
    b = np.nextafter(a, np.float32(2e6))
    X = np.array([[a], [a], [b], [b]], dtype=np.float64)
    y = np.array([-1.0, -1.0, 1.0, 1.0])
    doc = train_shrub(X, y, "classification", max_depth=1)
    q = np.array([[doc["threshold"][0]]])
    assert q[0, 0] <= doc["threshold"][0]
    assert sklearn_tree(X, y, "classification", 1).predict(q)[0] == 1.0
    assert predict_tree(doc, q)[0] == 1.0


def test_labels_are_mapped_back_and_json_round_trips() -> None:
    X, y = make_data(300, 3, 3, seed=5)
    labels = np.array([-4.0, 2.0, 7.0])[y.astype(int)]
    doc = train_shrub(X, labels, "classification", max_depth=3)
    assert doc["format"] == MODEL_FORMAT and doc["kind"] == "shrub" and doc["n_train"] == 300
    assert doc["classes"] == [-4.0, 2.0, 7.0]
    assert doc["version"] is None and isinstance(doc["created"], str)
    np.testing.assert_allclose(np.asarray(doc["value"]).sum(axis=1), 1.0)
    back = json.loads(json.dumps(doc))
    validate_tree_document(back)
    np.testing.assert_array_equal(
        predict_tree(back, X), sklearn_tree(X, labels, "classification", 3).predict(X)
    )
    assert set(np.unique(predict_tree(back, X))) <= {-4.0, 2.0, 7.0}


def test_single_class_window_gives_a_leaf() -> None:
    X = np.random.default_rng(0).normal(size=(20, 2))
    doc = train_shrub(X, np.full(20, 3.0), "classification")
    assert doc["feature"] == [-1] and doc["max_depth"] == 0 and doc["value"] == [[1.0]]
    np.testing.assert_array_equal(predict_tree(doc, X), np.full(20, 3.0))


def test_seed_makes_training_deterministic() -> None:
    X, y = make_data(200, 5, 2, seed=8)
    X[:, 3] = X[:, 0]  # duplicated feature: equally good splits, chosen by the seeded permutation
    a, b = (train_shrub(X, y, "classification", seed=3) for _ in range(2))
    assert {k: v for k, v in a.items() if k != "created"} == {k: v for k, v in b.items() if k != "created"}


def test_wrong_number_of_features_is_rejected() -> None:
    X, y = make_data(100, 3, 2, seed=1)
    doc = train_shrub(X, y, "classification")
    with pytest.raises(ValueError, match="X must be"):
        predict_tree(doc, X[:, :2])


@pytest.fixture(scope="module")
def shrub_doc() -> dict[str, Any]:
    X, y = make_data(300, 3, 3, seed=2)
    return train_shrub(X, y, "classification", max_depth=3)


def corrupt(doc: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    bad = copy.deepcopy(doc)
    bad[key] = value
    return bad


def first_split(doc: dict[str, Any]) -> int:
    return next(i for i, f in enumerate(doc["feature"]) if f >= 0)


def first_leaf(doc: dict[str, Any]) -> int:
    return next(i for i, f in enumerate(doc["feature"]) if f < 0)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: corrupt(d, "format", "edgedrift.model/0"), "format"),
        (lambda d: corrupt(d, "kind", "bush"), "not a shrub"),
        (lambda d: corrupt(d, "task", "ranking"), "task"),
        (lambda d: corrupt(d, "n_features", 0), "n_features"),
        (lambda d: corrupt(d, "threshold", d["threshold"][:-1]), "threshold"),
        (lambda d: corrupt(d, "left", [*d["left"], -1]), "left"),
        (lambda d: corrupt(d, "value", d["value"][:-1]), "value"),
        (lambda d: corrupt(d, "value", [row[:-1] for row in d["value"]]), "value"),
        (lambda d: corrupt(d, "classes", [2.0, 1.0, 0.0]), "sorted"),
        (lambda d: corrupt(d, "classes", None), "classes"),
        (lambda d: corrupt(d, "feature", "abc"), "feature"),
        (lambda d: corrupt(d, "threshold", ["x"] * len(d["threshold"])), "threshold"),
        (lambda d: corrupt(d, "max_depth", d["max_depth"] - 1), "deeper than max_depth"),
    ],
)
def test_validation_rejects_inconsistent_documents(
    shrub_doc: dict[str, Any], mutate: Any, message: str
) -> None:
    validate_tree_document(shrub_doc)
    with pytest.raises(ValueError, match=message):
        validate_tree_document(mutate(shrub_doc))


@pytest.mark.parametrize(
    ("key", "node", "value", "message"),
    [
        ("left", "split", 10_000, "'left' child"),
        ("right", "split", -1, "'right' child"),
        ("right", "split", 0, "'right' child"),
        ("feature", "split", 3, "feature indices"),
        ("feature", "split", -5, "feature indices"),
        ("left", "leaf", 1, "leaves"),
        ("threshold", "split", float("nan"), "finite"),
    ],
)
def test_validation_rejects_bad_node_entries(
    shrub_doc: dict[str, Any], key: str, node: str, value: float, message: str
) -> None:
    bad = copy.deepcopy(shrub_doc)
    i = first_split(bad) if node == "split" else first_leaf(bad)
    bad[key][i] = value
    with pytest.raises(ValueError, match=message):
        validate_tree_document(bad)


def test_regression_value_must_be_flat() -> None:
    X, y = make_data(200, 3, 0, seed=4)
    doc = train_shrub(X, y, "regression", max_depth=2)
    validate_tree_document(doc)
    with pytest.raises(ValueError, match="value"):
        validate_tree_document(corrupt(doc, "value", [[v] for v in doc["value"]]))


def test_predict_document_dispatches_on_kind(shrub_doc: dict[str, Any]) -> None:
    X = np.random.default_rng(3).normal(size=(50, 3))
    model = LinearModel(loss=get_loss("logistic"), beta=np.array([1.0, -2.0, 0.5, 0.1]), C=1.0)
    np.testing.assert_array_equal(predict_document(model.to_document(), X), model.predict(X))
    np.testing.assert_array_equal(predict_document(shrub_doc, X), predict_tree(shrub_doc, X))
    with pytest.raises(ValueError, match="unknown model kind"):
        predict_document(corrupt(shrub_doc, "kind", "forest"), X)
    with pytest.raises(ValueError, match="format"):
        predict_document(corrupt(shrub_doc, "format", "other/1"), X)
