"""river estimators as edge learners (warm start or reset-and-replay on every recompute) and river drift
detector instances as monitors, alone and inside the edge loop."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from river import drift, linear_model, preprocessing, tree

from edgedrift import state
from edgedrift.adapters import RiverDriftMonitor, RiverLearner, get_strategy
from edgedrift.adapters.river_strategies import river_detector_strategy
from edgedrift.loop import EdgeLoop
from edgedrift.metrics.baselines import no_change_predictions
from edgedrift.models.linear import LinearModel
from edgedrift.monitors.replayable import ReplayableDetector
from edgedrift.strategies import Context
from edgedrift.training.linear import LinearTrainer
from edgedrift.window import CountWindow


def stream(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * [1.0, 5.0, 0.2] + [1.0, -3.0, 0.0]
    return X, np.where(X[:, 0] - 0.2 * X[:, 1] > 1.5, 1.0, -1.0)


@pytest.mark.parametrize(
    "template",
    [linear_model.LogisticRegression(), preprocessing.StandardScaler() | linear_model.LogisticRegression()],
    ids=["bare", "scaled"],
)
def test_a_linear_river_classifier_is_warm_started_on_the_batch_model(template: Any) -> None:
    X, y = stream()
    batch = LinearTrainer("logistic", 10.0)(X, y)
    learner = RiverLearner(template, 3, window=100)
    for x, t in zip(X[:200], y[:200], strict=True):
        learner.learn_one(x, t)
    learner.anchor(batch)
    assert learner.rule == "warm-start" and learner.n_replayed == 0
    proba = [learner._model.predict_proba_one(dict(enumerate(x.tolist())))[True] for x in X]
    np.testing.assert_allclose(proba, batch.predict_proba(X)[:, 1], rtol=0, atol=1e-12)
    assert np.array_equal(learner.predict_many(X), batch.predict(X))
    assert learner.model is template


def test_a_linear_river_regressor_is_warm_started() -> None:
    X, _ = stream()
    y = X @ [1.0, 0.5, -2.0] + 3.0
    batch = LinearTrainer("squared", 100.0)(X, y)
    learner = RiverLearner(preprocessing.StandardScaler() | linear_model.LinearRegression(), 3, "regression")
    for x, t in zip(X[:50], y[:50], strict=True):
        learner.learn_one(x, t)
    learner.anchor(batch)
    np.testing.assert_allclose(learner.predict_many(X), batch.predict(X), rtol=1e-10, atol=1e-10)


def test_a_tree_is_reset_and_relearns_the_window() -> None:
    X, y = stream(600)
    learner = RiverLearner(tree.HoeffdingTreeClassifier(grace_period=30), 3, window=250)
    for x, t in zip(X, y, strict=True):
        learner.learn_one(x, t)
    learner.anchor(LinearTrainer("logistic", 10.0)(X[-250:], y[-250:]))
    assert learner.rule == "replay" and learner.n_replayed == 250
    fresh = tree.HoeffdingTreeClassifier(grace_period=30)
    for x, t in zip(X[-250:], y[-250:], strict=True):
        fresh.learn_one(dict(enumerate(x.tolist())), bool(t > 0))
    expected = [1.0 if fresh.predict_one(dict(enumerate(x.tolist()))) else -1.0 for x in X]
    assert learner.predict_many(X).tolist() == expected


def test_a_linear_river_model_with_a_non_linear_batch_model_replays() -> None:
    from edgedrift.models.tree import ShrubModel
    from edgedrift.training.shrub import train_shrub

    X, y = stream()
    learner = RiverLearner(linear_model.LogisticRegression(), 3, window=40)
    for x, t in zip(X, y, strict=True):
        learner.learn_one(x, t)
    learner.anchor(ShrubModel.from_document(train_shrub(X, y, "classification", max_depth=2)))
    assert learner.n_replayed == 40


def test_before_learning_the_anchored_model_predicts_and_clone_starts_fresh() -> None:
    X, y = stream()
    learner = RiverLearner(tree.HoeffdingTreeClassifier(), 3)
    assert learner.predict_one(X[0]) == 1.0
    batch = LinearTrainer("logistic", 10.0)(X, y)
    learner.anchor(batch)  # nothing to replay: the tree predicts None, the batch model answers
    assert np.array_equal(learner.predict_many(X), batch.predict(X))
    learner.learn_one(X[0], y[0])
    twin = learner.clone()
    assert twin.n_learned == 0 and twin.n_anchors == 0 and twin.model is learner.model
    with pytest.raises(ValueError, match="window"):
        RiverLearner(tree.HoeffdingTreeClassifier(), 3, window=0)


def errors_with_a_jump(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.random(600) < 0.1, rng.random(600) < 0.7]).astype(float)


@pytest.mark.parametrize("detector", [drift.PageHinkley(mode="up"), drift.KSWIN(seed=1)], ids=["ph", "kswin"])
def test_a_river_detector_instance_is_a_monitor(detector: Any) -> None:
    monitor = RiverDriftMonitor(detector, last=30, refill=False)
    window, x = CountWindow(100, n_features=1), np.zeros(1)
    hits = []
    for i, e in enumerate(errors_with_a_jump()):
        monitor.update(x, 1.0, e, window, window.push(x, 1.0))
        if monitor.drift_detected:
            hits.append(i)
            monitor.reset(LinearModel.from_document(_tiny_model()), np.zeros((1, 1)), np.ones(1))
    assert hits and hits[0] >= 600, f"{type(detector).__name__} fired before the jump: {hits[:3]}"
    assert monitor.train_on_last() == 30 and monitor.n_detections == len(hits)
    assert not detector._get_params().get("window"), "the user's instance is never fed"
    assert monitor.clone().detector is not detector


def test_a_detection_retrains_on_the_newest_labels_then_on_the_refilled_window() -> None:
    monitor = RiverDriftMonitor(drift.ADWIN(delta=0.01))
    assert (monitor.last, monitor.refill) == (30, True)
    window, x = CountWindow(100, n_features=1), np.zeros(1)
    model = LinearModel.from_document(_tiny_model())
    fired: list[tuple[int, int | None]] = []
    for i, e in enumerate(errors_with_a_jump()):
        monitor.update(x, 1.0, e, window, window.push(x, 1.0))
        if monitor.drift_detected:
            k = monitor.train_on_last()
            fired.append((i, k))
            if k is not None:
                window.keep_last(k)  # as the loop does
            monitor.reset(model, np.zeros((1, 1)), np.ones(1))
    assert fired[0][0] >= 600 and fired[0][1] == 30, fired
    detection, refill = fired[0][0], fired[1]
    assert refill == (detection + 100 - 30 + 1, None), "the whole window, once 70 more labels refilled it"
    assert monitor.n_detections == len([k for _, k in fired if k is not None])


def flips(n: int = 12_000, every: int = 3_000, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """A concept that flips back and forth (Sine1's kind of drift) in two features."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    sign = np.where((np.arange(n) // every) % 2 == 0, 1.0, -1.0)
    return X, sign * np.sign(X[:, 0] + X[:, 1] + 1e-12)


def run_detector_strategy(**kw: Any) -> float:
    X, y = flips()
    labeled = np.arange(len(y)) % 10 == 0
    X0, y0 = X[:2000][labeled[:2000]], y[:2000][labeled[:2000]]
    strategy = river_detector_strategy("adwin-t", "ADWIN", drift.ADWIN(delta=0.01), **kw)
    ctx = Context(2, "classification", "logistic", 200, 1.0, LinearTrainer("logistic", 1.0), X0, y0)
    loop = strategy.build(ctx)
    loop.start(ctx.initial_model(), X0, y0)
    hits = [loop.process_one(X[i], y[i] if labeled[i] else None) == y[i] for i in range(2000, len(y))]
    return float(np.mean(hits))


def test_the_adwin_detector_strategy_beats_the_no_change_baseline_with_its_defaults() -> None:
    _, y = flips()
    labeled = np.arange(len(y)) % 10 == 0
    no_change = float(np.mean(no_change_predictions(y, labeled)[2000:] == y[2000:]))
    default = run_detector_strategy()
    assert default > max(no_change, 0.5) + 0.3, (default, no_change)
    whole_window = run_detector_strategy(last=None)
    assert whole_window < no_change, "the former default retrains on the concept that just ended"
    assert run_detector_strategy(refill=False) < default


def _tiny_model() -> dict[str, Any]:
    return LinearTrainer("logistic", 1.0)(np.array([[0.0], [1.0]]), np.array([-1.0, 1.0])).to_document()


def test_a_page_hinkley_monitor_survives_a_checkpoint() -> None:
    monitor = RiverDriftMonitor(drift.PageHinkley(mode="up"))
    assert isinstance(monitor._det, ReplayableDetector)
    window, x = CountWindow(100, n_features=1), np.zeros(1)
    errors = errors_with_a_jump(1)
    for e in errors[:700]:
        monitor.update(x, 1.0, e, window, window.push(x, 1.0))
    restored, _ = state.loads(state.dumps(monitor))
    assert isinstance(restored, RiverDriftMonitor) and type(restored.detector) is drift.PageHinkley
    flags = []
    for e in errors[700:]:
        for m in (monitor, restored):
            m.update(x, 1.0, e, window, 0)
        flags.append((monitor.drift_detected, restored.drift_detected))
    assert all(a == b for a, b in flags)


def test_not_a_detector_is_refused() -> None:
    with pytest.raises(TypeError, match="not a river drift detector"):
        RiverDriftMonitor(object())
    with pytest.raises(ValueError, match="last"):
        RiverDriftMonitor(drift.ADWIN(), last=0)


@pytest.mark.parametrize("name", ["river-logreg", "river-hoeffding", "river-page-hinkley", "river-kswin"])
def test_river_strategies_recompute_on_a_concept_flip(name: str) -> None:
    rng = np.random.default_rng(5)
    X = rng.normal(size=(5000, 2))
    y = np.where(np.arange(5000) < 2500, 1.0, -1.0) * np.sign(X[:, 0] + X[:, 1])
    X0, y0 = X[:400:2], y[:400:2]
    ctx = Context(2, "classification", "logistic", 200, 10.0, LinearTrainer("logistic", 10.0), X0, y0)
    strategy = get_strategy(name)
    loop = strategy.build(ctx)
    loop.start(ctx.initial_model(), X0, y0, warm_learner=True)
    hits = [loop.process_one(X[i], y[i] if i % 2 == 0 else None) == y[i] for i in range(400, 5000)]
    assert loop.counters.recomputes >= 1, f"{name} never recomputed"
    after = np.mean(hits[-1500:])
    if strategy.param is not None:  # the learners: DRUiD re-anchors them on the flipped concept
        assert after > 0.85, f"{name}: accuracy {after:.3f} on the flipped concept"


def test_a_river_learner_is_checkpointed_by_its_description_and_re_anchored() -> None:
    X, y = stream(600)
    batch = LinearTrainer("logistic", 10.0)(X[:200], y[:200])
    learner = RiverLearner(linear_model.LogisticRegression(l2=0.001), 3, window=150)
    for x, t in zip(X[:300], y[:300], strict=True):
        learner.learn_one(x, t)
    learner.anchor(batch)
    for x, t in zip(X[300:400], y[300:400], strict=True):
        learner.learn_one(x, t)
    restored, _ = state.loads(state.dumps(learner))
    assert isinstance(restored, RiverLearner) and repr(restored.model) == repr(learner.model)
    # Warm start from the same batch model, then the 100 samples since: the same weights.
    for x in X:
        row = dict(enumerate(x.tolist()))
        p, q = learner._model.predict_proba_one(row)[True], restored._model.predict_proba_one(row)[True]
        assert abs(p - q) < 1e-12
    assert (restored.n_learned, restored.n_anchors) == (400, 1)


def test_a_checkpointed_tree_loop_predicts_as_before() -> None:
    X, y = stream(400)
    ctx = Context(3, "classification", "logistic", 100, 1.0, LinearTrainer("logistic", 1.0), X[:100], y[:100])
    loop = get_strategy("river-hoeffding").build(ctx)
    loop.start(ctx.initial_model(), X[:100], y[:100], warm_learner=True)
    restored, _ = state.loads(state.dumps(loop))
    assert isinstance(restored, EdgeLoop)
    assert np.array_equal(restored.predict_many(X), loop.predict_many(X))
    for i in range(100, 400):
        assert restored.process_one(X[i], y[i]) == loop.process_one(X[i], y[i])


def test_a_river_model_that_cannot_be_described_is_not_checkpointed_and_the_error_names_it() -> None:
    from river import compose

    model = compose.FuncTransformer(lambda x: x) | linear_model.LogisticRegression()
    learner = RiverLearner(model, 3)
    assert learner.spec is None
    with pytest.raises(state.StateError, match=r"RiverLearner\._unsaved: .*river"):
        state.dumps(learner)


def test_a_checkpoint_builds_river_estimators_only() -> None:
    from edgedrift.adapters.river_spec import build

    for path in (
        "os:system",
        "river.datasets.elec2:Elec2",
        "river.stream:iter_csv",
        "river.linear_model:Nope",
    ):
        with pytest.raises(state.StateError):
            build({"class": path, "params": {}})
    with pytest.raises(state.StateError, match="cannot rebuild"):
        build({"class": "river.linear_model:LogisticRegression", "params": {"no_such_param": 1}})
