"""The estimator contract (see tests/support/contract.py for the checks' list): the strategies."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from support.contract import (
    BATCH_SIZES,
    CASES,
    EXTREMES,
    N0,
    PARAMS,
    QUIET_AFTER_SNAPSHOT,
    STREAMS,
    D,
    Kind,
    assert_predictions_equal,
    batch_feed,
    batch_state,
    build,
    contents,
    jsonable,
    learner_state,
    probe,
    reattach,
    restore,
    run,
    stats_json,
    warm_loop,
)

from edgedrift.monitors import (
    NeverMonitor,
)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the extreme samples overflow on purpose


@pytest.fixture(params=CASES, ids=[f"{n}-{t[:3]}" for n, t in CASES])
def case(request: pytest.FixtureRequest) -> tuple[str, Kind]:
    name, task = request.param
    return str(name), task


def test_strategy_snapshot_round_trip(case: tuple[str, Kind]) -> None:
    name, task = case
    loop = build(name, task)
    list(run(loop, task, N0, 400))
    restored = restore(loop)
    assert restored.recompute_fn is None
    restored.recompute_fn = reattach(loop.recompute_fn, restored)
    assert contents(restored) == contents(loop)
    X = probe(task)
    np.testing.assert_array_equal(restored.predict_many(X), loop.predict_many(X))
    before = loop.counters.recomputes
    for a, b in zip(run(loop, task, 400, 1000), run(restored, task, 400, 1000), strict=True):
        assert a == b
    assert contents(restored) == contents(loop)
    assert restored.counters == loop.counters
    if name in PARAMS and name not in QUIET_AFTER_SNAPSHOT:
        assert loop.counters.recomputes > before, "no recompute happened after the restore"


def test_strategy_predict_many_equals_predict_one(case: tuple[str, Kind]) -> None:
    name, task = case
    loop = warm_loop(name, task)
    X = probe(task)
    assert_predictions_equal(loop.predict_many(X), np.array([loop.predict_one(x) for x in X]), task)


@pytest.mark.parametrize("batch", BATCH_SIZES)
def test_strategy_batches_predict_exactly_as_process_one(case: tuple[str, Kind], batch: int) -> None:
    """Per-sample semantics: a stream fed in batches through process_many gives process_one's predictions,
    recomputes (mid-batch ones included) and state."""
    name, task = case
    seq, bat = warm_loop(name, task), warm_loop(name, task)
    X, y = batch_feed(task)
    expected = np.array([seq.process_one(x, None if v != v else float(v)) for x, v in zip(X, y, strict=True)])
    got = np.concatenate(
        [bat.process_many(X[j : j + batch], y[j : j + batch]) for j in range(0, len(y), batch)]
    )
    np.testing.assert_array_equal(got, expected)
    assert bat.counters == seq.counters
    assert [e.sample for e in bat.events] == [e.sample for e in seq.events]
    assert batch_state(bat) == batch_state(seq)


def test_strategy_learn_many_learns_exactly_as_learn_one(case: tuple[str, Kind]) -> None:
    name, task = case
    seq, bat = warm_loop(name, task), warm_loop(name, task)
    X, y = batch_feed(task)
    labeled = ~np.isnan(y)
    X, y = X[labeled], y[labeled]
    for x, v in zip(X, y, strict=True):
        seq.learn_one(x, float(v))
    for j in range(0, len(y), 10):
        bat.learn_many(X[j : j + 10], y[j : j + 10])
    assert bat.counters == seq.counters
    assert batch_state(bat) == batch_state(seq)
    np.testing.assert_array_equal(bat.predict_many(probe(task)), seq.predict_many(probe(task)))


def test_strategy_vectorised_batch_path_predicts_with_the_batch_start_state(case: tuple[str, Kind]) -> None:
    """The opt-in mini-batch path: every sample of a batch is predicted with the state at its start."""
    name, task = case
    s = STREAMS[task]
    seq, bat = warm_loop(name, task), warm_loop(name, task)
    y = np.where(np.arange(400, 500) % 3 == 2, np.nan, s.y[400:500])
    first = bat.predict_many(s.X[400:420])
    preds = bat.process_many_vectorised(s.X[400:420], y[:20])
    np.testing.assert_array_equal(preds, first)
    bat.process_many_vectorised(s.X[420:500], y[20:])
    for i in range(400, 500):
        seq.process_one(s.X[i], None if np.isnan(y[i - 400]) else float(y[i - 400]))
    assert (bat.counters.samples, bat.counters.labeled) == (seq.counters.samples, seq.counters.labeled)
    stats_json(bat.monitor)


def test_strategy_extreme_samples(case: tuple[str, Kind]) -> None:
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
