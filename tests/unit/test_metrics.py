"""edgedrift.metrics against river.metrics, hand-computed cases, naive loops and degenerate inputs."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from numpy.typing import NDArray
from river import metrics as rm
from river import utils as ru

from edgedrift.metrics import (
    ConfusionMatrix,
    classification_report,
    downsample_curve,
    majority_predictions,
    no_change_predictions,
    regression_report,
    windowed_accuracy,
    windowed_kappa,
    windowed_rmse,
)

TOL = 1e-9
CLASSIFICATION_KEYS = {
    *("accuracy", "kappa", "kappa_t", "kappa_m", "balanced_accuracy", "f1", "macro_f1", "mcc", "n")
}


@pytest.fixture(autouse=True)
def _no_warnings() -> Iterator[None]:
    """Every test runs with warnings as errors and numpy floating-point errors raised. What the garbage
    collector finds of earlier tests (an unclosed socket, reported by pytest as an unraisable exception)
    stays a warning: it is not this module's."""
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        warnings.simplefilter("default", pytest.PytestUnraisableExceptionWarning)
        yield


def _binary_stream(
    seed: int, n: int = 3000, p_pos: float = 0.5, acc: float = 0.8
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """y_true as int ±1, y_pred as float ±1 (right with probability acc)."""
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < p_pos, 1, -1).astype(np.int64)
    flip = rng.random(n) >= acc
    y_pred = np.where(flip, -y, y).astype(np.float64)
    return y, y_pred


def _river(metric: rm.base.Metric, y_true: NDArray[np.generic], y_pred: NDArray[np.generic]) -> float:
    for t, p in zip(y_true.tolist(), y_pred.tolist(), strict=True):
        metric.update(t, p)
    return float(metric.get())


# --------------------------------------------------------------------------------------------------
# classification_report vs river
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seed", "p_pos", "acc"), [(0, 0.5, 0.8), (1, 0.2, 0.9), (2, 0.85, 0.6), (3, 0.5, 0.3), (4, 0.05, 0.97)]
)
def test_classification_report_matches_river(seed: int, p_pos: float, acc: float) -> None:
    y, y_pred = _binary_stream(seed, p_pos=p_pos, acc=acc)
    rep = classification_report(y, y_pred)
    yp = y_pred.astype(np.int64)
    assert set(rep) == CLASSIFICATION_KEYS
    assert rep["n"] == len(y)
    assert rep["accuracy"] == pytest.approx(_river(rm.Accuracy(), y, yp), abs=TOL)
    assert rep["kappa"] == pytest.approx(_river(rm.CohenKappa(), y, yp), abs=TOL)
    assert rep["balanced_accuracy"] == pytest.approx(_river(rm.BalancedAccuracy(), y, yp), abs=TOL)
    assert rep["f1"] == pytest.approx(_river(rm.F1(pos_val=1), y, yp), abs=TOL)
    assert rep["mcc"] == pytest.approx(_river(rm.MCC(pos_val=1), y, yp), abs=TOL)
    assert math.isnan(rep["kappa_t"])  # no y_nochange given


def test_kappa_m_and_kappa_t_match_their_definition_on_random_data() -> None:
    y, y_pred = _binary_stream(7, p_pos=0.3, acc=0.75)
    mask = np.random.default_rng(8).random(len(y)) < 0.1
    y_nc = no_change_predictions(y, mask)
    rep = classification_report(y, y_pred, y_nochange=y_nc)
    acc = float(np.mean(y == y_pred))
    p_maj = max(np.mean(y == 1), np.mean(y == -1))
    p_nc = float(np.mean(y == y_nc))
    assert rep["kappa_m"] == pytest.approx((acc - p_maj) / (1 - p_maj), abs=TOL)
    assert rep["kappa_t"] == pytest.approx((acc - p_nc) / (1 - p_nc), abs=TOL)


# --------------------------------------------------------------------------------------------------
# Hand-computed small cases
# --------------------------------------------------------------------------------------------------

Y8 = np.array([1, 1, -1, -1, 1, 1, -1, 1])
P8 = np.array([1.0, 1.0, -1.0, 1.0, 1.0, 1.0, -1.0, -1.0])  # TP 4, FN 1, FP 1, TN 2


def test_classification_report_hand_computed() -> None:
    nochange = no_change_predictions(Y8)
    np.testing.assert_array_equal(nochange, [1, 1, 1, -1, -1, 1, 1, -1])  # p_nc = 4/8
    rep = classification_report(Y8, P8, y_nochange=nochange)
    assert rep["n"] == 8
    assert rep["accuracy"] == pytest.approx(6 / 8, abs=TOL)
    assert rep["kappa_t"] == pytest.approx((0.75 - 0.5) / (1 - 0.5), abs=TOL)  # 0.5
    assert rep["kappa_m"] == pytest.approx((0.75 - 5 / 8) / (1 - 5 / 8), abs=TOL)  # 1/3
    assert rep["kappa"] == pytest.approx(7 / 15, abs=TOL)  # p_e = (5·5 + 3·3)/64
    assert rep["mcc"] == pytest.approx((4 * 2 - 1 * 1) / math.sqrt(5 * 5 * 3 * 3), abs=TOL)
    assert rep["f1"] == pytest.approx(2 * 4 / (2 * 4 + 1 + 1), abs=TOL)
    assert rep["balanced_accuracy"] == pytest.approx((4 / 5 + 2 / 3) / 2, abs=TOL)


def test_kappa_t_negative_when_worse_than_no_change() -> None:
    y = np.array([1, 1, 1, 1, -1, -1, -1, -1])
    y_nc = no_change_predictions(y)  # [1, 1, 1, 1, 1, -1, -1, -1]: 7/8 right
    y_pred = -y_nc  # 1/8 right
    rep = classification_report(y, y_pred, y_nochange=y_nc)
    assert rep["kappa_t"] == pytest.approx((1 / 8 - 7 / 8) / (1 - 7 / 8), abs=TOL)  # −6


def test_regression_report_hand_computed() -> None:
    y = np.array([1.0, 2.0, 3.0, 4.0])
    yh = np.array([1.5, 2.0, 2.0, 5.0])  # |e| = .5, 0, 1, 1; |y − ȳ| = 1.5, .5, .5, 1.5
    rep = regression_report(y, yh)
    assert rep == pytest.approx(
        {"mse": 0.5625, "rmse": 0.75, "mae": 0.625, "rae": 2.5 / 4.0, "r2": 1 - 2.25 / 5.0, "n": 4.0},
        abs=TOL,
    )


def test_no_change_predictions_hand_computed() -> None:
    mask = np.array([True, False, False, True, False, False, True, False])
    np.testing.assert_array_equal(no_change_predictions(Y8, mask), [1, 1, 1, 1, -1, -1, -1, -1])
    np.testing.assert_array_equal(no_change_predictions(Y8, np.zeros(8, dtype=bool)), np.ones(8))
    np.testing.assert_array_equal(no_change_predictions([-1, 1, -1]), [1, -1, 1])


def test_majority_predictions_hand_computed() -> None:
    mask = np.array([True, False, False, True, False, False, True, False])
    # labels known before i: {+1} from i=1, {+1,−1} (tie → +1) from i=4, {+1,−1,−1} at i=7.
    np.testing.assert_array_equal(majority_predictions(Y8, mask), [1, 1, 1, 1, 1, 1, 1, -1])
    y = np.array([-1, -1, 1, 1, 1, -1, -1, -1])
    np.testing.assert_array_equal(majority_predictions(y), [1, -1, -1, -1, 1, 1, 1, -1])


def test_unlabelled_samples_are_never_read() -> None:
    y = np.array([1.0, np.nan, -1.0, np.nan, np.nan])
    mask = ~np.isnan(y)
    np.testing.assert_array_equal(no_change_predictions(y, mask), [1, 1, 1, -1, -1])
    np.testing.assert_array_equal(majority_predictions(y, mask), [1, 1, 1, 1, 1])
    with pytest.raises(ValueError, match="-1, \\+1"):
        no_change_predictions(y)  # NaN labels when every sample counts as labelled


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reference_predictions_match_naive_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    y = np.where(rng.random(n) < 0.4, 1, -1)
    mask = rng.random(n) < 0.3
    nc, maj = no_change_predictions(y, mask), majority_predictions(y, mask)
    last, pos, neg = 1, 0, 0
    for i in range(n):
        assert nc[i] == last
        assert maj[i] == (1 if pos >= neg else -1)
        if mask[i]:
            last = int(y[i])
            pos += y[i] == 1
            neg += y[i] == -1


# --------------------------------------------------------------------------------------------------
# regression_report vs river
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_regression_report_matches_river(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 3000
    y = rng.normal(3.0, 2.0, n) + np.sin(np.arange(n) / 50.0)
    yh = y + rng.standard_t(3, n) * 0.7
    rep = regression_report(y, yh)
    assert rep["n"] == n
    assert rep["mse"] == pytest.approx(_river(rm.MSE(), y, yh), rel=TOL)
    assert rep["rmse"] == pytest.approx(_river(rm.RMSE(), y, yh), rel=TOL)
    assert rep["mae"] == pytest.approx(_river(rm.MAE(), y, yh), rel=TOL)
    assert rep["r2"] == pytest.approx(_river(rm.R2(), y, yh), abs=TOL)
    rae = np.abs(yh - y).sum() / np.abs(y - y.mean()).sum()
    assert rep["rae"] == pytest.approx(rae, rel=TOL)


# --------------------------------------------------------------------------------------------------
# Windowed metrics: naive loops and river's Rolling
# --------------------------------------------------------------------------------------------------


def _naive_windowed(values_fn: Callable[[slice], float], n: int, window: int) -> NDArray[np.float64]:
    return np.array([values_fn(slice(max(0, i - window + 1), i + 1)) for i in range(n)])


@pytest.mark.parametrize("window", [1, 2, 7, 50, 400, 1000])
def test_windowed_accuracy_equals_naive_loop(window: int) -> None:
    y, y_pred = _binary_stream(11, n=400, acc=0.7)
    correct = y == y_pred
    got = windowed_accuracy(correct, window)
    want = _naive_windowed(lambda s: float(np.mean(correct[s])), len(y), window)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
    np.testing.assert_array_equal(windowed_accuracy(correct.astype(int), window), got)


@pytest.mark.parametrize("window", [1, 3, 64, 400, 1000])
def test_windowed_rmse_equals_naive_loop(window: int) -> None:
    rng = np.random.default_rng(12)
    err = rng.normal(0.0, 1.0, 400) * np.linspace(0.1, 3.0, 400)
    got = windowed_rmse(err, window)
    want = _naive_windowed(lambda s: math.sqrt(float(np.mean(err[s] ** 2))), len(err), window)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=0)


def test_windowed_rmse_keeps_precision_after_huge_errors() -> None:
    """A global cumsum difference would lose the tiny late errors to round-off (or go negative)."""
    err = np.concatenate([np.full(1000, 1e8), np.full(1000, 1e-4)])
    window = 100
    got = windowed_rmse(err, window)
    want = _naive_windowed(lambda s: math.sqrt(float(np.mean(err[s] ** 2))), len(err), window)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=0)


def test_windowed_rmse_nan_only_spoils_windows_containing_it() -> None:
    err = np.ones(50)
    err[20] = np.nan
    with np.errstate(invalid="ignore"):
        got = windowed_rmse(err, 5)
    assert np.isnan(got[20:25]).all()
    assert np.isfinite(np.delete(got, range(20, 25))).all()


@pytest.mark.parametrize("window", [1, 5, 60, 500])
def test_windowed_kappa_equals_naive_loop(window: int) -> None:
    y, y_pred = _binary_stream(13, n=300, p_pos=0.3, acc=0.75)
    got = windowed_kappa(y, y_pred, window)
    want = _naive_windowed(lambda s: classification_report(y[s], y_pred[s])["kappa"], len(y), window)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)


def test_windowed_metrics_match_river_rolling() -> None:
    y, y_pred = _binary_stream(14, n=3000, p_pos=0.4, acc=0.7)
    yp = y_pred.astype(np.int64)
    window = 100
    kappa, acc = windowed_kappa(y, y_pred, window), windowed_accuracy(y == y_pred, window)
    r_kappa = ru.Rolling(rm.CohenKappa, window_size=window)
    r_acc = ru.Rolling(rm.Accuracy, window_size=window)
    for i, (t, p) in enumerate(zip(y.tolist(), yp.tolist(), strict=True)):
        r_kappa.update(t, p)
        r_acc.update(t, p)
        assert kappa[i] == pytest.approx(r_kappa.get(), abs=TOL)
        assert acc[i] == pytest.approx(r_acc.get(), abs=TOL)

    rng = np.random.default_rng(15)
    yt = rng.normal(size=3000)
    yh = yt + rng.normal(scale=0.5, size=3000)
    rmse = windowed_rmse(yh - yt, window)
    r_rmse = ru.Rolling(rm.RMSE, window_size=window)
    for i, (t, p) in enumerate(zip(yt.tolist(), yh.tolist(), strict=True)):
        r_rmse.update(t, p)
        assert rmse[i] == pytest.approx(r_rmse.get(), rel=TOL)


# --------------------------------------------------------------------------------------------------
# Degenerate inputs
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("label", [1, -1])
def test_all_one_class_all_correct_is_finite(label: int) -> None:
    y = np.full(100, label)
    rep = classification_report(y, y.astype(float), y_nochange=y)
    assert all(math.isfinite(v) for v in rep.values())
    assert rep["accuracy"] == 1.0
    assert rep["balanced_accuracy"] == 1.0
    assert rep["kappa"] == rep["kappa_m"] == rep["kappa_t"] == rep["mcc"] == 0.0
    assert rep["f1"] == (1.0 if label == 1 else 0.0)
    assert (windowed_kappa(y, y, 10) == 0.0).all()


def test_all_one_class_all_wrong_is_finite() -> None:
    y = np.ones(50)
    rep = classification_report(y, -y, y_nochange=y)
    assert all(math.isfinite(v) for v in rep.values())
    assert rep["accuracy"] == rep["balanced_accuracy"] == rep["f1"] == rep["mcc"] == 0.0
    assert rep["kappa"] == 0.0  # p_e = 0 here, so this is the ordinary formula


def test_constant_prediction_gives_zero_mcc_and_kappa() -> None:
    y, _ = _binary_stream(16, n=200)
    rep = classification_report(y, np.ones(200))
    assert rep["mcc"] == 0.0
    assert rep["kappa"] == pytest.approx(0.0, abs=TOL)
    assert rep["balanced_accuracy"] == pytest.approx(0.5, abs=TOL)


def test_empty_inputs_give_nan() -> None:
    rep = classification_report([], [], y_nochange=[])
    assert rep["n"] == 0
    assert all(math.isnan(v) for k, v in rep.items() if k != "n")
    rrep = regression_report([], [])
    assert rrep["n"] == 0
    assert all(math.isnan(v) for k, v in rrep.items() if k != "n")
    assert windowed_accuracy(np.array([], dtype=bool), 5).shape == (0,)
    assert windowed_rmse([], 5).shape == (0,)
    assert windowed_kappa([], [], 5).shape == (0,)
    assert no_change_predictions([]).shape == (0,)
    assert majority_predictions([]).shape == (0,)


def test_regression_degenerate_cases() -> None:
    y = np.full(10, 2.5)
    perfect = regression_report(y, y)
    assert perfect == {"mse": 0.0, "rmse": 0.0, "mae": 0.0, "rae": 0.0, "r2": 1.0, "n": 10.0}
    off = regression_report(y, y + 1.0)
    assert off["r2"] == 0.0
    assert off["rae"] == math.inf  # any error is infinitely worse than the (perfect) mean predictor
    assert off["mae"] == 1.0
    single = regression_report([1.0], [3.0])
    assert single["mse"] == 4.0
    assert single["r2"] == 0.0
    assert (windowed_rmse(np.zeros(20), 4) == 0.0).all()


# --------------------------------------------------------------------------------------------------
# ConfusionMatrix
# --------------------------------------------------------------------------------------------------


def _cm_metrics(cm: ConfusionMatrix) -> dict[str, float]:
    return {
        "accuracy": cm.accuracy,
        "kappa": cm.kappa,
        "kappa_m": cm.kappa_m,
        "balanced_accuracy": cm.balanced_accuracy,
        "f1": cm.f1,
        "mcc": cm.mcc,
        "n": float(cm.n),
    }


@pytest.mark.parametrize("seed", [0, 1])
def test_confusion_matrix_incremental_equals_batch(seed: int) -> None:
    y, y_pred = _binary_stream(20 + seed, n=2000, p_pos=0.35, acc=0.7)
    one = ConfusionMatrix()
    river_cm = rm.ConfusionMatrix()
    for t, p in zip(y.tolist(), y_pred.tolist(), strict=True):
        one.update(t, p)
        river_cm.update(t, int(p))
    chunked = ConfusionMatrix()
    for start in range(0, len(y), 333):
        chunked.update_many(y[start : start + 333], y_pred[start : start + 333])
    batch = classification_report(y, y_pred)
    assert one.counts == chunked.counts
    assert one.counts == (river_cm[1][1], river_cm[-1][1], river_cm[1][-1], river_cm[-1][-1])
    for cm in (one, chunked):
        for key, value in _cm_metrics(cm).items():
            assert value == batch[key], key
    assert one.report() == pytest.approx(batch, nan_ok=True)


def test_confusion_matrix_revert_and_reset() -> None:
    y, y_pred = _binary_stream(30, n=500)
    cm = ConfusionMatrix()
    cm.update_many(y, y_pred)
    for t, p in zip(y[:200].tolist(), y_pred[:200].tolist(), strict=True):
        cm.revert(t, p)
    tail = ConfusionMatrix()
    tail.update_many(y[200:], y_pred[200:])
    assert cm.counts == tail.counts
    cm.reset()
    assert cm.counts == (0, 0, 0, 0)
    assert math.isnan(cm.accuracy)
    with pytest.raises(ValueError, match="revert"):
        cm.revert(1, 1)


def test_confusion_matrix_report_kappa_t() -> None:
    cm = ConfusionMatrix()
    cm.update_many(Y8, P8)
    nochange = no_change_predictions(Y8)
    assert cm.report(correct_nochange=int(np.sum(nochange == Y8))) == pytest.approx(
        classification_report(Y8, P8, y_nochange=nochange), abs=TOL
    )


# --------------------------------------------------------------------------------------------------
# Input validation, downsampling, speed
# --------------------------------------------------------------------------------------------------


def test_invalid_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="-1, \\+1"):
        classification_report([1, 0, -1], [1, 1, 1])
    with pytest.raises(ValueError, match="-1, \\+1"):
        classification_report([1, -1], [1.0, 0.5])
    with pytest.raises(ValueError, match="booleans"):
        classification_report(np.array([True, False]), np.array([True, True]))
    with pytest.raises(ValueError, match="same length"):
        classification_report([1, -1, 1], [1, -1])
    with pytest.raises(ValueError, match="same length"):
        classification_report([1, -1], [1, -1], y_nochange=[1])
    with pytest.raises(ValueError, match="one-dimensional"):
        regression_report(np.zeros((2, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="window"):
        windowed_accuracy([True, False], 0)
    with pytest.raises(ValueError, match="boolean"):
        windowed_accuracy([0.5, 1.0], 2)
    with pytest.raises(TypeError, match="boolean"):
        no_change_predictions([1, -1], [1, 0])
    with pytest.raises(ValueError, match="y_true"):
        ConfusionMatrix().update(0, 1)


def test_downsample_curve() -> None:
    values = np.sin(np.arange(100_000) / 1000.0)
    idx, vals = downsample_curve(values, max_points=2000)
    assert len(idx) == 2000
    assert idx[0] == 0
    assert idx[-1] == len(values) - 1
    assert np.all(np.diff(idx) > 0)
    np.testing.assert_array_equal(vals, values[idx])
    idx_small, _ = downsample_curve(values[:2001], max_points=2000)
    assert len(idx_small) == 2000
    assert np.all(np.diff(idx_small) > 0)
    short_idx, short_vals = downsample_curve([3.0, 1.0, 2.0])
    np.testing.assert_array_equal(short_idx, [0, 1, 2])
    np.testing.assert_array_equal(short_vals, [3.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="max_points"):
        downsample_curve(values, max_points=1)


def test_half_a_million_predictions_take_milliseconds() -> None:
    n = 500_000
    y, y_pred = _binary_stream(40, n=n, p_pos=0.3, acc=0.8)
    mask = np.random.default_rng(41).random(n) < 0.05
    err = np.random.default_rng(42).normal(size=n)
    calls: list[Callable[[], object]] = [
        lambda: classification_report(y, y_pred, y_nochange=y_pred),
        lambda: regression_report(y.astype(float), y_pred),
        lambda: windowed_accuracy(y == y_pred, 1000),
        lambda: windowed_rmse(err, 1000),
        lambda: windowed_kappa(y, y_pred, 1000),
        lambda: no_change_predictions(y, mask),
        lambda: majority_predictions(y, mask),
        lambda: downsample_curve(err),
        lambda: ConfusionMatrix().update_many(y, y_pred),
    ]
    for call in calls:
        best = math.inf
        for _ in range(3):
            start = time.perf_counter()
            call()
            best = min(best, time.perf_counter() - start)
        assert best < 0.25, f"{best * 1e3:.1f} ms"  # typically a few ms; generous for loaded CI hosts
