"""Prediction from any model document, dispatching on its ``kind`` (numpy only, for edges)."""

from __future__ import annotations

from typing import Any

from edgedrift.models import linear, tree
from edgedrift.models.linear import MODEL_FORMAT
from edgedrift.models.losses import FloatArray

__all__ = ["predict_document"]


def predict_document(doc: dict[str, Any], X: FloatArray) -> FloatArray:
    """Labels or values of ``X`` under a ``linear`` or ``shrub`` document; ValueError for anything else."""
    if doc.get("format") != MODEL_FORMAT:
        raise ValueError(f"unsupported model format {doc.get('format')!r}; expected {MODEL_FORMAT!r}")
    kind = doc.get("kind")
    if kind == "linear":
        return linear.predict_document(doc, X)
    if kind == tree.SHRUB_KIND:
        return tree.predict_tree(doc, X)
    raise ValueError(f"unknown model kind {kind!r}")
