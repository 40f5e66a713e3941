"""Sine-MC: a seeded multi-class stream with abrupt drifts, the C-class counterpart of Sine1+.

The unit cube [0, 1]^d is cut into C stripes by the C − 1 sine-shaped curves
``x_d = k/C + A·sin(2π·u)``, k = 1 … C−1, with u the mean of x_1 … x_{d−1}; a sample's region r is the
number of curves below it. With A ≤ 1/(2C) the curves never cross and stay inside the cube, so every
region covers exactly 1/C of it (the classes are balanced). Each concept labels region r with class
π_k(r), for a permutation π_k of 0 … C−1; at every drift the permutation changes to one that moves every
region to another class (a derangement of the previous one), so every part of the input space changes
class at once. A one-vs-rest linear model fits one concept well (the stripes are close to linear) and
fails right after a drift.
"""

from __future__ import annotations

import numpy as np

from edgedrift.data.stream import Stream

__all__ = ["sine_mc"]


def sine_mc(
    n_classes: int = 5,
    d: int = 2,
    n_concepts: int = 5,
    concept_length: int = 5000,
    amplitude: float | None = None,
    noise: float = 0.0,
    seed: int = 0,
) -> Stream:
    """The Sine-MC stream (see the module docstring): ``n_concepts`` concepts of ``concept_length`` samples.

    Parameters
    ----------
    n_classes
        C ≥ 3 classes (codes 0 … C−1).
    d
        Attributes, ≥ 2 (x ~ U[0, 1]^d).
    n_concepts, concept_length
        The concepts and their length; ``drift_points`` are the concept boundaries.
    amplitude
        A of the sine curves, in (0, 1/(2C)] (None: 1/(2C), the most curved balanced partition).
    noise
        Probability that a label is replaced by another class drawn uniformly.
    seed
        The seed of the samples, the permutations and the noise.

    Examples
    --------
    >>> s = sine_mc(n_classes=3, n_concepts=3, concept_length=1000, seed=1)
    >>> s.n_classes, s.drift_points, np.bincount(s.y.astype(int)).tolist()
    (3, (1000, 2000), [1025, 953, 1022])
    >>> [list(p) for p in s.meta["permutations"]]
    [[1, 0, 2], [0, 2, 1], [1, 0, 2]]
    """
    if n_classes < 3:
        raise ValueError(f"sine-mc needs n_classes >= 3 (two classes: sine1+), got {n_classes}")
    if d < 2:
        raise ValueError(f"sine-mc needs d >= 2 attributes, got d={d}")
    if n_concepts < 1 or concept_length < 1:
        raise ValueError("n_concepts and concept_length must be >= 1")
    A = 0.5 / n_classes if amplitude is None else amplitude
    if not 0.0 < A <= 0.5 / n_classes:
        raise ValueError(f"amplitude must be in (0, 1/(2C)] = (0, {0.5 / n_classes:g}], got {amplitude}")
    if not 0.0 <= noise < 1.0:
        raise ValueError(f"noise must be in [0, 1), got {noise}")
    rng = np.random.default_rng(seed)
    n = n_concepts * concept_length
    X = rng.random((n, d))
    u = X[:, : d - 1].mean(axis=1)
    curves = np.arange(1, n_classes)[None, :] / n_classes + A * np.sin(2.0 * np.pi * u)[:, None]
    region = (X[:, d - 1 : d] > curves).sum(axis=1)
    perms = [rng.permutation(n_classes)]
    while len(perms) < n_concepts:
        candidate = rng.permutation(n_classes)
        if np.all(candidate != perms[-1]):
            perms.append(candidate)
    concept = np.arange(n) // concept_length
    y = np.asarray(perms)[concept, region].astype(np.float64)
    flip = rng.random(n) < noise
    y[flip] = (y[flip] + rng.integers(1, n_classes, size=int(flip.sum()))) % n_classes
    return Stream(
        name=f"sine-mc:C={n_classes},d={d}",
        X=X,
        y=y,
        task="classification",
        feature_names=tuple(f"x{i}" for i in range(1, d + 1)),
        drift_points=tuple(k * concept_length for k in range(1, n_concepts)),
        meta={
            "generator": "sine_mc",
            "n_classes": n_classes,
            "d": d,
            "n_concepts": n_concepts,
            "concept_length": concept_length,
            "amplitude": A,
            "noise": noise,
            "seed": seed,
            "permutations": [tuple(int(c) for c in p) for p in perms],
        },
        classes=tuple(range(n_classes)),
    )
