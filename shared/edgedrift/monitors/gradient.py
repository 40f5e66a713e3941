"""Δg of Theorem 1, maintained in O(d) per added or evicted labeled sample.

Δg = Σ_{i∈D_A} ∇ℓᵢ(β₁) − Σ_{i∈D_R} ∇ℓᵢ(β₁): D_A are the samples added since β₁ was trained and still in
the window, D_R the training samples of β₁ that have left it. Gradients are taken in β₁'s training
space (augmented, and standardised if the model carries a scaler).

The radius vector also carries β₁'s optimality residual ρ = β₁ + C₁ Σ_{D₁} ∇ℓᵢ(β₁) (zero at the exact
optimum), computed once per batch model: with it r = ½(β₁ + C₂ Σ_{D₂} ∇ℓᵢ(β₁)) exactly, so the bound of
Theorem 1 holds even though the solver stops at a finite tolerance.

A sample whose gradient is non-finite or huge (‖∇ℓ‖² above ``G2_MAX``, e.g. x = 1e308) adds nothing
and is counted in ``n_skipped``; its eviction is skipped by the same test, so Δg never turns NaN or inf.

For a one-vs-rest model of C ≥ 3 classes Δg is the (d+1, C) matrix of the C columns' Δg (column c with
the labels ±1 of "class c against the rest"), kept flattened in β's row-major order as one vector of
(d+1)·C entries: one sample's gradient is x̃ ∂ℓ/∂zᵀ, ∂ℓ/∂z_c = ℓ'(y_c, x̃ᵀβ_c). That path is numpy only
(the compiled kernels take a binary model's weight vector).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgedrift import kernels
from edgedrift.bounds import radius_vector
from edgedrift.labels import one_vs_rest_targets
from edgedrift.models.document import BatchModel
from edgedrift.models.linear import LinearModel
from edgedrift.models.losses import FloatArray
from edgedrift.monitors.base import Evictions, Monitor, require_linear

#: Largest squared norm of one sample's gradient that Δg takes in (larger or non-finite: skipped).
G2_MAX = 1e100


def step_counts(
    n_added: int, n_evicted: int, n_orig: int, added: np.ndarray, evicted: np.ndarray
) -> FloatArray:
    """|D_A| + |D_R| of a Δg that has taken ``n_added`` samples and seen ``n_evicted`` evictions of a
    window that held ``n_orig`` at the reset, after the given numbers of further additions and
    evictions (vectorised)."""
    ev = n_evicted + evicted
    removed = np.minimum(ev, n_orig)
    new = n_added + added - np.maximum(0, ev - n_orig)
    return np.asarray(removed + new, dtype=np.float64)


class DeltaG:
    """Running Δg for one batch model; call :meth:`reset` for every new model."""

    def __init__(self) -> None:
        self.model: LinearModel | None = None
        self._multi = False
        self._codes = np.zeros(0)
        self.vec = np.zeros(0)
        self.residual = np.zeros(0)
        self._xa = np.zeros(0)
        self._tmp = np.zeros(0)
        self._orig = 0
        self._evicted = 0
        self.n_added = 0
        self.n_skipped = 0

    def reset(self, model: LinearModel, X: FloatArray, y: FloatArray) -> None:
        """Start from Δg = 0 for ``model`` trained on the window (X, y)."""
        self.model = model
        self._multi = model.multiclass
        self._codes = np.arange(model.n_classes, dtype=np.float64)
        dim = model.beta.size
        self.vec = np.zeros(dim)
        self._tmp = np.empty(dim)
        self._xa = np.empty(model.n_features + 1)
        self._xa[-1] = model.bias
        self._mean: FloatArray | None = None if model.scaler is None else model.scaler.mean
        d = model.n_features
        self._inv_scale: FloatArray = np.ones(d) if model.scaler is None else 1.0 / model.scaler.scale
        self._raw_coef = model.raw_coef
        self._raw_intercept = model.raw_intercept
        self._loss = model.loss
        self._bias = model.bias
        self.residual = model.beta + model.C * model.gradient_sum(X, y) if len(y) else model.beta.copy()
        self._orig = len(y)
        self._evicted = 0
        self.n_added = 0
        self._metric: FloatArray | None = None
        self.robust = np.zeros(dim)
        # Moments of the clipped gradients of the added (out-of-sample) samples, for calibration.
        self.added_sum = np.zeros(dim)
        self.added_outer = np.zeros((dim, dim))

    def enable_robust(self, metric: FloatArray, radius: float) -> None:
        """Also keep ``robust`` = Σ_A clip(gᵢ) − Σ_R clip(gᵢ), every gradient shrunk to norm ≤ radius
        in the metric ``metric`` (gᵀMg ≤ radius²), so a single outlier cannot dominate a test statistic.
        The clip is a fixed function of the sample, so an evicted sample removes what it added."""
        self._metric = metric
        self._mg = np.empty(len(metric))
        self._radius2 = radius * radius
        self.robust[:] = 0.0
        self.added_sum[:] = 0.0
        self.added_outer[:] = 0.0

    def _clipped(self, g: FloatArray) -> FloatArray:
        assert self._metric is not None
        q = float(g @ np.matmul(self._metric, g, out=self._mg))
        if q > self._radius2:
            g *= (self._radius2 / q) ** 0.5
        return g

    def augment(self, x: FloatArray) -> FloatArray:
        """x̃ of one raw sample in β₁'s training space, in a reused buffer (valid until the next call)."""
        xa = self._xa
        if self._mean is None:
            xa[:-1] = x
        else:
            np.subtract(x, self._mean, out=xa[:-1])
            xa[:-1] *= self._inv_scale
        return xa

    def _track_compiled(self, x: FloatArray, y: float, added: bool) -> bool | None:
        """:meth:`add` (or one row of :meth:`remove`) in one compiled call (:mod:`edgedrift.kernels`):
        whether the gradient was taken; None where there is no kernel for the loss or these arrays (or the
        model is multi-class)."""
        if self._multi:
            return None
        found = kernels.for_loss(self._loss)
        if found is None:
            return None
        k, code = found
        metric = self._metric
        robust = metric is not None
        try:
            taken: bool = k.grad_track(
                x, y, code, self._raw_coef, self._raw_intercept, self._mean, self._inv_scale, self._bias,
                self._xa, self._tmp, G2_MAX, self.vec, 1.0 if added else -1.0, metric,
                self._mg if robust else None, self._radius2 if robust else 0.0, self.robust,
                self.added_sum if robust and added else None, self.added_outer,
            )  # fmt: skip
        except kernels.LayoutError:  # an array the kernel does not take (not contiguous, say)
            return None
        return taken

    def add(self, x: FloatArray, y: float) -> None:
        """Δg += ∇ℓ(β₁) of a new labeled sample (nothing if the gradient is not finite and moderate)."""
        self.n_added += 1
        taken = self._track_compiled(x, y, added=True)
        if taken is not None:
            self.n_skipped += not taken
            return
        if not self._gradient(x, y):
            self.n_skipped += 1
            return
        self.vec += self._tmp
        if self._metric is not None:
            g = self._clipped(self._tmp)
            self.robust += g
            self.added_sum += g
            self.added_outer += np.multiply.outer(g, g)

    def _gradient(self, x: FloatArray, y: float) -> bool:
        """∇ℓ(β₁) of one sample into ``self._tmp``; False (skip it) unless its squared norm ≤ G2_MAX."""
        if self._multi:
            dz = self._loss.dz(
                np.where(self._codes == y, 1.0, -1.0), x @ self._raw_coef + self._raw_intercept
            )
            out = self._tmp.reshape(len(self._xa), len(dz))
            np.multiply(self.augment(x)[:, None], dz, out=out)
            return float(self._tmp @ self._tmp) <= G2_MAX
        c = self._loss.dz_one(y, float(self._raw_coef @ x) + self._raw_intercept)
        g = np.multiply(self.augment(x), c, out=self._tmp)
        return float(g @ g) <= G2_MAX

    def remove(self, X: FloatArray, y: FloatArray, k: int) -> None:
        """Δg −= ∇ℓ(β₁) of the k samples the window just evicted (rows of X, y)."""
        for i in range(k):
            if self._track_compiled(X[i], float(y[i]), added=False) is not None:
                continue
            if not self._gradient(X[i], float(y[i])):
                continue  # skipped when it was added
            self.vec -= self._tmp
            if self._metric is not None:
                self.robust -= self._clipped(self._tmp)
        self._evicted += k

    def gradients(self, X: FloatArray, y: FloatArray) -> FloatArray:
        """Per-sample gradients ∇ℓᵢ(β₁) in β₁'s training space, shape (k, d+1) (multi-class: (k, (d+1)·C),
        rows flattened as Δg is); rows that :meth:`add` would skip are zero."""
        return self._gradients(X, y)[0]

    def _gradients(self, X: FloatArray, y: FloatArray) -> tuple[FloatArray, int]:
        """:meth:`gradients` and the number of rows skipped (zeroed)."""
        z = X @ self._raw_coef + self._raw_intercept
        G = np.empty((len(y), X.shape[1] + 1))
        if self._mean is None:
            G[:, :-1] = X
        else:
            np.multiply(X - self._mean, self._inv_scale, out=G[:, :-1])
        G[:, -1] = self._bias
        if self._multi:
            dz = self._loss.dz(one_vs_rest_targets(y, len(self._codes)), z)
            G = np.einsum("ij,ic->ijc", G, dz).reshape(len(y), -1)
        else:
            G *= self._loss.dz(y, z)[:, None]
        flat = G.reshape(-1)
        if float(flat @ flat) <= G2_MAX:  # then every row passes :meth:`add`'s test
            return G, 0
        bad = ~(np.einsum("ij,ij->i", G, G) <= G2_MAX)
        G[bad] = 0.0
        return G, int(np.count_nonzero(bad))

    def clip(self, G: FloatArray) -> FloatArray:
        """Row-wise robust clip of :meth:`enable_robust` (G itself when robust tracking is off)."""
        if self._metric is None:
            return G
        q = np.einsum("ij,jk,ik->i", G, self._metric, G)
        factor = np.sqrt(np.minimum(1.0, self._radius2 / np.maximum(q, 1e-300)))
        return np.asarray(G * factor[:, None], dtype=np.float64)

    def _many_compiled(self, X: FloatArray, y: FloatArray, added: bool) -> FloatArray | None:
        """:meth:`add_many` (or :meth:`remove_many`) in one compiled call: the contributions R; None where
        there is no kernel for the loss or these arrays, or the model is multi-class (then the numpy code
        runs)."""
        if self._multi:
            return None
        found = kernels.for_loss(self._loss)
        if found is None:
            return None
        k, code = found
        robust = self._metric is not None
        R = np.empty((len(y), len(self.vec)))
        try:
            skipped: int = k.grad_track_many(
                X, y, code, self._raw_coef, self._raw_intercept, self._mean, self._inv_scale, self._bias,
                G2_MAX, self.vec, 1.0 if added else -1.0, self._metric, self._radius2 if robust else 0.0,
                self.robust, self.added_sum if robust and added else None, self.added_outer, R,
            )  # fmt: skip
        except kernels.LayoutError:  # an array the kernel does not take (not contiguous, say)
            return None
        if added:
            self.n_skipped += skipped
            self.n_added += len(y)
        else:
            self._evicted += len(y)
        return R

    def add_many(self, X: FloatArray, y: FloatArray) -> FloatArray:
        """Add a batch; returns its (clipped) per-sample contributions, for step-wise statistics."""
        R = self._many_compiled(X, y, added=True)
        if R is not None:
            return R
        G, n_bad = self._gradients(X, y)
        self.n_skipped += n_bad
        self.vec += G.sum(axis=0)
        R = self.clip(G)
        if self._metric is not None:
            self.robust += R.sum(axis=0)
            self.added_sum += R.sum(axis=0)
            self.added_outer += R.T @ R
        self.n_added += len(y)
        return R

    def remove_many(self, X: FloatArray, y: FloatArray) -> FloatArray:
        """Remove a batch of evicted samples; returns their (clipped) contributions."""
        R = self._many_compiled(X, y, added=False)
        if R is not None:
            return R
        G = self.gradients(X, y)
        self.vec -= G.sum(axis=0)
        R = self.clip(G)
        if self._metric is not None:
            self.robust -= R.sum(axis=0)
        self._evicted += len(y)
        return R

    @property
    def n_evicted(self) -> int:
        """Samples the window has evicted since the reset (β₁'s training samples first, FIFO)."""
        return self._evicted

    @property
    def n_orig(self) -> int:
        """β₁'s training samples: the window at the reset."""
        return self._orig

    @property
    def n_removed(self) -> int:
        """|D_R|: training samples of β₁ that have left the window (FIFO eviction)."""
        return min(self._evicted, self._orig)

    @property
    def n_new_in_window(self) -> int:
        """|D_A|: samples added since the reset that are still in the window."""
        return self.n_added - max(0, self._evicted - self._orig)

    def radius(self, C2: float | None = None) -> FloatArray:
        """r of eq. (2), corrected for β₁'s optimality residual (see the module docstring); shaped like β
        (the (d+1, C) radius matrix R of a multi-class model, one column's r per class)."""
        assert self.model is not None
        C1 = self.model.C
        C2 = C1 if C2 is None else C2
        beta = self.model.beta
        return radius_vector(beta, self.vec.reshape(beta.shape), C1, C2) + (0.5 * C2 / C1) * self.residual


class BoundMonitor(Monitor):
    """A monitor built on Δg (DRUiD, PredSign): Δg under β₁, the radius vector, readable bound statistics."""

    def __init__(self) -> None:
        super().__init__()
        self.delta_g = DeltaG()
        self.num_warnings = 0

    def reset(self, model: BatchModel, X: FloatArray, y: FloatArray) -> None:
        self.delta_g.reset(require_linear(model, self.name), X, y)
        self.num_warnings = 0
        self.drift_detected = False
        self.warning_detected = False

    def _track(self, x: FloatArray, y: float, window: Evictions, n_evicted: int) -> None:
        if n_evicted:
            self.delta_g.remove(window.evicted_X, window.evicted_y, n_evicted)
        self.delta_g.add(x, y)

    @property
    def stats(self) -> dict[str, Any]:
        dg = self.delta_g
        out = {**super().stats, "warnings": self.num_warnings}
        if dg.model is not None:
            out["delta_g_norm"] = float(np.linalg.norm(dg.vec))
            out["bound"] = 2.0 * float(np.linalg.norm(dg.radius()))
            out["n_added"] = dg.n_added
            out["skipped"] = dg.n_skipped
        return out
