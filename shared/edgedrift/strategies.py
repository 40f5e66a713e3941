"""Named strategies: a monitor, an incremental learner and a prediction policy around the one EdgeLoop.

The offline evaluator and the edge agent both build their loop here, from a :class:`Context` (the
stream's shape, the batch trainer — in-process for the evaluator, the cloud over HTTP for the agent —
and the first window's labeled data) and one value of the strategy's trade-off parameter. So a deployed
run and a replay with the same parameters make the same predictions and the same recomputes.

Honest tuning: C and every learner hyper-parameter that is not a documented default are chosen on the
first window only; the scored part of the stream is never looked at.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from edgedrift.guard import RangeGuard
from edgedrift.learners import SGD, AdaptiveSGD, ForgettingNewton, Perceptron
from edgedrift.learners.base import OnlineLearner
from edgedrift.loop import EdgeLoop, PredictWith, Recompute
from edgedrift.models.document import BatchModel
from edgedrift.models.losses import FloatArray, Task
from edgedrift.monitors import (
    DruidMonitor,
    DruidPaperMonitor,
    ErrorDrivenMonitor,
    Monitor,
    NeverMonitor,
    PeriodicMonitor,
    PredSignMonitor,
)
from edgedrift.monitors.error_driven import Detector
from edgedrift.window import CountWindow


class Runner(Protocol):
    """What the prequential runner drives: one sample at a time, labels possibly late."""

    def process_one(self, x: FloatArray, y: float | None = None, ts: float = math.nan) -> float: ...

    def learn_one(
        self, x: FloatArray, y: float, y_hat: float | None = None, ts: float = math.nan
    ) -> None: ...


@dataclass
class Context:
    """Everything a strategy may use: the stream's shape and what was learned on the first window."""

    n_features: int
    task: Task
    loss: str
    window_labels: int
    C: float
    recompute: Recompute
    X0: FloatArray
    y0: FloatArray
    learner_params: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Trains the first model when it differs from ``recompute`` (e.g. without rebalancing).
    initial: Recompute | None = None
    #: Keeps glitched samples out of learning (fitted on X0 by :func:`edgedrift.guard.screen_first_window`).
    guard: RangeGuard | None = None

    def initial_model(self) -> BatchModel:
        """The first batch model, trained on the first window (not counted as a recompute)."""
        model = (self.initial or self.recompute)(self.X0, self.y0)
        if model is None:
            raise RuntimeError("the initial model needs a trainer that answers synchronously")
        return model


# --- incremental learners and their first-window tuning grids ---------------------------------------

LearnerFactory = Callable[..., OnlineLearner]


def _sgd(ctx: Context, lr: float = 0.01) -> OnlineLearner:
    """The paper's incremental SGD (raw features; λ = 1/(C·N) as in the batch objective)."""
    l2 = 1.0 / (ctx.C * max(len(ctx.y0), 1))
    return SGD(ctx.n_features, ctx.loss, lr=lr, schedule="inverse", l2=l2, task=ctx.task)


def _rmsprop(ctx: Context, lr: float = 0.3) -> OnlineLearner:
    return AdaptiveSGD(ctx.n_features, ctx.loss, lr=lr, method="rmsprop", task=ctx.task)


def _newton(ctx: Context, forgetting: float = 0.9) -> OnlineLearner:
    return ForgettingNewton(ctx.n_features, ctx.loss, forgetting=forgetting, prior=0.1, task=ctx.task)


def _perceptron(ctx: Context) -> OnlineLearner:
    return Perceptron(ctx.n_features)


def _bls(ctx: Context, forgetting: float = 0.99) -> OnlineLearner:
    """Online-BLS (seed 003) with the paper's sizes; inputs scaled by a map frozen on the first window.

    ``forgetting`` = 0 selects Algorithm 1 (no forgetting), else Algorithm 2 with μ = ``forgetting``.
    """
    from edgedrift.learners.online_bls import OnlineBLS

    bls = OnlineBLS(ctx.n_features, forgetting=forgetting or None, seed=0)
    bls.fit_scaler(ctx.X0)
    return bls


def _shrubs(ctx: Context, max_trees: float = 8) -> OnlineLearner:
    """Shrub Ensemble (seed 002) over the shrubs the cloud trains; at most ``max_trees`` kept."""
    from edgedrift.learners.shrub_ensemble import ShrubEnsemble

    return ShrubEnsemble(max_trees=int(max_trees), window=ctx.window_labels)


#: name -> (factory, grid of the hyper-parameter tuned on the first window)
LEARNERS: dict[str, tuple[LearnerFactory, dict[str, tuple[float, ...]]]] = {
    "sgd": (_sgd, {"lr": (0.001, 0.01, 0.1, 1.0)}),
    "rmsprop": (_rmsprop, {"lr": (0.03, 0.1, 0.3, 1.0)}),
    "newton": (_newton, {"forgetting": (0.8, 0.9, 0.95, 0.98, 0.995)}),
    "perceptron": (_perceptron, {}),
    "bls": (_bls, {}),
    "bls-static": (lambda ctx: _bls(ctx, 0.0), {}),
    "shrubs": (_shrubs, {}),
}


def prequential_score(learner: OnlineLearner, X: FloatArray, y: FloatArray) -> float:
    """Test-then-train accuracy (or −MSE for regression) of a fresh learner over (X, y)."""
    total = 0.0
    for xi, yi in zip(X, y, strict=True):
        p = learner.predict_one(xi)
        total += float(p == yi) if learner.task == "classification" else -((p - yi) ** 2)
        learner.learn_one(xi, float(yi))
    return total / max(len(y), 1)


def tune_learner(name: str, ctx: Context) -> dict[str, float]:
    """Pick the learner's hyper-parameter by prequential score on the first window's labels."""
    factory, grid = LEARNERS[name]
    if not grid:
        return {}
    ((param, values),) = grid.items()
    scores = {v: prequential_score(factory(ctx, **{param: v}), ctx.X0, ctx.y0) for v in values}
    return {param: max(values, key=lambda v: scores[v])}


def make_learner(name: str, ctx: Context) -> OnlineLearner:
    factory, _ = LEARNERS[name]
    if name not in ctx.learner_params:
        ctx.learner_params[name] = tune_learner(name, ctx)
    return factory(ctx, **ctx.learner_params[name])


# --- strategies ----------------------------------------------------------------------------------------

Build = Callable[[Context, float | None], Runner]


@dataclass(frozen=True)
class TrainSpec:
    """What a strategy's recomputes ask the cloud for (the wire's learner, params and rebalance).

    ``learner=None`` means the linear learner of the stream's loss (logistic / squared hinge / ridge).
    """

    learner: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    rebalance: Literal["none", "smote", "select"] = "none"
    return_base: bool = False


LINEAR = TrainSpec()
#: The shrubs of a Shrub Ensemble: small trees, as in the paper's grid (max_depth 2 … 15).
SHRUB = TrainSpec("shrub", {"max_depth": 4})
#: RebalanceStream's base learner: one deeper CART tree per change.
REBALANCE_TREE = {"max_depth": 8}


@dataclass(frozen=True)
class Strategy:
    """A named way of running the stream; ``param`` is its trade-off knob, swept over ``grid``.

    ``default`` is the value :meth:`build` uses when no parameter is given (the table "Strategy
    defaults" in docs/edge-agent.md); a strategy has one exactly when it has a ``param``. ``train``
    says which model a recompute asks the cloud for (the initial model included).
    """

    name: str
    description: str
    builder: Build
    param: str | None = None
    grid: tuple[float, ...] = ()
    default: float | None = None
    edgedrift: bool = False
    classification_only: bool = False
    train: TrainSpec = LINEAR

    def __post_init__(self) -> None:
        if (self.param is None) != (self.default is None):
            raise ValueError(f"strategy {self.name!r}: a default is needed exactly when there is a param")

    def build(self, ctx: Context, value: float | None = None) -> Runner:
        """The strategy's runner for parameter ``value`` (None: :attr:`default`)."""
        return self.builder(ctx, value if value is not None else self.default)


def _value(value: float | None) -> float:
    """The parameter a builder received: :meth:`Strategy.build` resolves None to the default first."""
    if value is None:
        raise ValueError("this strategy needs a parameter value; build it through Strategy.build")
    return float(value)


def _loop(
    ctx: Context,
    monitor: Monitor,
    learner: str | None = None,
    predict_with: PredictWith = "batch",
    window: int | None = None,
    **kwargs: Any,
) -> EdgeLoop:
    return EdgeLoop(
        CountWindow(window or ctx.window_labels, ctx.n_features),
        monitor,
        ctx.recompute,
        make_learner(learner, ctx) if learner else None,
        predict_with,
        guard=ctx.guard,
        **kwargs,
    )


def _druid(learner: str) -> Build:
    def build(ctx: Context, alpha: float | None) -> Runner:
        monitor = DruidMonitor(alpha=_value(alpha), t_n=ctx.window_labels)
        return _loop(ctx, monitor, learner, "incremental")

    return build


def _edge_only(learner: str) -> Build:
    return lambda ctx, _: _loop(ctx, NeverMonitor(), learner, "incremental")


def _error_driven(detector: Detector, mode: Literal["batch", "incremental"]) -> Build:
    def build(ctx: Context, level: float | None) -> Runner:
        monitor = ErrorDrivenMonitor(detector, _value(level), mode)
        if mode == "batch":
            return _loop(ctx, monitor)
        return _loop(ctx, monitor, "sgd", "incremental", swap_learner_on_drift=True)

    return build


def _shrub_ensemble(trigger: Literal["periodic", "adwin"]) -> Build:
    """Shrub Ensembles: the cloud trains a shrub on the window every k labels (or on an ADWIN drift of
    the ensemble's error); the edge adds it to the ensemble, whose weights it keeps learning."""

    def build(ctx: Context, value: float | None) -> Runner:
        monitor: Monitor
        if trigger == "periodic":
            monitor = PeriodicMonitor(int(_value(value)))
        else:
            monitor = ErrorDrivenMonitor("adwin", _value(value), "batch")
        return _loop(ctx, monitor, "shrubs", "incremental")

    return build


def _rebalance(mode: Literal["base", "rs", "rs+"]) -> Build:
    """RebalanceStream (seed 001): ADWIN on the model's errors with a warning level; on a change the
    cloud scores batch / SMOTE(batch) / reset batch / SMOTE(reset batch) by prequential kappa."""

    def build(ctx: Context, delta: float | None) -> Runner:
        from edgedrift.monitors.rebalance import RebalanceMonitor

        return _loop(ctx, RebalanceMonitor(delta=_value(delta), mode=mode))

    return build


#: DRUiD's α sweep: from a sensitive test to one that only a sustained change passes.
DRUID_GRID = (0.5, 0.9, 0.99, 0.999, 0.9999, 0.999999, 1 - 1e-9)
DDM_GRID = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0)
EDDM_GRID = (0.1, 0.5, 0.8, 0.9, 0.95, 0.99, 0.999, 0.99999)
ADWIN_GRID = (1e-5, 1e-3, 0.002, 0.01, 0.05, 0.1, 0.3, 0.5)
#: Defaults of the error-driven triggers: river's own (DDM's drift threshold 3 with warning 2, EDDM's
#: warning level α = 0.95 with drift β = 0.90, ADWIN's δ = 0.002), which the paper's level mappings give.
DDM_LEVEL = 3.0
EDDM_LEVEL = 0.95
ADWIN_DELTA = 0.002

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in [
        Strategy(
            "druid",
            "EdgeDrift: second-order forgetting learner predicts; the whitened DRUiD bound decides "
            "when a batch model re-anchors it",
            _druid("newton"),
            "alpha",
            DRUID_GRID,
            0.999,
            edgedrift=True,
        ),
        Strategy(
            "druid-rmsprop",
            "EdgeDrift hybrid with the RMSProp learner",
            _druid("rmsprop"),
            "alpha",
            DRUID_GRID,
            0.999,
            edgedrift=True,
        ),
        Strategy(
            "newton",
            "EdgeDrift edge learner alone: online Newton with forgetting (0 recomputes)",
            _edge_only("newton"),
            edgedrift=True,
        ),
        Strategy(
            "rmsprop",
            "EdgeDrift edge learner alone: RMSProp on EW-standardised features (0 recomputes)",
            _edge_only("rmsprop"),
            edgedrift=True,
        ),
        Strategy(
            "perceptron",
            "EdgeDrift perceptron on EW-standardised features (0 recomputes)",
            _edge_only("perceptron"),
            edgedrift=True,
            classification_only=True,
        ),
        Strategy(
            "druid-paper",
            "Algorithm 1 literally (χ_d fit, N = T_N = window, SGD β_cur)",
            lambda ctx, a: _loop(ctx, DruidPaperMonitor(_value(a), ctx.window_labels), "sgd", "monitor"),
            "alpha",
            (0.01, 0.5, 0.9, 0.99, 0.999, 0.9999, 0.9999999),
            0.99,
        ),
        Strategy(
            "predsign",
            "PredSign: recompute after T_D sign disagreements of the Lemma 1 bounds",
            lambda ctx, t: _loop(ctx, PredSignMonitor(int(_value(t)))),
            "t_d",
            (60, 200, 600, 2000, 6000, 20000, 50000),
            1000,
            classification_only=True,
        ),
        Strategy(
            "periodic",
            "Periodic sliding window: recompute every P labels",
            lambda ctx, p: _loop(ctx, PeriodicMonitor(int(_value(p)))),
            "period",
            (1, 2, 5, 10, 20, 50, 100, 200, 430, 1000, 3000),
            100,
        ),
        Strategy(
            "sgd",
            "Incremental SGD from the initial batch model (0 recomputes)",
            lambda ctx, _: _loop(ctx, NeverMonitor(), "sgd", "incremental"),
        ),
        Strategy(
            "never", "The initial batch model, never updated", lambda ctx, _: _loop(ctx, NeverMonitor())
        ),
        Strategy(
            "online-bls",
            "Online-BLS with forgetting (Algorithm 2, mu = 0.99) alone on the edge (0 recomputes)",
            lambda ctx, _: _loop(ctx, NeverMonitor(), "bls", "incremental", anchor_on_recompute=False),
            edgedrift=True,
            classification_only=True,
        ),
        Strategy(
            "online-bls-static",
            "Online-BLS without forgetting (Algorithm 1) alone on the edge (0 recomputes)",
            lambda ctx, _: _loop(ctx, NeverMonitor(), "bls-static", "incremental", anchor_on_recompute=False),
            classification_only=True,
        ),
        Strategy(
            "shrub-ensemble",
            "Shrub Ensembles: a new cloud shrub every P labels, weights by proximal gradient on the edge",
            _shrub_ensemble("periodic"),
            "period",
            (20, 50, 100, 200, 500, 1000, 2000, 5000),
            200,
            edgedrift=True,
            classification_only=True,
            train=SHRUB,
        ),
        Strategy(
            "shrub-ensemble-adwin",
            "Shrub Ensembles: a new cloud shrub when ADWIN sees the ensemble's error drift",
            _shrub_ensemble("adwin"),
            "delta",
            ADWIN_GRID,
            ADWIN_DELTA,
            classification_only=True,
            train=SHRUB,
        ),
        Strategy(
            "rebalance-base",
            "RebalanceStream's BASE: retrain a CART tree on the batch since the last ADWIN change",
            _rebalance("base"),
            "delta",
            ADWIN_GRID,
            ADWIN_DELTA,
            classification_only=True,
            train=TrainSpec("shrub", REBALANCE_TREE),
        ),
        Strategy(
            "rebalance-stream",
            "RebalanceStream: on an ADWIN change the best of four (SMOTE-)rebalanced candidates by kappa",
            _rebalance("rs"),
            "delta",
            ADWIN_GRID,
            ADWIN_DELTA,
            edgedrift=True,
            classification_only=True,
            train=TrainSpec("shrub", REBALANCE_TREE, rebalance="select"),
        ),
        Strategy(
            "rebalance-stream-plus",
            "RebalanceStream+: RebalanceStream that falls back to the BASE model when it scores better",
            _rebalance("rs+"),
            "delta",
            ADWIN_GRID,
            ADWIN_DELTA,
            classification_only=True,
            train=TrainSpec("shrub", REBALANCE_TREE, rebalance="select", return_base=True),
        ),
        Strategy(
            "ddm",
            "DDM (river), batch mode",
            _error_driven("ddm", "batch"),
            "level",
            DDM_GRID,
            DDM_LEVEL,
            classification_only=True,
        ),
        Strategy(
            "ddm-incremental",
            "DDM (river), incremental mode",
            _error_driven("ddm", "incremental"),
            "level",
            DDM_GRID,
            DDM_LEVEL,
            classification_only=True,
        ),
        Strategy(
            "eddm",
            "EDDM (river), batch mode",
            _error_driven("eddm", "batch"),
            "level",
            EDDM_GRID,
            EDDM_LEVEL,
            classification_only=True,
        ),
        Strategy(
            "eddm-incremental",
            "EDDM (river), incremental mode",
            _error_driven("eddm", "incremental"),
            "level",
            EDDM_GRID,
            EDDM_LEVEL,
            classification_only=True,
        ),
        Strategy(
            "adwin",
            "ADWIN (river) on the error, batch mode (retrain on the window)",
            _error_driven("adwin", "batch"),
            "delta",
            ADWIN_GRID,
            ADWIN_DELTA,
            classification_only=True,
        ),
        Strategy(
            "adwin-incremental",
            "ADWIN (river) on the error, incremental mode",
            _error_driven("adwin", "incremental"),
            "delta",
            ADWIN_GRID,
            ADWIN_DELTA,
            classification_only=True,
        ),
    ]
}
