"""The "shrub" model document: a small depth-limited CART tree as flat JSON arrays, and numpy prediction.

The cloud trains the tree with scikit-learn; an edge only needs numpy to use it. Node i tests
``x[feature[i]] <= threshold[i]`` (scikit-learn's rule) and goes to ``left[i]`` if true, else to
``right[i]``; leaves have ``feature = left = right = -1``. Node 0 is the root. ``value[i]`` holds the
class probabilities (classification, in the order of ``classes``) or the mean target (regression) of
the training samples that reach node i. Prediction descends all rows together, one level per step, so
it costs at most ``max_depth`` vectorised steps whatever the number of rows.

Features are rounded to float32 before the comparison, as scikit-learn does (its thresholds are
midpoints of float32 values), so a document predicts exactly what the fitted estimator predicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from edgedrift.models.linear import MODEL_FORMAT
from edgedrift.models.losses import FloatArray

__all__ = ["SHRUB_KIND", "ShrubModel", "predict_proba_tree", "predict_tree", "validate_tree_document"]

SHRUB_KIND = "shrub"
IntArray = NDArray[np.intp]


def _node_array(doc: dict[str, Any], key: str, n_nodes: int, dtype: type) -> NDArray[Any]:
    """``doc[key]`` as a 1-D array of ``n_nodes`` entries; ValueError otherwise."""
    try:
        a: NDArray[Any] = np.asarray(doc[key], dtype=dtype)
    except KeyError:
        raise ValueError(f"shrub document has no {key!r}") from None
    except (TypeError, ValueError):
        raise ValueError(f"shrub document field {key!r} is not a list of numbers") from None
    if a.shape != (n_nodes,):
        raise ValueError(f"{key!r} has shape {a.shape}, expected ({n_nodes},)")
    return a


def validate_tree_document(doc: dict[str, Any]) -> None:
    """Raise ValueError unless ``doc`` is a consistent shrub document (lengths, indices, values).

    Every path from the root must reach a leaf within ``max_depth`` steps. Cycles are not looked for:
    prediction stops after ``max_depth`` steps whatever the links say.
    """
    if doc.get("format") != MODEL_FORMAT:
        raise ValueError(f"unsupported model format {doc.get('format')!r}; expected {MODEL_FORMAT!r}")
    if doc.get("kind") != SHRUB_KIND:
        raise ValueError(f"not a shrub document (kind={doc.get('kind')!r})")
    task = doc.get("task")
    if task not in ("classification", "regression"):
        raise ValueError(f"unknown task {task!r}")
    d, max_depth = doc.get("n_features"), doc.get("max_depth")
    if not isinstance(d, int) or isinstance(d, bool) or d < 1:
        raise ValueError(f"n_features must be a positive integer, got {d!r}")
    if not isinstance(max_depth, int) or isinstance(max_depth, bool) or max_depth < 0:
        raise ValueError(f"max_depth must be a non-negative integer, got {max_depth!r}")
    feature_list = doc.get("feature")
    if not isinstance(feature_list, list) or not feature_list:
        raise ValueError("'feature' must be a non-empty list")
    m = len(feature_list)
    feature = _node_array(doc, "feature", m, np.int64)
    threshold = _node_array(doc, "threshold", m, np.float64)
    left = _node_array(doc, "left", m, np.int64)
    right = _node_array(doc, "right", m, np.int64)
    leaf = feature < 0
    if np.any(feature[leaf] != -1) or np.any(feature >= d):
        raise ValueError(f"feature indices must be -1 (leaf) or in [0, {d})")
    if np.any(left[leaf] != -1) or np.any(right[leaf] != -1):
        raise ValueError("leaves must have left = right = -1")
    split = ~leaf
    for name, child in (("left", left), ("right", right)):
        if np.any((child[split] < 1) | (child[split] >= m)):
            raise ValueError(f"{name!r} child indices of split nodes must be in [1, {m})")
    if not np.all(np.isfinite(threshold[split])):
        raise ValueError("thresholds of split nodes must be finite")
    # The nodes at each depth, as sets (at most m per level): a few Python steps per node of a small
    # tree, where a numpy call per level costs more than the whole walk.
    is_split, lefts, rights = split.tolist(), left.tolist(), right.tolist()
    frontier = {0}
    for _ in range(max_depth):
        frontier = {c for node in frontier if is_split[node] for c in (lefts[node], rights[node])}
    if any(is_split[node] for node in frontier):
        raise ValueError(f"the tree is deeper than max_depth = {max_depth}")
    if task == "classification":
        classes = doc.get("classes")
        if not isinstance(classes, list) or not classes:
            raise ValueError("a classification shrub needs a non-empty 'classes' list")
        c = np.asarray(classes, dtype=np.float64)
        if c.ndim != 1 or np.any(np.diff(c) <= 0) or not np.all(np.isfinite(c)):
            raise ValueError("'classes' must be finite, sorted and distinct")
        try:
            value = np.asarray(doc.get("value"), dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError("'value' must be a list of per-node probability lists") from None
        if value.shape != (m, c.size):
            raise ValueError(f"'value' has shape {value.shape}, expected ({m}, {c.size})")
    else:
        value = _node_array(doc, "value", m, np.float64)
    if not np.all(np.isfinite(value)):
        raise ValueError("'value' must be finite")


def _leaves(doc: dict[str, Any], X: FloatArray) -> IntArray:
    """Index of the node each row of X ends in (after at most ``max_depth`` descents)."""
    X = np.atleast_2d(np.asarray(X, dtype=np.float32)).astype(np.float64)
    d = int(doc["n_features"])
    if X.ndim != 2 or X.shape[1] != d:
        raise ValueError(f"X must be (n, {d}), got {X.shape}")
    feature = np.asarray(doc["feature"], dtype=np.intp)
    threshold = np.asarray(doc["threshold"], dtype=np.float64)
    left = np.asarray(doc["left"], dtype=np.intp)
    right = np.asarray(doc["right"], dtype=np.intp)
    rows = np.arange(X.shape[0])
    node = np.zeros(X.shape[0], dtype=np.intp)
    for _ in range(int(doc["max_depth"])):
        f = feature[node]
        active = f >= 0
        if not active.any():
            break
        go_left = X[rows, np.maximum(f, 0)] <= threshold[node]
        node = np.where(active, np.where(go_left, left[node], right[node]), node)
    return node


def predict_proba_tree(doc: dict[str, Any], X: FloatArray) -> FloatArray:
    """Class probabilities (n, n_classes), columns in the order of ``doc["classes"]``."""
    if doc["task"] != "classification":
        raise ValueError("predict_proba_tree needs a classification shrub")
    value = np.asarray(doc["value"], dtype=np.float64)
    proba: FloatArray = value[_leaves(doc, X)]
    return proba


def predict_tree(doc: dict[str, Any], X: FloatArray) -> FloatArray:
    """Class labels (the most probable class; ties go to the smaller label, like scikit-learn) or values."""
    leaves = _leaves(doc, X)
    value = np.asarray(doc["value"], dtype=np.float64)
    if doc["task"] == "regression":
        out: FloatArray = value[leaves]
        return out
    classes = np.asarray(doc["classes"], dtype=np.float64)
    labels: FloatArray = classes[np.argmax(value[leaves], axis=1)]
    return labels


@dataclass(frozen=True)
class ShrubModel:
    """A validated shrub document as a batch model: what the edge loop installs after a shrub recompute.

    The node arrays are parsed once, so per-sample prediction does no JSON work. ``meta["training"]``
    keeps the document's ``training`` record (how the cloud chose the model, e.g. rebalancing scores).
    """

    document: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    _arrays: dict[str, Any] = field(init=False, repr=False, compare=False)

    _nodes: tuple[list[int], list[float], list[int], list[int], list[float]] = field(
        init=False, repr=False, compare=False
    )
    _depth: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        doc = self.document
        arrays = {key: np.asarray(doc[key], dtype=np.intp) for key in ("feature", "left", "right")}
        arrays.update({key: np.asarray(doc[key], dtype=np.float64) for key in ("threshold", "value")})
        object.__setattr__(self, "_arrays", {**doc, **arrays})
        value = arrays["value"]
        if doc["task"] == "classification":
            # The leaf's most probable class, ties to the smaller label (np.argmax takes the first).
            value = np.asarray(doc["classes"], dtype=np.float64)[np.argmax(value, axis=1)]
        nodes = (doc["feature"], doc["threshold"], doc["left"], doc["right"], value)
        object.__setattr__(self, "_nodes", tuple(np.asarray(a).tolist() for a in nodes))
        object.__setattr__(self, "_depth", int(doc["max_depth"]))

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> ShrubModel:
        """Validate ``doc`` (ValueError if inconsistent) and wrap it."""
        validate_tree_document(doc)
        training = doc.get("training")
        return cls(doc, {"training": training} if isinstance(training, dict) else {})

    @property
    def task(self) -> str:
        return str(self.document["task"])

    @property
    def n_features(self) -> int:
        return int(self.document["n_features"])

    @property
    def n_nodes(self) -> int:
        return len(self.document["feature"])

    @property
    def classes(self) -> FloatArray:
        """The class labels, in the column order of :meth:`predict_proba` (empty for regression)."""
        return np.asarray(self.document.get("classes") or [], dtype=np.float64)

    @property
    def nbytes(self) -> int:
        """Bytes of the parsed node arrays (what a device holds to predict)."""
        keys = ("feature", "threshold", "left", "right", "value")
        return int(sum(np.asarray(self._arrays[k]).nbytes for k in keys))

    def predict(self, X: FloatArray) -> FloatArray:
        return predict_tree(self._arrays, X)

    def predict_proba(self, X: FloatArray) -> FloatArray:
        return predict_proba_tree(self._arrays, X)

    def predict_one(self, x: FloatArray) -> float:
        """One row by walking the node lists (a few µs; :meth:`predict` pays ~100 µs of numpy calls per
        level for a single row). Same rule: x rounded to float32, ``x[f] <= threshold`` goes left."""
        feature, threshold, left, right, value = self._nodes
        row = np.asarray(x, dtype=np.float32).tolist()
        node = 0
        for _ in range(self._depth):
            f = feature[node]
            if f < 0:
                break
            node = left[node] if row[f] <= threshold[node] else right[node]
        return float(value[node])

    def to_document(self) -> dict[str, Any]:
        return self.document

    @classmethod
    def from_sklearn(cls, est: Any) -> ShrubModel:
        """A fitted ``DecisionTreeClassifier`` / ``DecisionTreeRegressor`` (same predictions); see
        :mod:`edgedrift.adapters.sklearn`."""
        from edgedrift.adapters.sklearn import shrub_from_sklearn

        return shrub_from_sklearn(est)

    def to_sklearn(self) -> Any:
        """A fitted scikit-learn CART estimator with this shrub's nodes."""
        from edgedrift.adapters.sklearn import shrub_to_sklearn

        return shrub_to_sklearn(self)
