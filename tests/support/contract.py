"""Contract checks for every learner, monitor and strategy EdgeDrift exports (river's estimator_checks style).

Parametrised over ``edgedrift.learners.__all__`` and ``edgedrift.monitors.__all__`` (abstract bases,
protocols and helpers are skipped, and a new export without a factory here fails
``test_every_export_has_a_factory``) and over every strategy of ``edgedrift.strategies.STRATEGIES``,
each built through ``Strategy.build`` on a small seeded stream and started with a model trained in process
by ``edgedrift.training``, as the evaluator does. Three streams: binary (Sine1+, labels ±1), regression
(the ridge stream) and multi-class (Sine-MC with C = 3, codes 0..2); every learner, monitor and strategy
that runs on C classes (``Strategy.multiclass``) is checked on the multi-class one too. The checks:

* every ``__init__`` argument is stored under its own name (``_get_params()`` reads them back) and
  ``clone()`` is a fresh instance with the same hyper-parameters;
* an ``edgedrift.state`` snapshot restores an object that predicts the same and, fed the same further
  samples (recomputes included, for whole edge loops), stays identical, down to every array;
* ``predict_many`` equals ``predict_one`` row by row;
* the batch path agrees with the sequential one where the library says so (Online-BLS and the Shrub
  Ensemble learn row by row; a monitor without its own ``update_many`` replays ``update``; DRUiD's
  vectorised Δg; PredSign's disagreement count; ``process_many_vectorised`` predicts with the batch-start
  state);
* per-sample batch semantics: a stream fed through ``process_many`` in batches of 1, 10 and 100 (and
  ``learn_many``) gives exactly the predictions, recomputes and state of ``process_one`` (``learn_one``);
* every monitor's ``stats`` is JSON (non-finite floats mapped to strings);
* samples with 1e6, ±1e308, ±inf or NaN in every feature leave the state finite and predictions on
  ordinary samples finite.

The streams, factories and comparisons live here; the tests are in tests/contract/test_*_contract.py."""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any, Literal

import numpy as np

from edgedrift.base import Estimator, init_parameters
from edgedrift.data import Stream, ridge_stream, sine1plus, sine_mc
from edgedrift.learners import (
    SGD,
    AdaptiveSGD,
    ForgettingNewton,
    OneVsRest,
    OnlineBLS,
    Perceptron,
    ShrubEnsemble,
)
from edgedrift.learners.base import IncrementalLearner
from edgedrift.loop import EdgeLoop
from edgedrift.models.document import BatchModel
from edgedrift.models.linear import LinearModel
from edgedrift.models.losses import FloatArray, Task
from edgedrift.models.tree import ShrubModel
from edgedrift.monitors import (
    DruidMonitor,
    DruidPaperMonitor,
    ErrorDrivenMonitor,
    Monitor,
    NeverMonitor,
    PeriodicMonitor,
    PredSignMonitor,
    RebalanceMonitor,
)
from edgedrift.state import dumps, loads
from edgedrift.strategies import STRATEGIES, Context, TrainSpec
from edgedrift.strategies.retuned import RetunedLearner
from edgedrift.training.linear import LinearTrainer, train_linear
from edgedrift.training.recompute import spec_trainer
from edgedrift.training.retune import HistoryRetuner
from edgedrift.training.shrub import train_shrub
from edgedrift.window import CountWindow

D = 2


N0 = 60  # labeled samples of the first window

#: The kind of stream a case runs on: binary classification, regression, or C = N_CLASSES classes.
Kind = Literal["classification", "regression", "multiclass"]
N_CLASSES = 3

STREAMS: dict[Kind, Stream] = {
    "classification": sine1plus(d=D, concept_length=300, n_concepts=4, seed=3),
    "regression": ridge_stream(d=D, concept_length=300, n_concepts=4, seed=3),
    "multiclass": sine_mc(n_classes=N_CLASSES, d=D, concept_length=300, n_concepts=4, seed=3),
}


EXTREMES = [1e6, 1e308, -1e308, math.inf, -math.inf, math.nan]

#: Labels the extreme samples come with, per kind (regression: extreme targets too).
EXTREME_LABELS: dict[Kind, list[float]] = {
    "classification": [1.0, -1.0],
    "regression": [1.0, 1e308, math.nan],
    "multiclass": [1.0, 0.0, 2.0],
}


def task_of(kind: Kind) -> Task:
    return "regression" if kind == "regression" else "classification"


def classes_of(kind: Kind) -> int | None:
    """The n_classes a trainer of this kind is told (None: binary or regression)."""
    return N_CLASSES if kind == "multiclass" else None


def probe(task: Kind) -> FloatArray:
    """Fixed samples to compare predictions on (from the end of the stream, never learned)."""
    return STREAMS[task].X[-100:]


def contents(obj: object) -> tuple[str, dict[str, tuple[str, tuple[int, ...], bytes]]]:
    """Everything a snapshot holds: the object tree and every array's dtype, shape and bytes.

    Only the creation times of models trained after a snapshot (which differ by a few ms) are masked.
    """
    with np.load(io.BytesIO(dumps(obj)), allow_pickle=False) as npz:
        root = json.loads(npz["__state__"].tobytes())["root"]
        arrays = {k: (npz[k].dtype.str, npz[k].shape, npz[k].tobytes(order="A")) for k in npz.files}
    arrays.pop("__state__")
    return re.sub(r'\["created", "[^"]*"\]', '["created", "*"]', json.dumps(root, sort_keys=True)), arrays


def reattach(recompute: Any, restored: EdgeLoop) -> Any:
    """The recompute a restored loop talks to: the same one, or for a re-tuning strategy the same cloud
    state bound to the restored learner's channel."""
    if isinstance(recompute, HistoryRetuner) and isinstance(restored.learner, RetunedLearner):
        return recompute.for_channel(restored.learner.channel)
    return recompute


def restore(obj: Any) -> Any:
    out, _ = loads(dumps(obj))
    assert type(out) is type(obj)
    return out


def jsonable(value: Any) -> Any:
    """Non-finite floats as strings; everything else must already be JSON (checked by the caller)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        assert all(isinstance(k, str) for k in value)
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def stats_json(monitor: Monitor) -> str:
    return json.dumps(jsonable(monitor.stats), allow_nan=False, sort_keys=True)


def constructor_params(obj: Estimator) -> dict[str, Any]:
    """The constructor arguments, read back from the attributes of the same name (river's ``_get_params``);
    every argument of ``__init__`` must be stored."""
    params = obj._get_params()
    assert tuple(params) == init_parameters(type(obj))
    return params


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    if isinstance(a, Estimator) or isinstance(b, Estimator):  # a wrapped learner: the same by its params
        if type(a) is not type(b):
            return False
        pa, pb = a._get_params(), b._get_params()
        return pa.keys() == pb.keys() and all(same(pa[k], pb[k]) for k in pa)
    return bool(a == b)


def assert_predictions_equal(a: FloatArray, b: FloatArray, task: Kind) -> None:
    if task != "regression":
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


def _bls(forgetting: float | None) -> OnlineBLS:
    bls = OnlineBLS(D, n1=4, n2=3, n3=30, forgetting=forgetting, refactor_every=7, seed=1)
    bls.fit_scaler(STREAMS["classification"].X[:N0])
    return bls


LEARNERS: dict[str, tuple[Callable[[], Any], Kind]] = {
    "SGD": (lambda: SGD(D, lr=0.05), "classification"),
    "SGD-squared": (lambda: SGD(D, "squared", lr=0.01), "regression"),
    "SGD-hinge-scaled": (
        lambda: SGD(D, "squared_hinge", lr=0.05, schedule="constant", scale=True),
        "classification",
    ),
    "AdaptiveSGD": (lambda: AdaptiveSGD(D, lr=0.1), "classification"),
    "AdaptiveSGD-adagrad-squared": (
        lambda: AdaptiveSGD(D, "squared", lr=0.1, method="adagrad", scale=False),
        "regression",
    ),
    "ForgettingNewton": (lambda: ForgettingNewton(D, forgetting=0.95, prior=0.1), "classification"),
    "ForgettingNewton-squared": (
        lambda: ForgettingNewton(D, "squared", forgetting=0.98, scale=False),
        "regression",
    ),
    "Perceptron": (lambda: Perceptron(D), "classification"),
    "OnlineBLS": (lambda: _bls(0.99), "classification"),
    "OnlineBLS-static": (lambda: _bls(None), "classification"),
    "ShrubEnsemble": (lambda: ShrubEnsemble(max_trees=3, window=40, update_every=4), "classification"),
    "OneVsRest-SGD": (lambda: OneVsRest(SGD(D, lr=0.05), N_CLASSES), "multiclass"),
    "OneVsRest-SGD-hinge-scaled": (
        lambda: OneVsRest(SGD(D, "squared_hinge", lr=0.05, schedule="constant", scale=True), N_CLASSES),
        "multiclass",
    ),
    "OneVsRest-AdaptiveSGD": (lambda: OneVsRest(AdaptiveSGD(D, lr=0.1), N_CLASSES), "multiclass"),
    "OneVsRest-ForgettingNewton": (
        lambda: OneVsRest(ForgettingNewton(D, forgetting=0.95, prior=0.1), N_CLASSES),
        "multiclass",
    ),
    "OneVsRest-Perceptron": (lambda: OneVsRest(Perceptron(D), N_CLASSES), "multiclass"),
}


#: Learners whose ``learn_many`` is documented to equal ``learn_one`` row by row.
EXACT_BATCH = (OnlineBLS, ShrubEnsemble)


@cache
def anchor_model(task: Kind, stop: int, shrub: bool) -> BatchModel:
    """The model a recompute at sample ``stop`` would install (a shrub or a linear model)."""
    s = STREAMS[task]
    X, y = s.X[stop - 50 : stop], s.y[stop - 50 : stop]
    if shrub:
        return ShrubModel.from_document(train_shrub(X, y, task_of(task), max_depth=2))
    loss = "squared" if task == "regression" else "logistic"
    return train_linear(X, y, loss=loss, C=10.0, n_classes=classes_of(task))


def feed(learner: Any, task: Kind, start: int, stop: int, batch: int = 1) -> None:
    """Learn samples start…stop-1; every 50 samples the learner is anchored on a recompute's model."""
    s = STREAMS[task]
    i = start
    while i < stop:
        if i % 50 == 0 and i >= 50:
            learner.anchor(anchor_model(task, i, isinstance(learner, ShrubEnsemble)))
        j = min(stop, i + batch, (i // 50 + 1) * 50)
        if batch == 1:
            learner.learn_one(s.X[i], float(s.y[i]))
        else:
            learner.learn_many(s.X[i:j], s.y[i:j])
        i = j


def learner_state(learner: Any) -> list[FloatArray]:
    """The arrays a learner predicts from (its weights and what updates them)."""
    if isinstance(learner, RetunedLearner):
        return learner_state(learner.inner)
    if isinstance(learner, OneVsRest):
        return [a for inner in learner.learners for a in learner_state(inner)]
    if isinstance(learner, IncrementalLearner):
        arrays = [learner.w]
        if isinstance(learner, ForgettingNewton):
            arrays += [learner.P, learner.m]
        if isinstance(learner, AdaptiveSGD):
            arrays.append(learner._v)
        if learner.scaler is not None:
            arrays += [learner.scaler.mean, learner.scaler.var, learner.scaler.inv_std]
        return arrays
    if isinstance(learner, OnlineBLS):
        return [learner.W, learner.R, np.array([learner.ridge])]
    assert isinstance(learner, ShrubEnsemble)
    return [learner.weights, learner._X[: learner.window_size].astype(np.float64), learner._P]


MONITORS: dict[str, tuple[Callable[[], Monitor], Kind]] = {
    "DruidMonitor": (lambda: DruidMonitor(alpha=0.9, t_n=5), "classification"),
    "DruidMonitor-regression": (lambda: DruidMonitor(alpha=0.9, t_n=5, restart=True), "regression"),
    "DruidPaperMonitor": (lambda: DruidPaperMonitor(alpha=0.5, n_fit=20, t_n=3), "classification"),
    "PredSignMonitor": (lambda: PredSignMonitor(15), "classification"),
    "PeriodicMonitor": (lambda: PeriodicMonitor(37), "regression"),
    "NeverMonitor": (NeverMonitor, "classification"),
    "ErrorDrivenMonitor-ddm": (lambda: ErrorDrivenMonitor("ddm", 1.0), "classification"),
    "ErrorDrivenMonitor-eddm": (lambda: ErrorDrivenMonitor("eddm", 0.99, "incremental"), "classification"),
    "ErrorDrivenMonitor-adwin": (lambda: ErrorDrivenMonitor("adwin", 0.3), "classification"),
    "RebalanceMonitor-rs": (lambda: RebalanceMonitor(0.3, "rs", max_batch=150), "classification"),
    "RebalanceMonitor-rs+": (lambda: RebalanceMonitor(0.3, "rs+", min_switch=5), "classification"),
    "RebalanceMonitor-base": (lambda: RebalanceMonitor(0.3, "base"), "classification"),
    "DruidMonitor-multiclass": (lambda: DruidMonitor(alpha=0.9, t_n=5), "multiclass"),
    "DruidPaperMonitor-multiclass": (lambda: DruidPaperMonitor(alpha=0.5, n_fit=20, t_n=3), "multiclass"),
    "PredSignMonitor-multiclass": (lambda: PredSignMonitor(15), "multiclass"),
    "PeriodicMonitor-multiclass": (lambda: PeriodicMonitor(37), "multiclass"),
    "NeverMonitor-multiclass": (NeverMonitor, "multiclass"),
    "ErrorDrivenMonitor-ddm-multiclass": (lambda: ErrorDrivenMonitor("ddm", 1.0), "multiclass"),
    "ErrorDrivenMonitor-adwin-multiclass": (lambda: ErrorDrivenMonitor("adwin", 0.3), "multiclass"),
}


def monitor_trainer(task: Kind) -> Callable[..., BatchModel]:
    loss = "squared" if task == "regression" else "logistic"

    def train(X: FloatArray, y: FloatArray, reset_rows: int | None = None) -> BatchModel:
        return train_linear(X, y, loss=loss, C=10.0, n_classes=classes_of(task))

    return train


def monitor_loop(name: str) -> tuple[EdgeLoop, Kind]:
    """The monitor in a batch-model edge loop (window of 50 labels), started on the first window."""
    factory, task = MONITORS[name]
    s = STREAMS[task]
    train = monitor_trainer(task)
    loop = EdgeLoop(CountWindow(50, D), factory(), train)
    loop.start(train(s.X[:N0], s.y[:N0]), s.X[:N0], s.y[:N0])
    return loop, task


def run(loop: EdgeLoop, task: Kind, start: int, stop: int) -> Iterator[tuple[float, bool, bool, str]]:
    """Process samples (every third unlabeled); per sample the prediction, the flags and the stats."""
    s = STREAMS[task]
    for i in range(start, stop):
        y = None if i % 3 == 2 else float(s.y[i])
        y_hat = loop.process_one(s.X[i], y)
        m = loop.monitor
        yield y_hat, m.drift_detected, m.warning_detected, stats_json(m)


def drive(monitor: Monitor, window: CountWindow, model: LinearModel, X: FloatArray, y: FloatArray) -> None:
    for x, yi in zip(X, y, strict=True):
        monitor.update(x, float(yi), float(model.predict_one(x) != yi), window, window.push(x, float(yi)))


def started(monitor_name: str) -> tuple[Monitor, CountWindow, LinearModel, Stream]:
    factory, task = MONITORS[monitor_name]
    s = STREAMS[task]
    model = monitor_trainer(task)(s.X[:N0], s.y[:N0])
    assert isinstance(model, LinearModel)
    window = CountWindow(50, D)
    window.push_many(s.X[:N0], s.y[:N0])
    monitor = factory()
    monitor.reset(model, s.X[:N0], s.y[:N0])
    return monitor, window, model, s


#: Sensitive parameter values, so that recomputes happen before and after the snapshot.
PARAMS: dict[str, float] = {
    "druid": 0.5,
    "druid-rmsprop": 0.5,
    "druid-paper": 0.5,
    "predsign": 60,
    "periodic": 25,
    "shrub-ensemble": 20,
    "shrub-ensemble-adwin": 0.3,
    "rebalance-base": 0.3,
    "rebalance-stream": 0.3,
    "rebalance-stream-plus": 0.3,
    "ddm": 1.0,
    "ddm-incremental": 1.0,
    "eddm": 0.99,
    "eddm-incremental": 0.99,
    "adwin": 0.3,
    "adwin-incremental": 0.3,
}
#: Strategies of PARAMS that do not recompute after the snapshot on this stream: the SGD of
#: `adwin-incremental` at its default rate (0.01, kept by the no-harm tuning rule) follows the drifts at
#: samples 600 and 900 itself, so ADWIN (any δ in 0.1-0.9) sees no change of its error; `adwin` checks
#: ADWIN's restore with recomputes after the snapshot.
QUIET_AFTER_SNAPSHOT = frozenset({"adwin-incremental"})


CASES: list[tuple[str, Kind]] = [
    (name, kind)
    for name, strategy in sorted(STRATEGIES.items())
    for kind in ("classification", "regression", "multiclass")
    if (kind == "classification")
    or (kind == "regression" and not strategy.classification_only)
    or (kind == "multiclass" and strategy.multiclass)
]


def build(name: str, kind: Kind) -> EdgeLoop:
    """The strategy's loop through Strategy.build, started on the first window (labels only)."""
    s = STREAMS[kind]
    task = task_of(kind)
    nc = classes_of(kind)
    loss = "logistic" if task == "classification" else "squared"
    X0, y0 = s.X[:N0], s.y[:N0]
    trainer = LinearTrainer(loss, 10.0, n_classes=nc)
    ctx = Context(D, task, loss, N0, 10.0, trainer, X0, y0, n_classes=nc or 2)
    ctx.retune = lambda channel, learner: HistoryRetuner(channel, learner, ctx.recompute, loss, task)
    spec = STRATEGIES[name].train
    if spec.learner is not None:
        ctx.recompute = spec_trainer(spec, task, n_classes=nc)
        ctx.initial = spec_trainer(TrainSpec(spec.learner, spec.params), task, n_classes=nc)
    loop = STRATEGIES[name].build(ctx, PARAMS.get(name))
    loop.start(ctx.initial_model(), X0, y0, warm_learner=True)
    return loop


#: Batch sizes of the per-sample batch semantics check.
BATCH_SIZES = (1, 10, 100)


def batch_feed(task: Kind) -> tuple[FloatArray, FloatArray]:
    """Samples 400…699 with every third unlabeled (NaN), for the batch checks (a drift at 600)."""
    s = STREAMS[task]
    idx = np.arange(400, 700)
    return s.X[idx], np.where(idx % 3 == 2, np.nan, s.y[idx])


def batch_state(loop: EdgeLoop) -> tuple[str, dict[str, tuple[str, tuple[int, ...], bytes]]]:
    """:func:`contents` of a loop without the outputs of its last call (``last_outlier(s)``,
    ``last_incremental``), which a batch and a sample-by-sample run fill differently."""
    saved = loop.last_outlier, loop.last_outliers, loop.last_incremental
    loop.last_outlier, loop.last_outliers, loop.last_incremental = False, np.zeros(0, bool), np.zeros(0, bool)
    try:
        return contents(loop)
    finally:
        loop.last_outlier, loop.last_outliers, loop.last_incremental = saved


@cache
def _warm(name: str, task: Kind) -> bytes:
    loop = build(name, task)
    list(run(loop, task, N0, 400))
    return dumps(loop)


def warm_loop(name: str, task: Kind) -> EdgeLoop:
    """A fresh copy of the strategy's loop after samples N0…399 (built once per module)."""
    loop, _ = loads(_warm(name, task))
    assert isinstance(loop, EdgeLoop)
    fresh = build(name, task)
    loop.recompute_fn = reattach(fresh.recompute_fn, loop)
    return loop
