"""Strategies the evaluator compares: EdgeDrift's own and the paper's (from :mod:`edgedrift.strategies`,
the same builders the edge agent uses), plus the river peers and the evaluator's first-window tuning."""

from __future__ import annotations

from typing import Any

from edgedrift.loop import Recompute
from edgedrift.models.document import BatchModel, model_from_document
from edgedrift.models.losses import FloatArray, Task
from edgedrift.strategies import LEARNERS, STRATEGIES, Context, Runner, Strategy, TrainSpec, make_learner
from edgedrift.training.linear import LinearTrainer, tune_C
from edgedrift.training.window import train_window
from edgedrift.wire import WindowHeader

__all__ = [
    "LEARNERS",
    "STRATEGIES",
    "Context",
    "Runner",
    "Strategy",
    "cloud_trainer",
    "expand",
    "make_context",
    "make_learner",
]


def cloud_trainer(spec: TrainSpec, task: Task, reason: str = "evaluator") -> Recompute:
    """The cloud's own training entry point (:func:`train_window`), in process, for a non-linear spec."""

    def recompute(X: FloatArray, y: FloatArray, reset_rows: int | None = None) -> BatchModel:
        fields: dict[str, Any] = {
            "task": task,
            "learner": spec.learner,
            "params": spec.params,
            "rebalance": spec.rebalance,
            "reason": reason,
        }
        if reset_rows is not None:
            fields["reset_rows"] = reset_rows
        if spec.return_base:
            fields["return_base"] = True
        outcome = train_window(WindowHeader.model_validate(fields), X, y)
        return model_from_document(outcome.document)

    return recompute


def make_context(
    X0: FloatArray,
    y0: FloatArray,
    task: Task,
    window_labels: int,
    loss: str | None = None,
    C: float | None = None,
    train: TrainSpec | None = None,
) -> Context:
    """Tune C on the first window's labeled samples (blocked CV over a wide grid) and build a Context.

    ``train`` is the strategy's recompute spec: linear models train with :class:`LinearTrainer`, other
    learners (shrubs, rebalancing) through the cloud's :func:`train_window`, the first model without
    rebalancing.
    """
    loss = loss or ("logistic" if task == "classification" else "squared")
    trainer = LinearTrainer(loss=loss)
    C = C if C is not None else tune_C(X0, y0, trainer).best_C
    ctx = Context(X0.shape[1], task, loss, window_labels, C, trainer.with_C(C), X0, y0)
    if train is not None and train.learner is not None:
        ctx.recompute = cloud_trainer(train, task)
        ctx.initial = cloud_trainer(TrainSpec(train.learner, train.params), task, "initial")
    return ctx


def expand(names: list[str]) -> list[str]:
    """Resolve group names: ``river`` = river peers, ``peers`` = paper baselines, ``all``."""
    from edgedrift_eval.peers import RIVER_PEERS

    groups = {
        "river": list(RIVER_PEERS),
        "edgedrift": [s.name for s in STRATEGIES.values() if s.edgedrift],
        "all": list(STRATEGIES) + list(RIVER_PEERS),
    }
    out: list[str] = []
    for name in names:
        for item in groups.get(name, [name]):
            if item not in STRATEGIES and item not in RIVER_PEERS:
                known = sorted([*STRATEGIES, *RIVER_PEERS, *groups])
                raise ValueError(f"unknown strategy {item!r}; known: {', '.join(known)}")
            if item not in out:
                out.append(item)
    return out
