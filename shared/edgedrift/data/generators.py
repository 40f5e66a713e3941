"""Synthetic drifting streams: the paper's Sine1+ and ridge streams, river's SEA, Hyperplane, RBF, and
RebalanceStream's imbalanced RBF stream.

Every generator is a pure function of its arguments: the same seed gives bit-identical arrays. The
numpy-based generators (Sine1+, ridge; DRUiD paper Sections 5.4-5.5) need nothing but numpy; the river
based ones import river lazily so that the core library imports without it (river is an optional extra).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import islice, pairwise
from typing import Any

import numpy as np

from edgedrift.data.stream import Stream
from edgedrift.models.losses import FloatArray

#: SEA thresholds θ of river's variants 0-3: y = [x0 + x1 > θ].
SEA_THRESHOLDS: tuple[float, ...] = (8.0, 9.0, 7.0, 9.5)

#: river's Hyperplane flips a label when ``0.01 + U <= noise_percentage``.
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
    move by ±``mag_change``. **river quirk**: river flips a label when
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


#: RebalanceStream's minority shares (class ratios 0.9;0.1 … 0.6;0.4), in the reference's list order.
IMBALANCE_LEVELS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4)
_JAVA_MULT = 0x5DEECE66D
_JAVA_MASK = (1 << 48) - 1


class _JavaRandom:
    """``java.util.Random`` (48-bit LCG), enough of it to replay the reference's imbalance schedule."""

    def __init__(self, seed: int) -> None:
        self._seed = (seed ^ _JAVA_MULT) & _JAVA_MASK
        self._next_gaussian: float | None = None

    def _next(self, bits: int) -> int:
        self._seed = (self._seed * _JAVA_MULT + 0xB) & _JAVA_MASK
        value = self._seed >> (48 - bits)
        return value - (1 << 32) if value >= 1 << 31 else value  # Java's (int) cast

    def next_int(self, bound: int) -> int:
        if bound <= 0 or bound & (bound - 1):
            raise ValueError("only powers of two are needed here")
        return (bound * self._next(31)) >> 31

    def next_double(self) -> float:
        return ((self._next(26) << 27) + self._next(27)) * 2.0**-53

    def next_gaussian(self) -> float:
        """Marsaglia's polar method with Java's cached second value."""
        if self._next_gaussian is not None:
            value, self._next_gaussian = self._next_gaussian, None
            return value
        while True:
            v1, v2 = 2.0 * self.next_double() - 1.0, 2.0 * self.next_double() - 1.0
            s = v1 * v1 + v2 * v2
            if 0.0 < s < 1.0:
                break
        multiplier = math.sqrt(-2.0 * math.log(s) / s)
        self._next_gaussian = v2 * multiplier
        return v1 * multiplier


def rbf_drift_rows(gen: Any) -> Iterator[tuple[list[float], int]]:
    """river ``RandomRBFDrift.__iter__`` bit for bit (rows as lists), about ten times faster.

    river moves every drifting centroid in a Python loop before each sample; here one vectorised numpy
    step per sample does the same float operations (centre += speed·change_speed, clip to [0, 1] and
    reverse the speed). The sample itself is drawn exactly as river's ``_generate_sample`` draws it.
    """
    import random
    from bisect import bisect_right
    from itertools import accumulate

    gen._generate_centroids()
    rng = random.Random(gen.seed_sample)
    k, d, speed_factor = gen.n_drift_centroids, gen.n_features, gen.change_speed
    centre = np.array([c.centre for c in gen.centroids], dtype=np.float64)
    speed = np.array(gen.centroid_speed, dtype=np.float64).reshape(k, d)
    labels = [int(c.class_label) for c in gen.centroids]
    std_dev = [float(c.std_dev) for c in gen.centroids]
    cumulative = list(accumulate(gen.centroid_weights))
    total, last = sum(gen.centroid_weights), len(cumulative) - 1
    moving = centre[:k]
    while True:
        moving += speed * speed_factor
        out = (moving > 1.0) | (moving < 0.0)
        if out.any():
            moving[out] = np.where(moving[out] > 1.0, 1.0, 0.0)
            speed[out] = -speed[out]
        idx = min(bisect_right(cumulative, rng.random() * total), last)
        att = [rng.random() * 2.0 - 1.0 for _ in range(d)]
        magnitude = 0.0
        for a in att:
            magnitude += a * a
        scale = rng.gauss(0, 1) * std_dev[idx] / magnitude**0.5
        c = centre[idx].tolist()
        yield [c[i] + att[i] * scale for i in range(d)], labels[idx]


def imbalance_schedule(
    n: int,
    mean: int = 20_000,
    var: float = 50.0,
    schedule_seed: int = 10,
    levels: tuple[float, ...] = IMBALANCE_LEVELS,
) -> FloatArray:
    """The minority share of every row of :func:`rbf_imbalanced` (RebalanceStream, Section IV).

    Replays the reference's ``DatasetGenerator``: ``java.util.Random(schedule_seed)`` picks one of
    ``levels`` (``nextInt(4)`` for the paper's :data:`IMBALANCE_LEVELS`) and a segment length
    ``round(nextGaussian()·var + mean)``, again and again. The reference multiplies by ``var`` itself, so
    σ² of the paper acts as a standard deviation; the seed is 10 for every data seed, so all five streams
    share one schedule (Fig. 1). Other ``levels`` (e.g. ``(0.05, 0.1, 0.2, 0.3)`` for a 5 % minority)
    keep the same segments and put their own share at each drawn index.
    """
    _check_positive(n=n, mean=mean)
    if var < 0:
        raise ValueError(f"var must be >= 0, got {var}")
    if not levels or len(levels) & (len(levels) - 1):
        raise ValueError(f"levels must be 1, 2, 4, 8 … shares (java.util.Random.nextInt), got {len(levels)}")
    if not all(0.0 < lv < 1.0 for lv in levels):
        raise ValueError(f"every minority share must be in (0, 1), got {levels}")
    rng = _JavaRandom(schedule_seed)
    share = np.empty(n)
    start = 0
    while start < n:
        level = levels[rng.next_int(len(levels))]
        length = max(1, math.floor(rng.next_gaussian() * var + mean + 0.5))  # Java's Math.round
        share[start : start + length] = level
        start += length
    return share


def rbf_imbalanced(
    n: int = 100_000,
    mean: int = 20_000,
    var: float = 50.0,
    n_features: int = 10,
    n_centroids: int = 50,
    change_speed: float = 1e-7,
    seed: int = 3,
    schedule_seed: int = 10,
    levels: tuple[float, ...] = IMBALANCE_LEVELS,
) -> Stream:
    """RebalanceStream's stream (Section IV): Random RBF with drift under a switching class ratio.

    river ``RandomRBFDrift(seed_model=seed, seed_sample=seed, 2 classes, 10 features, 50 centroids,
    change_speed=1e-7, 50 drifting centroids)`` (MOA ``RandomRBFGeneratorDrift -n 50 -c 2 -a 10 -s 1e-7``)
    wrapped like MOA's ``ImbalancedStream``: each row draws its class from the current ratio of
    :func:`imbalance_schedule`, and generator samples are queued per class until that class has one
    (first in, first out), so no sample is thrown away. **+1 (river class 1) is the minority** with share
    0.1-0.4 and −1 the majority, as class 1 is in the reference's ratios ``0.9;0.1`` … ``0.6;0.4``.

    ``levels`` are the minority shares the schedule draws from (the paper's 0.1-0.4 by default;
    ``rbf-imbalanced:levels=0.05;0.1;0.2;0.3`` for a 5 % minority).
    ``meta["minority_share"]`` is the per-row share (the imbalance level of the paper's plots) and
    ``drift_points`` the rows where it changes. Two reference details are not copied: its RBF model seed
    is fixed at 1 for every data seed (here ``seed_model = seed``), and it re-prepares the whole stream at
    every ratio switch, which restarts the generator.
    """
    from river.datasets import synth

    _check_positive(n=n, n_features=n_features, n_centroids=n_centroids)
    if change_speed < 0:
        raise ValueError(f"change_speed must be >= 0, got {change_speed}")
    share = imbalance_schedule(n, mean, var, schedule_seed, tuple(levels))
    wanted_positive = np.random.default_rng(_derive_seed(seed, 3)).random(n) < share
    gen = rbf_drift_rows(
        synth.RandomRBFDrift(
            seed_model=seed,
            seed_sample=seed,
            n_classes=2,
            n_features=n_features,
            n_centroids=n_centroids,
            change_speed=change_speed,
            n_drift_centroids=n_centroids,
        )
    )
    queues: tuple[deque[list[float]], deque[list[float]]] = (deque(), deque())
    X = np.empty((n, n_features))
    max_queue = 50 * n + 1_000
    for i in range(n):
        cls = int(wanted_positive[i])
        queue = queues[cls]
        while not queue:
            row, label = next(gen)
            queues[int(bool(label))].append(row)
            if len(queues[1 - cls]) > max_queue:
                raise RuntimeError(f"rbf_imbalanced: the generator hardly produces class {2 * cls - 1:+d}")
        X[i] = queue.popleft()
    y = np.where(wanted_positive, 1.0, -1.0)
    changes = tuple(int(i) for i in np.flatnonzero(np.diff(share)) + 1)
    return Stream(
        name=f"rbf-imbalanced:mean={mean},var={var:g},seed={seed}"
        + ("" if tuple(levels) == IMBALANCE_LEVELS else ",levels=" + ";".join(f"{lv:g}" for lv in levels)),
        X=X,
        y=y,
        task="classification",
        feature_names=tuple(f"x{i}" for i in range(n_features)),
        drift_points=changes,
        meta={
            "generator": "rbf_imbalanced",
            "mean": mean,
            "var": var,
            "n_centroids": n_centroids,
            "change_speed": change_speed,
            "seed": seed,
            "schedule_seed": schedule_seed,
            "levels": tuple(levels),
            "minority_share": share,
            "queued": (len(queues[0]), len(queues[1])),
        },
    )
