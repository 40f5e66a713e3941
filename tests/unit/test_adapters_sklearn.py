"""scikit-learn round trips: LogisticRegression, LinearSVC, Ridge and CART trees to EdgeDrift's models and
back predict the same to 1e-12."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from edgedrift.models.linear import LinearModel, Standardizer
from edgedrift.models.losses import get_loss
from edgedrift.models.tree import ShrubModel
from edgedrift.training.linear import LinearTrainer
from edgedrift.training.shrub import train_shrub

TOL = 1e-12


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(600, 4)) * [1.0, 10.0, 0.1, 3.0] + [0.0, 5.0, 0.0, -2.0]
    y = np.where(X[:, 0] + 0.1 * X[:, 1] - 3.0 * X[:, 2] > 0.4, 1, -1)
    y_reg = X @ [1.0, -0.2, 3.0, 0.5] + rng.normal(size=600)
    return X, y, y_reg


@pytest.mark.parametrize(
    ("est", "loss"),
    [
        (LogisticRegression(C=3.0), "logistic"),
        (LogisticRegression(C=0.5, solver="liblinear", intercept_scaling=2.0), "logistic"),
        (LinearSVC(C=0.1), "squared_hinge"),
        (Ridge(alpha=0.5), "squared"),
    ],
)
def test_linear_estimators_round_trip(est: Any, loss: str) -> None:
    X, y, y_reg = data()
    est.fit(X, y_reg if loss == "squared" else y)
    model = LinearModel.from_sklearn(est)
    assert model.loss.name == loss
    if loss == "squared":
        assert pytest.approx(1.0 / (2.0 * est.alpha)) == model.C
        np.testing.assert_allclose(model.predict(X), est.predict(X), rtol=0, atol=TOL)
    else:
        assert model.C == est.C
        np.testing.assert_allclose(model.decision_function(X), est.decision_function(X), rtol=0, atol=TOL)
        assert np.array_equal(model.predict(X), est.predict(X))
    back = model.to_sklearn()
    assert type(back) is type(est)
    np.testing.assert_allclose(back.predict(X), est.predict(X), rtol=0, atol=TOL)
    if loss == "logistic":
        np.testing.assert_allclose(model.predict_proba(X), est.predict_proba(X), rtol=0, atol=TOL)
    # The JSON document keeps it: the registry can store a model that came from scikit-learn.
    again = LinearModel.from_document(model.to_document())
    np.testing.assert_allclose(again.decision_function(X), model.decision_function(X), rtol=0, atol=TOL)


def test_liblinear_intercept_scaling_becomes_the_bias() -> None:
    X, y, _ = data()
    est = LogisticRegression(solver="liblinear", intercept_scaling=4.0).fit(X, y)
    model = LinearModel.from_sklearn(est)
    assert model.bias == 4.0
    assert model.intercept == pytest.approx(float(est.intercept_[0]), abs=TOL)


@pytest.mark.parametrize("loss", ["logistic", "squared_hinge", "squared"])
def test_edgedrift_models_with_a_standardiser_go_to_sklearn(loss: str) -> None:
    X, y, y_reg = data(1)
    target = y_reg if loss == "squared" else y.astype(np.float64)
    model = LinearTrainer(loss, 10.0)(X, target)
    scaled = LinearModel(get_loss(loss), model.beta, 10.0, scaler=Standardizer.fit(X))
    est = scaled.to_sklearn()
    if loss == "squared":
        np.testing.assert_allclose(est.predict(X), scaled.predict(X), rtol=0, atol=TOL)
    else:
        np.testing.assert_allclose(est.decision_function(X), scaled.decision_function(X), rtol=0, atol=TOL)
        assert np.array_equal(est.predict(X), scaled.predict(X))
    back = LinearModel.from_sklearn(est)
    np.testing.assert_allclose(back.decision_function(X), scaled.decision_function(X), rtol=0, atol=TOL)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_cart_trees_round_trip(task: str) -> None:
    X, y, y_reg = data(2)
    est: DecisionTreeClassifier | DecisionTreeRegressor
    if task == "classification":
        est = DecisionTreeClassifier(max_depth=5, random_state=0).fit(X, y)
    else:
        est = DecisionTreeRegressor(max_depth=5, random_state=0).fit(X, y_reg)
    shrub = ShrubModel.from_sklearn(est)
    assert shrub.n_nodes == est.tree_.node_count
    X_new = np.random.default_rng(9).normal(size=(2000, 4)) * 5.0
    for rows in (X, X_new):
        np.testing.assert_allclose(shrub.predict(rows), est.predict(rows), rtol=0, atol=TOL)
        back = shrub.to_sklearn()
        np.testing.assert_allclose(back.predict(rows), est.predict(rows), rtol=0, atol=TOL)
        if task == "classification":
            np.testing.assert_allclose(shrub.predict_proba(rows), est.predict_proba(rows), rtol=0, atol=TOL)
            np.testing.assert_allclose(back.predict_proba(rows), est.predict_proba(rows), rtol=0, atol=TOL)
        assert np.array_equal(back.apply(rows), est.apply(rows))


def test_the_clouds_shrub_document_goes_to_sklearn() -> None:
    X, y, _ = data(3)
    shrub = ShrubModel.from_document(train_shrub(X, y.astype(np.float64), "classification", max_depth=3))
    est = shrub.to_sklearn()
    assert np.array_equal(est.predict(X), shrub.predict(X))
    assert ShrubModel.from_sklearn(est).document["value"] == shrub.document["value"]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_what_does_not_convert_says_why() -> None:
    X, y, _ = data()
    three = np.where(X[:, 0] > 1, 2, np.where(X[:, 0] > -1, 1, 0))
    with pytest.raises(ValueError, match="multinomial"):  # not eq. (1) per class: OneVsRestClassifier is
        LinearModel.from_sklearn(LogisticRegression().fit(X, three))
    with pytest.raises(ValueError, match="squared_hinge"):
        LinearModel.from_sklearn(LinearSVC(loss="hinge").fit(X, y))
    with pytest.raises(TypeError, match="LogisticRegression, LinearSVC or Ridge"):
        LinearModel.from_sklearn(DecisionTreeClassifier().fit(X, y))
    with pytest.raises(TypeError, match="DecisionTreeClassifier or DecisionTreeRegressor"):
        ShrubModel.from_sklearn(Ridge().fit(X, y))
    with pytest.raises(ValueError, match="single-output"):
        ShrubModel.from_sklearn(DecisionTreeRegressor(max_depth=2).fit(X, np.column_stack([y, y])))
