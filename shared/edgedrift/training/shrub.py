"""Training of "shrubs": depth-limited CART trees (scikit-learn), exported as a JSON tree document.

The document format and the numpy-only prediction live in :mod:`edgedrift.models.tree`; this module
only fits the tree and flattens scikit-learn's ``tree_`` arrays into that format.

A classification shrub on finite inputs is grown by scikit-learn's own tree builder, called as
``DecisionTreeClassifier.fit`` calls it (Gini criterion, best splitter, depth-first builder) but without
the estimator's per-call checks: on the windows of 32 rows a Shrub Ensemble retrains on every label or
two, the checks (parameter validation, input and target-type checks, a fresh ``RandomState``) cost about
three times the fit itself. The tree is node for node the estimator's (``tests/unit/test_shrub_fast.py``
compares both on random windows); regression, non-finite inputs, or a scikit-learn without these modules
take the estimator.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import numpy as np
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from edgedrift.models.linear import MODEL_FORMAT
from edgedrift.models.losses import FloatArray, Task
from edgedrift.models.tree import SHRUB_KIND, validate_tree_document

try:
    from sklearn.tree._criterion import Gini
    from sklearn.tree._splitter import BestSplitter
    from sklearn.tree._tree import DepthFirstTreeBuilder, Tree
except ImportError:  # pragma: no cover - a scikit-learn that moved its tree modules
    FAST_FIT = False
else:
    FAST_FIT = True

#: scikit-learn's splitter draws its seed with ``random_state.randint(0, RAND_R_MAX)``.
_RAND_R_MAX = 0x7FFFFFFF


class _SeedDraw:
    """Stands in for ``check_random_state(seed)`` in the splitter, which draws one integer from it: the
    integer a fresh ``RandomState(seed)`` draws (remembered per seed: seeding a Mersenne twister costs
    more than the fit of a small tree)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def randint(self, low: int, high: int) -> int:
        return _first_draw(self.seed, low, high)


@lru_cache(maxsize=64)
def _first_draw(seed: int, low: int, high: int) -> int:
    return int(np.random.RandomState(seed).randint(low, high))


def _fit_classifier(
    X: FloatArray, y: FloatArray, max_depth: int, min_samples_leaf: int, seed: int
) -> tuple[Any, FloatArray]:
    """(tree, classes) of ``DecisionTreeClassifier(max_depth, min_samples_leaf, random_state=seed)``
    fitted on finite (X, y): the estimator's ``_fit`` steps for these settings, without its checks."""
    X32 = np.ascontiguousarray(X, dtype=np.float32)
    classes, codes = np.unique(y, return_inverse=True)
    y_enc = np.ascontiguousarray(codes.reshape(-1, 1), dtype=np.float64)
    n_classes = np.array([classes.shape[0]], dtype=np.intp)
    d = X32.shape[1]
    splitter = BestSplitter(Gini(1, n_classes), d, min_samples_leaf, 0.0, _SeedDraw(seed), None)
    tree = Tree(d, n_classes, 1)
    builder = DepthFirstTreeBuilder(
        splitter, max(2, 2 * min_samples_leaf), min_samples_leaf, 0.0, max_depth, 0.0
    )
    builder.build(tree, X32, y_enc, None, None)
    return tree, classes


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
    if task not in ("classification", "regression"):
        raise ValueError(f"unknown task {task!r}")
    classes: FloatArray | None = None
    if task == "classification" and FAST_FIT and _fast_ok(X, y, max_depth, min_samples_leaf, seed):
        tree, classes = _fit_classifier(X, y, max_depth, min_samples_leaf, seed)
    else:
        est: DecisionTreeClassifier | DecisionTreeRegressor
        if task == "classification":
            est = DecisionTreeClassifier(
                max_depth=max_depth, min_samples_leaf=min_samples_leaf, random_state=seed
            )
        else:
            est = DecisionTreeRegressor(
                max_depth=max_depth, min_samples_leaf=min_samples_leaf, random_state=seed
            )
        est.fit(X, y)
        tree = est.tree_
        if task == "classification":
            classes = np.asarray(est.classes_, dtype=np.float64)
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
    if classes is not None:
        # Counts in older scikit-learn, fractions since 1.4: normalise either way.
        doc["classes"] = [float(c) for c in classes]
        doc["value"] = (raw / raw.sum(axis=1, keepdims=True)).tolist()
    else:
        doc["value"] = raw[:, 0].tolist()
    validate_tree_document(doc)
    return doc


def _fast_ok(X: FloatArray, y: FloatArray, max_depth: int, min_samples_leaf: int, seed: int) -> bool:
    """Whether the builder path applies: finite inputs (the estimator routes NaN through its
    missing-value splitter and refuses inf), integral labels (the estimator refuses "continuous" targets)
    and the plain integer settings the estimator would accept."""
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (max_depth, min_samples_leaf, seed))
    return (
        ints
        and max_depth >= 1
        and min_samples_leaf >= 1
        and 0 <= seed < 2**32
        and bool(np.isfinite(X).all() and np.isfinite(y).all())
        and bool(np.array_equal(y, np.trunc(y)))
        and bool(np.isfinite(X.astype(np.float32)).all())
    )
