"""Contract checks for every learner, monitor and strategy EdgeDrift exports (river's estimator_checks style).

Parametrised over ``edgedrift.learners.__all__`` and ``edgedrift.monitors.__all__`` (abstract bases,
protocols and helpers are skipped, and a new export without a factory here fails
``test_every_export_has_a_factory``) and over every strategy of ``edgedrift.strategies.STRATEGIES``,
each built through ``Strategy.build`` on a small seeded stream and started with a model trained in process
by ``edgedrift.training``, as the evaluator does. The checks:

* ``clone()`` is a fresh instance with the same hyper-parameters;
* an ``edgedrift.state`` snapshot restores an object that predicts the same and, fed the same further
  samples (recomputes included, for whole edge loops), stays identical, down to every array;
* ``predict_many`` equals ``predict_one`` row by row;
* the batch path agrees with the sequential one where the library says so (Online-BLS and the Shrub
  Ensemble learn row by row; a monitor without its own ``update_many`` replays ``update``; DRUiD's
  vectorised Δg; PredSign's disagreement count; ``process_many`` predicts with the batch-start state);
* every monitor's ``stats`` is JSON (non-finite floats mapped to strings);
* samples with 1e6, ±1e308, ±inf or NaN in every feature leave the state finite and predictions on
  ordinary samples finite.
"""

from __future__ import annotations

import inspect
import io
import json
import math
import re
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import numpy as np
import pytest

from edgedrift import learners, monitors
from edgedrift.data import Stream, ridge_stream, sine1plus
from edgedrift.learners import SGD, AdaptiveSGD, ForgettingNewton, OnlineBLS, Perceptron, ShrubEnsemble
from edgedrift.learners.base import EWStandardizer, IncrementalLearner
from edgedrift.loop import EdgeLoop, LoopCounters, RecomputeEvent
from edgedrift.metrics import ConfusionMatrix
from edgedrift.models.document import BatchModel, model_from_document
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
from edgedrift.training.linear import LinearTrainer, train_linear
from edgedrift.training.shrub import train_shrub
from edgedrift.training.window import train_window
from edgedrift.window import CountWindow, TimeWindow
from edgedrift.wire import WindowHeader

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the extreme samples overflow on purpose

D = 2
N0 = 60  # labeled samples of the first window
STREAMS: dict[Task, Stream] = {
    "classification": sine1plus(d=D, concept_length=300, n_concepts=4, seed=3),
    "regression": ridge_stream(d=D, concept_length=300, n_concepts=4, seed=3),
}
EXTREMES = [1e6, 1e308, -1e308, math.inf, -math.inf, math.nan]


def probe(task: Task) -> FloatArray:
    """Fixed samples to compare predictions on (from the end of the stream, never learned)."""
    return STREAMS[task].X[-100:]


# --- helpers ---------------------------------------------------------------------------------------------


def contents(obj: object) -> tuple[str, dict[str, tuple[str, tuple[int, ...], bytes]]]:
    """Everything a snapshot holds: the object tree and every array's dtype, shape and bytes.

    Only the creation times of models trained after a snapshot (which differ by a few ms) are masked.
    """
    with np.load(io.BytesIO(dumps(obj)), allow_pickle=False) as npz:
        root = json.loads(npz["__state__"].tobytes())["root"]
        arrays = {k: (npz[k].dtype.str, npz[k].shape, npz[k].tobytes(order="A")) for k in npz.files}
    arrays.pop("__state__")
    return re.sub(r'\["created", "[^"]*"\]', '["created", "*"]', json.dumps(root, sort_keys=True)), arrays


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


def constructor_params(obj: object) -> dict[str, Any]:
    """The constructor parameters kept as attributes of the same name (river's ``_get_params``)."""
    names = [p for p in inspect.signature(type(obj).__init__).parameters if p != "self"]
    return {n: getattr(obj, n) for n in names if hasattr(obj, n)}


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    if type(a).__module__.startswith("edgedrift.models.losses"):
        return type(a) is type(b)
    return bool(a == b)


def assert_predictions_equal(a: FloatArray, b: FloatArray, task: Task) -> None:
    if task == "classification":
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


# --- learners ---------------------------------------------------------------------------------------------


def _bls(forgetting: float | None) -> OnlineBLS:
    bls = OnlineBLS(D, n1=4, n2=3, n3=30, forgetting=forgetting, refactor_every=7, seed=1)
    bls.fit_scaler(STREAMS["classification"].X[:N0])
    return bls


LEARNERS: dict[str, tuple[Callable[[], Any], Task]] = {
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
}
#: Learners whose ``learn_many`` is documented to equal ``learn_one`` row by row.
EXACT_BATCH = (OnlineBLS, ShrubEnsemble)


@cache
def anchor_model(task: Task, stop: int, shrub: bool) -> BatchModel:
    """The model a recompute at sample ``stop`` would install (a shrub or a linear model)."""
    s = STREAMS[task]
    X, y = s.X[stop - 50 : stop], s.y[stop - 50 : stop]
    if shrub:
        return ShrubModel.from_document(train_shrub(X, y, task, max_depth=2))
    return train_linear(X, y, loss="logistic" if task == "classification" else "squared", C=10.0)


def feed(learner: Any, task: Task, start: int, stop: int, batch: int = 1) -> None:
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


@pytest.fixture(params=sorted(LEARNERS))
def learner_case(request: pytest.FixtureRequest) -> tuple[Callable[[], Any], Task]:
    return LEARNERS[request.param]


def test_every_export_has_a_factory() -> None:
    helpers = {"EWStandardizer", "DeltaG", "chi_scale_mle"}  # checked in test_components_round_trip
    covered = {factory().__class__ for factory, _ in LEARNERS.values()}
    for name in learners.__all__:
        obj = getattr(learners, name)
        if name in helpers or getattr(obj, "_is_protocol", False) or inspect.isabstract(obj):
            continue
        assert obj in covered, f"learner {name} has no contract factory"
    covered = {factory().__class__ for factory, _ in MONITORS.values()}
    for name in monitors.__all__:
        obj = getattr(monitors, name)
        if name in helpers or inspect.isabstract(obj):
            continue
        assert obj in covered, f"monitor {name} has no contract factory"


def test_clone_equals_a_fresh_instance(learner_case: tuple[Callable[[], Any], Task]) -> None:
    factory, task = learner_case
    trained = factory()
    feed(trained, task, N0, 300)
    clone, fresh = trained.clone(), factory()
    assert type(clone) is type(fresh)
    a, b = constructor_params(clone), constructor_params(fresh)
    assert a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    assert clone.n_learned == 0
    X = probe(task)
    assert_predictions_equal(clone.predict_many(X), fresh.predict_many(X), task)
    feed(clone, task, 300, 450)
    feed(fresh, task, 300, 450)
    assert_predictions_equal(clone.predict_many(X), fresh.predict_many(X), task)
    for x, y in zip(learner_state(clone), learner_state(fresh), strict=True):
        np.testing.assert_array_equal(x, y)


def test_snapshot_round_trip_continues_identically(learner_case: tuple[Callable[[], Any], Task]) -> None:
    factory, task = learner_case
    learner = factory()
    feed(learner, task, N0, 300)
    restored = restore(learner)
    X = probe(task)
    np.testing.assert_array_equal(restored.predict_many(X), learner.predict_many(X))
    assert [restored.predict_one(x) for x in X] == [learner.predict_one(x) for x in X]
    assert contents(restored) == contents(learner)
    for start in range(300, 500, 50):
        feed(learner, task, start, start + 50)
        feed(restored, task, start, start + 50)
        np.testing.assert_array_equal(restored.predict_many(X), learner.predict_many(X))
    assert contents(restored) == contents(learner)


def test_predict_many_equals_predict_one(learner_case: tuple[Callable[[], Any], Task]) -> None:
    factory, task = learner_case
    learner = factory()
    X = probe(task)
    assert_predictions_equal(learner.predict_many(X), np.array([learner.predict_one(x) for x in X]), task)
    feed(learner, task, N0, 400)
    assert_predictions_equal(learner.predict_many(X), np.array([learner.predict_one(x) for x in X]), task)


def test_batch_path(learner_case: tuple[Callable[[], Any], Task]) -> None:
    factory, task = learner_case
    seq, bat = factory(), factory()
    feed(seq, task, N0, 400)
    feed(bat, task, N0, 400, batch=13)
    assert bat.n_learned == seq.n_learned == 400 - N0
    if isinstance(seq, ShrubEnsemble) and isinstance(bat, ShrubEnsemble):
        # Everything but the one-row prediction cache, which only the sequential path fills.
        for x, y in zip(learner_state(bat), learner_state(seq), strict=True):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(bat.predict_many(probe(task)), seq.predict_many(probe(task)))
    elif isinstance(seq, EXACT_BATCH):
        assert contents(bat) == contents(seq)
    else:  # one mini-batch step per batch: documented to learn as well, not the same weights
        assert all(np.isfinite(a).all() for a in learner_state(bat))


def test_extreme_samples_leave_the_state_finite(learner_case: tuple[Callable[[], Any], Task]) -> None:
    factory, task = learner_case
    s = STREAMS[task]
    learner = factory()
    feed(learner, task, N0, 200)
    labels = [1.0, -1.0] if task == "classification" else [1.0, 1e308, math.nan]
    for value in EXTREMES:
        x = np.full(D, value)
        learner.predict_one(x)
        learner.predict_many(x[None, :])
        for y in labels:
            learner.learn_one(x, y)
    bad = np.vstack([np.full(D, v) for v in EXTREMES] + [s.X[200:204]])
    learner.learn_many(bad, np.concatenate([np.ones(len(EXTREMES)), s.y[200:204]]))
    feed(learner, task, 204, 260)
    feed(learner, task, 260, 300, batch=8)
    assert learner.n_skipped >= len(EXTREMES) - 1
    for arr in learner_state(learner):
        assert np.isfinite(arr).all()
    X = probe(task)
    assert np.isfinite(learner.predict_many(X)).all()
    assert all(math.isfinite(learner.predict_one(x)) for x in X)


# --- monitors ---------------------------------------------------------------------------------------------


MONITORS: dict[str, tuple[Callable[[], Monitor], Task]] = {
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
}


def monitor_trainer(task: Task) -> Callable[..., BatchModel]:
    loss = "logistic" if task == "classification" else "squared"

    def train(X: FloatArray, y: FloatArray, reset_rows: int | None = None) -> BatchModel:
        return train_linear(X, y, loss=loss, C=10.0)

    return train


def monitor_loop(name: str) -> tuple[EdgeLoop, Task]:
    """The monitor in a batch-model edge loop (window of 50 labels), started on the first window."""
    factory, task = MONITORS[name]
    s = STREAMS[task]
    train = monitor_trainer(task)
    loop = EdgeLoop(CountWindow(50, D), factory(), train)
    loop.start(train(s.X[:N0], s.y[:N0]), s.X[:N0], s.y[:N0])
    return loop, task


def run(loop: EdgeLoop, task: Task, start: int, stop: int) -> Iterator[tuple[float, bool, bool, str]]:
    """Process samples (every third unlabeled); per sample the prediction, the flags and the stats."""
    s = STREAMS[task]
    for i in range(start, stop):
        y = None if i % 3 == 2 else float(s.y[i])
        y_hat = loop.process_one(s.X[i], y)
        m = loop.monitor
        yield y_hat, m.drift_detected, m.warning_detected, stats_json(m)


@pytest.fixture(params=sorted(MONITORS))
def monitor_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_monitor_snapshot_round_trip(monitor_name: str) -> None:
    loop, task = monitor_loop(monitor_name)
    list(run(loop, task, N0, 500))
    restored = restore(loop)
    restored.recompute_fn = loop.recompute_fn
    assert contents(restored) == contents(loop)
    assert stats_json(restored.monitor) == stats_json(loop.monitor)
    before = loop.counters.recomputes
    for a, b in zip(run(loop, task, 500, 1000), run(restored, task, 500, 1000), strict=True):
        assert a == b
    assert contents(restored) == contents(loop)
    if not isinstance(loop.monitor, NeverMonitor):
        assert loop.counters.recomputes > before  # recomputes happened after the restore


def test_monitor_stats_are_json(monitor_name: str) -> None:
    factory, _ = MONITORS[monitor_name]
    stats_json(factory())
    loop, task = monitor_loop(monitor_name)
    stats_json(loop.monitor)
    list(run(loop, task, N0, 700))
    assert isinstance(loop.monitor, NeverMonitor) or loop.counters.recomputes > 0
    for event in loop.events:
        json.dumps(jsonable(event.stats), allow_nan=False)


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


def test_monitor_batch_path(monitor_name: str) -> None:
    seq, win_seq, model, s = started(monitor_name)
    bat, win_bat, _, _ = started(monitor_name)
    X, y = s.X[N0:500], s.y[N0:500]
    drive(seq, win_seq, model, X, y)
    for j in range(0, len(y), 17):
        Xb, yb = X[j : j + 17], y[j : j + 17]
        errors = (model.predict(Xb) != yb).astype(np.float64)
        bat.update_many(Xb, yb, errors, win_bat, win_bat.push_many(Xb, yb))
    for a, b in zip(win_bat.contents(), win_seq.contents(), strict=True):
        np.testing.assert_array_equal(a, b)
    if type(seq).update_many is Monitor.update_many:  # documented: replays update() per sample
        bat.drift_detected = seq.drift_detected  # the batch flag is "any step", the sequential one "last"
        assert contents(bat) == contents(seq)
    elif isinstance(seq, DruidMonitor) and isinstance(bat, DruidMonitor):
        np.testing.assert_allclose(bat.delta_g.vec, seq.delta_g.vec, atol=1e-9)
        np.testing.assert_allclose(bat.delta_g.robust, seq.delta_g.robust, atol=1e-9)
        assert bat.n_tests == seq.n_tests
    if isinstance(seq, PredSignMonitor) and isinstance(bat, PredSignMonitor):
        for x in s.X[500:700]:
            seq.update_unlabeled(x)
        bat.update_unlabeled_many(s.X[500:700])
        assert bat.n_disagree == seq.n_disagree


def test_monitor_extreme_samples(monitor_name: str) -> None:
    monitor, window, model, s = started(monitor_name)
    drive(monitor, window, model, s.X[N0:150], s.y[N0:150])
    for value in EXTREMES:
        x = np.full(D, value)
        monitor.update_unlabeled(x)
        monitor.update(x, 1.0, 1.0, window, window.push(x, 1.0))
        monitor.update(x, -1.0, math.inf, window, window.push(x, -1.0))
        monitor.update(x, 1.0, math.nan, window, window.push(x, 1.0))
    bad = np.vstack([np.full(D, v) for v in EXTREMES])
    monitor.update_unlabeled_many(bad)
    monitor.update_many(
        bad, np.ones(len(bad)), np.ones(len(bad)), window, window.push_many(bad, np.ones(len(bad)))
    )
    drive(monitor, window, model, s.X[150:300], s.y[150:300])  # the extremes leave the window of 50
    for value in monitor.stats.values():
        assert not isinstance(value, float) or math.isfinite(value) or value == math.inf
    delta_g = getattr(monitor, "delta_g", None)
    if delta_g is not None:
        for arr in (delta_g.vec, delta_g.robust, delta_g.added_sum, delta_g.added_outer):
            assert np.isfinite(arr).all()
        assert delta_g.n_skipped > 0
    if isinstance(monitor, DruidMonitor):
        assert math.isfinite(monitor.statistic)


# --- strategies -------------------------------------------------------------------------------------------

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
CASES = [
    (name, task)
    for name, strategy in sorted(STRATEGIES.items())
    for task in ("classification", "regression")
    if task == "classification" or not strategy.classification_only
]


def cloud_recompute(spec: TrainSpec, task: Task) -> Callable[..., BatchModel]:
    """The cloud's training entry point in process, for strategies that train shrubs (as the evaluator)."""

    def recompute(X: FloatArray, y: FloatArray, reset_rows: int | None = None) -> BatchModel:
        fields: dict[str, Any] = {
            "task": task,
            "learner": spec.learner,
            "params": spec.params,
            "rebalance": spec.rebalance,
            "reason": "contract",
        }
        if reset_rows is not None:
            fields["reset_rows"] = reset_rows
        if spec.return_base:
            fields["return_base"] = True
        return model_from_document(train_window(WindowHeader.model_validate(fields), X, y).document)

    return recompute


def build(name: str, task: Task) -> EdgeLoop:
    """The strategy's loop through Strategy.build, started on the first window (labels only)."""
    s = STREAMS[task]
    loss = "logistic" if task == "classification" else "squared"
    X0, y0 = s.X[:N0], s.y[:N0]
    ctx = Context(D, task, loss, N0, 10.0, LinearTrainer(loss, 10.0), X0, y0)
    spec = STRATEGIES[name].train
    if spec.learner is not None:
        ctx.recompute = cloud_recompute(spec, task)
        ctx.initial = cloud_recompute(TrainSpec(spec.learner, spec.params), task)
    loop = STRATEGIES[name].build(ctx, PARAMS.get(name))
    assert isinstance(loop, EdgeLoop)
    loop.start(ctx.initial_model(), X0, y0, warm_learner=True)
    return loop


@cache
def _warm(name: str, task: Task) -> bytes:
    loop = build(name, task)
    list(run(loop, task, N0, 400))
    return dumps(loop)


def warm_loop(name: str, task: Task) -> EdgeLoop:
    """A fresh copy of the strategy's loop after samples N0…399 (built once per module)."""
    loop, _ = loads(_warm(name, task))
    assert isinstance(loop, EdgeLoop)
    fresh = build(name, task)
    loop.recompute_fn = fresh.recompute_fn
    return loop


@pytest.fixture(params=CASES, ids=[f"{n}-{t[:3]}" for n, t in CASES])
def case(request: pytest.FixtureRequest) -> tuple[str, Task]:
    name, task = request.param
    return str(name), task


def test_strategy_snapshot_round_trip(case: tuple[str, Task]) -> None:
    name, task = case
    loop = build(name, task)
    list(run(loop, task, N0, 400))
    restored = restore(loop)
    assert restored.recompute_fn is None
    restored.recompute_fn = loop.recompute_fn
    assert contents(restored) == contents(loop)
    X = probe(task)
    np.testing.assert_array_equal(restored.predict_many(X), loop.predict_many(X))
    before = loop.counters.recomputes
    for a, b in zip(run(loop, task, 400, 1000), run(restored, task, 400, 1000), strict=True):
        assert a == b
    assert contents(restored) == contents(loop)
    assert restored.counters == loop.counters
    if name in PARAMS:
        assert loop.counters.recomputes > before, "no recompute happened after the restore"


def test_strategy_predict_many_equals_predict_one(case: tuple[str, Task]) -> None:
    name, task = case
    loop = warm_loop(name, task)
    X = probe(task)
    assert_predictions_equal(loop.predict_many(X), np.array([loop.predict_one(x) for x in X]), task)


def test_strategy_batch_path_predicts_with_the_batch_start_state(case: tuple[str, Task]) -> None:
    name, task = case
    s = STREAMS[task]
    seq, bat = warm_loop(name, task), warm_loop(name, task)
    y = np.where(np.arange(400, 500) % 3 == 2, np.nan, s.y[400:500])
    first = bat.predict_many(s.X[400:420])
    preds = bat.process_many(s.X[400:420], y[:20])
    np.testing.assert_array_equal(preds, first)
    bat.process_many(s.X[420:500], y[20:])
    for i in range(400, 500):
        seq.process_one(s.X[i], None if np.isnan(y[i - 400]) else float(y[i - 400]))
    assert (bat.counters.samples, bat.counters.labeled) == (seq.counters.samples, seq.counters.labeled)
    stats_json(bat.monitor)


def test_strategy_extreme_samples(case: tuple[str, Task]) -> None:
    name, task = case
    s = STREAMS[task]
    loop = warm_loop(name, task)
    # A labeled extreme reaches the batch trainer with the window when a recompute follows, and the
    # loop's squared error of a regression prediction beyond 1e154 overflows: those two stay unlabeled.
    labeled = isinstance(loop.monitor, NeverMonitor) and task == "classification"
    for value in EXTREMES:
        x = np.full(D, value)
        loop.process_one(x)
        loop.process_many(np.vstack([x, s.X[400]]))
        if labeled:
            loop.process_one(x, 1.0)
    list(run(loop, task, 400, 460))
    X = probe(task)
    assert all(math.isfinite(loop.predict_one(x)) for x in X)
    assert np.isfinite(loop.predict_many(X)).all()
    if loop.learner is not None:
        assert all(np.isfinite(a).all() for a in learner_state(loop.learner))
    json.dumps(jsonable(loop.monitor.stats), allow_nan=False)


# --- components -------------------------------------------------------------------------------------------


def test_components_round_trip() -> None:
    """Windows, the online standardiser, models, Δg and the small records restore exactly."""
    s = STREAMS["classification"]
    windows: list[Any] = [CountWindow(30, D), TimeWindow(5.0, D, initial_capacity=4)]
    scaler = EWStandardizer(D, 0.05)
    for i in range(100):
        windows[0].push(s.X[i], float(s.y[i]))
        windows[1].push(s.X[i], float(s.y[i]), 0.1 * i)
        scaler.update(s.X[i])
    cm = ConfusionMatrix()
    cm.update_many(s.y[:50], -s.y[50:100])
    model = train_linear(s.X[:100], s.y[:100], C=10.0, standardize=True)
    shrub = anchor_model("classification", 100, True)
    druid = DruidMonitor()
    druid.reset(model, s.X[:100], s.y[:100])
    records = [LoopCounters(1, 2, 3, 4, 5), RecomputeEvent(1, 2, 3, 4, {"a": [1.5, None]}), cm]
    graph = [windows, scaler, model, shrub, druid.delta_g, records]
    restored = restore(graph)
    assert contents(restored) == contents(graph)
    r_windows, r_scaler, r_model, r_shrub, r_delta_g, _ = restored
    np.testing.assert_array_equal(r_model.predict(s.X), model.predict(s.X))
    np.testing.assert_array_equal(r_shrub.predict(s.X), shrub.predict(s.X))
    assert r_delta_g.model is r_model
    for i in range(100, 160):
        for w, rw in zip(windows, r_windows, strict=True):
            assert w.push(s.X[i], float(s.y[i]), 0.1 * i) == rw.push(s.X[i], float(s.y[i]), 0.1 * i)
        scaler.update(s.X[i])
        r_scaler.update(s.X[i])
        druid.delta_g.add(s.X[i], float(s.y[i]))
        r_delta_g.add(s.X[i], float(s.y[i]))
    assert contents([r_windows, r_scaler, r_delta_g]) == contents([windows, scaler, druid.delta_g])
