"""The JSON document of a :class:`~edgedrift.models.linear.LinearModel`, and its validation.

A binary or regression document holds ``coef`` (d numbers) and ``intercept`` (a number); a one-vs-rest
document of C ≥ 3 classes holds ``classes`` (the codes 0..C−1 in column order), ``coef`` (C lists of d
numbers, row c the weights of class c against the rest) and ``intercept`` (C numbers). Either may carry
``class_names`` (the classes' names in code order, for people) and a binary one ``classes`` = [−1, 1].
Every field is checked before a model is built: a bad document is refused with a ValueError that names
the field, never with a KeyError or an IndexError from deep inside numpy.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import numpy as np

from edgedrift.labels import ClassLabels, class_codes
from edgedrift.models.linear import MODEL_FORMAT, LinearModel, Standardizer
from edgedrift.models.losses import LOSSES, FloatArray

__all__ = ["linear_document", "linear_from_document"]


def linear_document(model: LinearModel) -> dict[str, Any]:
    """The versioned JSON document of ``model`` (a binary one exactly as before multi-class existed)."""
    doc: dict[str, Any] = {
        "format": MODEL_FORMAT,
        "kind": "linear",
        "task": model.task,
        "loss": model.loss.name,
        "n_features": model.n_features,
    }
    if model.multiclass:
        doc["classes"] = model.classes.tolist()
    if "class_names" in model.meta:
        doc["class_names"] = list(model.meta["class_names"])
    doc.update(
        {
            "coef": model.coef.T.tolist(),
            "intercept": model.intercept.tolist()
            if isinstance(model.intercept, np.ndarray)
            else model.intercept,
            "bias": model.bias,
            "C": model.C,
            "scaler": None
            if model.scaler is None
            else {"mean": model.scaler.mean.tolist(), "scale": model.scaler.scale.tolist()},
            "n_train": model.n_train,
            "created": model.meta.get("created", datetime.now(UTC).isoformat()),
            "version": model.meta.get("version"),
        }
    )
    if "training" in model.meta:
        doc["training"] = model.meta["training"]
    return doc


def _number(doc: dict[str, Any], key: str, *, positive: bool = False) -> float:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"linear document: {key!r} must be a finite number, got {value!r}")
    if positive and not value > 0:
        raise ValueError(f"linear document: {key!r} must be > 0, got {value!r}")
    return float(value)


def _integer(doc: dict[str, Any], key: str, minimum: int) -> int:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"linear document: {key!r} must be an integer >= {minimum}, got {value!r}")
    return value


def _array(value: Any, key: str, shape: tuple[int, ...], what: str) -> FloatArray:
    """``value`` as a finite float array of ``shape``; ValueError naming ``key`` otherwise."""
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"linear document: {key!r} must be {what}") from None
    if a.shape != shape:
        raise ValueError(f"linear document: {key!r} has shape {a.shape}, expected {shape} ({what})")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"linear document: {key!r} must be finite")
    return a


def _classes(doc: dict[str, Any], task: str, coef: Any) -> int:
    """The number of classes the document declares (0 for regression), checked against ``coef``."""
    classes = doc.get("classes")
    multi = isinstance(coef, list) and bool(coef) and isinstance(coef[0], list)
    if task == "regression":
        if classes is not None or doc.get("class_names") is not None:
            raise ValueError("linear document: a regression model has no 'classes' or 'class_names'")
        if multi:
            raise ValueError("linear document: a regression model's 'coef' is one list of n_features numbers")
        return 0
    if classes is None:
        if multi:
            raise ValueError("linear document: a multi-class model needs 'classes' (the codes 0..C-1)")
        return 2
    if not isinstance(classes, list) or len(classes) < 2:
        raise ValueError(f"linear document: 'classes' must be a list of two or more codes, got {classes!r}")
    n = len(classes)
    expected = class_codes(n)
    if any(isinstance(c, bool) or not isinstance(c, int | float) for c in classes) or not np.array_equal(
        np.asarray(classes, dtype=np.float64), expected
    ):
        raise ValueError(
            f"linear document: 'classes' of {n} classes must be the codes {expected.tolist()}, "
            f"got {classes!r}"
        )
    if multi != (n >= 3):
        raise ValueError(
            f"linear document: {n} classes need 'coef' as "
            + ("C lists of n_features numbers" if n >= 3 else "one list of n_features numbers")
        )
    return n


def linear_from_document(doc: dict[str, Any]) -> LinearModel:
    """The model of a linear document, every field validated (see the module docstring)."""
    if not isinstance(doc, dict):
        raise ValueError(f"a model document must be a JSON object, got {type(doc).__name__}")
    if doc.get("format") != MODEL_FORMAT:
        raise ValueError(f"unsupported model format {doc.get('format')!r}; expected {MODEL_FORMAT!r}")
    if doc.get("kind") != "linear":
        raise ValueError(f"not a linear model document (kind={doc.get('kind')!r})")
    loss_name = doc.get("loss")
    if not isinstance(loss_name, str) or loss_name not in LOSSES:
        raise ValueError(f"linear document: unknown loss {loss_name!r}; expected one of {sorted(LOSSES)}")
    loss = LOSSES[loss_name]
    task = doc.get("task", loss.task)
    if task != loss.task:
        raise ValueError(f"linear document: task {task!r} does not fit the {loss_name!r} loss ({loss.task})")
    d = _integer(doc, "n_features", 1)
    n_classes = _classes(doc, task, doc.get("coef"))
    meta = {k: doc[k] for k in ("created", "version", "training") if doc.get(k) is not None}
    if doc.get("class_names") is not None:
        names = doc["class_names"]
        if not isinstance(names, list) or len(names) != n_classes:
            raise ValueError(f"linear document: 'class_names' must be a list of {n_classes} names")
        meta["class_names"] = list(ClassLabels(tuple(names)).names)
    multi = n_classes >= 3
    rows = f"{n_classes} lists of n_features = {d} numbers" if multi else f"n_features = {d} numbers"
    coef = _array(doc.get("coef"), "coef", (n_classes, d) if multi else (d,), rows)
    intercept = _array(
        doc.get("intercept"),
        "intercept",
        (n_classes,) if multi else (),
        f"{n_classes} numbers" if multi else "a number",
    )
    bias = _number(doc, "bias", positive=True)
    C = _number(doc, "C", positive=True)
    scaler = None
    raw = doc.get("scaler")
    if raw is not None:
        if not isinstance(raw, dict):
            raise ValueError("linear document: 'scaler' must be null or an object with 'mean' and 'scale'")
        mean = _array(raw.get("mean"), "scaler.mean", (d,), f"n_features = {d} numbers")
        scale = _array(raw.get("scale"), "scaler.scale", (d,), f"n_features = {d} numbers")
        if not np.all(scale > 0):
            raise ValueError("linear document: 'scaler.scale' must be > 0")
        scaler = Standardizer(mean=mean, scale=scale)
    n_train = _integer(doc, "n_train", 0) if doc.get("n_train") is not None else 0
    beta = np.vstack([coef.T, intercept / bias]) if multi else np.append(coef, float(intercept) / bias)
    return LinearModel(loss=loss, beta=beta, C=C, bias=bias, scaler=scaler, n_train=n_train, meta=meta)
