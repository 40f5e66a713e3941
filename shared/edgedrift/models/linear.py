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

**Multi-class (one-vs-rest).** With C ≥ 3 classes (codes 0..C−1, :mod:`edgedrift.labels`) β is a
(d+1, C) matrix: column c is the eq. (1) solution of "class c against the rest" (labels +1 / −1), what
LIBLINEAR's ``-s 0`` and ``-s 2`` train for C classes. The objective C Σᵢ Σ_c ℓ(y_ic, x̃ᵢᵀβ_c) + ½‖B‖²_F is
a sum of C independent eq. (1) problems, so Theorem 1 holds per column (docs/learning-core.md). The
prediction is the argmax of the C scores (ties: the lowest code). The document (:mod:`edgedrift.models.
linear_document`) carries ``classes`` (the codes, in column order), ``coef`` (C × d) and ``intercept``
(C numbers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgedrift.labels import class_codes, one_vs_rest_targets
from edgedrift.models.losses import FloatArray, Loss, Task

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
    """β of eq. (1) over augmented features, with everything needed to predict and to bound it.

    ``beta`` is a vector (d+1,) for a binary classifier (labels ±1) or a regressor, and a (d+1, C) matrix
    for a one-vs-rest classifier of C ≥ 3 classes (see the module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> from edgedrift.models.losses import get_loss
    >>> beta = np.array([[1.0, 0.0, -1.0], [0.0, 1.0, 0.0], [0.0, -0.5, 0.0]])  # d = 2, C = 3
    >>> model = LinearModel(get_loss("logistic"), beta, C=1.0)
    >>> model.n_classes, model.predict(np.array([[2.0, 0.0], [0.0, 2.0], [-2.0, 0.0]])).tolist()
    (3, [0.0, 1.0, 2.0])
    >>> model.column(1).beta.tolist()
    [0.0, 1.0, -0.5]
    """

    loss: Loss
    beta: FloatArray
    C: float
    bias: float = 1.0
    scaler: Standardizer | None = None
    n_train: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    # Raw-space weights for prediction: x·raw_coef + raw_intercept == x̃ᵀβ. A binary or regression model
    # has raw_coef (d,) and a float raw_intercept; a multi-class one (d, C) and (C,).
    raw_coef: FloatArray = field(init=False, repr=False)
    raw_intercept: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        beta = np.ascontiguousarray(self.beta, dtype=np.float64)
        if beta.ndim == 2:
            if beta.shape[0] < 2 or beta.shape[1] < 3:
                raise ValueError(
                    f"a multi-class beta must be (n_features + 1, n_classes >= 3), got shape {beta.shape}"
                )
            if self.loss.task != "classification":
                raise ValueError(f"a multi-class beta needs a classification loss, not {self.loss.name!r}")
        elif beta.ndim != 1 or beta.size < 2:
            raise ValueError("beta must be a 1-D vector of length n_features + 1")
        if not np.all(np.isfinite(beta)):
            raise ValueError("beta must be finite")
        if not self.C > 0:
            raise ValueError("C must be > 0")
        object.__setattr__(self, "beta", beta)
        if beta.ndim == 2:
            coef2 = beta[:-1]
            intercepts = self.bias * beta[-1]
            if self.scaler is not None:
                coef2 = coef2 / self.scaler.scale[:, None]
                intercepts = intercepts - self.scaler.mean @ coef2
            object.__setattr__(self, "raw_coef", np.ascontiguousarray(coef2))
            object.__setattr__(self, "raw_intercept", np.ascontiguousarray(intercepts))
            return
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
        return int(self.beta.shape[0] - 1)

    @property
    def multiclass(self) -> bool:
        """Whether this is a one-vs-rest model of C ≥ 3 classes (β is a matrix)."""
        return self.beta.ndim == 2

    @property
    def n_classes(self) -> int:
        """C: the columns of a multi-class model, 2 for a binary classifier, 0 for a regressor."""
        if self.beta.ndim == 2:
            return int(self.beta.shape[1])
        return 2 if self.task == "classification" else 0

    @property
    def classes(self) -> FloatArray:
        """The label codes the model predicts, in column order: (−1, +1) or (0, …, C−1)."""
        if self.task != "classification":
            raise ValueError("a regression model has no classes")
        return class_codes(self.n_classes)

    @property
    def coef(self) -> FloatArray:
        """Weights of the (possibly standardised) features, without the intercept: (d,) or (d, C)."""
        return self.beta[:-1]

    @property
    def intercept(self) -> float | FloatArray:
        """bias · w_b: a float, or the C intercepts of a multi-class model."""
        if self.beta.ndim == 2:
            return np.asarray(self.bias * self.beta[-1], dtype=np.float64)
        return self.bias * float(self.beta[-1])

    def column(self, c: int) -> LinearModel:
        """The binary model "class c against the rest" of a multi-class model (same C, bias, scaler)."""
        if self.beta.ndim != 2:
            raise ValueError("column() needs a multi-class model")
        if not 0 <= c < self.n_classes:
            raise ValueError(f"class {c} is not in 0..{self.n_classes - 1}")
        return LinearModel(self.loss, self.beta[:, c], self.C, self.bias, self.scaler, self.n_train)

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
        """Scores x̃ᵀβ for a batch of raw samples: (n,), or (n, C) for a multi-class model."""
        out: FloatArray = np.asarray(X, dtype=np.float64) @ self.raw_coef + self.raw_intercept
        return out

    def predict(self, X: FloatArray) -> FloatArray:
        """±1 labels (a score of exactly 0 maps to +1), the argmax code of C ≥ 3 classes (ties: the lowest
        code), or real values for regression."""
        z = self.decision_function(X)
        if self.beta.ndim == 2:
            codes: FloatArray = np.argmax(np.atleast_2d(z), axis=1).astype(np.float64)
            return codes
        if self.task == "regression":
            return z
        return np.where(z >= 0.0, 1.0, -1.0)

    def predict_one(self, x: FloatArray) -> float:
        if self.beta.ndim == 2:
            return float(np.argmax(x @ self.raw_coef + self.raw_intercept))
        z: float = float(self.raw_coef @ x) + self.raw_intercept
        if self.task == "regression":
            return z
        return 1.0 if z >= 0.0 else -1.0

    def predict_proba(self, X: FloatArray) -> FloatArray:
        """Logistic loss only: columns P(y = −1), P(y = +1) = σ(x̃ᵀβ) (scikit-learn's column order); for
        C ≥ 3 classes the one-vs-rest sigmoids σ(x̃ᵀβ_c) normalised to sum to 1 (what scikit-learn's
        ``OneVsRestClassifier`` and a LIBLINEAR ``LogisticRegression`` report)."""
        if self.loss.name != "logistic":
            raise ValueError(f"probabilities need the logistic loss, not {self.loss.name!r}")
        if self.beta.ndim == 2:
            p = np.atleast_2d(0.5 * (1.0 + np.tanh(0.5 * self.decision_function(X))))
            total = p.sum(axis=1, keepdims=True)  # 0 only if every sigmoid underflows: uniform then
            out: FloatArray = np.divide(p, total, out=np.full_like(p, 1.0 / p.shape[1]), where=total > 0)
            return out
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

    def _targets(self, y: FloatArray) -> FloatArray:
        """The labels each column's loss sees: y itself, or the (n, C) one-vs-rest ±1 targets."""
        y = np.asarray(y, dtype=np.float64)
        return one_vs_rest_targets(y, self.n_classes) if self.beta.ndim == 2 else y

    def gradients(self, X: FloatArray, y: FloatArray) -> FloatArray:
        """Per-sample gradients ∇_β ℓᵢ(β) in the training space: (n, d+1), or for a multi-class model
        (n, (d+1)·C), each row the (d+1, C) gradient x̃ᵢ ∂ℓᵢ/∂zᵀ flattened in β's (row-major) order."""
        Xa = self.augment(X)
        dz = self.loss.dz(self._targets(y), Xa @ self.beta)
        if self.beta.ndim == 2:
            rows: FloatArray = np.einsum("ij,ic->ijc", Xa, dz).reshape(len(Xa), -1)
            return rows
        return dz[:, None] * Xa

    def gradient_sum(self, X: FloatArray, y: FloatArray) -> FloatArray:
        """Σᵢ ∇_β ℓᵢ(β), shaped like β (one matrix product, no per-sample temporary)."""
        Xa = self.augment(X)
        return Xa.T @ self.loss.dz(self._targets(y), Xa @ self.beta)

    def objective(self, X: FloatArray, y: FloatArray) -> float:
        """Eq. (1): C Σ ℓ + ½‖β‖² (for C ≥ 3 classes the sum over the columns, ‖·‖ Frobenius)."""
        z = self.augment(X) @ self.beta
        b = self.beta.reshape(-1)
        return self.C * float(self.loss.value(self._targets(y), z).sum()) + 0.5 * float(b @ b)

    def with_meta(self, **meta: Any) -> LinearModel:
        return LinearModel(
            self.loss, self.beta, self.C, self.bias, self.scaler, self.n_train, {**self.meta, **meta}
        )

    def to_document(self) -> dict[str, Any]:
        """The versioned JSON document (see :func:`predict_document` for numpy-only prediction)."""
        from edgedrift.models.linear_document import linear_document

        return linear_document(self)

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> LinearModel:
        """Rebuild a model from :meth:`to_document` output; every field is validated (ValueError naming
        the field for a bad document, an unknown format or kind)."""
        from edgedrift.models.linear_document import linear_from_document

        return linear_from_document(doc)


def predict_document(doc: dict[str, Any], X: FloatArray) -> FloatArray:
    """Predict from a model document with numpy alone (what a minimal edge needs)."""
    X = np.atleast_2d(np.asarray(X, dtype=np.float64))
    Z = X
    if doc.get("scaler") is not None:
        Z = (X - np.asarray(doc["scaler"]["mean"])) / np.asarray(doc["scaler"]["scale"])
    coef = np.asarray(doc["coef"], dtype=np.float64)
    if coef.ndim == 2:  # one-vs-rest: C rows of d weights, the codes in ``classes``
        scores = Z @ coef.T + np.asarray(doc["intercept"], dtype=np.float64)
        classes = np.asarray(doc["classes"], dtype=np.float64)
        labels: FloatArray = classes[np.argmax(scores, axis=1)]
        return labels
    z = Z @ coef + float(doc["intercept"])
    if doc["task"] == "regression":
        return z
    return np.where(z >= 0.0, 1.0, -1.0)
