"""The vectorised batch path agrees with the per-sample path it stands for."""

from __future__ import annotations

import numpy as np
import pytest

from edgedrift.data import sine1plus
from edgedrift.learners import SGD, AdaptiveSGD, EWStandardizer, ForgettingNewton, Perceptron
from edgedrift.loop import EdgeLoop
from edgedrift.monitors import DruidMonitor, PeriodicMonitor, PredSignMonitor
from edgedrift.training.linear import LinearTrainer, train_linear
from edgedrift.window import CountWindow, TimeWindow


@pytest.mark.parametrize("k", [1, 3, 7, 12, 25])
def test_count_window_push_many_equals_sequential_pushes(k: int) -> None:
    rng = np.random.default_rng(k)
    X, y = rng.normal(size=(40, 3)), rng.normal(size=40)
    a, b = CountWindow(10, 3), CountWindow(10, 3)
    for i in range(6):
        a.push(X[i], y[i])
        b.push(X[i], y[i])
    evicted = []
    for i in range(6, 6 + k):
        if a.push(X[i], y[i]):
            evicted.append(a.evicted_y[0])
    n = b.push_many(X[6 : 6 + k], y[6 : 6 + k])
    assert n == len(evicted)
    np.testing.assert_array_equal(b.evicted_y[:n], evicted)
    np.testing.assert_array_equal(a.contents()[0], b.contents()[0])


def test_time_window_push_many_keeps_the_same_samples() -> None:
    rng = np.random.default_rng(1)
    ts = np.sort(rng.uniform(0, 10, 50))
    X, y = rng.normal(size=(50, 1)), rng.normal(size=50)
    a, b = TimeWindow(2.0, 1, initial_capacity=2), TimeWindow(2.0, 1, initial_capacity=2)
    evicted: list[float] = []
    for i in range(50):
        n_out = a.push(X[i], y[i], ts[i])
        evicted.extend(a.evicted_y[:n_out])
    n = b.push_many(X[:20], y[:20], ts[:20])
    n += b.push_many(X[20:], y[20:], ts[20:])
    assert n == len(evicted)
    np.testing.assert_array_equal(a.contents()[1], b.contents()[1])


def test_ew_standardizer_batch_update_equals_sequential() -> None:
    X = np.random.default_rng(2).normal(size=(400, 3)) * [1.0, 10.0, 100.0] + [0.0, 5.0, -3.0]
    a, b = EWStandardizer(3, 0.05), EWStandardizer(3, 0.05)
    for x in X:
        a.update(x)
    for chunk in np.array_split(X, [7, 150, 151]):
        b.update_many(chunk)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-10)
    np.testing.assert_allclose(a.var, b.var, rtol=1e-10)


def test_druid_batch_statistics_match_the_per_sample_path() -> None:
    s = sine1plus(concept_length=3000, n_concepts=3, seed=1)
    X, y = s.X[::10], s.y[::10]
    model = train_linear(X[:100], y[:100], C=10.0)

    def make() -> tuple[DruidMonitor, CountWindow]:
        mon, win = DruidMonitor(alpha=0.99, t_n=30, refresh=1), CountWindow(100, 2)
        for i in range(100):
            win.push(X[i], y[i])
        mon.reset(model, X[:100], y[:100])
        return mon, win

    a, wa = make()
    b, wb = make()
    for i in range(100, 800):
        a.update(X[i], y[i], 0.0, wa, wa.push(X[i], y[i]))
    for j in range(100, 800, 37):
        Xb, yb = X[j : min(j + 37, 800)], y[j : min(j + 37, 800)]
        b.update_many(Xb, yb, np.zeros(len(yb)), wb, wb.push_many(Xb, yb))
    np.testing.assert_allclose(a.delta_g.vec, b.delta_g.vec, atol=1e-9)
    np.testing.assert_allclose(a.delta_g.robust, b.delta_g.robust, atol=1e-9)
    assert a.n_tests == b.n_tests
    # The pooled covariance is refreshed at different label counts in the two paths.
    assert abs(a.n_exceedances - b.n_exceedances) <= 0.02 * a.n_tests
    assert a.statistic == pytest.approx(b.statistic, rel=0.05)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ForgettingNewton(5, forgetting=0.95, prior=0.1),
        lambda: SGD(5, lr=0.05),
        lambda: AdaptiveSGD(5, lr=0.1),
        lambda: Perceptron(5),
    ],
)
def test_mini_batch_learners_learn_as_well_as_sequential(make: object) -> None:
    rng = np.random.default_rng(0)
    n = 4000
    X = rng.random((n, 5))
    w = np.array([4.0, -3.0, 2.0, 1.0, 0.5, -1.0])
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-(X @ w[:-1] + w[-1]))), 1.0, -1.0)
    seq, bat = make(), make()  # type: ignore[operator]
    acc_seq = acc_bat = 0
    for i in range(n):
        acc_seq += seq.predict_one(X[i]) == y[i]
        seq.learn_one(X[i], y[i])
    for j in range(0, n, 100):
        acc_bat += int((bat.predict_many(X[j : j + 100]) == y[j : j + 100]).sum())
        bat.learn_many(X[j : j + 100], y[j : j + 100])
    assert bat.n_learned == n
    assert acc_bat / n >= acc_seq / n - 0.05
    assert acc_bat / n > 0.68  # the Bayes rate of this stream is about 0.78; chance is 0.5


def test_process_many_counts_predicts_and_recomputes() -> None:
    s = sine1plus(concept_length=2000, n_concepts=3, seed=3)
    trainer = LinearTrainer(C=10.0)
    loop = EdgeLoop(CountWindow(50, 2), PeriodicMonitor(40), trainer)
    X0, y0 = s.X[:500:10], s.y[:500:10]
    loop.start(trainer(X0, y0), X0, y0)
    y = np.where(np.arange(len(s)) % 10 == 0, s.y, np.nan)
    preds = [loop.process_many(s.X[j : j + 100], y[j : j + 100]) for j in range(500, len(s), 100)]
    assert loop.counters.samples == len(s) - 500
    assert loop.counters.labeled == 550
    assert loop.counters.recomputes == 550 // 40
    assert np.mean(np.concatenate(preds) == s.y[500:]) > 0.6


def test_predsign_counts_disagreements_in_a_batch_like_one_by_one() -> None:
    s = sine1plus(concept_length=3000, n_concepts=2, seed=4)
    model = train_linear(s.X[:1000:10], s.y[:1000:10], C=1.0)
    a, b = PredSignMonitor(10**9), PredSignMonitor(10**9)
    for m in (a, b):
        m.reset(model, s.X[:1000:10], s.y[:1000:10])
        for i in range(3000, 3400, 10):
            m.delta_g.add(s.X[i], s.y[i])
        m._refresh()
    for x in s.X[3400:4000]:
        a.update_unlabeled(x)
    b.update_unlabeled_many(s.X[3400:4000])
    assert a.n_disagree == b.n_disagree > 0
