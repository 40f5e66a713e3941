"""A user's own data files as streams, in file order: CSV with a header row, and Weka's ARFF.

Class labels may be text or numbers; :mod:`edgedrift.labels` codes them (−1/+1 for two classes,
0..C−1 beyond) and ``Stream.classes`` keeps their names. ARFF files are read with liac-arff
(``pip install 'edgedrift-core[arff]'``, imported on first use), dense or sparse.
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

__all__ = ["MAX_INFERRED_CLASSES", "load_arff", "load_csv"]


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


def _arff_module() -> Any:
    try:
        import arff
    except ImportError as exc:
        raise ImportError("reading ARFF files needs liac-arff: pip install 'edgedrift-core[arff]'") from exc
    return arff


def _nominal_number(values: list[str]) -> dict[str, float]:
    """A nominal attribute as a feature: its values' numbers when all are numbers (``{0,1}``), else the
    position of the value in the declaration."""
    numbers = [_as_float(v) for v in values]
    if all(n is not None and math.isfinite(n) for n in numbers):
        return {v: float(n) for v, n in zip(values, numbers, strict=True)}  # type: ignore[arg-type]
    return {v: float(i) for i, v in enumerate(values)}


def load_arff(
    path: str | os.PathLike[str],
    target: str | None = None,
    task: Task | None = None,
    features: list[str] | tuple[str, ...] | None = None,
) -> Stream:
    """A Weka ARFF file (dense or sparse rows) as a stream.

    ``target`` defaults to the last attribute (Weka's convention for the class). A nominal target is
    classification with the classes in their declared order; a numeric one follows :func:`load_csv`'s
    rule. Features: numeric attributes, and nominal ones as numbers (their values when those are numbers,
    as in ``{0,1}``, else the value's position in the declaration); string and date attributes are
    skipped unless named in ``features``, which then fails. A missing value (``?``) is an error naming
    the row and the attribute.
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"ARFF file not found: {file}")
    arff = _arff_module()
    try:
        with file.open() as f:
            data = arff.load(f, return_type=arff.DENSE)
    except arff.ArffException as exc:
        raise ValueError(f"{file}: not a readable ARFF file: {exc}") from exc
    attributes: list[tuple[str, Any]] = data["attributes"]
    names = [a for a, _ in attributes]
    target = names[-1] if target is None else target
    if target not in names:
        raise ValueError(f"{file}: unknown target attribute {target!r}; attributes are {names}")
    t = names.index(target)
    usable = [
        j
        for j, (_, kind) in enumerate(attributes)
        if j != t and (isinstance(kind, list) or str(kind).upper() in ("NUMERIC", "REAL", "INTEGER"))
    ]
    if features is None:
        cols = usable
    else:
        unknown = [c for c in features if c not in names]
        if unknown:
            raise ValueError(f"{file}: unknown feature attribute(s) {unknown}; attributes are {names}")
        cols = [names.index(c) for c in features]
        bad = [names[j] for j in cols if j not in usable]
        if bad:
            raise ValueError(
                f"{file}: attribute(s) {bad} are neither numeric nor nominal (or are the target)"
            )
    if not cols:
        raise ValueError(f"{file}: no numeric or nominal feature attributes besides the target {target!r}")
    rows: list[list[Any]] = data["data"]
    if not rows:
        raise ValueError(f"{file}: no data rows")
    maps = {j: _nominal_number(attributes[j][1]) for j in cols if isinstance(attributes[j][1], list)}
    X = np.empty((len(rows), len(cols)))
    for i, row in enumerate(rows):
        for k, j in enumerate(cols):
            value = row[j]
            if value is None:
                raise ValueError(f"{file}: missing value (?) in attribute {names[j]!r}, data row {i + 1}")
            X[i, k] = maps[j][value] if j in maps else float(value)
    raw = [row[t] for row in rows]
    if any(v is None for v in raw):
        i = next(i for i, v in enumerate(raw) if v is None)
        raise ValueError(f"{file}: missing value (?) in target {target!r}, data row {i + 1}")
    kind = attributes[t][1]
    meta: dict[str, Any] = {"source": str(file), "target": target}
    if isinstance(kind, list):
        if task == "regression":
            raise ValueError(f"{file}: the target {target!r} is nominal: it cannot be regression")
        labels = ClassLabels(tuple(kind))
        return Stream(
            name=file.stem,
            X=X,
            y=labels.encode(raw),
            task="classification",
            feature_names=tuple(names[j] for j in cols),
            meta=meta,
            classes=labels.names,
        )
    values = [float(v) for v in raw]
    resolved = task or _infer_task(set(values), True)
    classes = None
    if resolved == "classification":
        labels = ClassLabels.from_values(values)
        y, classes = labels.encode(values), labels.names
    else:
        y = np.asarray(values, dtype=np.float64)
    return Stream(
        name=file.stem,
        X=X,
        y=y,
        task=resolved,
        feature_names=tuple(names[j] for j in cols),
        meta=meta,
        classes=classes,
    )
