"""Strategies the evaluator compares: EdgeDrift's own and the paper's (from :mod:`edgedrift.strategies`,
the same builders the edge agent uses), plus the river peers and the evaluator's first-window tuning."""

from __future__ import annotations

from edgedrift.adapters.entry_points import strategy_catalogue
from edgedrift.models.losses import FloatArray, Task
from edgedrift.strategies import LEARNERS, Context, Runner, Strategy, TrainSpec, make_learner
from edgedrift.training.linear import LinearTrainer, tune_C
from edgedrift.training.recompute import spec_trainer
from edgedrift.training.retune import HistoryRetuner

__all__ = [
    "LEARNERS",
    "STRATEGIES",
    "Context",
    "Runner",
    "Strategy",
    "expand",
    "make_context",
    "make_learner",
    "spec_trainer",
]

#: The built-in strategies and those registered under the ``edgedrift.strategies`` entry points.
STRATEGIES = strategy_catalogue()


def make_context(
    X0: FloatArray,
    y0: FloatArray,
    task: Task,
    window_labels: int,
    loss: str | None = None,
    C: float | None = None,
    train: TrainSpec | None = None,
    n_classes: int = 2,
) -> Context:
    """Tune C on the first window's labeled samples (blocked CV over a wide grid) and build a Context.

    ``train`` is the strategy's recompute spec: linear models train with :class:`LinearTrainer`, other
    learners (shrubs, rebalancing) through the cloud's own entry point (:func:`spec_trainer`), the first
    model without rebalancing. Re-tuning strategies get the cloud's search in process
    (:class:`~edgedrift.training.retune.HistoryRetuner`). ``n_classes`` ≥ 3: the labels are the codes
    0..C−1 and every batch model is one-vs-rest.
    """
    loss = loss or ("logistic" if task == "classification" else "squared")
    classes = n_classes if task == "classification" and n_classes > 2 else None
    trainer = LinearTrainer(loss=loss, n_classes=classes)
    C = C if C is not None else tune_C(X0, y0, trainer).best_C
    ctx = Context(X0.shape[1], task, loss, window_labels, C, trainer.with_C(C), X0, y0, n_classes=n_classes)
    batch = trainer.with_C(C)
    ctx.retune = lambda channel, learner: HistoryRetuner(
        channel, learner, batch, loss, task, window_labels=window_labels
    )
    if train is not None and train.learner is not None:
        ctx.recompute = spec_trainer(train, task, n_classes=classes)
        ctx.initial = spec_trainer(TrainSpec(train.learner, train.params), task, "initial", n_classes=classes)
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
