"""A labelled data stream held in memory: the unit every loader and generator returns.

The DRUiD paper (Section 5) evaluates on finite streams that fit in memory (ELEC2, Covertype, Sine1+,
ridge regression), so a stream is simply the rows in arrival order plus what is known about it: the task,
the feature names and, for synthetic streams, the sample indices where a new concept starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from edgedrift.labels import ClassLabels, ClassName, check_codes
from edgedrift.models.losses import FloatArray, Task

_TASKS: tuple[Task, ...] = ("classification", "regression")


@dataclass(frozen=True, eq=False)
class Stream:
    """Rows ``X[i], y[i]`` in arrival order.

    Classification labels are codes (:mod:`edgedrift.labels`): −1.0/+1.0 for two classes (the losses of
    Table 1 are written for ±1 labels), 0.0 … C−1 for C ≥ 3 classes. ``classes`` names the classes in
    code order (None: a binary stream whose classes are just −1 and +1). ``drift_points`` are the
    indices of the first sample of every new concept (synthetic streams only).
    ``X`` and ``y`` are converted to float64 (``X`` C-contiguous) on construction; the arrays are shared,
    not copied, when they already have that layout. Equality is identity (arrays have no single truth
    value).
    """

    name: str
    X: FloatArray
    y: FloatArray
    task: Task
    feature_names: tuple[str, ...]
    drift_points: tuple[int, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
    classes: tuple[ClassName, ...] | None = None

    def __post_init__(self) -> None:
        X = np.ascontiguousarray(self.X, dtype=np.float64)
        y = np.ascontiguousarray(self.y, dtype=np.float64)
        name = self.name
        if X.ndim != 2:
            raise ValueError(f"Stream {name!r}: X must be 2-D (n_samples, n_features), got shape {X.shape}")
        if y.ndim != 1:
            raise ValueError(f"Stream {name!r}: y must be 1-D (n_samples,), got shape {y.shape}")
        n, d = X.shape
        if y.shape[0] != n:
            raise ValueError(f"Stream {name!r}: X has {n} rows but y has {y.shape[0]} labels")
        if n == 0:
            raise ValueError(f"Stream {name!r}: a stream needs at least one sample")
        if self.task not in _TASKS:
            raise ValueError(f"Stream {name!r}: task must be one of {_TASKS}, got {self.task!r}")
        names = tuple(str(f) for f in self.feature_names)
        if len(names) != d:
            raise ValueError(f"Stream {name!r}: {len(names)} feature names for {d} features")
        if len(set(names)) != len(names):
            dups = sorted({f for f in names if names.count(f) > 1})
            raise ValueError(f"Stream {name!r}: duplicate feature names {dups}")
        bad_rows = np.flatnonzero(~np.isfinite(X).all(axis=1))
        if bad_rows.size:
            i = int(bad_rows[0])
            j = int(np.flatnonzero(~np.isfinite(X[i]))[0])
            raise ValueError(
                f"Stream {name!r}: X has {bad_rows.size} row(s) with NaN/inf values; "
                f"first at row {i}, feature {names[j]!r} (value {X[i, j]})"
            )
        bad_y = np.flatnonzero(~np.isfinite(y))
        if bad_y.size:
            raise ValueError(
                f"Stream {name!r}: y has {bad_y.size} NaN/inf value(s); first at row {int(bad_y[0])}"
            )
        classes = None if self.classes is None else ClassLabels(tuple(self.classes)).names
        if self.task == "classification":
            check_codes(y, 2 if classes is None else len(classes), f"Stream {name!r}")
        elif classes is not None:
            raise ValueError(f"Stream {name!r}: a regression stream has no classes")
        drifts = tuple(int(p) for p in self.drift_points)
        if any(not 0 < p < n for p in drifts) or any(a >= b for a, b in pairwise(drifts)):
            raise ValueError(
                f"Stream {name!r}: drift_points must be strictly increasing indices in (0, {n}), got {drifts}"
            )
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "feature_names", names)
        object.__setattr__(self, "drift_points", drifts)
        object.__setattr__(self, "classes", classes)

    def __len__(self) -> int:
        return int(self.X.shape[0])

    def __repr__(self) -> str:
        return (
            f"Stream(name={self.name!r}, task={self.task!r}, n={len(self)}, "
            f"n_features={self.n_features}, drift_points={self.drift_points})"
        )

    @property
    def n_features(self) -> int:
        """Number of input features d (without any bias term)."""
        return int(self.X.shape[1])

    @property
    def n_classes(self) -> int:
        """Number of classes (2 for a binary stream without names); 0 for regression."""
        if self.task == "regression":
            return 0
        return 2 if self.classes is None else len(self.classes)

    @property
    def labels(self) -> ClassLabels:
        """The classes' names and codes (names −1 and +1 when the stream has none); regression: ValueError."""
        if self.task == "regression":
            raise ValueError(f"Stream {self.name!r}: a regression stream has no classes")
        return ClassLabels(self.classes if self.classes is not None else (-1, 1))

    def shuffled(self, seed: int) -> Stream:
        """The same rows in a random order: an i.i.d. stream without drift, so ``drift_points`` is cleared."""
        perm = np.random.default_rng(seed).permutation(len(self))
        return Stream(
            name=f"{self.name}[shuffled:{seed}]",
            X=self.X[perm],
            y=self.y[perm],
            task=self.task,
            feature_names=self.feature_names,
            meta={**self.meta, "shuffle_seed": seed},
            classes=self.classes,
        )
