"""The catalogue of named strategies: a monitor, an incremental learner and a prediction policy around
the one :class:`~edgedrift.loop.EdgeLoop`, with each strategy's trade-off parameter and its grid.

The offline evaluator and the edge agent both build their loop here, from a
:class:`~edgedrift.strategies.context.Context` and one value of the strategy's parameter. So a deployed
run and a replay with the same parameters make the same predictions and the same recomputes.

The module is over 500 lines because :data:`STRATEGIES` is one table, an entry per strategy with its
flags; splitting the table would scatter what a reader compares.

Examples
--------
Every strategy of the catalogue on one stream whose concept rotates at sample 2500, every 10th sample
labeled, with its default parameter: accuracy on the 3000 samples after the first window, and the
recomputes it asked for (the re-tuning strategies get the cloud's search in process). A strategy whose
recomputes train something else than LIBLINEAR (shrubs, rebalanced trees) gets the cloud's own trainer in
process
(:func:`~edgedrift.training.recompute.spec_trainer`):

>>> import numpy as np
>>> from edgedrift.strategies import STRATEGIES, Context, TrainSpec
>>> from edgedrift.training.linear import LinearTrainer
>>> from edgedrift.training.recompute import spec_trainer
>>> from edgedrift.training.retune import HistoryRetuner
>>> rng = np.random.default_rng(0)
>>> X = rng.normal(size=(4000, 2))
>>> y = np.where(np.arange(4000) < 2500, np.sign(X[:, 0] + X[:, 1]), np.sign(X[:, 0] - X[:, 1]))
>>> X0, y0 = X[:1000:10], y[:1000:10]
>>> for name, strategy in STRATEGIES.items():
...     ctx = Context(2, "classification", "logistic", 100, 10.0, LinearTrainer("logistic", 10.0), X0, y0)
...     ctx.retune = lambda ch, name: HistoryRetuner(ch, name, ctx.recompute, "logistic", "classification")
...     if strategy.train.learner is not None:
...         ctx.recompute = spec_trainer(strategy.train, "classification")
...         first = TrainSpec(strategy.train.learner, strategy.train.params)
...         ctx.initial = spec_trainer(first, "classification")
...     loop = strategy.build(ctx)
...     loop.start(ctx.initial_model(), X0, y0, warm_learner=True)
...     hits = sum(loop.process_one(X[i], y[i] if i % 10 == 0 else None) == y[i] for i in range(1000, 4000))
...     print(f"{name:22} {hits / 3000:.3f} {loop.counters.recomputes}")
druid                  0.932 1
druid-rmsprop          0.902 1
newton                 0.928 0
rmsprop                0.901 0
perceptron             0.942 0
druid-tune             0.934 1
periodic-tune          0.928 0
newton-tuned           0.928 0
rmsprop-tuned          0.901 0
druid-paper            0.819 1
predsign               0.796 1
periodic               0.821 3
sgd                    0.758 0
never                  0.753 0
online-bls             0.858 0
online-bls-static      0.767 0
shrub-ensemble         0.885 30
shrub-ensemble-adwin   0.808 1
rebalance-base         0.763 1
rebalance-stream       0.808 1
rebalance-stream-plus  0.808 1
ddm                    0.670 1
ddm-incremental        0.924 2
eddm                   0.832 1
eddm-incremental       0.894 1
adwin                  0.799 1
adwin-incremental      0.905 1
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from edgedrift.labels import is_multiclass
from edgedrift.loop import EdgeLoop, PredictWith
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
from edgedrift.strategies.context import Context
from edgedrift.strategies.retuned import druid_tune, periodic_tune, strong_baseline
from edgedrift.strategies.train_spec import LINEAR, REBALANCE_TREE, SHRUB, TrainSpec
from edgedrift.strategies.tuning import make_learner
from edgedrift.window import CountWindow

Build = Callable[[Context, float | None], EdgeLoop]


@dataclass(frozen=True)
class Strategy:
    """A named way of running the stream; ``param`` is its trade-off knob, swept over ``grid``.

    Parameters
    ----------
    name
        The strategy's name in results, the evaluator's ``--strategies`` and the agent's ``--strategy``.
    description
        One line for people.
    builder
        Builds the loop from a context and the parameter's value.
    param
        Name of the trade-off parameter (None: the strategy has none).
    grid
        The values an evaluator sweep uses.
    default
        The value :meth:`build` uses when none is given (the table "Strategy defaults" in
        docs/edge-agent.md); a strategy has one exactly when it has a ``param``.
    edgedrift
        Whether the strategy is one of EdgeDrift's own (the evaluator's group ``edgedrift``).
    classification_only
        Whether the strategy needs labels ±1.
    train
        Which model a recompute asks the cloud for (the initial model included).
    needs_history
        Whether its recomputes search the device's labeled history (``druid-tune``, ``periodic-tune``):
        such a strategy needs a context with a retune factory.
    multiclass
        Whether it runs on a stream of C ≥ 3 classes (codes 0..C−1; its linear learners one-vs-rest);
        :meth:`build` refuses a multi-class context otherwise.

    Examples
    --------
    Build DRUiD (second-order learner, the bound decides recomputes) and run it on a stream whose
    concept rotates at sample 1500, every 10th sample labeled:

    >>> import numpy as np
    >>> from edgedrift.strategies import STRATEGIES, Context
    >>> from edgedrift.training.linear import LinearTrainer
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(6000, 2))
    >>> y = np.where(np.arange(6000) < 1500, np.sign(X[:, 0] + X[:, 1]), np.sign(X[:, 0] - X[:, 1]))
    >>> X0, y0 = X[:1000:10], y[:1000:10]
    >>> ctx = Context(2, "classification", "logistic", 100, 10.0, LinearTrainer("logistic", 10.0), X0, y0)
    >>> druid = STRATEGIES["druid"]
    >>> druid.param, druid.default
    ('alpha', 0.999)
    >>> loop = druid.build(ctx)
    >>> loop.start(ctx.initial_model(), X0, y0, warm_learner=True)
    >>> hits = 0
    >>> for i in range(1000, 6000):
    ...     hits += int(loop.process_one(X[i], y[i] if i % 10 == 0 else None) == y[i])
    >>> round(hits / 5000, 3), loop.counters.recomputes, ctx.learner_params
    (0.952, 1, {'newton': {'forgetting': 0.9}})
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
    needs_history: bool = False
    multiclass: bool = False

    def __post_init__(self) -> None:
        if (self.param is None) != (self.default is None):
            raise ValueError(f"strategy {self.name!r}: a default is needed exactly when there is a param")

    def build(self, ctx: Context, value: float | None = None) -> EdgeLoop:
        """The strategy's loop for parameter ``value`` (None: :attr:`default`), not yet started; ValueError
        for a context of C ≥ 3 classes when the strategy is not :attr:`multiclass`."""
        if ctx.task == "classification" and is_multiclass(ctx.n_classes) and not self.multiclass:
            raise ValueError(
                f"strategy {self.name!r} runs on binary (and regression) streams only, "
                f"not on {ctx.n_classes} classes"
            )
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
    **kwargs: Any,
) -> EdgeLoop:
    """The one EdgeLoop every strategy builds: a count window of the context's labels."""
    return EdgeLoop(
        CountWindow(ctx.window_labels, ctx.n_features),
        monitor,
        ctx.recompute,
        None if learner is None else make_learner(learner, ctx),
        predict_with,
        guard=ctx.guard,
        **kwargs,
    )


def _druid(learner: str) -> Build:
    def build(ctx: Context, alpha: float | None) -> EdgeLoop:
        monitor = DruidMonitor(alpha=_value(alpha), t_n=ctx.window_labels)
        return _loop(ctx, monitor, learner, "incremental")

    return build


def _edge_only(learner: str) -> Build:
    return lambda ctx, _: _loop(ctx, NeverMonitor(), learner, "incremental")


def _error_driven(detector: Detector, mode: Literal["batch", "incremental"]) -> Build:
    def build(ctx: Context, level: float | None) -> EdgeLoop:
        monitor = ErrorDrivenMonitor(detector, _value(level), mode)
        if mode == "batch":
            return _loop(ctx, monitor)
        return _loop(ctx, monitor, "sgd", "incremental", swap_learner_on_drift=True)

    return build


def _shrub_ensemble(trigger: Literal["periodic", "adwin"]) -> Build:
    """Shrub Ensembles (Buschjäger et al., AAAI 2022): the cloud trains a shrub on the last B labels every
    k labels (or on an ADWIN drift of the ensemble's error); the edge adds it to the ensemble, whose
    weights it fits on the same B labels. B is the paper's window (32), not the strategy's window: each
    shrub is a local pattern of the last B labels (Algorithm 1, line 6)."""

    def build(ctx: Context, value: float | None) -> EdgeLoop:
        from edgedrift.learners.shrub_ensemble import PAPER_WINDOW

        monitor: Monitor
        if trigger == "periodic":
            monitor = PeriodicMonitor(int(_value(value)))
        else:
            monitor = ErrorDrivenMonitor("adwin", _value(value), "batch")
        return EdgeLoop(
            CountWindow(PAPER_WINDOW, ctx.n_features),
            monitor,
            ctx.recompute,
            make_learner("shrubs", ctx),
            "incremental",
            guard=ctx.guard,
        )

    return build


def _rebalance(mode: Literal["base", "rs", "rs+"]) -> Build:
    """RebalanceStream (Bernardo et al., ICDMW 2020): ADWIN on the model's errors with a warning level;
    on a change the cloud scores batch / SMOTE(batch) / reset batch / SMOTE(reset batch) by kappa."""

    def build(ctx: Context, delta: float | None) -> EdgeLoop:
        from edgedrift.monitors.rebalance import RebalanceMonitor

        return _loop(ctx, RebalanceMonitor(delta=_value(delta), mode=mode, n_classes=ctx.n_classes))

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
            multiclass=True,
        ),
        Strategy(
            "druid-rmsprop",
            "EdgeDrift hybrid with the RMSProp learner",
            _druid("rmsprop"),
            "alpha",
            DRUID_GRID,
            0.999,
            edgedrift=True,
            multiclass=True,
        ),
        Strategy(
            "newton",
            "EdgeDrift edge learner alone: online Newton with forgetting (0 recomputes)",
            _edge_only("newton"),
            edgedrift=True,
            multiclass=True,
        ),
        Strategy(
            "rmsprop",
            "EdgeDrift edge learner alone: RMSProp on EW-standardised features (0 recomputes)",
            _edge_only("rmsprop"),
            edgedrift=True,
            multiclass=True,
        ),
        Strategy(
            "perceptron",
            "EdgeDrift perceptron on EW-standardised features (0 recomputes)",
            _edge_only("perceptron"),
            edgedrift=True,
            classification_only=True,
            multiclass=True,
        ),
        Strategy(
            "druid-tune",
            "DRUiD with re-tuning recomputes: the cloud refits on a validated window length and re-tunes "
            "every learner hyper-parameter on the device's labeled history",
            druid_tune("newton"),
            "alpha",
            DRUID_GRID,
            0.999,
            edgedrift=True,
            needs_history=True,
        ),
        Strategy(
            "periodic-tune",
            "A re-tuning recompute (as druid-tune) every P labels",
            periodic_tune("newton"),
            "period",
            (100, 200, 430, 1000, 2000),
            430,
            edgedrift=True,
            needs_history=True,
        ),
        Strategy(
            "newton-tuned",
            "Strong edge-only baseline: newton with all hyper-parameters tuned on the first window",
            strong_baseline("newton"),
            edgedrift=True,
            multiclass=True,
        ),
        Strategy(
            "rmsprop-tuned",
            "Strong edge-only baseline: rmsprop with all hyper-parameters tuned on the first window",
            strong_baseline("rmsprop"),
            edgedrift=True,
            multiclass=True,
        ),
        Strategy(
            "druid-paper",
            "Algorithm 1 literally (χ_d fit, N = T_N = window, SGD β_cur)",
            lambda ctx, a: _loop(ctx, DruidPaperMonitor(_value(a), ctx.window_labels), "sgd", "monitor"),
            "alpha",
            (0.01, 0.5, 0.9, 0.99, 0.999, 0.9999, 0.9999999),
            0.99,
            multiclass=True,
        ),
        Strategy(
            "predsign",
            "PredSign: recompute after T_D sign disagreements of the Lemma 1 bounds",
            lambda ctx, t: _loop(ctx, PredSignMonitor(int(_value(t)))),
            "t_d",
            (60, 200, 600, 2000, 6000, 20000, 50000),
            1000,
            classification_only=True,
            multiclass=True,
        ),
        Strategy(
            "periodic",
            "Periodic sliding window: recompute every P labels",
            lambda ctx, p: _loop(ctx, PeriodicMonitor(int(_value(p)))),
            "period",
            (1, 2, 5, 10, 20, 50, 100, 200, 430, 1000, 3000),
            100,
            multiclass=True,
        ),
        Strategy(
            "sgd",
            "Incremental SGD from the initial batch model (0 recomputes)",
            lambda ctx, _: _loop(ctx, NeverMonitor(), "sgd", "incremental"),
            multiclass=True,
        ),
        Strategy(
            "never",
            "The initial batch model, never updated",
            lambda ctx, _: _loop(ctx, NeverMonitor()),
            multiclass=True,
        ),
        Strategy(
            "online-bls",
            "Online-BLS with forgetting (Algorithm 2, mu = 0.99) alone on the edge (0 recomputes)",
            lambda ctx, _: _loop(ctx, NeverMonitor(), "bls", "incremental", anchor_on_recompute=False),
            edgedrift=True,
            classification_only=True,
            multiclass=True,
        ),
        Strategy(
            "online-bls-static",
            "Online-BLS without forgetting (Algorithm 1) alone on the edge (0 recomputes)",
            lambda ctx, _: _loop(ctx, NeverMonitor(), "bls-static", "incremental", anchor_on_recompute=False),
            classification_only=True,
            multiclass=True,
        ),
        Strategy(
            "shrub-ensemble",
            "Shrub Ensembles: a new cloud shrub every P labels, weights by proximal gradient on the edge",
            _shrub_ensemble("periodic"),
            "period",
            (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
            10,
            edgedrift=True,
            classification_only=True,
            train=SHRUB,
            multiclass=True,
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
            multiclass=True,
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
            multiclass=True,
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
            multiclass=True,
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
            multiclass=True,
        ),
        Strategy(
            "ddm",
            "DDM (river), batch mode",
            _error_driven("ddm", "batch"),
            "level",
            DDM_GRID,
            DDM_LEVEL,
            classification_only=True,
            multiclass=True,
        ),
        Strategy(
            "ddm-incremental",
            "DDM (river), incremental mode",
            _error_driven("ddm", "incremental"),
            "level",
            DDM_GRID,
            DDM_LEVEL,
            classification_only=True,
            multiclass=True,
        ),
        Strategy(
            "eddm",
            "EDDM (river), batch mode",
            _error_driven("eddm", "batch"),
            "level",
            EDDM_GRID,
            EDDM_LEVEL,
            classification_only=True,
            multiclass=True,
        ),
        Strategy(
            "eddm-incremental",
            "EDDM (river), incremental mode",
            _error_driven("eddm", "incremental"),
            "level",
            EDDM_GRID,
            EDDM_LEVEL,
            classification_only=True,
            multiclass=True,
        ),
        Strategy(
            "adwin",
            "ADWIN (river) on the error, batch mode (retrain on the window)",
            _error_driven("adwin", "batch"),
            "delta",
            ADWIN_GRID,
            ADWIN_DELTA,
            classification_only=True,
            multiclass=True,
        ),
        Strategy(
            "adwin-incremental",
            "ADWIN (river) on the error, incremental mode",
            _error_driven("adwin", "incremental"),
            "delta",
            ADWIN_GRID,
            ADWIN_DELTA,
            classification_only=True,
            multiclass=True,
        ),
    ]
}
