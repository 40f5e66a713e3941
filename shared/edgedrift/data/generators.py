"""Synthetic drifting streams: the paper's Sine1+ and ridge streams, and river's SEA, Hyperplane, RBF.

Every generator is a pure function of its arguments: the same seed gives bit-identical arrays. The
numpy-based generators (Sine1+, ridge; DRUiD paper Sections 5.4-5.5) need nothing but numpy; the river
based ones import river lazily so that the core library imports without it (river is an optional extra).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice, pairwise
from typing import Any

import numpy as np

from edgedrift.data.stream import Stream
from edgedrift.models.losses import FloatArray

#: SEA thresholds θ of river's variants 0-3: y = [x0 + x1 > θ] (ALGORITHM-NOTES §5).
SEA_THRESHOLDS: tuple[float, ...] = (8.0, 9.0, 7.0, 9.5)

#: river's Hyperplane flips a label when ``0.01 + U <= noise_percentage`` (ALGORITHM-NOTES §5).
_HYPERPLANE_NOISE_OFFSET = 0.01


def _derive_seed(seed: int, *keys: int) -> int:
    """An independent 32-bit seed for sub-stream ``keys`` of ``seed`` (no overlap between seed, seed+1)."""
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed}")
    return int(np.random.SeedSequence([seed, *keys]).generate_state(1)[0])


def _check_positive(**values: float) -> None:
    for key, value in values.items():
        if not value > 0:
            raise ValueError(f"{key} must be > 0, got {value}")


def _concept_bounds(n_concepts: int, concept_length: int) -> tuple[int, ...]:
    _check_positive(n_concepts=n_concepts, concept_length=concept_length)
    return tuple(k * concept_length for k in range(1, n_concepts))


def _fill_from(
    samples: Iterable[tuple[dict[Any, Any], Any]], X: FloatArray, y: FloatArray, start: int, stop: int
) -> None:
    """Copy ``stop - start`` river samples (dict x, label) into the preallocated ``X``/``y`` rows in place.

    Binary labels (bool or 0/1) become -1/+1.
    """
    d = X.shape[1]
    i = start
    for x, label in islice(samples, stop - start):
        row = tuple(x.values())
        if len(row) != d:
            raise ValueError(f"river sample {i} has {len(row)} features, expected {d}")
        X[i] = row
        y[i] = 1.0 if label else -1.0
        i += 1
    if i != stop:
        raise RuntimeError(f"river stream ended after {i - start} of {stop - start} samples")


def sine1plus(
    d: int = 2, sigma: float = 1.0, n_concepts: int = 10, concept_length: int = 10_000, seed: int = 0
) -> Stream:
    """Sine1+ (DRUiD paper Section 5.4): abrupt drifts every ``concept_length`` samples.

    x1 ~ U[0, σ] and x2..xd ~ U[0, 1]. In the first concept a point is +1 iff
    ``x_d < sin(((x1/σ) + Σ_{i=2}^{d-1} x_i) / (d-1))``, else -1; every concept change flips all labels
    (so 10 concepts have 9 drifts). d=2, σ=1 is the original Sine1 (``x2 < sin(x1)``). σ only rescales x1,
    which leaves the concept unchanged but makes the learning problem ill-conditioned.
    """
    if d < 2:
        raise ValueError(f"Sine1+ needs d >= 2 attributes, got d={d}")
    _check_positive(sigma=sigma)
    drift_points = _concept_bounds(n_concepts, concept_length)
    n = n_concepts * concept_length
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    X[:, 0] *= sigma
    arg = (X[:, 0] / sigma + X[:, 1 : d - 1].sum(axis=1)) / (d - 1)
    y = np.where(X[:, d - 1] < np.sin(arg), 1.0, -1.0)
    concept = np.arange(n) // concept_length
    y[concept % 2 == 1] *= -1.0
    return Stream(
        name=f"sine1+:d={d},sigma={sigma:g}",
        X=X,
        y=y,
        task="classification",
        feature_names=tuple(f"x{i}" for i in range(1, d + 1)),
        drift_points=drift_points,
        meta={
            "generator": "sine1plus",
            "d": d,
            "sigma": sigma,
            "n_concepts": n_concepts,
            "concept_length": concept_length,
            "seed": seed,
        },
    )


def ridge_stream(
    sigma: float = 1.0, d: int = 2, n_concepts: int = 10, concept_length: int = 10_000, seed: int = 0
) -> Stream:
    """Ridge regression stream (DRUiD paper Section 5.5): a new true model at every concept.

    Per concept β_true ~ N(0, I_d); x ~ N(0, I_d) with the first attribute multiplied by σ (the
    ill-conditioning of Sine1+); y = xᵀβ_true + ε, ε ~ N(0, 1). The true models are kept in
    ``meta["betas"]`` (shape (n_concepts, d)) so that tests and benchmarks can compare against them.
    """
    if d < 1:
        raise ValueError(f"ridge stream needs d >= 1 attributes, got d={d}")
    _check_positive(sigma=sigma)
    drift_points = _concept_bounds(n_concepts, concept_length)
    n = n_concepts * concept_length
    rng = np.random.default_rng(seed)
    betas = rng.standard_normal((n_concepts, d))
    X = rng.standard_normal((n, d))
    X[:, 0] *= sigma
    concept = np.arange(n) // concept_length
    y = np.einsum("ij,ij->i", X, betas[concept]) + rng.standard_normal(n)
    return Stream(
        name=f"ridge:d={d},sigma={sigma:g}",
        X=X,
        y=y,
        task="regression",
        feature_names=tuple(f"x{i}" for i in range(1, d + 1)),
        drift_points=drift_points,
        meta={
            "generator": "ridge_stream",
            "betas": betas,
            "d": d,
            "sigma": sigma,
            "n_concepts": n_concepts,
            "concept_length": concept_length,
            "seed": seed,
        },
    )


def sea(
    n: int = 100_000, noise: float = 0.1, drift_at: tuple[int, ...] = (25_000, 50_000, 75_000), seed: int = 0
) -> Stream:
    """SEA concepts (river ``synth.SEA``) with abrupt drifts: the variant switches at every drift point.

    Segment k uses variant ``k % 4`` (thresholds 8, 9, 7, 9.5 on x0 + x1) and its own derived seed, and
    labels are flipped with probability ``noise``. y = +1 iff the (possibly flipped) river label is True.
    """
    from river.datasets import synth

    _check_positive(n=n)
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise must be in [0, 1], got {noise}")
    drift_points = tuple(int(p) for p in drift_at)
    if any(not 0 < p < n for p in drift_points) or any(a >= b for a, b in pairwise(drift_points)):
        raise ValueError(f"drift_at must be strictly increasing indices in (0, {n}), got {drift_at}")
    X = np.empty((n, 3))
    y = np.empty(n)
    variants = []
    for k, (start, stop) in enumerate(pairwise((0, *drift_points, n))):
        variant = k % 4
        variants.append(variant)
        gen = synth.SEA(variant=variant, noise=noise, seed=_derive_seed(seed, k))
        _fill_from(gen, X, y, start, stop)
    return Stream(
        name=f"sea:noise={noise:g}",
        X=X,
        y=y,
        task="classification",
        feature_names=("x0", "x1", "x2"),
        drift_points=drift_points,
        meta={
            "generator": "sea",
            "noise": noise,
            "variants": tuple(variants),
            "thresholds": tuple(SEA_THRESHOLDS[v] for v in variants),
            "seed": seed,
        },
    )


def hyperplane(
    n: int = 100_000,
    n_features: int = 20,
    noise: float = 0.01,
    mag_change: float = 0.001,
    n_drift_features: int = 2,
    seed: int = 0,
) -> Stream:
    """Rotating hyperplane (river ``synth.Hyperplane``): gradual drift of the first weights.

    y = +1 iff Σ wᵢxᵢ ≥ ½ Σ wᵢ, x ~ U[0,1]^d; after every sample the first ``n_drift_features`` weights
    move by ±``mag_change``. **river quirk** (ALGORITHM-NOTES §5): river flips a label when
    ``0.01 + U <= noise_percentage``, so its effective noise is ``noise_percentage - 0.01``. This function
    passes ``noise + 0.01`` so that ``noise`` is the real flip probability (noise=0 gives clean labels).
    The direction-reversal probability keeps river's default (``sigma=0.1``, effectively 9%, same quirk).
    """
    from river.datasets import synth

    _check_positive(n=n, n_features=n_features)
    if not 0.0 <= noise <= 1.0 - _HYPERPLANE_NOISE_OFFSET:
        raise ValueError(f"noise must be in [0, {1.0 - _HYPERPLANE_NOISE_OFFSET}], got {noise}")
    if not 0 <= n_drift_features <= n_features:
        raise ValueError(f"n_drift_features must be in [0, n_features={n_features}], got {n_drift_features}")
    gen = synth.Hyperplane(
        seed=_derive_seed(seed, 0),
        n_features=n_features,
        n_drift_features=n_drift_features,
        mag_change=mag_change,
        noise_percentage=noise + _HYPERPLANE_NOISE_OFFSET,
    )
    X = np.empty((n, n_features))
    y = np.empty(n)
    _fill_from(gen, X, y, 0, n)
    return Stream(
        name=f"hyperplane:d={n_features},noise={noise:g},mag_change={mag_change:g}",
        X=X,
        y=y,
        task="classification",
        feature_names=tuple(f"x{i}" for i in range(n_features)),
        meta={
            "generator": "hyperplane",
            "noise": noise,
            "mag_change": mag_change,
            "n_drift_features": n_drift_features,
            "river_noise_percentage": noise + _HYPERPLANE_NOISE_OFFSET,
            "seed": seed,
        },
    )


def _class_slots(
    samples: Iterator[tuple[dict[Any, Any], Any]], wanted: FloatArray, max_tries: int
) -> Iterator[tuple[dict[Any, Any], Any]]:
    """Rejection sampling: for every wanted label, skip river samples until one has that label."""
    for i, label in enumerate(wanted):
        positive = label > 0
        for _ in range(max_tries):
            x, y = next(samples)
            if bool(y) == positive:
                yield x, y
                break
        else:
            raise RuntimeError(
                f"rbf_drift: no sample of class {int(label):+d} in {max_tries} draws at output row {i}; "
                "this RBF model (seed, n_centroids) hardly generates that class"
            )


def rbf_drift(
    n: int = 100_000,
    n_features: int = 10,
    n_centroids: int = 50,
    change_speed: float = 1e-4,
    seed: int = 0,
    class_ratio: float | None = None,
) -> Stream:
    """Random RBF with moving centroids (river ``synth.RandomRBFDrift``), two classes (1 -> +1, 0 -> -1).

    ``class_ratio`` (optional) is the probability of the +1 class: each output row first draws its
    label ~ Bernoulli(class_ratio), then river samples are rejected until one has that label. The centroids
    keep moving during rejected draws, so imbalance also speeds up the drift per output row.
    """
    from river.datasets import synth

    _check_positive(n=n, n_features=n_features, n_centroids=n_centroids)
    if change_speed < 0:
        raise ValueError(f"change_speed must be >= 0, got {change_speed}")
    gen = synth.RandomRBFDrift(
        seed_model=_derive_seed(seed, 0),
        seed_sample=_derive_seed(seed, 1),
        n_classes=2,
        n_features=n_features,
        n_centroids=n_centroids,
        change_speed=change_speed,
        n_drift_centroids=n_centroids,
    )
    samples: Iterator[tuple[dict[Any, Any], Any]] = iter(gen)
    if class_ratio is not None:
        if not 0.0 < class_ratio < 1.0:
            raise ValueError(f"class_ratio must be in (0, 1), got {class_ratio}")
        wanted = np.where(np.random.default_rng(_derive_seed(seed, 2)).random(n) < class_ratio, 1.0, -1.0)
        samples = _class_slots(samples, wanted, max_tries=100_000)
    X = np.empty((n, n_features))
    y = np.empty(n)
    _fill_from(samples, X, y, 0, n)
    return Stream(
        name=f"rbf:d={n_features},centroids={n_centroids},speed={change_speed:g}",
        X=X,
        y=y,
        task="classification",
        feature_names=tuple(f"x{i}" for i in range(n_features)),
        meta={
            "generator": "rbf_drift",
            "n_centroids": n_centroids,
            "change_speed": change_speed,
            "class_ratio": class_ratio,
            "seed": seed,
        },
    )
