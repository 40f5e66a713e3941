"""The model-distance bound of Theorem 1 and the prediction bounds of Lemma 1 (DRUiD paper, Section 4).

β₁ solves eq. (1) on window W₁ with constant C₁; β₂ would solve it on the current window W₂ with C₂.
With Δg = Σ_{added} ∇ℓᵢ(β₁) − Σ_{removed} ∇ℓᵢ(β₁) (all gradients taken at β₁, in the space β₁ was
trained in), β₂ lies in the ball Ω with centre m = β₁ − r and radius ‖r‖, so ‖β₁ − β₂‖ ≤ 2‖r‖.

A one-vs-rest model of C ≥ 3 classes (β and Δg (d+1, C) matrices) solves C independent eq. (1) problems,
so every formula holds column by column: r_c from eq. (2), ‖β₁_c − β₂_c‖ ≤ 2‖r_c‖ and hence
‖B₁ − B₂‖_F ≤ 2‖R‖_F; the functions below take either shape (derivation in docs/learning-core.md).
"""

from __future__ import annotations

import numpy as np

from edgedrift.models.losses import FloatArray


def radius_vector(beta1: FloatArray, delta_g: FloatArray, C1: float, C2: float | None = None) -> FloatArray:
    """Eq. (2): r = ½(β₁ − (C₂/C₁)β₁ + C₂Δg); C₂ = C₁ gives Table 1's r = (C/2)Δg."""
    if C2 is None:
        C2 = C1
    return 0.5 * ((1.0 - C2 / C1) * beta1 + C2 * delta_g)


def distance_bound(r: FloatArray) -> float:
    """Theorem 1: ‖β₁ − β₂‖ ≤ 2‖r‖ (Frobenius norms for the (d+1, C) radius matrix of C classes)."""
    return 2.0 * float(np.linalg.norm(r))


def radius_vector_tikhonov(
    beta1: FloatArray, delta_g: FloatArray, AtA: FloatArray, C1: float, C2: float | None = None
) -> FloatArray:
    """Tikhonov form (regulariser ½‖Aβ‖²): r = ½(β₁ − (C₂/C₁)β₁ + C₂ (AᵀA)⁻¹ Δg).

    Note on the paper: with AᵀA ≠ I the set containing β₂ is the ellipsoid ‖β − m‖_{AᵀA} ≤ ‖r‖_{AᵀA},
    not a Euclidean ball, so the guarantee is ‖A(β₁ − β₂)‖ ≤ 2‖A r‖ (see :func:`tikhonov_distance_bound`);
    the Euclidean ‖β₁ − β₂‖ ≤ 2‖r‖ does not hold in general.
    """
    if C2 is None:
        C2 = C1
    return 0.5 * ((1.0 - C2 / C1) * beta1 + C2 * np.linalg.solve(AtA, delta_g))


def tikhonov_distance_bound(r: FloatArray, A: FloatArray) -> float:
    """‖A(β₁ − β₂)‖ ≤ 2‖A r‖ for the Tikhonov-regularised problem."""
    return 2.0 * float(np.linalg.norm(A @ r))


def prediction_bounds(X_aug: FloatArray, beta1: FloatArray, r: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Lemma 1, eq. (7): L, U = x̃ᵀβ₁ − x̃ᵀr ∓ ‖x̃‖‖r‖ bound x̃ᵀβ₂ for augmented samples (n, d+1); for a
    (d+1, C) β₁ and r the bounds of every column, (n, C), each with its own radius ‖r_c‖."""
    X_aug = np.atleast_2d(X_aug)
    centre = X_aug @ (beta1 - r)
    norms = np.linalg.norm(X_aug, axis=1)
    half = np.outer(norms, np.linalg.norm(r, axis=0)) if r.ndim == 2 else norms * float(np.linalg.norm(r))
    return centre - half, centre + half


def argmax_certain(lower: FloatArray, upper: FloatArray) -> np.ndarray:
    """Whether the argmax class of β₂ is known from the column bounds (n, C) of :func:`prediction_bounds`:
    the class k with the highest lower bound has L_k > U_c for every other class c (then
    x̃ᵀβ₂_k ≥ L_k > U_c ≥ x̃ᵀβ₂_c). For C = 2 one-vs-rest columns this is the sign rule of Lemma 1.

    Examples
    --------
    >>> lower = np.array([[2.0, -1.0, 0.0], [2.0, 1.0, 0.0]])
    >>> upper = np.array([[3.0, 1.5, 1.0], [3.0, 2.5, 1.0]])
    >>> argmax_certain(lower, upper).tolist()
    [True, False]
    """
    rows = np.arange(len(lower))
    k = np.argmax(lower, axis=1)
    others = np.array(upper, dtype=np.float64, copy=True)
    others[rows, k] = -np.inf
    return np.asarray(lower[rows, k] > others.max(axis=1))
