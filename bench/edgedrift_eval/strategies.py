"""Strategies the evaluator compares: EdgeDrift's own and the paper's (from :mod:`edgedrift.strategies`,
the same builders the edge agent uses), plus the river peers and the evaluator's first-window tuning."""

from __future__ import annotations

from edgedrift.models.losses import FloatArray, Task
from edgedrift.strategies import LEARNERS, STRATEGIES, Context, Runner, Strategy, make_learner
from edgedrift_cloud.training.linear import LinearTrainer, tune_C

__all__ = [
    "LEARNERS",
    "STRATEGIES",
    "Context",
    "Runner",
    "Strategy",
    "expand",
    "make_context",
    "make_learner",
]


def make_context(
    X0: FloatArray,
    y0: FloatArray,
    task: Task,
    window_labels: int,
    loss: str | None = None,
    C: float | None = None,
) -> Context:
    """Tune C on the first window's labeled samples (blocked CV over a wide grid) and build a Context."""
    loss = loss or ("logistic" if task == "classification" else "squared")
    trainer = LinearTrainer(loss=loss)
    C = C if C is not None else tune_C(X0, y0, trainer).best_C
    return Context(X0.shape[1], task, loss, window_labels, C, trainer.with_C(C), X0, y0)


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
