"""Models from documents, dispatching on ``kind`` (numpy only, for edges), and the batch-model interface.

Every model the cloud returns — a linear model or a shrub — offers :class:`BatchModel`, so the edge
loop, the monitors that only look at errors and the agent handle both alike. Only the bound monitors
(DRUiD, PredSign) need a :class:`~edgedrift.models.linear.LinearModel`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from edgedrift.models import linear, tree
from edgedrift.models.linear import MODEL_FORMAT, LinearModel
from edgedrift.models.losses import FloatArray
from edgedrift.models.tree import ShrubModel

__all__ = ["BatchModel", "model_from_document", "predict_document"]


@runtime_checkable
class BatchModel(Protocol):
    """A model trained in one go on a window: what a recompute returns and the edge loop installs."""

    @property
    def meta(self) -> dict[str, Any]: ...

    @property
    def task(self) -> str: ...

    def predict(self, X: FloatArray) -> FloatArray: ...

    def predict_one(self, x: FloatArray) -> float: ...

    def to_document(self) -> dict[str, Any]: ...


def _check_format(doc: dict[str, Any]) -> None:
    if doc.get("format") != MODEL_FORMAT:
        raise ValueError(f"unsupported model format {doc.get('format')!r}; expected {MODEL_FORMAT!r}")


def model_from_document(doc: dict[str, Any]) -> LinearModel | ShrubModel:
    """The model of a ``linear`` or ``shrub`` document; ValueError for anything else."""
    _check_format(doc)
    kind = doc.get("kind")
    if kind == "linear":
        return LinearModel.from_document(doc)
    if kind == tree.SHRUB_KIND:
        return ShrubModel.from_document(doc)
    raise ValueError(f"unknown model kind {kind!r}")


def predict_document(doc: dict[str, Any], X: FloatArray) -> FloatArray:
    """Labels or values of ``X`` under a ``linear`` or ``shrub`` document; ValueError for anything else."""
    _check_format(doc)
    kind = doc.get("kind")
    if kind == "linear":
        return linear.predict_document(doc, X)
    if kind == tree.SHRUB_KIND:
        return tree.predict_tree(doc, X)
    raise ValueError(f"unknown model kind {kind!r}")
