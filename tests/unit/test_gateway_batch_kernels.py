"""The kernels of a gateway's batch path against the numpy code they replace: DRUiD's batch update
(``grad_track_many``, ``druid_steps``), the range guard's batch test, the samples' content digests and a
decoded batch's columns."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import msgspec
import numpy as np
import pytest
from support.kernels import COMPILED, both_paths, labeled_stream, needs_kernels

from edgedrift.guard import RangeGuard
from edgedrift.models.losses import FloatArray
from edgedrift.monitors import DruidMonitor
from edgedrift.training.linear import train_linear
from edgedrift.window import CountWindow
from edgedrift_edge.session.messages import _BATCH, content_keys, content_keys_of, parse_samples

# The 1e200 row overflows in the numpy path's gradient checks, as it should.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


def druid_batches(
    X: FloatArray, y: FloatArray, batch: int, robust: bool = True
) -> tuple[list[tuple[float, int, int, int]], list[int], dict[str, Any]]:
    """DRUiD over a stream fed in labeled batches (``update_many``, a full window evicting as it goes):
    (statistic, tests, exceedances, run) after every batch, the batches where it fired, its Δg."""
    model = train_linear(X[:200], y[:200], "logistic", C=10.0)
    window = CountWindow(200, n_features=X.shape[1])
    monitor = DruidMonitor(alpha=0.999, t_n=30, min_labels=15)
    monitor.reset(model, X[:200], y[:200])
    if not robust:
        monitor.delta_g._metric = None
    window.push_many(X[:200], y[:200])
    trace, fired = [], []
    for start in range(200, len(y), batch):
        Xb, yb = X[start : start + batch], y[start : start + batch]
        errors = (model.predict(Xb) != yb).astype(np.float64)
        monitor.update_many(Xb, yb, errors, window, window.push_many(Xb, yb))
        trace.append((monitor.statistic, monitor.n_tests, monitor.n_exceedances, monitor.num_warnings))
        if monitor.drift_detected:
            fired.append(start)
            monitor.num_warnings = 0
    dg = monitor.delta_g
    state = {name: getattr(dg, name).copy() for name in ("vec", "robust", "added_sum", "added_outer")}
    state["counts"] = np.array([dg.n_skipped, dg.n_added, dg.n_evicted])
    return trace, fired, state


@needs_kernels
@pytest.mark.parametrize("d", [2, 5, 54])
@pytest.mark.parametrize("batch", [1, 7, 40])
def test_druid_batches_see_the_same_statistics_and_drifts(
    d: int, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """grad_track_many and druid_steps against DeltaG.add_many/remove_many and the numpy step test:
    the same tests, exceedances, runs and drift batches, statistics and Δg to rounding."""
    rng = np.random.default_rng(d + batch)
    X = rng.normal(size=(1600, d))
    w = rng.normal(size=d)
    y = np.where(np.arange(1600) < 800, np.sign(X @ w), np.sign(X @ -w))
    X[901, 0] = np.nan  # skipped when added, and again when the window evicts it
    X[950] = 1e200

    (trace_c, fired_c, dg_c), (trace_r, fired_r, dg_r) = both_paths(
        lambda: druid_batches(X, y, batch), monkeypatch
    )
    assert fired_c == fired_r and fired_r  # the flip is found, in the same batch
    assert [t[1:] for t in trace_c] == [t[1:] for t in trace_r]
    np.testing.assert_array_equal(dg_c["counts"], dg_r["counts"])
    assert dg_r["counts"][0] >= 1  # the NaN row
    np.testing.assert_allclose([t[0] for t in trace_c], [t[0] for t in trace_r], rtol=1e-7, atol=1e-9)
    for key in ("vec", "robust", "added_sum", "added_outer"):
        np.testing.assert_allclose(dg_c[key], dg_r[key], rtol=1e-8, atol=1e-9, err_msg=key)


@needs_kernels
def test_delta_g_batches_without_robust_tracking_are_the_numpy_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(600, 4))
    y = np.sign(X @ rng.normal(size=4))

    (_, _, dg_c), (_, _, dg_r) = both_paths(lambda: druid_batches(X, y, 25, robust=False), monkeypatch)
    np.testing.assert_allclose(dg_c["vec"], dg_r["vec"], rtol=1e-9, atol=1e-9)
    assert not dg_c["robust"].any() and not dg_r["robust"].any()
    assert not dg_c["added_outer"].any() and not dg_r["added_outer"].any()


@needs_kernels
def test_druid_steps_counts_runs_across_batches_and_the_warm_up() -> None:
    """Three steps, the first untested (min_labels), the run carried in from the batch before."""
    assert COMPILED is not None
    W = np.eye(2)
    R = np.array([[1.0, 0.0], [0.0, 0.0], [-1.0, 0.0]])
    before = np.zeros(2)
    # n_added 0, n_evicted 0, n_orig 10: counts are 10 + t; stats 1/12 (t = 2), 0 (t = 3)
    tests, exceedances, stat, run, longest = COMPILED.druid_steps(
        before, R, np.zeros((0, 2)), W, 0, 0, 10, 2, 0.05, 4
    )
    assert (tests, exceedances, stat, run, longest) == (2, 1, 0.0, 0, 5)
    # one eviction at the last step, taking the first contribution out again
    tests, _, stat, _, _ = COMPILED.druid_steps(before, R[:2], R[:1], W, 0, 0, 10, 0, 1.0, 0)
    assert tests == 2 and stat == 0.0


@needs_kernels
def test_the_batch_range_test_is_the_numpy_one(monkeypatch: pytest.MonkeyPatch) -> None:
    X, _ = labeled_stream(300, 5, seed=2)
    guard = RangeGuard(threshold=3.0).fit(X[:100])
    rows = np.vstack([X[100:], np.full((1, 5), np.nan), X[:1] + 1e6])

    compiled, reference = both_paths(lambda: guard.outside(rows), monkeypatch)
    np.testing.assert_array_equal(compiled, reference)
    assert compiled[-2:].all() and not compiled.all()


def test_content_keys_are_a_stable_digest_of_the_sample() -> None:
    """The digests checkpoints keep: BLAKE2b of the sample's float64 bytes (the same on every interpreter),
    pinned here; equal content gives equal keys whatever the layout, -0.0 is 0.0 and every NaN one NaN;
    ragged rows (content_keys) get the keys their rows would have in a block."""
    X = np.array([[0.5, -1.0, 2.0], [0.0, np.inf, 1e300]])
    y, ts = np.array([1.0, np.nan]), np.array([np.nan, 1.7e9])
    keys = content_keys_of(X, y, ts)
    assert keys.dtype == np.int64 and (keys & 1).all() and keys[0] != keys[1]
    raw = np.array([0.5, -1.0, 2.0, 1.0, np.nan]).astype("<f8").tobytes()
    expected = int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little", signed=True) | 1
    assert int(keys[0]) == expected
    assert content_keys_of(np.asfortranarray(X), y, ts).tolist() == keys.tolist()
    negative_zero, other_nan = X.copy(), y.copy()
    negative_zero[1, 0] = -0.0
    other_nan[1] = -np.float64(np.nan)
    assert content_keys_of(negative_zero, other_nan, ts).tolist() == keys.tolist()
    moved = X.copy()
    moved[0, 2] = np.nextafter(2.0, 3.0)
    assert content_keys_of(moved, y, ts)[0] != keys[0]
    assert content_keys(X.tolist(), y.tolist(), ts.tolist()) == keys.tolist()
    rng = np.random.default_rng(0)  # a batch laid out with numpy, digests as row by row
    big = rng.normal(size=(50, 4)) * 10.0 ** rng.integers(-300, 300, size=(50, 4))
    big[3], big[4, 1], big[5, 2] = [0.0, -0.0, np.inf, -np.inf], np.nan, -np.float64(np.nan)
    labels, times = np.where(rng.random(50) < 0.5, np.nan, 1.0), np.where(rng.random(50) < 0.5, np.nan, 9.0)
    assert content_keys_of(big, labels, times).tolist() == content_keys(
        big.tolist(), labels.tolist(), times.tolist()
    )
    assert content_keys([[0.5], []], [1.0, np.nan], [2.0, 3.0]) == [
        int(content_keys_of(np.array([[0.5]]), np.array([1.0]), np.array([2.0]))[0]),
        int(content_keys_of(np.zeros((1, 0)), np.array([np.nan]), np.array([3.0]))[0]),
    ]


@needs_kernels
def test_the_batch_kernels_reject_arrays_of_the_wrong_shape_with_a_clear_error() -> None:
    assert COMPILED is not None
    with pytest.raises(ValueError, match="out: expected a writable C-contiguous bool array"):
        COMPILED.rows_outside(np.ones((3, 2)), np.zeros(2), np.ones(2), np.zeros(3, np.int8))
    with pytest.raises(ValueError, match="hi: expected"):
        COMPILED.rows_outside(np.ones((3, 2)), np.zeros(2), np.ones(3), np.zeros(3, bool))
    with pytest.raises(ValueError, match="W must have shape"):
        COMPILED.druid_steps(np.zeros(3), np.zeros((2, 3)), np.zeros((0, 3)), np.eye(2), 0, 0, 1, 0, 1.0, 0)
    with pytest.raises(ValueError, match="more evictions than steps"):
        COMPILED.druid_steps(np.zeros(2), np.zeros((1, 2)), np.zeros((2, 2)), np.eye(2), 0, 0, 1, 0, 1.0, 0)
    with pytest.raises(TypeError, match="17 arguments"):
        COMPILED.grad_track_many(np.ones((2, 2)))


BATCHES = [
    {"samples": [{"id": 1, "x": [0.5, -1.0, 2.0]}, {"id": 2, "x": [1, 2, 3], "y": -1, "ts": 1.5}]},
    {"samples": [{"x": [0.5, -1.0, 2.0], "y": 1.0}, {"id": "a-7", "x": [0.0, 0.0, 1e300]}, {"x": [1, 1, 1]}]},
    {"samples": [{"id": 3, "x": [0.5, -1.0]}, {"id": 4, "x": [1.0, 2.0, 3.0]}]},  # a row too short
    {"samples": [{"id": 5, "x": [0.5, -1.0, 2.0], "y": 0.5}, {"id": 8, "x": [1, 1, 1]}]},  # not a class label
    {"samples": [{"id": 6, "x": [0.5, -1.0, 2.0], "y": 2}, {"id": 7, "x": [1.0, 2.0, 3.0]}]},
]


@needs_kernels
@pytest.mark.parametrize("task", ["classification", "regression"])
@pytest.mark.parametrize("message", BATCHES)
def test_a_batch_decodes_to_the_same_samples_and_rejections(
    task: str, message: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """sample_columns against the numpy fast path and the general path (for what it declines)."""
    payload = json.dumps(message).encode()
    compiled, reference = both_paths(lambda: parse_samples(payload, 3, task, 100, None), monkeypatch)
    assert compiled.ids == reference.ids
    assert [(r.id, r.reason) for r in compiled.rejected] == [(r.id, r.reason) for r in reference.rejected]
    for name in ("X", "y", "ts"):
        np.testing.assert_array_equal(getattr(compiled, name), getattr(reference, name), err_msg=name)
    assert compiled.batch and reference.batch


@needs_kernels
def test_sample_columns_fills_the_columns_and_numbers_missing_ids() -> None:
    assert COMPILED is not None
    items = _BATCH.decode(
        b'{"samples": [{"x": [1.0, 2.0]}, {"id": "s", "x": [3.0, 4.0], "y": -1, "ts": 9.0}]}'
    )
    X, y, ts = np.zeros((2, 2)), np.zeros(2), np.zeros(2)
    ids = COMPILED.sample_columns(items.samples, 2, True, 40, msgspec.UNSET, X, y, ts)
    assert ids == [40, "s"]
    assert X.tolist() == [[1.0, 2.0], [3.0, 4.0]] and ts[1] == 9.0 and y[1] == -1.0
    assert np.isnan(y[0]) and np.isnan(ts[0])
    assert COMPILED.sample_columns(items.samples, 3, True, 0, msgspec.UNSET, np.zeros((2, 3)), y, ts) is None
    with pytest.raises(ValueError, match="X: expected a C-contiguous float64 array of 4 values"):
        COMPILED.sample_columns(items.samples, 2, True, 0, msgspec.UNSET, np.zeros(3), y, ts)
