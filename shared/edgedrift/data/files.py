"""A user's own data files as streams: CSV with a header row, in file order.

Class labels may be text or numbers; :mod:`edgedrift.labels` codes them (−1/+1 for two classes,
0..C−1 beyond) and ``Stream.classes`` keeps their names.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from edgedrift.data.stream import Stream
from edgedrift.labels import ClassLabels
from edgedrift.models.losses import Task

__all__ = ["MAX_INFERRED_CLASSES", "load_csv"]


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def load_csv(
    path: str | os.PathLike[str],
    target: str,
    task: Task | None = None,
    features: list[str] | tuple[str, ...] | None = None,
) -> Stream:
    """Any CSV file with a header row, in file order, as a stream.

    ``features`` defaults to every other column that holds numbers (columns without a single number,
    e.g. dates or ids, are skipped and listed in ``meta["skipped_columns"]``). Without ``task`` the target
    is read as classes when it holds text, exactly two values, or at most ``MAX_INFERRED_CLASSES`` integer
    values, and as a regression target otherwise. Classes are sorted (numerically if all are numbers) and
    coded as :mod:`edgedrift.labels` says: −1/+1 for two, 0..C−1 for more; ``Stream.classes`` keeps their
    names.
    """
    if task not in (None, "classification", "regression"):
        raise ValueError(f"task must be 'classification', 'regression' or None, got {task!r}")
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"CSV file not found: {file}")
    with file.open(newline="") as f:
        reader = csv.reader(f)
        header = [c.strip() for c in next(reader, [])]
        rows: list[tuple[int, list[str]]] = [
            (reader.line_num, [c.strip() for c in row]) for row in reader if any(c.strip() for c in row)
        ]
    if not header:
        raise ValueError(f"{file}: empty file, expected a header row")
    if len(set(header)) != len(header):
        raise ValueError(f"{file}: duplicate column names in header {header}")
    if not rows:
        raise ValueError(f"{file}: no data rows")
    for line, row in rows:
        if len(row) != len(header):
            raise ValueError(f"{file}: line {line} has {len(row)} fields, the header has {len(header)}")
    if target not in header:
        raise ValueError(f"{file}: unknown target column {target!r}; columns are {header}")
    t = header.index(target)

    skipped: list[str] = []
    if features is None:
        feature_cols = []
        for j, col in enumerate(header):
            if j == t:
                continue
            if any(_as_float(row[j]) is not None for _, row in rows):
                feature_cols.append(j)
            else:
                skipped.append(col)
    else:
        unknown = [c for c in features if c not in header]
        if unknown:
            raise ValueError(f"{file}: unknown feature column(s) {unknown}; columns are {header}")
        if target in features:
            raise ValueError(f"{file}: the target {target!r} cannot also be a feature")
        if len(set(features)) != len(features):
            raise ValueError(f"{file}: duplicate feature columns in {list(features)}")
        feature_cols = [header.index(c) for c in features]
    if not feature_cols:
        raise ValueError(f"{file}: no numeric feature columns besides the target {target!r}")

    X = np.empty((len(rows), len(feature_cols)))
    for i, (line, row) in enumerate(rows):
        for k, j in enumerate(feature_cols):
            value = _as_float(row[j])
            if value is None:
                raise ValueError(
                    f"{file}: non-numeric value {row[j]!r} in feature column {header[j]!r}, "
                    f"data row {i + 1} (line {line})"
                )
            if not math.isfinite(value):
                raise ValueError(
                    f"{file}: NaN/inf value {row[j]!r} in feature column {header[j]!r}, "
                    f"data row {i + 1} (line {line})"
                )
            X[i, k] = value

    raw = [row[t] for _, row in rows]
    numeric = [_as_float(v) for v in raw]
    for i, (value, (line, _)) in enumerate(zip(numeric, rows, strict=True)):
        if value is not None and not math.isfinite(value):
            raise ValueError(
                f"{file}: NaN/inf value {raw[i]!r} in target column {target!r}, "
                f"data row {i + 1} (line {line})"
            )
    all_numeric = all(v is not None for v in numeric)
    labels: list[Any] = list(numeric) if all_numeric else raw
    distinct = set(labels)
    meta: dict[str, Any] = {"source": str(file), "target": target}
    if skipped:
        meta["skipped_columns"] = tuple(skipped)
    resolved = task or _infer_task(distinct, all_numeric)
    classes: tuple[Any, ...] | None = None
    if resolved == "classification":
        if len(distinct) < 2:
            raise ValueError(f"{file}: classification needs at least two classes in target {target!r}")
        encoding = ClassLabels.from_values(labels)
        classes = encoding.names
        y = encoding.encode(labels)
    else:
        if not all_numeric:
            i = next(i for i, v in enumerate(numeric) if v is None)
            raise ValueError(
                f"{file}: regression needs a numeric target, but column {target!r} has {raw[i]!r} "
                f"at data row {i + 1} (line {rows[i][0]})"
            )
        y = np.array(numeric, dtype=np.float64)
    return Stream(
        name=file.stem,
        X=X,
        y=y,
        task=resolved,
        feature_names=tuple(header[j] for j in feature_cols),
        meta=meta,
        classes=classes,
    )


#: A numeric target with integer values and at most this many of them is read as class labels.
MAX_INFERRED_CLASSES = 100


def _infer_task(distinct: set[Any], all_numeric: bool) -> Task:
    """The task of a target column when none is asked for: classification for text labels, two values,
    or a few integer values (scikit-learn's ``type_of_target`` reads integers as classes too; the cap keeps
    integer-valued regression targets, such as counts, regression); regression otherwise."""
    if not all_numeric or len(distinct) == 2:
        return "classification"
    if len(distinct) <= MAX_INFERRED_CLASSES and all(float(v).is_integer() for v in distinct):
        return "classification"
    return "regression"
