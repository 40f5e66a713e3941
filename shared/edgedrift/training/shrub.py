"""Training of "shrubs": depth-limited CART trees (scikit-learn), exported as a JSON tree document.

The document format and the numpy-only prediction live in :mod:`edgedrift.models.tree`; this module
only fits the tree and flattens scikit-learn's ``tree_`` arrays into that format.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from edgedrift.models.linear import MODEL_FORMAT
from edgedrift.models.losses import FloatArray, Task
from edgedrift.models.tree import SHRUB_KIND, validate_tree_document


def train_shrub(
    X: FloatArray,
    y: FloatArray,
    task: Task,
    *,
    max_depth: int = 4,
    min_samples_leaf: int = 1,
    seed: int = 0,
) -> dict[str, Any]:
    """Fit a CART tree of depth ≤ ``max_depth`` on (X, y) and return its shrub document.

    ``seed`` fixes scikit-learn's feature permutation, which decides between equally good splits.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"X must be (n, d) and y (n,), got {X.shape} and {y.shape}")
    if X.shape[0] == 0:
        raise ValueError("cannot train on an empty window")
    est: DecisionTreeClassifier | DecisionTreeRegressor
    if task == "classification":
        est = DecisionTreeClassifier(
            max_depth=max_depth, min_samples_leaf=min_samples_leaf, random_state=seed
        )
    elif task == "regression":
        est = DecisionTreeRegressor(max_depth=max_depth, min_samples_leaf=min_samples_leaf, random_state=seed)
    else:
        raise ValueError(f"unknown task {task!r}")
    est.fit(X, y)
    tree = est.tree_
    left = np.asarray(tree.children_left, dtype=np.int64)
    right = np.asarray(tree.children_right, dtype=np.int64)
    leaf = left < 0
    feature = np.where(leaf, -1, np.asarray(tree.feature, dtype=np.int64))
    threshold = np.where(leaf, 0.0, np.asarray(tree.threshold, dtype=np.float64))
    raw = np.asarray(tree.value, dtype=np.float64)[:, 0, :]  # (nodes, classes) or (nodes, 1)
    doc: dict[str, Any] = {
        "format": MODEL_FORMAT,
        "kind": SHRUB_KIND,
        "task": task,
        "n_features": int(X.shape[1]),
        "max_depth": int(tree.max_depth),
        "feature": feature.tolist(),
        "threshold": threshold.tolist(),
        "left": np.where(leaf, -1, left).tolist(),
        "right": np.where(leaf, -1, right).tolist(),
        "n_train": int(X.shape[0]),
        "created": datetime.now(UTC).isoformat(),
        "version": None,
    }
    if task == "classification":
        # Counts in older scikit-learn, fractions since 1.4: normalise either way.
        doc["classes"] = [float(c) for c in est.classes_]
        doc["value"] = (raw / raw.sum(axis=1, keepdims=True)).tolist()
    else:
        doc["value"] = raw[:, 0].tolist()
    validate_tree_document(doc)
    return doc
