"""What a strategy's recomputes ask the cloud for, and the wire header of one recompute.

A :class:`TrainSpec` names the training API's learner, its parameters and the rebalancing; with the
stream's task and loss and one recompute's details it becomes a :class:`~edgedrift.wire.WindowHeader`
(:meth:`TrainSpec.header`), the one place the edge agent and the evaluator build that header.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from edgedrift.learners.shrub_ensemble import PAPER_MAX_DEPTH
from edgedrift.wire import LINEAR_LOSS, WindowHeader

__all__ = ["LINEAR", "LOSS_LEARNER", "REBALANCE_TREE", "SHRUB", "TrainSpec"]

#: Loss of the learning core -> learner name of the training API (the inverse of ``wire.LINEAR_LOSS``).
LOSS_LEARNER: dict[str, str] = {loss: learner for learner, loss in LINEAR_LOSS.items()}


@dataclass(frozen=True)
class TrainSpec:
    """What a strategy's recomputes ask the cloud for (the wire's learner, params and rebalance).

    Parameters
    ----------
    learner
        The training API's learner (``"shrub"``, ...); None: the linear learner of the stream's loss
        (logistic / squared hinge / ridge).
    params
        Learner parameters of the wire (:class:`~edgedrift.wire.LearnerParams`), e.g. ``max_depth``.
    rebalance
        ``"none"``, ``"smote"`` or ``"select"`` (RebalanceStream's four candidates).
    return_base
        Also return the model trained on the plain window (RebalanceStream+).

    Examples
    --------
    >>> spec = TrainSpec()
    >>> spec.learner_for("squared_hinge")
    'svm'
    >>> header = spec.header("classification", "logistic", "druid", C=100.0, stats={"statistic": 7.5})
    >>> header.learner, header.params.C, header.reason, header.monitor
    ('logistic', 100.0, 'druid', {'statistic': 7.5})
    >>> select = TrainSpec("shrub", {"max_depth": 8}, rebalance="select", return_base=True)
    >>> header = select.header("classification", None, "change", request_id="gw-1-0-3", reset_rows=40)
    >>> header.params.max_depth, header.reset_rows, header.return_base, header.request_id
    (8, 40, True, 'gw-1-0-3')
    """

    learner: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    rebalance: Literal["none", "smote", "select"] = "none"
    return_base: bool = False

    def learner_for(self, loss: str | None) -> str:
        """The training API's learner: this spec's, or the linear learner of ``loss``."""
        if self.learner is not None:
            return self.learner
        if loss is None:
            raise ValueError("a linear TrainSpec needs the stream's loss to name its learner")
        return LOSS_LEARNER[loss]

    def header(
        self,
        task: str,
        loss: str | None,
        reason: str,
        *,
        C: float | str | None = None,
        stats: Mapping[str, Any] | None = None,
        request_id: str | None = None,
        reset_rows: int | None = None,
        n_classes: int | None = None,
        class_names: Sequence[str] | None = None,
    ) -> WindowHeader:
        """The wire header of one recompute with this spec (validated by the wire model, ``task`` too).

        ``loss`` names the learner when the spec does not (None is fine for a non-linear spec); ``C``
        goes into the learner parameters (None: the trainer's default); ``stats`` is the monitor's
        evidence; ``reset_rows`` the size of RebalanceStream's reset batch; ``n_classes`` the classes of a
        multi-class stream (C ≥ 3; a binary header leaves it out); ``class_names`` the classes' names in
        code order (the cloud writes them into the model document).
        """
        params = dict(self.params) if C is None else {"C": C, **self.params}
        fields: dict[str, Any] = {
            "task": task,
            "learner": self.learner_for(loss),
            "params": params,
            "rebalance": self.rebalance,
            "reason": reason,
        }
        if stats is not None:
            fields["monitor"] = dict(stats)
        if request_id is not None:
            fields["request_id"] = request_id
        if reset_rows is not None:
            fields["reset_rows"] = reset_rows
        if n_classes is not None and n_classes >= 3:
            fields["n_classes"] = n_classes
        if class_names is not None:
            fields["class_names"] = list(class_names)
        if self.return_base:
            fields["return_base"] = True
        return WindowHeader.model_validate(fields)


#: The linear learner of the stream's loss, not rebalanced: what most strategies recompute.
LINEAR = TrainSpec()
#: The shrubs of a Shrub Ensemble: CART trees of depth ≤ 8 on the paper's window of B = 32 labels (the
#: reference grows them fully; on 32 rows that is at most 63 nodes either way).
SHRUB = TrainSpec("shrub", {"max_depth": PAPER_MAX_DEPTH})
#: RebalanceStream's base learner: one deeper CART tree per change.
REBALANCE_TREE = {"max_depth": 8}
