"""Edge learners whose every hyper-parameter is tuned: on the first window (the strong edge-only baseline)
and again by the cloud at each recompute, over the device's labeled history (``druid-tune``,
``periodic-tune``).

The grids are the same for both, so a gain of a re-tuning strategy over the baseline is the cloud's (more
data, later data), not the grid's. The search itself runs in the cloud
(:mod:`edgedrift.training.retune`); the edge only applies what it is sent (:class:`RetunedLearner`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from edgedrift.learners import AdaptiveSGD, ForgettingNewton
from edgedrift.learners.base import OnlineLearner
from edgedrift.loop import EdgeLoop
from edgedrift.models.losses import FloatArray, Task
from edgedrift.monitors import DruidMonitor, Monitor, NeverMonitor, PeriodicMonitor
from edgedrift.strategies.channel import TuneChannel
from edgedrift.strategies.context import Context
from edgedrift.strategies.tuning import prequential_score
from edgedrift.window import CountWindow, TimeWindow

__all__ = ["EDGE_GRIDS", "RetunedLearner", "edge_learner", "first_window_params", "grid_points", "tune_all"]

#: Every hyper-parameter of each tunable edge learner, the EW scaler's rate included, and its grid.
EDGE_GRIDS: dict[str, dict[str, tuple[float, ...]]] = {
    "rmsprop": {"scale_alpha": (0.01, 0.03, 0.1, 0.3), "lr": (0.03, 0.1, 0.3, 1.0)},
    "newton": {
        "scale_alpha": (0.01, 0.03, 0.1, 0.3),
        "forgetting": (0.9, 0.95, 0.98, 0.995),
        "prior": (0.1, 1.0),
    },
}


def edge_learner(
    name: str, n_features: int, loss: str, task: Task, params: Mapping[str, float]
) -> OnlineLearner:
    """A fresh tunable edge learner with the given hyper-parameters (missing ones: the grid's default).

    Examples
    --------
    >>> newton = edge_learner("newton", 3, "logistic", "classification", {"forgetting": 0.98})
    >>> newton.forgetting, newton.prior, newton.scale_alpha
    (0.98, 0.1, 0.01)
    """
    p = dict(params)
    alpha = float(p.get("scale_alpha", 0.01))
    if name == "rmsprop":
        return AdaptiveSGD(n_features, loss, lr=float(p.get("lr", 0.3)), scale_alpha=alpha, task=task)
    if name == "newton":
        return ForgettingNewton(
            n_features,
            loss,
            forgetting=float(p.get("forgetting", 0.9)),
            prior=float(p.get("prior", 0.1)),
            scale_alpha=alpha,
            task=task,
        )
    raise ValueError(f"no tunable edge learner {name!r}; known: {', '.join(EDGE_GRIDS)}")


def grid_points(name: str) -> list[dict[str, float]]:
    """Every configuration of the learner's grid, in a fixed order (ties go to the first).

    Examples
    --------
    >>> len(grid_points("rmsprop")), grid_points("rmsprop")[0]
    (16, {'scale_alpha': 0.01, 'lr': 0.03})
    """
    grid = EDGE_GRIDS[name]
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def tune_all(
    name: str, n_features: int, loss: str, task: Task, X: FloatArray, y: FloatArray
) -> tuple[dict[str, float], float]:
    """The grid point with the best prequential score of a fresh learner over (X, y), and that score."""
    best: tuple[dict[str, float], float] | None = None
    for params in grid_points(name):
        score = prequential_score(edge_learner(name, n_features, loss, task, params), X, y)
        if best is None or score > best[1]:
            best = (params, score)
    assert best is not None
    return best


def first_window_params(name: str, ctx: Context) -> dict[str, float]:
    """All hyper-parameters tuned on the first window's labels only (remembered in the context)."""
    key = f"{name}+all"
    if key not in ctx.learner_params:
        ctx.learner_params[key] = tune_all(name, ctx.n_features, ctx.loss, ctx.task, ctx.X0, ctx.y0)[0]
    return ctx.learner_params[key]


class RetunedLearner:
    """The edge side of a re-tuning strategy: a tunable learner that forwards what it learns and, when a
    recompute's model is installed, applies the hyper-parameters the cloud chose.

    On new parameters the learner is rebuilt and warmed on the window the edge holds (a few hundred
    updates), then anchored on the batch model like every DRUiD learner.
    """

    def __init__(
        self,
        name: str,
        ctx: Context,
        params: Mapping[str, float],
        channel: TuneChannel,
        window: CountWindow | TimeWindow,
    ) -> None:
        self.name = name
        self._shape = (ctx.n_features, ctx.loss, ctx.task)
        self.params = dict(params)
        self.channel = channel
        self.window = window
        self.inner = edge_learner(name, *self._shape, self.params)
        self.n_learned = 0
        self.retunes = 0

    @property
    def task(self) -> Task:
        return self.inner.task

    @property
    def order(self) -> str:
        """The inner learner's update cost (``O(d)``, ``O(d^2)``)."""
        return str(getattr(self.inner, "order", "other"))

    def predict_one(self, x: FloatArray) -> float:
        return self.inner.predict_one(x)

    def predict_many(self, X: FloatArray) -> FloatArray:
        return self.inner.predict_many(X)

    def learn_one(self, x: FloatArray, y: float) -> None:
        self.inner.learn_one(x, y)
        self.channel.record(x, y)
        self.n_learned += 1

    def learn_many(self, X: FloatArray, y: FloatArray) -> None:
        self.inner.learn_many(X, y)
        self.channel.record_many(X, y)
        self.n_learned += len(y)

    def anchor(self, model: Any) -> None:
        """Apply the cloud's parameters if a recompute sent some (rebuild, warm on the window), then
        continue from the batch model unless the cloud found that anchoring does not pay."""
        tune = self.channel.take()
        if tune is not None and tune.params:
            self.params = dict(tune.params)
            fresh = edge_learner(self.name, *self._shape, self.params)
            X, y = self.window.contents()
            for xi, yi in zip(X, y, strict=True):
                fresh.learn_one(xi, float(yi))
            self.inner = fresh
            self.retunes += 1
        if tune is None or tune.anchor:
            self.inner.anchor(model)

    def clone(self) -> OnlineLearner:
        return self.inner.clone()


def _tuned_loop(ctx: Context, monitor: Monitor, learner: str) -> EdgeLoop:
    """The loop of ``druid-tune`` / ``periodic-tune``: the learner starts from its first-window tuning and
    the cloud re-tunes it at every recompute."""
    if ctx.retune is None:
        raise ValueError("a re-tuning strategy needs a context with a retune factory (the cloud's search)")
    window = CountWindow(ctx.window_labels, ctx.n_features)
    channel = TuneChannel(ctx.n_features)
    edge = RetunedLearner(learner, ctx, first_window_params(learner, ctx), channel, window)
    return EdgeLoop(window, monitor, ctx.retune(channel, learner), edge, "incremental", guard=ctx.guard)


def druid_tune(learner: str) -> Callable[[Context, float | None], EdgeLoop]:
    """DRUiD decides when; each recompute also re-tunes the learner on the device's history."""

    def build(ctx: Context, alpha: float | None) -> EdgeLoop:
        assert alpha is not None
        return _tuned_loop(ctx, DruidMonitor(alpha=float(alpha), t_n=ctx.window_labels), learner)

    return build


def periodic_tune(learner: str) -> Callable[[Context, float | None], EdgeLoop]:
    """A re-tuning recompute every P labels."""

    def build(ctx: Context, period: float | None) -> EdgeLoop:
        assert period is not None
        return _tuned_loop(ctx, PeriodicMonitor(int(period)), learner)

    return build


def strong_baseline(learner: str) -> Callable[[Context, float | None], EdgeLoop]:
    """The learner alone, every hyper-parameter tuned on the first window (0 recomputes)."""

    def build(ctx: Context, _: float | None) -> EdgeLoop:
        edge = edge_learner(learner, ctx.n_features, ctx.loss, ctx.task, first_window_params(learner, ctx))
        window = CountWindow(ctx.window_labels, ctx.n_features)
        return EdgeLoop(window, NeverMonitor(), ctx.recompute, edge, "incremental", guard=ctx.guard)

    return build
