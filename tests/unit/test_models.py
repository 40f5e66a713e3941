"""Tests of edgedrift.models: the three losses of Table 1 and the linear model with its JSON document."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from edgedrift.models.linear import MODEL_FORMAT, LinearModel, Standardizer, predict_document
from edgedrift.models.losses import LOSSES, get_loss, ridge_alpha_to_c

LOSS_NAMES = ["logistic", "squared_hinge", "squared"]


def labels_and_scores(loss: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.uniform(-4.0, 4.0, size=n)
    y = rng.choice([-1.0, 1.0], size=n) if LOSSES[loss].task == "classification" else rng.normal(0, 2, n)
    return y, z


# --- losses --------------------------------------------------------------------------------------------


def test_loss_registry() -> None:
    assert sorted(LOSSES) == sorted(LOSS_NAMES)
    for name in LOSS_NAMES:
        assert get_loss(name).name == name
    with pytest.raises(ValueError, match="unknown loss"):
        get_loss("hinge")
    assert get_loss("logistic").liblinear_solver == 0
    assert get_loss("squared_hinge").liblinear_solver == 2
    assert get_loss("squared").liblinear_solver == 11
    assert get_loss("squared").task == "regression"


def test_loss_values_match_table_1() -> None:
    y = np.array([1.0, -1.0, 1.0, -1.0])
    z = np.array([0.5, 0.5, -2.0, 3.0])
    np.testing.assert_allclose(get_loss("logistic").value(y, z), np.log1p(np.exp(-y * z)))
    np.testing.assert_allclose(get_loss("squared_hinge").value(y, z), [0.25, 2.25, 9.0, 16.0])
    yr = np.array([1.5, -0.5, 0.0, 2.0])
    np.testing.assert_allclose(get_loss("squared").value(yr, z), (yr - z) ** 2)


@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_dz_matches_finite_differences(loss: str) -> None:
    fn = get_loss(loss)
    y, z = labels_and_scores(loss, 300, seed=1)
    if loss == "squared_hinge":
        # Keep away from the kink at y z = 1 where the central difference is not the derivative.
        keep = np.abs(1.0 - y * z) > 1e-3
        y, z = y[keep], z[keep]
    h = 1e-6
    fd = (fn.value(y, z + h) - fn.value(y, z - h)) / (2 * h)
    np.testing.assert_allclose(fn.dz(y, z), fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_d2z_matches_finite_differences_of_dz(loss: str) -> None:
    fn = get_loss(loss)
    y, z = labels_and_scores(loss, 300, seed=2)
    if loss == "squared_hinge":
        keep = np.abs(1.0 - y * z) > 1e-3
        y, z = y[keep], z[keep]
    h = 1e-5
    fd = (fn.dz(y, z + h) - fn.dz(y, z - h)) / (2 * h)
    np.testing.assert_allclose(fn.d2z(y, z), fd, rtol=1e-5, atol=1e-7)
    # And of the value itself (second central difference).
    h2 = 1e-4
    fd2 = (fn.value(y, z + h2) - 2 * fn.value(y, z) + fn.value(y, z - h2)) / h2**2
    np.testing.assert_allclose(fn.d2z(y, z), fd2, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_scalar_versions_agree_with_vectorised(loss: str) -> None:
    fn = get_loss(loss)
    y, z = labels_and_scores(loss, 200, seed=3)
    if loss != "squared":
        # Include the kink of the squared hinge and a few extreme scores.
        y = np.concatenate([y, [1.0, -1.0, 1.0, -1.0, 1.0]])
        z = np.concatenate([z, [1.0, -1.0, 40.0, 40.0, -800.0]])
    dz = fn.dz(y, z)
    d2z = fn.d2z(y, z)
    for i in range(len(y)):
        assert fn.dz_one(float(y[i]), float(z[i])) == pytest.approx(float(dz[i]), rel=1e-12, abs=1e-300)
        assert fn.d2z_one(float(y[i]), float(z[i])) == pytest.approx(float(d2z[i]), rel=1e-12, abs=1e-300)
    assert np.all(np.isfinite(dz))
    assert np.all(np.isfinite(d2z))


def test_logistic_derivatives_are_stable_for_large_scores() -> None:
    fn = get_loss("logistic")
    y = np.array([1.0, 1.0, -1.0, -1.0])
    z = np.array([1000.0, -1000.0, 1000.0, -1000.0])
    np.testing.assert_allclose(fn.dz(y, z), [0.0, -1.0, 1.0, 0.0], atol=1e-300)
    np.testing.assert_allclose(fn.value(y, z), [0.0, 1000.0, 1000.0, 0.0])
    assert np.all(fn.d2z(y, z) >= 0.0)


def test_ridge_alpha_to_c() -> None:
    assert ridge_alpha_to_c(0.25) == 2.0
    with pytest.raises(ValueError):
        ridge_alpha_to_c(0.0)


# --- LinearModel ---------------------------------------------------------------------------------------


def make_model(loss: str, d: int, seed: int, scaled: bool, bias: float = 1.0) -> LinearModel:
    rng = np.random.default_rng(seed)
    scaler = None
    if scaled:
        scaler = Standardizer(mean=rng.normal(0, 3, d), scale=rng.uniform(0.2, 5.0, d))
    return LinearModel(
        loss=get_loss(loss), beta=rng.normal(size=d + 1), C=0.7, bias=bias, scaler=scaler, n_train=42
    )


def make_data(loss: str, n: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(2.0, 4.0, size=(n, d))
    y = rng.choice([-1.0, 1.0], size=n) if LOSSES[loss].task == "classification" else rng.normal(0, 3, n)
    return X, y


def manual_augment(model: LinearModel, X: np.ndarray) -> np.ndarray:
    Z = X if model.scaler is None else (X - model.scaler.mean) / model.scaler.scale
    return np.hstack([Z, np.full((X.shape[0], 1), model.bias)])


@pytest.mark.parametrize("scaled", [False, True])
@pytest.mark.parametrize("bias", [1.0, 2.5])
def test_augment_and_decision_function(scaled: bool, bias: float) -> None:
    model = make_model("logistic", 4, seed=5, scaled=scaled, bias=bias)
    X, _ = make_data("logistic", 50, 4, seed=6)
    Xa = model.augment(X)
    np.testing.assert_allclose(Xa, manual_augment(model, X), rtol=1e-13, atol=1e-13)
    # raw_coef / raw_intercept reproduce x̃ᵀβ in the raw space.
    np.testing.assert_allclose(model.decision_function(X), Xa @ model.beta, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(X @ model.raw_coef + model.raw_intercept, Xa @ model.beta, atol=1e-10)
    assert model.intercept == pytest.approx(bias * model.beta[-1])
    np.testing.assert_array_equal(model.coef, model.beta[:-1])
    assert model.n_features == 4
    # One sample (1-D) is augmented to a single row.
    np.testing.assert_allclose(model.augment(X[0]), Xa[:1])


def test_standardizer_fit_keeps_constant_columns() -> None:
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.normal(3, 2, 100), np.full(100, 7.0)])
    s = Standardizer.fit(X)
    np.testing.assert_allclose(s.mean, X.mean(axis=0))
    assert s.scale[0] == pytest.approx(X[:, 0].std())
    assert s.scale[1] == 1.0
    Z = (X - s.mean) / s.scale
    np.testing.assert_allclose(Z.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(Z[:, 0].std(), 1.0)


@pytest.mark.parametrize("loss", LOSS_NAMES)
@pytest.mark.parametrize("scaled", [False, True])
def test_predict_and_predict_one(loss: str, scaled: bool) -> None:
    model = make_model(loss, 3, seed=7, scaled=scaled)
    X, _ = make_data(loss, 40, 3, seed=8)
    score = manual_augment(model, X) @ model.beta
    pred = model.predict(X)
    if model.task == "regression":
        np.testing.assert_allclose(pred, score, rtol=1e-10, atol=1e-10)
    else:
        np.testing.assert_array_equal(pred, np.where(score >= 0, 1.0, -1.0))
    for i in range(len(X)):
        assert model.predict_one(X[i]) == pytest.approx(pred[i], rel=1e-12, abs=1e-12)


def test_predict_maps_zero_score_to_plus_one() -> None:
    model = LinearModel(loss=get_loss("logistic"), beta=np.array([1.0, 0.0]), C=1.0)
    assert model.predict(np.array([[0.0]]))[0] == 1.0
    assert model.predict_one(np.array([0.0])) == 1.0
    assert model.predict_one(np.array([-1e-9])) == -1.0


@pytest.mark.parametrize("loss", LOSS_NAMES)
@pytest.mark.parametrize("scaled", [False, True])
def test_gradients_gradient_sum_and_objective(loss: str, scaled: bool) -> None:
    model = make_model(loss, 3, seed=9, scaled=scaled, bias=1.5)
    X, y = make_data(loss, 60, 3, seed=10)
    fn = get_loss(loss)
    Xa = manual_augment(model, X)
    z = Xa @ model.beta
    G = model.gradients(X, y)
    assert G.shape == (60, 4)
    np.testing.assert_allclose(G, fn.dz(y, z)[:, None] * Xa, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model.gradient_sum(X, y), G.sum(axis=0), rtol=1e-10, atol=1e-10)
    direct = model.C * sum(float(fn.value(y[i : i + 1], z[i : i + 1])[0]) for i in range(60))
    direct += 0.5 * float(np.sum(model.beta**2))
    assert model.objective(X, y) == pytest.approx(direct, rel=1e-12)


@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_gradient_sum_is_the_gradient_of_the_loss_part(loss: str) -> None:
    """∇_β [C Σ ℓ + ½‖β‖²] = C·gradient_sum + β, checked by finite differences of objective()."""
    base = make_model(loss, 3, seed=12, scaled=True)
    X, y = make_data(loss, 40, 3, seed=13)
    analytic = base.C * base.gradient_sum(X, y) + base.beta
    h = 1e-6
    fd = np.empty_like(analytic)
    for j in range(base.beta.size):
        e = np.zeros_like(base.beta)
        e[j] = h
        plus = LinearModel(base.loss, base.beta + e, base.C, base.bias, base.scaler)
        minus = LinearModel(base.loss, base.beta - e, base.C, base.bias, base.scaler)
        fd[j] = (plus.objective(X, y) - minus.objective(X, y)) / (2 * h)
    np.testing.assert_allclose(analytic, fd, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("beta", "C"),
    [
        (np.array([1.0]), 1.0),  # no room for the bias weight
        (np.array([[1.0, 2.0]]), 1.0),  # not 1-D
        (np.array([1.0, np.nan]), 1.0),
        (np.array([1.0, np.inf]), 1.0),
        (np.array([1.0, 2.0]), 0.0),
        (np.array([1.0, 2.0]), -1.0),
    ],
)
def test_linear_model_rejects_bad_parameters(beta: np.ndarray, C: float) -> None:
    with pytest.raises(ValueError):
        LinearModel(loss=get_loss("logistic"), beta=beta, C=C)


def test_with_meta_keeps_the_model() -> None:
    model = make_model("logistic", 2, seed=1, scaled=True)
    tagged = model.with_meta(version=3).with_meta(created="then")
    assert tagged.meta == {"version": 3, "created": "then"}
    np.testing.assert_array_equal(tagged.beta, model.beta)
    assert tagged.scaler is model.scaler
    assert tagged.C == model.C
    assert model.meta == {}


# --- JSON document -------------------------------------------------------------------------------------


def roundtrip(doc: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(doc))
    return out


@pytest.mark.parametrize("loss", LOSS_NAMES)
@pytest.mark.parametrize("scaled", [False, True])
@pytest.mark.parametrize("bias", [1.0, 3.0])
def test_document_round_trip(loss: str, scaled: bool, bias: float) -> None:
    model = make_model(loss, 5, seed=20, scaled=scaled, bias=bias).with_meta(version=7)
    doc = roundtrip(model.to_document())
    assert doc["format"] == MODEL_FORMAT
    assert doc["kind"] == "linear"
    assert doc["loss"] == loss
    assert doc["task"] == model.task
    assert doc["n_features"] == 5
    assert doc["version"] == 7
    assert isinstance(doc["created"], str)
    back = LinearModel.from_document(doc)
    assert back.loss.name == loss
    assert back.C == model.C
    assert back.bias == bias
    assert back.n_train == 42
    assert back.meta["version"] == 7
    assert back.meta["created"] == doc["created"]
    np.testing.assert_allclose(back.beta, model.beta, rtol=1e-15, atol=1e-15)
    assert (back.scaler is None) == (not scaled)
    X, _ = make_data(loss, 200, 5, seed=21)
    np.testing.assert_array_equal(back.predict(X), model.predict(X))


@pytest.mark.parametrize("loss", LOSS_NAMES)
@pytest.mark.parametrize("scaled", [False, True])
def test_predict_document_matches_the_model(loss: str, scaled: bool) -> None:
    model = make_model(loss, 4, seed=30, scaled=scaled, bias=2.0)
    doc = roundtrip(model.to_document())
    X, _ = make_data(loss, 300, 4, seed=31)
    got = predict_document(doc, X)
    want = model.predict(X)
    if model.task == "regression":
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    else:
        # Both predict the sign of the same score, computed in a different order: identical unless a
        # score is within round-off of 0, which random data does not produce.
        score = model.decision_function(X)
        assert np.min(np.abs(score)) > 1e-9
        np.testing.assert_array_equal(got, want)
    # One sample as a 1-D vector works too.
    np.testing.assert_allclose(predict_document(doc, X[0]), want[:1])


def test_document_defaults_created_time() -> None:
    doc = make_model("logistic", 2, seed=1, scaled=False).to_document()
    assert doc["version"] is None
    assert doc["created"][:2] == "20"
    back = LinearModel.from_document(roundtrip(doc))
    assert "version" not in back.meta


def _doc() -> dict[str, Any]:
    return roundtrip(make_model("logistic", 3, seed=40, scaled=True).to_document())


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"format": "edgedrift.model/0"}, "format"),
        ({"format": None}, "format"),
        ({"kind": "shrub"}, "kind"),
        ({"coef": [1.0, 2.0]}, "n_features"),
        ({"n_features": 4}, "n_features"),
        ({"bias": 0.0}, "bias"),
        ({"bias": -1.0}, "bias"),
        ({"loss": "hinge"}, "loss"),
    ],
)
def test_from_document_rejects_bad_documents(change: dict[str, Any], match: str) -> None:
    doc = {**_doc(), **change}
    with pytest.raises(ValueError, match=match):
        LinearModel.from_document(doc)


def test_from_document_rejects_missing_format() -> None:
    doc = _doc()
    del doc["format"]
    with pytest.raises(ValueError, match="format"):
        LinearModel.from_document(doc)
