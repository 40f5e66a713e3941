"""The estimator contract (see tests/support/contract.py for the checks' list): the monitors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from support.contract import (
    EXTREME_LABELS,
    EXTREMES,
    MONITORS,
    N0,
    D,
    constructor_params,
    contents,
    drive,
    jsonable,
    monitor_loop,
    restore,
    run,
    same,
    started,
    stats_json,
)

from edgedrift.monitors import (
    DruidMonitor,
    Monitor,
    NeverMonitor,
    PredSignMonitor,
)
from edgedrift.monitors.hooks import UnlabeledHook

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the extreme samples overflow on purpose


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


def test_monitor_clone_is_a_fresh_monitor_with_the_same_parameters(monitor_name: str) -> None:
    loop, task = monitor_loop(monitor_name)
    list(run(loop, task, N0, 400))
    clone, fresh = loop.monitor.clone(), MONITORS[monitor_name][0]()
    a, b = constructor_params(clone), constructor_params(fresh)
    assert type(clone) is type(fresh) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    assert contents(clone) == contents(fresh)


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
    unlabeled = monitor if isinstance(monitor, UnlabeledHook) else None
    a, b = EXTREME_LABELS[MONITORS[monitor_name][1]][:2]
    for value in EXTREMES:
        x = np.full(D, value)
        if unlabeled is not None:
            unlabeled.update_unlabeled(x)
        monitor.update(x, a, 1.0, window, window.push(x, a))
        monitor.update(x, b, math.inf, window, window.push(x, b))
        monitor.update(x, a, math.nan, window, window.push(x, a))
    bad = np.vstack([np.full(D, v) for v in EXTREMES])
    if unlabeled is not None:
        unlabeled.update_unlabeled_many(bad)
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
