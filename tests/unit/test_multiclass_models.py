"""One-vs-rest linear models of C ≥ 3 classes: LIBLINEAR training against scikit-learn, prediction, the
JSON document and its validation, the scikit-learn and ONNX adapters, the wire's ``n_classes``."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.multiclass import OneVsRestClassifier
from sklearn.svm import LinearSVC

from edgedrift.models.document import model_from_document, predict_document
from edgedrift.models.linear import LinearModel, Standardizer
from edgedrift.models.losses import get_loss
from edgedrift.strategies import TrainSpec
from edgedrift.training.liblinear_fast import solve
from edgedrift.training.linear import LinearTrainer, train_linear, tune_C
from edgedrift.training.window import train_window
from edgedrift.wire import WindowError, WindowHeader, check_window

TIGHT = 1e-10


def data(seed: int = 0, n: int = 300, d: int = 3, C: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 3.0, size=d) + 1.0
    y = np.argmax(X @ rng.normal(size=(d, C)) + rng.normal(size=(n, C)), axis=1).astype(np.float64)
    return X, y


# --- training -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("loss", "est"),
    [
        ("logistic", LogisticRegression(C=2.0, solver="liblinear", tol=1e-12)),
        ("squared_hinge", LinearSVC(C=2.0, tol=1e-12, max_iter=1_000_000)),
    ],
)
def test_one_vs_rest_training_matches_liblinear_per_column_and_sklearn(loss: str, est: Any) -> None:
    X, y = data()
    model = train_linear(X, y, loss, 2.0, eps=TIGHT, n_classes=4)
    assert model.beta.shape == (4, 4) and model.n_classes == 4 and model.multiclass
    # Column c is the binary eq. (1) solution of "c against the rest" (LIBLINEAR's one-call OvR, mapped).
    per_column = np.column_stack(
        [solve(X, np.where(y == c, 1.0, -1.0), model.loss.liblinear_solver, 2.0, eps=TIGHT) for c in range(4)]
    )
    np.testing.assert_allclose(model.beta, per_column, atol=1e-6)
    ovr = OneVsRestClassifier(est).fit(X, y)
    coef = np.array([e.coef_.ravel() for e in ovr.estimators_])
    intercept = np.array([e.intercept_[0] for e in ovr.estimators_])
    np.testing.assert_allclose(model.raw_coef, coef.T, atol=1e-6)
    np.testing.assert_allclose(model.raw_intercept, intercept, atol=1e-6)
    np.testing.assert_array_equal(model.predict(X), ovr.predict(X))
    if loss == "logistic":
        np.testing.assert_allclose(model.predict_proba(X), ovr.predict_proba(X), atol=1e-6)


@pytest.mark.parametrize("present", [[1], [0, 2], [0, 1, 3]])
def test_a_class_the_window_misses_gets_the_never_this_class_column(present: list[int]) -> None:
    X, y = data(1)
    keep = np.isin(y, present)
    X, y = X[keep], y[keep]
    model = train_linear(X, y, "logistic", 1.0, eps=TIGHT, n_classes=4)
    never = solve(X, -np.ones(len(y)), 0, 1.0, eps=TIGHT)  # every label −1
    for c in range(4):
        want = never if c not in present else solve(X, np.where(y == c, 1.0, -1.0), 0, 1.0, eps=TIGHT)
        np.testing.assert_allclose(model.beta[:, c], want, atol=1e-6)
    assert set(np.unique(model.predict(X))) <= set(map(float, present))


def test_labels_must_fit_the_classes() -> None:
    X, y = data()
    with pytest.raises(ValueError, match=r"0\.\.3"):
        train_linear(X, y + 1.0, "logistic", 1.0, n_classes=4)
    with pytest.raises(ValueError, match="n_classes=C"):
        train_linear(X, y, "logistic", 1.0)
    with pytest.raises(ValueError, match="classification loss"):
        train_linear(X, y, "squared", 1.0, n_classes=4)


def test_c_tuning_by_blocked_cross_validation_for_c_classes() -> None:
    X, y = data(2, n=400)
    trainer = LinearTrainer("logistic", 1.0, n_classes=4)
    result = tune_C(X, y, trainer, grid=(0.001, 1.0, 100.0), folds=4)
    for C, score in result.scores.items():  # blocked 4-fold accuracy of the C-class model, by hand
        hits = 0
        for k in range(4):
            test = np.arange(400) // 100 == k
            model = train_linear(X[~test], y[~test], "logistic", C, n_classes=4)
            hits += int(np.sum(model.predict(X[test]) == y[test]))
        assert score == hits / 400
    assert result.best_C == max(result.scores, key=lambda c: (result.scores[c], -c))
    assert trainer.with_C(5.0).n_classes == 4


# --- the model ------------------------------------------------------------------------------------------


def make_model(
    seed: int = 0, scaled: bool = True, C: int = 4, d: int = 3, loss: str = "logistic"
) -> LinearModel:
    rng = np.random.default_rng(seed)
    scaler = Standardizer(rng.normal(0, 2, d), rng.uniform(0.5, 3, d)) if scaled else None
    return LinearModel(get_loss(loss), rng.normal(size=(d + 1, C)), 0.7, 2.0, scaler, 42)


@pytest.mark.parametrize("scaled", [False, True])
def test_prediction_is_the_argmax_of_the_columns(scaled: bool) -> None:
    model = make_model(scaled=scaled)
    X = np.random.default_rng(1).normal(size=(200, 3))
    scores = model.augment(X) @ model.beta
    np.testing.assert_allclose(model.decision_function(X), scores, atol=1e-10)
    np.testing.assert_array_equal(model.predict(X), np.argmax(scores, axis=1))
    assert [model.predict_one(x) for x in X] == model.predict(X).tolist()
    for c in range(4):
        np.testing.assert_allclose(model.column(c).decision_function(X), scores[:, c], atol=1e-10)
    p = model.predict_proba(X)
    sig = 1.0 / (1.0 + np.exp(-scores))
    np.testing.assert_allclose(p, sig / sig.sum(axis=1, keepdims=True), atol=1e-12)


def test_ties_go_to_the_lowest_code_and_bad_betas_are_refused() -> None:
    tied = LinearModel(get_loss("logistic"), np.zeros((3, 4)), 1.0)
    assert tied.predict(np.ones((2, 2))).tolist() == [0.0, 0.0] and tied.predict_one(np.ones(2)) == 0.0
    with pytest.raises(ValueError, match="n_classes >= 3"):
        LinearModel(get_loss("logistic"), np.zeros((3, 2)), 1.0)
    with pytest.raises(ValueError, match="classification loss"):
        LinearModel(get_loss("squared"), np.zeros((3, 3)), 1.0)
    with pytest.raises(ValueError, match="multi-class model"):
        make_model(scaled=False).column(0).column(0)


def test_objective_and_gradients_are_the_columns_sums() -> None:
    model = make_model()
    X, y = data(3, n=50, C=4)
    columns = [model.column(c) for c in range(4)]
    ovr_y = [np.where(y == c, 1.0, -1.0) for c in range(4)]
    assert model.objective(X, y) == pytest.approx(
        sum(m.objective(X, t) for m, t in zip(columns, ovr_y, strict=True))
    )
    G = model.gradient_sum(X, y)
    for c in range(4):
        np.testing.assert_allclose(G[:, c], columns[c].gradient_sum(X, ovr_y[c]), atol=1e-10)
    np.testing.assert_allclose(model.gradients(X, y).sum(axis=0), G.reshape(-1), atol=1e-9)


# --- the document ---------------------------------------------------------------------------------------


def roundtrip(doc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(doc))
    return out


@pytest.mark.parametrize("scaled", [False, True])
def test_document_round_trip_and_numpy_prediction(scaled: bool) -> None:
    model = make_model(scaled=scaled).with_meta(version=3, class_names=["oak", "ash", "elm", "fir"])
    doc = roundtrip(model.to_document())
    assert doc["classes"] == [0.0, 1.0, 2.0, 3.0] and doc["class_names"] == ["oak", "ash", "elm", "fir"]
    assert np.asarray(doc["coef"]).shape == (4, 3) and len(doc["intercept"]) == 4
    back = model_from_document(doc)
    assert isinstance(back, LinearModel)
    np.testing.assert_allclose(back.beta, model.beta, rtol=1e-15, atol=1e-15)
    assert back.meta["class_names"] == ["oak", "ash", "elm", "fir"] and back.n_train == 42
    X = np.random.default_rng(2).normal(size=(300, 3))
    np.testing.assert_array_equal(predict_document(doc, X), model.predict(X))
    np.testing.assert_array_equal(predict_document(doc, X[0]), model.predict(X[:1]))


def test_a_binary_document_has_no_new_fields() -> None:
    model = LinearModel(get_loss("logistic"), np.array([1.0, -2.0, 0.5]), 1.0)
    doc = model.to_document()
    assert list(doc) == [
        "format", "kind", "task", "loss", "n_features", "coef", "intercept", "bias", "C", "scaler",
        "n_train", "created", "version",
    ]  # fmt: skip
    assert LinearModel.from_document({**doc, "classes": [-1.0, 1.0]}).n_classes == 2


def _doc() -> dict[str, Any]:
    return roundtrip(make_model(scaled=True).to_document())


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"classes": [0.0, 1.0, 2.0, 4.0]}, "classes"),
        ({"classes": [0.0, 1.0, 2.0]}, "coef"),
        ({"classes": None}, "needs 'classes'"),
        ({"classes": [-1.0, 1.0]}, "one list of n_features"),
        ({"classes": "0123"}, "classes"),
        ({"classes": [0, 1, True, 3]}, "classes"),
        ({"coef": [[1.0, 2.0, 3.0]] * 3 + [[1.0, 2.0]]}, "coef"),
        ({"coef": [[1.0, 2.0, None]] * 4}, "coef"),
        ({"coef": [[1.0, 2.0, float("nan")]] * 4}, "finite"),
        ({"intercept": [0.0, 1.0, 2.0]}, "intercept"),
        ({"intercept": 1.0}, "intercept"),
        ({"n_features": 4}, "coef"),
        ({"n_features": True}, "n_features"),
        ({"n_features": 0}, "n_features"),
        ({"bias": 0.0}, "bias"),
        ({"bias": "1"}, "bias"),
        ({"C": -1.0}, "'C'"),
        ({"C": float("inf")}, "'C'"),
        ({"loss": "squared", "task": "regression"}, "regression"),
        ({"task": "regression"}, "task"),
        ({"scaler": {"mean": [0.0] * 3, "scale": [1.0, 0.0, 1.0]}}, "scale"),
        ({"scaler": {"mean": [0.0] * 2, "scale": [1.0] * 3}}, "mean"),
        ({"scaler": [1.0]}, "scaler"),
        ({"n_train": -1}, "n_train"),
        ({"class_names": ["a", "b", "c"]}, "class_names"),
        ({"class_names": ["a", "b", "c", "a"]}, "distinct"),
        ({"class_names": ["a", "b", "c", None]}, "class name"),
    ],
)
def test_bad_multiclass_documents_are_refused_precisely(change: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LinearModel.from_document({**_doc(), **change})


def test_bad_binary_fields_are_refused_precisely() -> None:
    doc = roundtrip(LinearModel(get_loss("squared"), np.array([1.0, 2.0]), 1.0).to_document())
    with pytest.raises(ValueError, match="no 'classes'"):
        LinearModel.from_document({**doc, "classes": [-1.0, 1.0]})
    with pytest.raises(ValueError, match="intercept"):
        LinearModel.from_document({**doc, "intercept": [1.0]})
    with pytest.raises(ValueError, match="JSON object"):
        LinearModel.from_document([doc])  # type: ignore[arg-type]


# --- adapters -------------------------------------------------------------------------------------------


def test_sklearn_one_vs_rest_both_ways() -> None:
    X, y = data(4)
    est = OneVsRestClassifier(LogisticRegression(C=3.0, solver="liblinear", intercept_scaling=2.0)).fit(X, y)
    model = LinearModel.from_sklearn(est)
    assert model.n_classes == 4 and model.bias == 2.0 and model.C == 3.0
    np.testing.assert_array_equal(model.predict(X), est.predict(X))
    np.testing.assert_allclose(model.predict_proba(X), est.predict_proba(X), atol=1e-12)
    svc = LinearSVC(C=0.5).fit(X, y)
    np.testing.assert_array_equal(LinearModel.from_sklearn(svc).predict(X), svc.predict(X))
    trained = train_linear(X, y, "logistic", 1.0, n_classes=4, standardize=True)
    back = trained.to_sklearn()
    assert isinstance(back, OneVsRestClassifier)
    np.testing.assert_array_equal(back.predict(X), trained.predict(X))
    np.testing.assert_allclose(back.predict_proba(X), trained.predict_proba(X), atol=1e-12)
    np.testing.assert_allclose(back.decision_function(X), trained.decision_function(X), atol=1e-12)


def test_onnx_export_of_a_one_vs_rest_model() -> None:
    onnxruntime = pytest.importorskip("onnxruntime")
    from edgedrift.adapters.onnx import document_to_onnx

    X, y = data(5)
    for loss in ("logistic", "squared_hinge"):
        model = train_linear(X, y, loss, 1.0, n_classes=4, standardize=True)
        session = onnxruntime.InferenceSession(
            document_to_onnx(model.to_document()), providers=["CPUExecutionProvider"]
        )
        label, second = session.run(None, {"X": X})
        np.testing.assert_array_equal(label, model.predict(X))
        want = model.predict_proba(X) if loss == "logistic" else model.decision_function(X)
        np.testing.assert_allclose(second, want, atol=1e-12)


# --- the training API -----------------------------------------------------------------------------------


def test_train_window_with_n_classes() -> None:
    X, y = data(6)
    header = TrainSpec().header("classification", "squared_hinge", "test", C=1.0, n_classes=4)
    assert (
        header.n_classes == 4
        and TrainSpec().header("classification", "logistic", "t", n_classes=2).n_classes is None
    )
    keep = y != 3  # the window misses class 3: still a 4-column model
    out = train_window(header, X[keep], y[keep])
    assert out.document["classes"] == [0.0, 1.0, 2.0, 3.0]
    assert np.mean(predict_document(out.document, X[keep]) == y[keep]) > 0.7
    check_window(header, X, y, max_rows=1000, max_features=10)
    with pytest.raises(WindowError, match=r"codes 0\.\.3; y\[\d+\] = -1"):
        check_window(header, X, np.where(keep, y, -1.0), max_rows=1000, max_features=10)
    with pytest.raises(ValueError, match="classification only"):
        WindowHeader.model_validate({"task": "regression", "learner": "ridge", "n_classes": 3})
    rules = WindowHeader.model_json_schema()["allOf"]
    assert any(r["if"]["properties"] == {"n_classes": {"type": "integer"}} for r in rules)
