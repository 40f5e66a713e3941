"""ONNX export checked with onnxruntime: labels equal to the model's own, probabilities and values to
1e-9, for linear models of every loss and for shrubs (classification and regression)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

from edgedrift.adapters.onnx import document_to_onnx, to_onnx
from edgedrift.models.linear import LinearModel, Standardizer
from edgedrift.models.tree import ShrubModel
from edgedrift.training.linear import LinearTrainer
from edgedrift.training.shrub import train_shrub

TOL = 1e-9


def run(blob: bytes, X: np.ndarray) -> dict[str, np.ndarray]:
    session = onnxruntime.InferenceSession(blob, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {"X": X}), strict=True))


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(3000, 3)) * [1.0, 20.0, 0.05] + [0.5, -4.0, 0.0]
    y = np.where(X[:, 0] - 0.05 * X[:, 1] + 10.0 * X[:, 2] > 0.3, 1.0, -1.0)
    flip = rng.random(3000) < 0.1
    return X, np.where(flip, -y, y), X @ [2.0, 0.1, -30.0] + rng.normal(size=3000)


@pytest.mark.parametrize("scaled", [False, True])
def test_logistic_model_labels_and_probabilities(scaled: bool) -> None:
    X, y, _ = data()
    model = LinearTrainer("logistic", 5.0)(X, y)
    if scaled:
        model = LinearModel(model.loss, model.beta, model.C, scaler=Standardizer.fit(X))
    out = run(to_onnx(model), X)
    assert np.array_equal(out["label"], model.predict(X))
    np.testing.assert_allclose(out["probabilities"], model.predict_proba(X), rtol=0, atol=TOL)


def test_squared_hinge_model_labels_and_scores() -> None:
    X, y, _ = data(1)
    model = LinearTrainer("squared_hinge", 5.0)(X, y)
    out = run(to_onnx(model), X)
    assert out["label"].dtype == np.int64
    assert np.array_equal(out["label"], model.predict(X))
    np.testing.assert_allclose(out["scores"], model.decision_function(X), rtol=0, atol=TOL)


def test_ridge_model_values() -> None:
    X, _, y_reg = data(2)
    model = LinearTrainer("squared", 5.0)(X, y_reg)
    out = run(to_onnx(model), X)
    np.testing.assert_allclose(out["variable"][:, 0], model.predict(X), rtol=TOL, atol=TOL)


@pytest.mark.parametrize("depth", [1, 4, 8])
def test_shrub_classifier_labels_and_probabilities(depth: int) -> None:
    X, y, _ = data(3)
    doc = train_shrub(X[:1500], y[:1500], "classification", max_depth=depth)
    shrub = ShrubModel.from_document(doc)
    out = run(document_to_onnx(doc), X)
    assert np.array_equal(out["label"], shrub.predict(X))
    np.testing.assert_allclose(out["probabilities"], shrub.predict_proba(X), rtol=0, atol=TOL)


def test_shrub_compares_rows_rounded_to_float32_like_sklearn() -> None:
    X, y, _ = data(4)
    doc = train_shrub(X[:500], y[:500], "classification", max_depth=1)
    threshold, f = doc["threshold"][0], doc["feature"][0]
    # A row next to the threshold on the other side of it than its float32 rounding.
    up = float(np.float32(threshold)) <= threshold
    v = float(np.nextafter(np.float64(threshold), np.inf if up else -np.inf))
    assert (v <= threshold) != (float(np.float32(v)) <= threshold), "the row must discriminate"
    rows = np.zeros((1, 3))
    rows[0, f] = v
    shrub = ShrubModel.from_document(doc)
    out = run(to_onnx(shrub), rows)
    assert np.array_equal(out["label"], shrub.predict(rows))
    np.testing.assert_allclose(out["probabilities"], shrub.predict_proba(rows), rtol=0, atol=TOL)


def test_shrub_regressor_values() -> None:
    X, _, y_reg = data(5)
    shrub = ShrubModel.from_document(train_shrub(X[:1500], y_reg[:1500], "regression", max_depth=6))
    out = run(to_onnx(shrub), X)
    np.testing.assert_allclose(out["variable"][:, 0], shrub.predict(X), rtol=0, atol=TOL)


def test_what_cannot_be_exported_says_why() -> None:
    with pytest.raises(TypeError, match="a LinearModel or a ShrubModel"):
        to_onnx("model")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown model kind"):
        document_to_onnx({"format": "edgedrift.model/1", "kind": "forest"})
