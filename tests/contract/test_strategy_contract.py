"""The estimator contract (see tests/support/contract.py for the checks' list): the strategies."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from support.contract import (
    CASES,
    EXTREMES,
    N0,
    PARAMS,
    STREAMS,
    D,
    Kind,
    assert_predictions_equal,
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
    if name in PARAMS:
        assert loop.counters.recomputes > before, "no recompute happened after the restore"


def test_strategy_predict_many_equals_predict_one(case: tuple[str, Kind]) -> None:
    name, task = case
    loop = warm_loop(name, task)
    X = probe(task)
    assert_predictions_equal(loop.predict_many(X), np.array([loop.predict_one(x) for x in X]), task)


def test_strategy_batch_path_predicts_with_the_batch_start_state(case: tuple[str, Kind]) -> None:
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
