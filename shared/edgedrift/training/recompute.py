"""The batch trainer a strategy's :class:`~edgedrift.strategies.TrainSpec` asks for, run in process.

The edge agent sends a ``TrainSpec`` to the cloud over HTTP; the offline evaluator, the benchmarks and
the examples call the cloud's own entry point, :func:`~edgedrift.training.window.train_window`, with the
same header instead, so a replay trains exactly the model a deployment would receive.
"""

from __future__ import annotations

from edgedrift.loop import Recompute
from edgedrift.models.document import BatchModel, model_from_document
from edgedrift.models.losses import FloatArray, Task
from edgedrift.strategies.train_spec import TrainSpec
from edgedrift.training.window import Scoring, train_window

__all__ = ["spec_trainer"]


def spec_trainer(
    spec: TrainSpec,
    task: Task,
    reason: str = "evaluator",
    n_classes: int | None = None,
    scoring: Scoring = "real",
) -> Recompute:
    """A recompute that trains what ``spec`` asks for on (X, y) with :func:`train_window`; ``n_classes``
    (C ≥ 3) for the codes 0..C−1 of a multi-class stream; ``scoring`` how RebalanceStream's candidates
    are scored (the cloud always uses ``"real"``; ``"augmented"`` is the paper's literal form).

    Examples
    --------
    >>> import numpy as np
    >>> from edgedrift.strategies import SHRUB
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2))
    >>> y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    >>> shrub = spec_trainer(SHRUB, "classification")(X, y)
    >>> type(shrub).__name__, float(np.mean(shrub.predict(X) == y)) > 0.9
    ('ShrubModel', True)
    """

    def recompute(X: FloatArray, y: FloatArray, reset_rows: int | None = None) -> BatchModel:
        header = spec.header(task, None, reason, reset_rows=reset_rows, n_classes=n_classes)
        outcome = train_window(header, X, y, scoring)
        return model_from_document(outcome.document)

    return recompute
