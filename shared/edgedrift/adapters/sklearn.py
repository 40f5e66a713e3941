"""Linear models and CART shrubs to and from scikit-learn estimators (the ``training`` extra).

* ``LogisticRegression`` (binary) ↔ logistic loss, ``LinearSVC`` (squared hinge) ↔ squared hinge,
  ``Ridge`` ↔ squared loss with C = 1/(2α) (the table of docs/learning-core.md). scikit-learn's
  ``intercept_scaling`` (LIBLINEAR's ``-B``; ``LinearSVC`` and the ``liblinear`` solver) becomes the
  model's ``bias``, so a LIBLINEAR-trained estimator keeps its regularised bias weight; with the other
  solvers the intercept is not regularised, and the bound still holds because
  :class:`~edgedrift.bounds.DeltaG` corrects for a β₁ that is not the exact optimum of eq. (1).
  A model with a frozen standardiser becomes an estimator on raw features (raw_coef, raw_intercept).
* ``DecisionTreeClassifier`` / ``DecisionTreeRegressor`` ↔ the shrub document
  (:mod:`edgedrift.models.tree`): the same node arrays, so both predict the same for every row.

Binary classifiers have labels ±1 on the EdgeDrift side; an estimator fitted on two other labels maps
its second class (``classes_[1]``) to +1. A one-vs-rest model of C ≥ 3 classes converts from and to
``OneVsRestClassifier`` over binary ``LogisticRegression`` / ``LinearSVC`` estimators (``classes_[c]``
becomes code c), and from a multi-class ``LinearSVC`` (one-vs-rest by default). scikit-learn's
multi-class ``LogisticRegression`` is multinomial (softmax), not eq. (1) per class, and is refused.

Examples
--------
>>> import numpy as np
>>> from sklearn.linear_model import LogisticRegression
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(200, 3))
>>> y = np.where(X[:, 0] > 0, 1, -1)
>>> est = LogisticRegression(C=10.0).fit(X, y)
>>> model = linear_from_sklearn(est)
>>> model.loss.name, bool(np.array_equal(model.predict(X), est.predict(X)))
('logistic', True)
>>> back = linear_to_sklearn(model)
>>> float(np.abs(back.decision_function(X) - est.decision_function(X)).max()) < 1e-12
True
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.multiclass import OneVsRestClassifier
from sklearn.preprocessing import LabelBinarizer
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor
from sklearn.tree._tree import Tree

from edgedrift.models.linear import MODEL_FORMAT, LinearModel
from edgedrift.models.losses import get_loss
from edgedrift.models.tree import SHRUB_KIND, ShrubModel, validate_tree_document

__all__ = ["linear_from_sklearn", "linear_to_sklearn", "shrub_from_sklearn", "shrub_to_sklearn"]

#: scikit-learn's marks for a leaf's children and its feature/threshold.
_TREE_LEAF, _TREE_UNDEFINED = -1, -2


def _binary_coef(est: Any) -> tuple[np.ndarray, float]:
    classes = np.asarray(est.classes_)
    if classes.size != 2:
        raise ValueError(
            f"only binary classifiers convert (labels ±1); {type(est).__name__} has {classes.size}"
        )
    coef = np.asarray(est.coef_, dtype=np.float64).reshape(-1)
    return coef, float(np.asarray(est.intercept_, dtype=np.float64).reshape(-1)[0])


def _one_vs_rest_from_sklearn(est: Any) -> LinearModel:
    """A fitted ``OneVsRestClassifier`` of binary linear estimators, or a multi-class ``LinearSVC``, as a
    one-vs-rest LinearModel: column c is the estimator of ``classes_[c]`` (same predictions)."""
    if isinstance(est, OneVsRestClassifier):
        columns = [linear_from_sklearn(e) for e in getattr(est, "estimators_", [])]
        if len(columns) < 3 or len(columns) != len(est.classes_):
            raise ValueError(
                "only a OneVsRestClassifier of 3 or more classes, each with a linear estimator, converts"
            )
        kinds = {(m.loss.name, m.C, m.bias) for m in columns}
        if len(kinds) != 1:
            raise ValueError(
                f"the one-vs-rest estimators differ in loss, C or intercept_scaling: {sorted(kinds)}"
            )
        beta = np.column_stack([m.beta for m in columns])
        first = columns[0]
        return LinearModel(first.loss, beta, first.C, first.bias, None, 0, {"sklearn": "OneVsRestClassifier"})
    if est.loss != "squared_hinge" or est.multi_class != "ovr":
        raise ValueError("only LinearSVC(loss='squared_hinge', multi_class='ovr') has a loss of eq. (1)")
    coef = np.asarray(est.coef_, dtype=np.float64)
    bias = float(est.intercept_scaling) if est.fit_intercept else 1.0
    beta = np.vstack([coef.T, np.asarray(est.intercept_, dtype=np.float64) / bias])
    return LinearModel(get_loss("squared_hinge"), beta, float(est.C), bias, None, 0, {"sklearn": "LinearSVC"})


def linear_from_sklearn(est: Any) -> LinearModel:
    """A fitted ``LogisticRegression``, ``LinearSVC`` or ``Ridge`` as a LinearModel (same predictions); for
    C ≥ 3 classes a ``OneVsRestClassifier`` of them or a ``LinearSVC``."""
    if isinstance(est, OneVsRestClassifier) or (
        isinstance(est, LinearSVC) and np.asarray(getattr(est, "classes_", [])).size >= 3
    ):
        return _one_vs_rest_from_sklearn(est)
    if isinstance(est, LogisticRegression) and np.asarray(est.classes_).size >= 3:
        raise ValueError(
            "a multi-class LogisticRegression is multinomial (softmax), not one-vs-rest: fit "
            "OneVsRestClassifier(LogisticRegression(...)) for a model of eq. (1) per class"
        )
    if isinstance(est, LogisticRegression):
        coef, intercept = _binary_coef(est)
        bias = float(est.intercept_scaling) if est.solver == "liblinear" and est.fit_intercept else 1.0
        loss, C = "logistic", float(est.C)
    elif isinstance(est, LinearSVC):
        if est.loss != "squared_hinge":
            raise ValueError("only LinearSVC(loss='squared_hinge') has a loss of eq. (1)")
        coef, intercept = _binary_coef(est)
        bias = float(est.intercept_scaling) if est.fit_intercept else 1.0
        loss, C = "squared_hinge", float(est.C)
    elif isinstance(est, Ridge):
        coef = np.asarray(est.coef_, dtype=np.float64)
        if coef.ndim != 1 and coef.shape[0] != 1:
            raise ValueError("only single-target Ridge converts")
        coef = coef.reshape(-1)
        intercept = float(np.asarray(est.intercept_, dtype=np.float64).reshape(-1)[0])
        alpha = float(np.asarray(est.alpha).reshape(-1)[0])
        loss, bias, C = "squared", 1.0, 1.0 / (2.0 * alpha) if alpha > 0 else 1e12
    else:
        raise TypeError(
            f"cannot convert {type(est).__name__}: "
            "LogisticRegression, LinearSVC or Ridge (or a OneVsRestClassifier of them)"
        )
    if bias <= 0:
        raise ValueError("intercept_scaling must be > 0")
    beta = np.append(coef, intercept / bias)
    return LinearModel(get_loss(loss), beta, C, bias, None, 0, {"sklearn": type(est).__name__})


def linear_to_sklearn(model: LinearModel) -> LogisticRegression | LinearSVC | Ridge | OneVsRestClassifier:
    """A fitted scikit-learn estimator predicting what ``model`` predicts (raw-space weights); a model of
    C ≥ 3 classes becomes a ``OneVsRestClassifier`` of its columns (classes 0..C−1; for the logistic loss
    its ``predict_proba`` normalises the columns' sigmoids, as :meth:`LinearModel.predict_proba`)."""
    if model.multiclass:
        ovr = OneVsRestClassifier(linear_to_sklearn(model.column(0)))
        ovr.estimators_ = [linear_to_sklearn(model.column(c)) for c in range(model.n_classes)]
        ovr.label_binarizer_ = LabelBinarizer(sparse_output=False).fit(np.arange(model.n_classes))
        ovr.classes_ = ovr.label_binarizer_.classes_
        ovr.n_features_in_ = model.n_features
        return ovr
    coef, intercept = np.array(model.raw_coef, dtype=np.float64), float(model.raw_intercept)
    est: LogisticRegression | LinearSVC | Ridge
    if model.loss.name == "squared":
        est = Ridge(alpha=1.0 / (2.0 * model.C))
        est.coef_ = coef
        est.intercept_ = np.float64(intercept)
    else:
        est = LogisticRegression(C=model.C) if model.loss.name == "logistic" else LinearSVC(C=model.C)
        est.coef_ = coef[None, :]
        est.intercept_ = np.array([intercept])
        est.classes_ = np.array([-1, 1])
    est.n_features_in_ = model.n_features
    return est


def shrub_from_sklearn(est: DecisionTreeClassifier | DecisionTreeRegressor) -> ShrubModel:
    """A fitted CART tree (single output; a classifier's class labels numeric) as a ShrubModel."""
    if not isinstance(est, DecisionTreeClassifier | DecisionTreeRegressor):
        raise TypeError(
            f"cannot convert {type(est).__name__}: DecisionTreeClassifier or DecisionTreeRegressor"
        )
    if est.n_outputs_ != 1:
        raise ValueError("only single-output trees convert")
    tree = est.tree_
    left = np.asarray(tree.children_left, dtype=np.int64)
    leaf = left < 0
    raw = np.asarray(tree.value, dtype=np.float64)[:, 0, :]
    doc: dict[str, Any] = {
        "format": MODEL_FORMAT,
        "kind": SHRUB_KIND,
        "task": "classification" if isinstance(est, DecisionTreeClassifier) else "regression",
        "n_features": int(est.n_features_in_),
        "max_depth": int(tree.max_depth),
        "feature": np.where(leaf, -1, np.asarray(tree.feature, dtype=np.int64)).tolist(),
        "threshold": np.where(leaf, 0.0, np.asarray(tree.threshold, dtype=np.float64)).tolist(),
        "left": np.where(leaf, -1, left).tolist(),
        "right": np.where(leaf, -1, np.asarray(tree.children_right, dtype=np.int64)).tolist(),
        "n_train": int(tree.n_node_samples[0]),
        "version": None,
    }
    if isinstance(est, DecisionTreeClassifier):
        doc["classes"] = [float(c) for c in est.classes_]
        doc["value"] = (raw / raw.sum(axis=1, keepdims=True)).tolist()
    else:
        doc["value"] = raw[:, 0].tolist()
    validate_tree_document(doc)
    return ShrubModel.from_document(doc)


def shrub_to_sklearn(model: ShrubModel) -> DecisionTreeClassifier | DecisionTreeRegressor:
    """A fitted CART estimator with the shrub's nodes (impurities and sample counts are not kept: 0)."""
    doc = model.document
    d, m = model.n_features, model.n_nodes
    classification = model.task == "classification"
    n_classes = len(doc["classes"]) if classification else 1
    tree = Tree(d, np.array([n_classes], dtype=np.intp), 1)
    nodes_dtype = tree.__getstate__()["nodes"].dtype
    nodes = np.zeros(m, dtype=nodes_dtype)
    feature = np.asarray(doc["feature"], dtype=np.int64)
    leaf = feature < 0
    nodes["left_child"] = np.where(leaf, _TREE_LEAF, np.asarray(doc["left"], dtype=np.int64))
    nodes["right_child"] = np.where(leaf, _TREE_LEAF, np.asarray(doc["right"], dtype=np.int64))
    nodes["feature"] = np.where(leaf, _TREE_UNDEFINED, feature)
    nodes["threshold"] = np.where(
        leaf, float(_TREE_UNDEFINED), np.asarray(doc["threshold"], dtype=np.float64)
    )
    values = np.asarray(doc["value"], dtype=np.float64).reshape(m, 1, n_classes)
    tree.__setstate__({"max_depth": int(doc["max_depth"]), "node_count": m, "nodes": nodes, "values": values})
    est: DecisionTreeClassifier | DecisionTreeRegressor
    if classification:
        est = DecisionTreeClassifier(max_depth=int(doc["max_depth"]) or None)
        est.classes_ = np.asarray(doc["classes"], dtype=np.float64)
        est.n_classes_ = n_classes
    else:
        est = DecisionTreeRegressor(max_depth=int(doc["max_depth"]) or None)
    est.tree_ = tree
    est.n_features_in_ = d
    est.n_outputs_ = 1
    est.max_features_ = d
    return est
