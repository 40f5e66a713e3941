"""RebalanceStream / RebalanceStream+ on the edge: the monitor, the cloud's four candidates, the stream."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from edgedrift.data import load_dataset
from edgedrift.data.generators import IMBALANCE_LEVELS, imbalance_schedule, rbf_drift_rows, rbf_imbalanced
from edgedrift.loop import EdgeLoop
from edgedrift.metrics import ConfusionMatrix
from edgedrift.models.document import BatchModel, model_from_document
from edgedrift.models.losses import FloatArray
from edgedrift.monitors import RebalanceMonitor
from edgedrift.training.rebalance import prequential_kappa, smote, smote_prefix
from edgedrift.training.shrub import train_shrub
from edgedrift.training.window import CANDIDATES, Scoring, train_window
from edgedrift.window import CountWindow
from edgedrift.wire import LearnerParams, WindowHeader


class NoEvictions:
    evicted_X = np.empty((0, 2))
    evicted_y = np.empty(0)


class Constant:
    """A classification model that predicts ``sign`` everywhere, with an optional selection record."""

    task = "classification"

    def __init__(self, sign: float, training: dict[str, Any] | None = None) -> None:
        self.sign = sign
        self.meta: dict[str, Any] = {} if training is None else {"training": training}

    def predict(self, X: FloatArray) -> FloatArray:
        return np.full(len(X), self.sign)

    def predict_one(self, x: FloatArray) -> float:
        return self.sign

    def to_document(self) -> dict[str, Any]:
        return {}


def feed(monitor: RebalanceMonitor, ys: np.ndarray, errors: np.ndarray, start: int = 0) -> list[int]:
    """Feed (x = [sample number, 0], y, error); returns the sample numbers where drift was raised."""
    fired = []
    for i, (y, e) in enumerate(zip(ys, errors, strict=True), start):
        monitor.update(np.array([float(i), 0.0]), float(y), float(e), NoEvictions(), 0)
        if monitor.drift_detected:
            fired.append(i)
            break
    return fired


def error_stream(seed: int, n_before: int = 1500, n_after: int = 1500) -> tuple[np.ndarray, np.ndarray]:
    """Labels ±1 and a 0/1 error stream whose rate jumps from 0.1 to 0.5 at ``n_before``."""
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n_before + n_after) < 0.3, 1.0, -1.0)
    rate = np.r_[np.full(n_before, 0.1), np.full(n_after, 0.5)]
    return y, (rng.random(n_before + n_after) < rate).astype(float)


def started(mode: str = "rs", **kwargs: Any) -> RebalanceMonitor:
    monitor = RebalanceMonitor(mode=mode, **kwargs)  # type: ignore[arg-type]
    monitor.reset(Constant(-1.0), np.empty((0, 2)), np.empty(0))
    return monitor


# --- the monitor -------------------------------------------------------------------------------------


def test_warning_comes_first_and_the_reset_batch_is_a_suffix_of_the_batch() -> None:
    monitor = started()
    y, errors = error_stream(seed=0)
    warned_at = None
    for i in range(len(y)):
        monitor.update(np.array([float(i), 0.0]), float(y[i]), float(errors[i]), NoEvictions(), 0)
        if monitor.warning_detected and warned_at is None:
            warned_at = i
        if monitor.drift_detected:
            break
    changed_at = i
    assert warned_at is not None and 1500 <= warned_at < changed_at < 2000
    assert monitor.stats["reason"] == "change" and monitor.n_detections == 1
    batch = monitor.training_batch()
    assert batch is not None
    X, yb, reset_rows = batch
    np.testing.assert_array_equal(X[:, 0], np.arange(changed_at + 1))  # every sample since the start
    np.testing.assert_array_equal(yb, y[: changed_at + 1])
    assert reset_rows == changed_at - warned_at + 1  # from the first warning, that sample included
    np.testing.assert_array_equal(X[-reset_rows:, 0], np.arange(warned_at, changed_at + 1))


def test_everything_starts_over_after_a_change() -> None:
    monitor = started()
    y, errors = error_stream(seed=0)
    assert feed(monitor, y, errors)
    model = Constant(1.0)
    monitor.training_batch()
    assert monitor.accept(model)  # no selection record: installed
    monitor.reset(model, np.empty((0, 2)), np.empty(0))
    assert not (monitor.drift_detected or monitor.warning_detected)
    assert monitor.batch_size == 0 and monitor.reset_rows == 0 and monitor.stats["reason"] is None
    monitor.update(np.array([7.0, 0.0]), 1.0, 0.0, NoEvictions(), 0)
    X, _, rows = monitor.training_batch()  # type: ignore[misc]
    assert X[:, 0].tolist() == [7.0] and rows == 0


def test_base_mode_asks_for_a_plain_retrain_and_always_installs() -> None:
    monitor = started("base")
    y, errors = error_stream(seed=1)
    feed(monitor, y, errors)
    batch = monitor.training_batch()
    assert batch is not None and batch[2] is None
    record = {"chosen": "batch", "scores": {"batch": -1.0}}
    assert monitor.accept(Constant(1.0, record))


def test_max_batch_forces_a_recompute_and_the_ring_keeps_the_newest() -> None:
    monitor = started(max_batch=50)
    fired = feed(monitor, np.ones(80), np.zeros(80))
    assert fired == [49]
    assert monitor.stats["reason"] == "max_batch" and monitor.n_forced == 1
    # A recompute that is still pending: later samples overwrite the oldest rows.
    for i in range(50, 60):
        monitor.update(np.array([float(i), 0.0]), 1.0, 0.0, NoEvictions(), 0)
    X, _, rows = monitor.training_batch()  # type: ignore[misc]
    np.testing.assert_array_equal(X[:, 0], np.arange(10, 60))
    assert rows == 0 and monitor.drift_detected


def test_samples_after_an_asynchronous_recompute_open_the_next_batch() -> None:
    monitor = started(max_batch=20)
    feed(monitor, np.ones(20), np.zeros(20))
    monitor.training_batch()
    for i in range(20, 25):  # arrive while the cloud trains
        monitor.update(np.array([float(i), 0.0]), 1.0, 0.0, NoEvictions(), 0)
    new = Constant(1.0)
    assert monitor.accept(new)
    monitor.reset(new, np.empty((0, 2)), np.empty(0))
    X, _, _ = monitor.training_batch()  # type: ignore[misc]
    np.testing.assert_array_equal(X[:, 0], np.arange(20, 25))


def perfect(monitor: RebalanceMonitor, n: int = 200) -> None:
    """n correctly predicted samples of both classes: κ_L = 1 (for rs/base modes)."""
    for i in range(n):
        monitor.update(np.array([float(i), 0.0]), 1.0 if i % 3 == 0 else -1.0, 0.0, NoEvictions(), 0)


def selection(chosen: str, score: float, counts: list[int] | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"chosen": chosen, "scores": {"batch": -1.0, chosen: score}}
    if counts is not None:
        record["confusion"] = {chosen: counts}
    return record


def test_the_current_model_is_kept_when_its_kappa_beats_the_candidates() -> None:
    monitor = started()
    current = monitor._model
    assert current is not None
    perfect(monitor)
    assert monitor.kappa_l == 1.0
    # Ties keep the current model (κ_L is first in Algorithm 1's argmax).
    assert not monitor.accept(Constant(1.0, selection("batch+smote", 1.0)))
    assert monitor.n_kept == 1 and monitor.last_kappa_l == 1.0
    monitor.reset(current, np.empty((0, 2)), np.empty(0))
    assert monitor.kappa_l == 1.0  # a kept model keeps its matrix


def test_a_better_candidate_is_installed_with_its_confusion_matrix() -> None:
    monitor = started()
    y, errors = error_stream(seed=2)
    feed(monitor, y, errors)
    kappa_l = monitor.kappa_l
    assert kappa_l < 0.9
    new = Constant(1.0, selection("reset+smote", 0.9, [40, 5, 5, 50]))
    assert monitor.accept(new) and monitor.n_swaps == 1
    monitor.reset(new, np.empty((0, 2)), np.empty(0))
    # Algorithm 1, line 29: the learner's matrix becomes the winner's (TP, FP, FN, TN).
    assert isinstance(monitor._cm_model, ConfusionMatrix) and monitor._cm_model.counts == (40, 5, 5, 50)
    fresh = Constant(-1.0, {"chosen": "batch", "scores": {"batch": 0.95}})
    assert monitor.accept(fresh)
    monitor.reset(fresh, np.empty((0, 2)), np.empty(0))
    assert monitor._cm_model.n == 0 and monitor.kappa_l == -1.0  # no counts sent: a fresh matrix


def separable(n: int, seed: int, minority: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < minority, 1.0, -1.0)
    X = rng.normal(size=(n, 2))
    X[:, 0] += 3.0 * y
    return X, y


def test_rs_plus_predicts_with_base_while_base_scores_better() -> None:
    X, y = separable(400, seed=3)
    header = WindowHeader(
        task="classification", learner="shrub", rebalance="select", reset_rows=0, return_base=True
    )
    base_doc = train_window(header, X, y).document["training"]["base"]
    assert "training" not in base_doc and base_doc["n_train"] == 400
    monitor = started("rs+")
    # The selection installs a model that is always -1; its BASE separates the classes.
    poor = Constant(-1.0, {"chosen": "batch+smote", "scores": {"batch+smote": 0.5}, "base": base_doc})
    assert monitor.accept(poor)
    monitor.reset(poor, np.empty((0, 2)), np.empty(0))
    assert monitor.base_model is not None and monitor.prediction_model() is None
    Xs, ys = separable(150, seed=4)
    for i in range(150):
        monitor.update(Xs[i], float(ys[i]), 1.0, NoEvictions(), 0)
        if i + 1 < monitor.min_switch:
            assert monitor.prediction_model() is None
    assert monitor.prediction_model() is monitor.base_model and monitor.stats["using_base"]
    # The next change starts the comparison over.
    monitor.reset(poor, np.empty((0, 2)), np.empty(0))
    assert monitor.prediction_model() is None


def test_rs_plus_keeps_predicting_with_its_model_when_it_beats_base() -> None:
    X, y = separable(400, seed=5)
    current = model_from_document(train_shrub(X, y, "classification", max_depth=3))
    one_class = train_shrub(X, np.full(400, -1.0), "classification", max_depth=3)
    monitor = RebalanceMonitor(mode="rs+")
    monitor.reset(current, np.empty((0, 2)), np.empty(0))
    Xs, ys = separable(200, seed=6)
    for i in range(50):
        monitor.update(Xs[i], float(ys[i]), 1.0, NoEvictions(), 0)  # rs+ ignores the loop's error
    assert monitor.kappa_l > 0.9
    # A rejected selection still brings its BASE (here a one-class tree).
    assert not monitor.accept(Constant(1.0, {"chosen": "batch", "scores": {"batch": 0.2}, "base": one_class}))
    monitor.reset(current, np.empty((0, 2)), np.empty(0))
    assert monitor.base_model is not None and monitor.kappa_l > 0.9
    for i in range(50, 200):
        monitor.update(Xs[i], float(ys[i]), 1.0, NoEvictions(), 0)
    assert monitor.prediction_model() is None


def test_the_loop_runs_rebalance_stream_end_to_end() -> None:
    stream = rbf_imbalanced(n=6_000, mean=1_500, var=10.0, seed=4)
    X, y = stream.X, stream.y
    calls: list[int | None] = []

    def recompute(Xb: FloatArray, yb: FloatArray, reset_rows: int | None = None) -> BatchModel:
        calls.append(reset_rows)
        header = WindowHeader(
            task="classification",
            learner="shrub",
            params=LearnerParams(max_depth=6),
            rebalance="select",
            reset_rows=reset_rows,
            return_base=True,
        )
        return model_from_document(train_window(header, Xb, yb).document)

    monitor = RebalanceMonitor(mode="rs+", max_batch=1_500)
    loop = EdgeLoop(CountWindow(500, X.shape[1]), monitor, recompute)
    first = train_window(WindowHeader(task="classification", learner="shrub"), X[:500], y[:500])
    loop.start(model_from_document(first.document), X[:500], y[:500])
    for i in range(500, len(y)):
        loop.process_one(X[i], float(y[i]))
    assert loop.counters.recomputes == len(calls) >= 3
    assert all(r is not None and r >= 0 for r in calls)
    assert monitor.n_swaps + monitor.n_kept == len(calls)
    # What an agent sends as the request's ``monitor`` field is valid on the wire.
    assert all(WindowHeader(task="classification", learner="shrub", monitor=e.stats) for e in loop.events)


def test_shrub_rows_predict_exactly_like_the_vectorised_tree() -> None:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(2_000, 5))
    y = np.where(X[:, 0] * X[:, 1] + 0.3 * rng.normal(size=2_000) > 0, 1.0, -1.0)
    tree = model_from_document(train_shrub(X, y, "classification", max_depth=8))
    # New rows, plus rows sitting exactly on thresholds (the float32 rounding decides their side).
    probe = rng.normal(size=(500, 5))
    doc = tree.to_document()
    for i, (f, t) in enumerate(zip(doc["feature"], doc["threshold"], strict=True)):
        if f >= 0 and i < 100:
            probe[i, f] = t
    assert [tree.predict_one(row) for row in probe] == tree.predict(probe).tolist()


def test_modes_and_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="mode"):
        RebalanceMonitor(mode="rs++")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="delta"):
        RebalanceMonitor(delta=0.0)
    with pytest.raises(ValueError, match="max_batch"):
        RebalanceMonitor(max_batch=1)


# --- the cloud's four candidates ---------------------------------------------------------------------


def rare_but_separable(n: int, frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A rare class +1 (share ``frac``) shifted along feature 0, overlapping the majority −1."""
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < frac, 1.0, -1.0)
    X = rng.normal(size=(n, 2))
    X[y == 1.0, 0] += 1.5
    return X, y


def select(
    X: np.ndarray, y: np.ndarray, reset_rows: int | None, scoring: Scoring = "real", **params: Any
) -> Any:
    header = WindowHeader.model_validate(
        {
            "task": "classification",
            "learner": "shrub",
            "rebalance": "select",
            "reset_rows": reset_rows,
            "params": {"max_depth": 4, **params},
        }
    )
    return train_window(header, X, y, scoring)


def test_candidates_are_scored_on_real_rows_and_the_papers_scoring_inflates_smote() -> None:
    X, y = rare_but_separable(600, 0.08, seed=0)

    def fit(Xt: FloatArray, yt: FloatArray) -> Any:
        return model_from_document(train_shrub(Xt, yt, "classification", max_depth=4)).predict

    Xr, yr = X[-200:], y[-200:]
    balanced = smote_prefix(0)
    real = {
        "batch": prequential_kappa(fit, X, y),
        "batch+smote": prequential_kappa(fit, X, y, prepare=balanced),
        "reset": prequential_kappa(fit, Xr, yr),
        "reset+smote": prequential_kappa(fit, Xr, yr, prepare=balanced),
    }
    out = select(X, y, reset_rows=200)
    assert out.scores is not None and tuple(out.scores) == CANDIDATES
    assert out.scores == pytest.approx(real)
    assert out.chosen == max(CANDIDATES, key=out.scores.__getitem__) == "batch"
    training = out.document["training"]
    assert training["chosen"] == out.chosen and training["scores"] == out.scores
    # Counts are over real rows only: blocks 1-4 of the window (480) or of the reset batch (160).
    rows = {name: sum(counts) for name, counts in training["confusion"].items()}
    assert rows == {"batch": 480, "batch+smote": 480, "reset": 160, "reset+smote": 160}
    assert "base" not in training
    # The paper's Algorithms 2-4 score a SMOTE candidate on its own rows, the synthetic tail included:
    # the same candidates then look far better than the window's own rows say, and SMOTE wins.
    paper = select(X, y, reset_rows=200, scoring="augmented")
    augmented = {
        **real,
        "batch+smote": prequential_kappa(fit, *(lambda r: (r.X, r.y))(smote(X, y, 0))),
        "reset+smote": prequential_kappa(fit, *(lambda r: (r.X, r.y))(smote(Xr, yr, 0))),
    }
    assert paper.scores == pytest.approx(augmented)
    assert paper.chosen.endswith("+smote") and paper.scores[paper.chosen] > out.scores["batch"] + 0.1
    for name in ("batch+smote", "reset+smote"):
        assert paper.scores[name] > out.scores[name] + 0.3
    with pytest.raises(ValueError, match="scoring"):
        select(X, y, reset_rows=200, scoring="synthetic")  # type: ignore[arg-type]


def test_a_change_before_any_warning_scores_the_reset_candidates_minus_one() -> None:
    X, y = rare_but_separable(300, 0.1, seed=1)
    out = select(X, y, reset_rows=0)
    assert out.scores is not None
    assert out.scores["reset"] == out.scores["reset+smote"] == -1.0
    assert out.chosen in ("batch", "batch+smote") and out.note is not None and "reset batch of 0" in out.note


def test_smote_with_one_minority_sample_scores_minus_one() -> None:
    X, y = rare_but_separable(200, 0.0, seed=2)
    y[150] = 1.0  # the batch's only minority sample, inside the reset batch too
    out = select(X, y, reset_rows=100)
    assert out.scores is not None
    assert out.scores["batch+smote"] == out.scores["reset+smote"] == -1.0
    assert out.scores["batch"] > -1.0 and out.scores["reset"] > -1.0
    assert out.chosen in ("batch", "reset")


# --- the stream --------------------------------------------------------------------------------------


def test_the_schedule_replays_the_reference_java_random() -> None:
    # Values of java.util.Random(10) in the reference's DatasetGenerator (checked against a JVM).
    levels = imbalance_schedule(100_000, 20_000, 50.0)
    changes = np.flatnonzero(np.diff(levels)) + 1
    np.testing.assert_array_equal(changes, [39_826, 59_760, 79_689, 99_734])
    np.testing.assert_array_equal(levels[np.r_[0, changes]], [0.3, 0.1, 0.3, 0.4, 0.2])
    assert set(np.unique(imbalance_schedule(50_000, 1_000, 400.0))) <= set(IMBALANCE_LEVELS)


def test_fast_rbf_rows_are_river_bit_for_bit() -> None:
    from river.datasets import synth

    kw: dict[str, Any] = dict(seed_model=5, seed_sample=7, n_features=4, n_centroids=20, n_drift_centroids=12)
    kw["change_speed"] = 0.05  # fast enough for centroids to bounce off the unit cube
    river_rows = [(list(x.values()), y) for x, y in itertools.islice(synth.RandomRBFDrift(**kw), 2_000)]
    assert list(itertools.islice(rbf_drift_rows(synth.RandomRBFDrift(**kw)), 2_000)) == river_rows


def test_class_ratios_follow_the_schedule() -> None:
    stream = load_dataset("rbf-imbalanced:n=12000,mean=3000,var=10", seed=5)
    share = stream.meta["minority_share"]
    assert stream.drift_points == tuple(int(i) for i in np.flatnonzero(np.diff(share)) + 1)
    for level in np.unique(share):
        rows = share == level
        observed = float(np.mean(stream.y[rows] == 1.0))
        assert abs(observed - level) < 4 * np.sqrt(level * (1 - level) / rows.sum()) + 1e-9
    assert set(np.unique(stream.y)) == {-1.0, 1.0} and stream.n_features == 10
    again = rbf_imbalanced(n=12_000, mean=3_000, var=10.0, seed=5)
    np.testing.assert_array_equal(again.X, stream.X)


def test_other_minority_levels_keep_the_schedules_segments() -> None:
    five = load_dataset("rbf-imbalanced:n=12000,mean=3000,var=10,levels=0.05;0.1;0.2;0.3", seed=5)
    paper = imbalance_schedule(12_000, 3_000, 10.0)
    mapping = dict(zip(IMBALANCE_LEVELS, (0.05, 0.1, 0.2, 0.3), strict=True))
    np.testing.assert_array_equal(five.meta["minority_share"], [mapping[v] for v in paper])
    assert five.meta["levels"] == (0.05, 0.1, 0.2, 0.3) and five.name.endswith("levels=0.05;0.1;0.2;0.3")
    rows = five.meta["minority_share"] == 0.05
    assert rows.any() and abs(float(np.mean(five.y[rows] == 1.0)) - 0.05) < 0.02
    with pytest.raises(ValueError, match="levels"):
        imbalance_schedule(100, levels=(0.1, 0.2, 0.3))
    with pytest.raises(ValueError, match="share"):
        imbalance_schedule(100, levels=(0.1, 1.5))
