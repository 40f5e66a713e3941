"""Projections onto the probability simplex, the prox of the Shrub Ensemble's weights.

The Shrub Ensemble (Buschjäger, Hess, Morik, AAAI 2022) keeps its weights in
{w ≥ 0, Σw = 1, ‖w‖₀ ≤ M}; a proximal gradient step ends with :func:`prox_sparse_simplex`, which keeps
the M largest weights and projects them onto the simplex with :func:`project_simplex`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from edgedrift.models.losses import FloatArray

__all__ = ["project_simplex", "prox_sparse_simplex", "prox_sparse_simplex_inplace"]


def _project_sorted(v: FloatArray) -> FloatArray:
    """:func:`project_simplex` without the checks (v 1-D, finite, non-empty)."""
    u = np.sort(v)[::-1]
    theta_j = (1.0 - np.cumsum(u)) / np.arange(1, u.size + 1)
    # For sorted u, u_j + θ_j > 0 holds exactly for j ≤ ρ (Duchi et al. 2008, Lemma 2).
    rho = int(np.count_nonzero(u + theta_j > 0.0)) - 1
    out: FloatArray = np.maximum(v + theta_j[rho], 0.0)
    return out


def project_simplex(v: ArrayLike) -> FloatArray:
    """Euclidean projection of v onto the probability simplex {w ≥ 0, Σw = 1} (Duchi et al. 2008, Fig. 1).

    Sort descending as u, ρ = max{j : u_j + (1 − Σ_{r≤j} u_r)/j > 0}, θ = (1 − Σ_{r≤ρ} u_r)/ρ,
    w = max(v + θ, 0). The sort is a true descending sort: the Shrub Ensemble paper's reference C++ code
    sorts with ``std::greater<int>`` and so leaves weights in (−1, 1) unsorted, which gives a wrong θ.
    Empty in, empty out.

    Parameters
    ----------
    v
        A finite 1-D vector.

    Examples
    --------
    >>> project_simplex([0.5, 0.5, 0.5]).round(6).tolist()
    [0.333333, 0.333333, 0.333333]
    >>> project_simplex([2.0, 0.0, -1.0]).tolist()
    [1.0, 0.0, 0.0]
    """
    v = np.asarray(v, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError(f"project_simplex needs a 1-D vector, got shape {v.shape}")
    if v.size == 0:
        return v.copy()
    if not np.all(np.isfinite(v)):
        raise ValueError("project_simplex needs finite values")
    return _project_sorted(v)


def prox_sparse_simplex_inplace(w: FloatArray, M: int) -> None:
    """:func:`prox_sparse_simplex` written into w (a 1-D float64 array or view), without the checks."""
    if w.size > M:
        w[np.argsort(-w, kind="stable")[M:]] = 0.0
    support = w != 0.0
    if support.any():
        w[support] = _project_sorted(w[support])


def prox_sparse_simplex(w: ArrayLike, M: int) -> FloatArray:
    """The Shrub Ensemble's prox 𝓟 for {w ≥ 0, Σw = 1, ‖w‖₀ ≤ M}: hard-L0 top-M, then project the support.

    Exactly: S = the indices of the M largest entries of w by signed value (ties to the lower index; all
    entries if there are ≤ M), T = {i ∈ S : wᵢ ≠ 0}; the result is :func:`project_simplex` of w_T on T and
    0 elsewhere (all zeros if T is empty). This is the operator of the paper's reference code (its
    ``EnsembleRegularizer.h`` hard-L0, then ``to_prob_simplex`` of the non-zero weights), not a separately
    derived exact joint projection. It does coincide with the exact Euclidean projection onto the sparse
    simplex whenever no kept entry is exactly 0, because keeping the M largest entries and projecting them
    is optimal for the simplex (Kyrillidis et al. 2013, GSSP; the unit tests check it by brute force over
    all supports). It differs when a kept entry is exactly 0, which is left out of the projection.

    Parameters
    ----------
    w
        A finite 1-D vector of weights.
    M
        The largest number of non-zero weights, ≥ 1.

    Examples
    --------
    >>> prox_sparse_simplex([0.6, 0.3, 0.2], M=2).round(6).tolist()
    [0.65, 0.35, 0.0]
    >>> prox_sparse_simplex([0.5, 0.0, -3.0], M=2).tolist()  # the exact projection: (0.75, 0.25, 0)
    [1.0, 0.0, 0.0]
    """
    if M < 1:
        raise ValueError(f"M must be >= 1, got {M}")
    v = np.asarray(w, dtype=np.float64)
    if v.ndim != 1 or not np.all(np.isfinite(v)):
        raise ValueError("prox_sparse_simplex needs a finite 1-D vector")
    out = v.copy()
    prox_sparse_simplex_inplace(out, M)
    return out
