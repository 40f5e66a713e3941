"""Linear models of eq. (1) and their JSON document.

**Intercept.** The bound of Theorem 1 holds only for a batch model that minimises exactly
``C Σ ℓ(yᵢ, x̃ᵢᵀβ) + ½‖β‖²``. EdgeDrift therefore treats the intercept as the weight of a constant
feature ``bias`` appended to every sample (LIBLINEAR ``-B bias``), and that weight *is* regularised:
β = (w₁ … w_d, w_b) ∈ ℝ^{d+1}, x̃ = (x₁ … x_d, bias), intercept = bias · w_b. LIBLINEAR's ``-R`` (an
unregularised bias) would change the objective and break the bound, so it is never used. Gradients,
Δg and the radius vector r all live in this augmented (d+1)-space.

**Scaling.** A model may carry a frozen standardiser (mean, scale) fitted on its training window; then
x̃ = ((x − mean)/scale, bias). The bound is computed in the space the batch model was trained in, so
monitors compute their gradients through :meth:`LinearModel.augment` and never in the raw space.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from edgedrift.models.losses import FloatArray, Loss, Task, get_loss

#: Version of the JSON model document; bump it when a field changes meaning.
MODEL_FORMAT = "edgedrift.model/1"


@dataclass(frozen=True)
class Standardizer:
    """A frozen affine map z = (x − mean) / scale."""

    mean: FloatArray
    scale: FloatArray

    @classmethod
    def fit(cls, X: FloatArray) -> Standardizer:
        """Fit on a window; constant columns keep scale 1 so they pass through unchanged."""
        mean = X.mean(axis=0)
        scale = X.std(axis=0)
        scale[scale < 1e-12] = 1.0
        return cls(mean=mean, scale=scale)


@dataclass(frozen=True)
class LinearModel:
    """β of eq. (1) over augmented features, with everything needed to predict and to bound it."""

    loss: Loss
    beta: FloatArray
    C: float
    bias: float = 1.0
    scaler: Standardizer | None = None
    n_train: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    # Raw-space weights for prediction: x·raw_coef + raw_intercept == x̃ᵀβ.
    raw_coef: FloatArray = field(init=False, repr=False)
    raw_intercept: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        beta = np.ascontiguousarray(self.beta, dtype=np.float64)
        if beta.ndim != 1 or beta.size < 2:
            raise ValueError("beta must be a 1-D vector of length n_features + 1")
        if not np.all(np.isfinite(beta)):
            raise ValueError("beta must be finite")
        if self.C <= 0:
            raise ValueError("C must be > 0")
        object.__setattr__(self, "beta", beta)
        coef = beta[:-1]
        intercept = self.bias * float(beta[-1])
        if self.scaler is not None:
            raw = coef / self.scaler.scale
            intercept -= float(raw @ self.scaler.mean)
            coef = raw
        object.__setattr__(self, "raw_coef", np.ascontiguousarray(coef))
        object.__setattr__(self, "raw_intercept", intercept)

    @property
    def task(self) -> Task:
        return self.loss.task

    @property
    def n_features(self) -> int:
        return int(self.beta.size - 1)

    @property
    def coef(self) -> FloatArray:
        """Weights of the (possibly standardised) features, without the intercept."""
        return self.beta[:-1]

    @property
    def intercept(self) -> float:
        return self.bias * float(self.beta[-1])

    def augment(self, X: FloatArray) -> FloatArray:
        """Map raw samples (n, d) to the training space (n, d+1): scale, then append the bias column."""
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        out = np.empty((X.shape[0], X.shape[1] + 1))
        if self.scaler is None:
            out[:, :-1] = X
        else:
            np.subtract(X, self.scaler.mean, out=out[:, :-1])
            out[:, :-1] /= self.scaler.scale
        out[:, -1] = self.bias
        return out

    def decision_function(self, X: FloatArray) -> FloatArray:
        """Scores x̃ᵀβ for a batch of raw samples."""
        return np.asarray(X, dtype=np.float64) @ self.raw_coef + self.raw_intercept

    def predict(self, X: FloatArray) -> FloatArray:
        """±1 labels (a score of exactly 0 maps to +1) or real values for regression."""
        z = self.decision_function(X)
        if self.task == "regression":
            return z
        return np.where(z >= 0.0, 1.0, -1.0)

    def predict_one(self, x: FloatArray) -> float:
        z = float(self.raw_coef @ x) + self.raw_intercept
        if self.task == "regression":
            return z
        return 1.0 if z >= 0.0 else -1.0

    def predict_proba(self, X: FloatArray) -> FloatArray:
        """Logistic loss only: columns P(y = −1), P(y = +1) = σ(x̃ᵀβ) (scikit-learn's column order)."""
        if self.loss.name != "logistic":
            raise ValueError(f"probabilities need the logistic loss, not {self.loss.name!r}")
        p = 1.0 / (1.0 + np.exp(-self.decision_function(X)))
        return np.column_stack([1.0 - p, p])

    @classmethod
    def from_sklearn(cls, est: Any) -> LinearModel:
        """A fitted scikit-learn ``LogisticRegression``, ``LinearSVC`` or ``Ridge`` (same predictions);
        see :mod:`edgedrift.adapters.sklearn`."""
        from edgedrift.adapters.sklearn import linear_from_sklearn

        return linear_from_sklearn(est)

    def to_sklearn(self) -> Any:
        """The scikit-learn estimator of this loss predicting what this model predicts."""
        from edgedrift.adapters.sklearn import linear_to_sklearn

        return linear_to_sklearn(self)

    def gradients(self, X: FloatArray, y: FloatArray) -> FloatArray:
        """Per-sample gradients ∇_β ℓᵢ(β), shape (n, d+1), in the training space."""
        Xa = self.augment(X)
        return self.loss.dz(np.asarray(y, dtype=np.float64), Xa @ self.beta)[:, None] * Xa

    def gradient_sum(self, X: FloatArray, y: FloatArray) -> FloatArray:
        """Σᵢ ∇_β ℓᵢ(β) (one matrix-vector product, no (n, d+1) temporary)."""
        Xa = self.augment(X)
        return Xa.T @ self.loss.dz(np.asarray(y, dtype=np.float64), Xa @ self.beta)

    def objective(self, X: FloatArray, y: FloatArray) -> float:
        """Eq. (1): C Σ ℓ + ½‖β‖²."""
        z = self.augment(X) @ self.beta
        return self.C * float(self.loss.value(np.asarray(y, dtype=np.float64), z).sum()) + 0.5 * float(
            self.beta @ self.beta
        )

    def with_meta(self, **meta: Any) -> LinearModel:
        return LinearModel(
            self.loss, self.beta, self.C, self.bias, self.scaler, self.n_train, {**self.meta, **meta}
        )

    def to_document(self) -> dict[str, Any]:
        """The versioned JSON document (see :func:`predict_document` for numpy-only prediction)."""
        doc: dict[str, Any] = {
            "format": MODEL_FORMAT,
            "kind": "linear",
            "task": self.task,
            "loss": self.loss.name,
            "n_features": self.n_features,
            "coef": self.coef.tolist(),
            "intercept": self.intercept,
            "bias": self.bias,
            "C": self.C,
            "scaler": None
            if self.scaler is None
            else {"mean": self.scaler.mean.tolist(), "scale": self.scaler.scale.tolist()},
            "n_train": self.n_train,
            "created": self.meta.get("created", datetime.now(UTC).isoformat()),
            "version": self.meta.get("version"),
        }
        if "training" in self.meta:
            doc["training"] = self.meta["training"]
        return doc

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> LinearModel:
        """Rebuild a model from :meth:`to_document` output; refuses unknown formats and kinds."""
        if doc.get("format") != MODEL_FORMAT:
            raise ValueError(f"unsupported model format {doc.get('format')!r}; expected {MODEL_FORMAT!r}")
        if doc.get("kind") != "linear":
            raise ValueError(f"not a linear model document (kind={doc.get('kind')!r})")
        coef = np.asarray(doc["coef"], dtype=np.float64)
        if coef.shape != (int(doc["n_features"]),):
            raise ValueError("coef length does not match n_features")
        bias = float(doc["bias"])
        if bias <= 0:
            raise ValueError("bias must be > 0")
        beta = np.append(coef, float(doc["intercept"]) / bias)
        scaler = None
        if doc.get("scaler") is not None:
            scaler = Standardizer(
                mean=np.asarray(doc["scaler"]["mean"], dtype=np.float64),
                scale=np.asarray(doc["scaler"]["scale"], dtype=np.float64),
            )
        return cls(
            loss=get_loss(doc["loss"]),
            beta=beta,
            C=float(doc["C"]),
            bias=bias,
            scaler=scaler,
            n_train=int(doc.get("n_train", 0)),
            meta={k: doc[k] for k in ("created", "version", "training") if doc.get(k) is not None},
        )


def predict_document(doc: dict[str, Any], X: FloatArray) -> FloatArray:
    """Predict from a model document with numpy alone (what a minimal edge needs)."""
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    Z = X
    if doc.get("scaler") is not None:
        Z = (X - np.asarray(doc["scaler"]["mean"])) / np.asarray(doc["scaler"]["scale"])
    z = Z @ np.asarray(doc["coef"], dtype=np.float64) + float(doc["intercept"])
    if doc["task"] == "regression":
        return z
    return np.where(z >= 0.0, 1.0, -1.0)
