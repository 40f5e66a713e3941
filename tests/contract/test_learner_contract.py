"""The estimator contract (see tests/support/contract.py for the checks' list): the learners."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from support.contract import (
    EXACT_BATCH,
    EXTREME_LABELS,
    EXTREMES,
    LEARNERS,
    MONITORS,
    N0,
    STREAMS,
    D,
    Kind,
    assert_predictions_equal,
    constructor_params,
    contents,
    feed,
    learner_state,
    probe,
    restore,
    same,
)

from edgedrift import learners, monitors
from edgedrift.learners import ShrubEnsemble

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the extreme samples overflow on purpose


@pytest.fixture(params=sorted(LEARNERS))
def learner_case(request: pytest.FixtureRequest) -> tuple[Callable[[], Any], Kind]:
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


def test_clone_equals_a_fresh_instance(learner_case: tuple[Callable[[], Any], Kind]) -> None:
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


def test_snapshot_round_trip_continues_identically(learner_case: tuple[Callable[[], Any], Kind]) -> None:
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


def test_predict_many_equals_predict_one(learner_case: tuple[Callable[[], Any], Kind]) -> None:
    factory, task = learner_case
    learner = factory()
    X = probe(task)
    assert_predictions_equal(learner.predict_many(X), np.array([learner.predict_one(x) for x in X]), task)
    feed(learner, task, N0, 400)
    assert_predictions_equal(learner.predict_many(X), np.array([learner.predict_one(x) for x in X]), task)


def test_batch_path(learner_case: tuple[Callable[[], Any], Kind]) -> None:
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


def test_extreme_samples_leave_the_state_finite(learner_case: tuple[Callable[[], Any], Kind]) -> None:
    factory, task = learner_case
    s = STREAMS[task]
    learner = factory()
    feed(learner, task, N0, 200)
    labels = EXTREME_LABELS[task]
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
