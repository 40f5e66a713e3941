"""Tests of edgedrift.monitors: periodic/never triggers, DRUiD (paper and EdgeDrift), PredSign and the
error-driven river detectors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.optimize
import scipy.stats
from river import drift

from edgedrift.bounds import prediction_bounds
from edgedrift.data import sine1plus
from edgedrift.learners import SGD
from edgedrift.loop import EdgeLoop
from edgedrift.models.linear import LinearModel
from edgedrift.monitors import (
    DruidMonitor,
    DruidPaperMonitor,
    ErrorDrivenMonitor,
    Monitor,
    NeverMonitor,
    PeriodicMonitor,
    PredSignMonitor,
    chi_scale_mle,
)
from edgedrift.monitors.hooks import RestartHook, SelectionHook, UnlabeledHook, WarningHook
from edgedrift.training.linear import LinearTrainer, train_linear
from edgedrift.window import CountWindow


def logistic_stream(n: int, seed: int, flip_at: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """i.i.d. logistic samples with 3 differently scaled features; labels flip from ``flip_at`` on."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * np.array([1.0, 3.0, 0.5])
    p = 1.0 / (1.0 + np.exp(-(X @ np.array([1.0, -0.5, 2.0]) + 0.3)))
    y = np.where(rng.random(n) < p, 1.0, -1.0)
    if flip_at is not None:
        y[flip_at:] *= -1.0
    return X, y


def started(
    monitor: Monitor, X: np.ndarray, y: np.ndarray, W: int, C: float = 1.0, standardize: bool = False
) -> tuple[LinearModel, CountWindow]:
    """Train β₁ on the first W samples, fill a count window with them and reset the monitor."""
    model = train_linear(X[:W], y[:W], "logistic", C, eps=1e-10, standardize=standardize)
    window = CountWindow(W, X.shape[1])
    for i in range(W):
        window.push(X[i], float(y[i]))
    monitor.reset(model, X[:W], y[:W])
    return model, window


def feed(monitor: Monitor, window: CountWindow, x: np.ndarray, y: float, error: float = 0.0) -> None:
    n_evicted = window.push(x, y)
    monitor.update(x, y, error, window, n_evicted)


# --- periodic / never ----------------------------------------------------------------------------------


@pytest.mark.parametrize("period", [1, 3, 10])
def test_periodic_monitor_fires_exactly_every_period_labels(period: int) -> None:
    X, y = logistic_stream(100, seed=0)
    monitor = PeriodicMonitor(period)
    model, window = started(monitor, X, y, 10)
    fired = []
    for i in range(10, 100):
        feed(monitor, window, X[i], float(y[i]))
        if monitor.drift_detected:
            fired.append(i - 9)  # label number since start
            monitor.reset(model, *window.contents())  # what the loop does after the recompute
    assert fired == list(range(period, 91, period))
    assert monitor.n_detections == len(fired)
    assert not monitor.warning_detected


def test_periodic_monitor_rejects_a_zero_period() -> None:
    with pytest.raises(ValueError):
        PeriodicMonitor(0)


def test_never_monitor_never_fires() -> None:
    X, y = logistic_stream(2000, seed=1, flip_at=300)
    monitor = NeverMonitor()
    _, window = started(monitor, X, y, 50)
    for i in range(50, 2000):
        feed(monitor, window, X[i], float(y[i]), error=1.0)
        assert not monitor.drift_detected
        assert not monitor.warning_detected
    assert monitor.n_detections == 0
    assert not isinstance(monitor, UnlabeledHook | RestartHook | SelectionHook | WarningHook)


# --- χ scale ---------------------------------------------------------------------------------------------


def _tight_fmin(
    func: Callable[..., float], x0: np.ndarray, args: tuple[Any, ...] = (), disp: int = 0
) -> np.ndarray:
    """scipy's default optimizer for fit, with tolerances tight enough to compare at 1e-6."""
    xopt: np.ndarray = scipy.optimize.fmin(
        func, x0, args=args, disp=0, xtol=1e-12, ftol=1e-14, maxiter=20_000
    )
    return xopt


@pytest.mark.parametrize("df", [1, 2, 3, 5, 8])
def test_chi_scale_mle_equals_scipy_fit_with_fixed_df(df: int) -> None:
    rng = np.random.default_rng(df)
    v = scipy.stats.chi.rvs(df, scale=2.5, size=300, random_state=rng)
    ours = chi_scale_mle(v, df)
    fdf, loc, scale = scipy.stats.chi.fit(v, fdf=df, floc=0, optimizer=_tight_fmin)
    assert (fdf, loc) == (df, 0)
    assert ours == pytest.approx(scale, rel=1e-6)
    # Also against scipy's default optimizer, at its own precision.
    assert ours == pytest.approx(scipy.stats.chi.fit(v, fdf=df, floc=0)[2], rel=1e-4)


def test_chi_fit_with_free_df_is_a_different_estimate() -> None:
    """chi.fit(v, df, floc=0) treats df as a starting guess only and fits it too."""
    rng = np.random.default_rng(0)
    v = np.abs(rng.normal(size=200)) * 3.0 + 1.0  # not χ-distributed: the free fit moves df
    df = 3
    free_df, _, free_scale = scipy.stats.chi.fit(v, df, floc=0)
    assert abs(free_df - df) > 0.1
    assert abs(free_scale - chi_scale_mle(v, df)) > 0.05 * chi_scale_mle(v, df)


# --- DruidPaperMonitor --------------------------------------------------------------------------------


def delta_g_norms(model: LinearModel, X: np.ndarray, y: np.ndarray, W: int, steps: int) -> np.ndarray:
    """‖Δg‖ after each of ``steps`` new labels into a window of W, from scratch: Σ gradients of the new
    samples still in the window − Σ gradients of β₁'s training samples that have left it."""
    G = model.gradients(X[: W + steps], y[: W + steps])
    out = np.empty(steps)
    for t in range(1, steps + 1):
        added = G[W + max(0, t - W) : W + t].sum(axis=0)
        removed = G[: min(t, W)].sum(axis=0)
        out[t - 1] = np.linalg.norm(added - removed)
    return out


@pytest.mark.parametrize("alpha", [0.5, 0.95])
@pytest.mark.parametrize("standardize", [False, True])
def test_druid_paper_monitor_follows_algorithm_1(alpha: float, standardize: bool) -> None:
    W, N, t_n, steps = 60, 40, 15, 400
    X, y = logistic_stream(W + steps, seed=2, flip_at=W + 150)
    monitor = DruidPaperMonitor(alpha, n_fit=N, t_n=t_n)
    model, window = started(monitor, X, y, W, standardize=standardize)
    assert (model.scaler is not None) == standardize
    norms = delta_g_norms(model, X, y, W, steps)
    threshold = chi_scale_mle(norms[: N - 1], 3) * scipy.stats.chi.ppf(alpha, 3)
    run = 0
    n_drift = 0
    saw_warning_clear = False
    for t in range(1, steps + 1):
        i = W + t - 1
        feed(monitor, window, X[i], float(y[i]))
        assert float(np.linalg.norm(monitor.delta_g.vec)) == pytest.approx(norms[t - 1], rel=1e-9, abs=1e-9)
        if t < N:
            # No test before N labels, however large ‖Δg‖ is.
            assert monitor.threshold == np.inf
            assert not monitor.warning_detected
            assert not monitor.drift_detected
            continue
        assert monitor.threshold == pytest.approx(threshold, rel=1e-12)
        run = run + 1 if norms[t - 1] > threshold else 0
        assert monitor.num_warnings == run
        assert monitor.warning_detected == (norms[t - 1] > threshold)
        assert monitor.drift_detected == (run > t_n)
        n_drift += int(run > t_n)
        if t < steps and 0 < run <= t_n and norms[t] <= threshold:
            saw_warning_clear = True
    assert n_drift > 0  # the label flip drives ‖Δg‖ above the threshold for good
    assert monitor.n_detections == n_drift
    assert run > t_n
    if alpha == 0.5 and not standardize:
        assert saw_warning_clear  # runs of exceedances that end before T_N reset the count


def test_druid_paper_monitor_threshold_uses_df_override() -> None:
    W, N = 50, 30
    X, y = logistic_stream(W + N, seed=3)
    monitor = DruidPaperMonitor(0.9, n_fit=N, df=7)
    model, window = started(monitor, X, y, W)
    for i in range(W, W + N):
        feed(monitor, window, X[i], float(y[i]))
    norms = delta_g_norms(model, X, y, W, N)
    expected = chi_scale_mle(norms[: N - 1], 7) * scipy.stats.chi.ppf(0.9, 7)
    assert monitor.threshold == pytest.approx(expected, rel=1e-12)
    assert monitor.t_n == N


def test_druid_paper_monitor_rejects_bad_alpha() -> None:
    for alpha in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError):
            DruidPaperMonitor(alpha)


def test_druid_paper_monitor_in_the_loop_recomputes_only_after_the_drift() -> None:
    """Sine1 (seed 0), every sample labeled, window 100: the first concept change is at 10,000."""
    stream = sine1plus(seed=0, n_concepts=2)  # the first 20,000 samples of sine1plus(seed=0)
    drift_at = stream.drift_points[0]
    assert drift_at == 10_000
    W = 100
    trainer = LinearTrainer(loss="logistic", C=10.0)
    monitor = DruidPaperMonitor(0.99, n_fit=W)
    loop = EdgeLoop(CountWindow(W, 2), monitor, trainer, SGD(2, lr=0.1), predict_with="monitor")
    loop.start(trainer(stream.X[:W], stream.y[:W]), stream.X[:W], stream.y[:W])
    recomputed_at: list[int] = []
    incremental_before_first = 0
    for i in range(W, len(stream)):
        before = loop.counters.recomputes
        if not recomputed_at and loop.uses_incremental():
            incremental_before_first += 1
        loop.process_one(stream.X[i], float(stream.y[i]))
        if loop.counters.recomputes > before:
            recomputed_at.append(i)
    assert recomputed_at, "no recompute after the concept change"
    first = recomputed_at[0]
    # Not before the drift, and only after more than T_N = 100 consecutive exceedances.
    assert drift_at + W < first <= drift_at + 3 * W
    # After the recompute the monitor starts over and the new model fits the flipped concept.
    assert loop.model is not None
    tail = slice(first + 1, len(stream))
    assert np.mean(loop.model.predict(stream.X[tail]) == stream.y[tail]) > 0.7
    # While the exceedances ran, Algorithm 1 predicted with the incremental model.
    assert incremental_before_first >= W


# --- DruidMonitor ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.9, 0.99])
def test_druid_monitor_is_calibrated_on_a_stationary_stream(alpha: float) -> None:
    """Without drift the per-label exceedance rate is close to 1 − α (pooled over many first windows:
    the rate of one run depends strongly on how well β₁ happened to fit its own window)."""
    W, L, runs = 100, 600, 100
    exceed = tests = 0
    for seed in range(runs):
        X, y = logistic_stream(W + L, seed=1000 + seed)
        monitor = DruidMonitor(alpha=alpha, t_n=10**9)
        _, window = started(monitor, X, y, W)
        for i in range(W, W + L):
            feed(monitor, window, X[i], float(y[i]))
        assert not monitor.drift_detected
        exceed += monitor.n_exceedances
        tests += monitor.n_tests
    assert tests == runs * (L - monitor.min_labels + 1)
    rate = exceed / tests
    assert (1 - alpha) / 2 <= rate <= 2 * (1 - alpha)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_druid_monitor_detects_an_abrupt_label_flip(seed: int) -> None:
    W, t_n, before, after = 100, 50, 500, 500
    flip = W + before
    X, y = logistic_stream(W + before + after, seed=seed, flip_at=flip)
    monitor = DruidMonitor(alpha=0.99, t_n=t_n)
    _, window = started(monitor, X, y, W)
    detected = None
    for i in range(W, len(y)):
        feed(monitor, window, X[i], float(y[i]))
        if monitor.drift_detected:
            detected = i
            break
        assert monitor.num_warnings < t_n
    assert detected is not None
    # Not before the flip; at least T_N labels after it and within the window + 50 labels.
    assert flip + t_n - 1 <= detected <= flip + W + 50
    assert monitor.warning_detected
    assert monitor.num_warnings == t_n


def test_druid_monitor_restart_trains_on_the_run_of_exceedances() -> None:
    W = 100
    X, y = logistic_stream(W + 400, seed=5, flip_at=W + 200)
    plain, restart = DruidMonitor(t_n=30), DruidMonitor(t_n=30, restart=True)
    _, w1 = started(plain, X, y, W)
    _, w2 = started(restart, X, y, W)
    for i in range(W, len(y)):
        feed(plain, w1, X[i], float(y[i]))
        feed(restart, w2, X[i], float(y[i]))
        if restart.drift_detected:
            break
    assert plain.train_on_last() is None
    assert restart.train_on_last() == max(restart.num_warnings, restart.min_labels) == 30


def test_druid_monitor_rejects_bad_alpha() -> None:
    for alpha in (0.0, 1.0):
        with pytest.raises(ValueError):
            DruidMonitor(alpha=alpha)


# --- PredSign ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("standardize", [False, True])
def test_predsign_counts_sign_disagreements_of_the_lemma_1_bounds(standardize: bool) -> None:
    W, steps, t_d = 80, 400, 40
    X, y = logistic_stream(W + steps, seed=6, flip_at=W + 100)
    monitor = PredSignMonitor(t_d)
    model, window = started(monitor, X, y, W, standardize=standardize)
    rng = np.random.default_rng(7)
    expected = 0
    fired_at = None
    checked_containment = 0
    for i in range(W, W + steps):
        feed(monitor, window, X[i], float(y[i]))
        # r = ½(β₁ + C Σ_{current window} ∇ℓ(β₁)), i.e. eq. (2) corrected for β₁'s optimality residual.
        Xw, yw = window.contents()
        r = 0.5 * (model.beta + model.C * model.gradient_sum(Xw, yw))
        for _ in range(3):
            u = rng.normal(size=3) * np.array([1.0, 3.0, 0.5])
            L, U = prediction_bounds(model.augment(u), model.beta, r)
            disagree = bool(np.sign(L[0]) != np.sign(U[0]))
            drift_before = monitor.drift_detected
            monitor.update_unlabeled(u)
            expected += int(disagree)
            assert monitor.n_disagree == expected
            if expected:
                assert monitor.warning_detected
            assert monitor.drift_detected == (drift_before or expected > t_d)
            if fired_at is None and monitor.drift_detected:
                fired_at = expected
        if i % 50 == 0:
            # The bounds do bound the score of the model retrained on the current window.
            # (β₂ in β₁'s training space: same frozen scaler as β₁.)
            Zw = Xw if model.scaler is None else (Xw - model.scaler.mean) / model.scaler.scale
            beta2 = train_linear(Zw, yw, "logistic", model.C, eps=1e-12).beta
            Xa = model.augment(X[:50])
            L, U = prediction_bounds(Xa, model.beta, r)
            z2 = Xa @ beta2
            assert np.all(z2 >= L - 1e-6)
            assert np.all(z2 <= U + 1e-6)
            checked_containment += 1
    assert checked_containment > 0
    assert fired_at == t_d + 1
    assert monitor.n_detections >= 1


def test_predsign_without_labels_since_reset_never_disagrees() -> None:
    """Right after a reset on the model's own window, r is the (tiny) optimality residual only."""
    W = 100
    X, y = logistic_stream(W, seed=8)
    monitor = PredSignMonitor(0)
    started(monitor, X, y, W)
    rng = np.random.default_rng(9)
    for _ in range(300):
        monitor.update_unlabeled(rng.normal(size=3) * np.array([1.0, 3.0, 0.5]) * 0.1)
    assert monitor.n_disagree <= 3  # only scores within ~1e-6 of 0 could straddle
    assert monitor.n_disagree == 0 or monitor.drift_detected


def test_predsign_rejects_negative_threshold() -> None:
    with pytest.raises(ValueError):
        PredSignMonitor(-1)


# --- error-driven (river) ----------------------------------------------------------------------------------


def error_stream(seed: int = 0, n_low: int = 1000, n_high: int = 1000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.random(n_low) < 0.05, rng.random(n_high) < 0.6]).astype(float)


@pytest.mark.parametrize(
    ("detector", "level", "check_before"),
    [("ddm", 3.0, True), ("eddm", 0.95, False), ("adwin", 0.002, True)],
)
def test_error_driven_monitor_fires_after_the_error_jump(
    detector: str, level: float, check_before: bool
) -> None:
    errors = error_stream()
    monitor = ErrorDrivenMonitor(detector, level)  # type: ignore[arg-type]
    assert monitor.name == f"{detector}-batch"
    window = CountWindow(10, 2)
    detections = []
    for i, e in enumerate(errors):
        monitor.update(np.zeros(2), 1.0, float(e), window, 0)
        if monitor.drift_detected:
            detections.append(i)
            monitor.reset(None, np.zeros((0, 2)), np.zeros(0))  # type: ignore[arg-type]
    after = [i for i in detections if i >= 1000]
    assert after and after[0] < 1000 + 200
    if check_before:
        assert not [i for i in detections if i < 1000]
    assert monitor.n_detections == len(detections)


def test_error_driven_ddm_trains_on_the_samples_since_the_warning() -> None:
    errors = error_stream()
    monitor = ErrorDrivenMonitor("ddm", 3.0)
    # Oracle: a river DDM with the paper's levels for α = 3 (warning 2, drift 3) on the same errors.
    oracle = drift.binary.DDM(warning_threshold=2.0, drift_threshold=3.0)
    window = CountWindow(10, 2)
    run_start = None
    checked = 0
    for i, e in enumerate(errors):
        monitor.update(np.zeros(2), 1.0, float(e), window, 0)
        oracle.update(float(e))
        flagged = oracle.warning_detected or oracle.drift_detected
        if flagged and run_start is None:
            run_start = i
        elif not flagged:
            run_start = None
        assert monitor.warning_detected == oracle.warning_detected
        if monitor.drift_detected:
            assert run_start is not None
            assert monitor.train_on_last() == i - run_start + 1
            checked += 1
            break
    assert checked == 1
    # A warning that cleared before the jump (there is one in this stream) did not count.
    assert run_start is not None and run_start >= 1000


def test_error_driven_train_on_last_has_a_minimum_and_adwin_uses_the_window() -> None:
    assert ErrorDrivenMonitor("ddm", 3.0, min_train=25).train_on_last() == 25
    assert ErrorDrivenMonitor("eddm", 0.95).train_on_last() == 1
    assert ErrorDrivenMonitor("adwin", 0.002).train_on_last() is None
    with pytest.raises(ValueError):
        ErrorDrivenMonitor("kswin", 0.1)  # type: ignore[arg-type]


def test_error_driven_paper_levels() -> None:
    from edgedrift.monitors.error_driven import paper_ddm_levels, paper_eddm_levels

    assert paper_ddm_levels(3.0) == (2.0, 3.0)
    assert paper_ddm_levels(0.5) == (0.5, 0.5)
    assert paper_eddm_levels(0.95) == pytest.approx((0.95, 0.9))
    assert paper_eddm_levels(0.01) == (0.01, 0.01)
