"""Online-BLS (Lei, Chen, Chen, Zhang, arXiv 2501.16932): a broad learning system with closed-form updates.

**Broad features** (eqs (1)-(3)). n2 feature-node groups z_i = x̃ W_fi + β_fi (φ linear) and n4
enhancement groups h_j = tanh(s_e·(z W_ej + β_ej)) with z = [z_1, …, z_n2]; all weights and biases are
U(−1, 1), drawn once from ``seed``. As in BLS the enhancement nodes take the feature nodes z as input
(W_ej is (n1·n2)×n3, eq. (28)), not x as the text of eq. (2) says. a = [z, h] has width m = n1·n2 + n3·n4.

* **Input scaling.** x̃ = (x − x_mean)/x_scale when a scaler is set (constructor arguments or
  :meth:`OnlineBLS.fit_scaler`, which freezes a per-feature min-max map to [0, 1] fitted on a batch of
  unlabeled rows), otherwise x̃ = x: the paper's data sets are pre-normalised to [0, 1].
* **Enhancement scaling** s_e (not in the paper). BLS scales the pre-activation by 0.8/max over the
  training data, which an online learner does not have. Here s_e is fixed from the input model
  x̃ ~ U(0, 1)^d instead: with all weights U(−1, 1), E[z_i²] = (d + 3)/9 and
  E[u²] = (n1·n2·(d + 3)/9 + 1)/3 for u = zW_e + β_e, and s_e = ``enh_rms``/√E[u²] makes the RMS of the
  pre-activation ``enh_rms``.
* **Default ``enh_rms``: it follows the memory.** Without forgetting (Algorithm 1) the default is
  ``ENH_RMS_STATIC`` = 0.2: tanh in its non-saturated but clearly non-linear range, about where BLS's
  0.8/max rule puts it; the labels soon outnumber the m = 1100 weights and the non-linear nodes pay
  (Image Segment, Table 3). With forgetting μ the weighted ridge problem sees about 1/(1 − μ) = 100
  labels (weights above λ = 1e-8 reach back ~1800), against m = 1100 weights and a ridge that
  regularises nothing: with 1000 clearly non-linear directions it nearly interpolates the recent
  labels, their noise included (Hyperplane at μ = 0.99: 71.7 % OCA instead of the paper's 92.6). The
  default with forgetting is therefore ``ENH_RMS_FORGETTING`` = 0.01: the enhancement nodes are nearly
  linear, their non-linear part has eigenvalues far below λ and drops out, and the model keeps about
  d + 1 effective directions, which 100 labels can estimate (docs/benchmarks.md, "Online-BLS against
  its paper", has the figures; docs/learning-core.md the choice).

**Output layer** (Algorithm 1). One-hot targets; classes are discovered on the fly and a new class adds a
zero column to W, which is exact because every earlier target was 0 for it. The state is the
Cholesky factor of K = AᵀA + λI, stored as R = Lᵀ (upper triangular, C-contiguous: each Givens step
touches one contiguous row), K⁽⁰⁾ = λI so R⁽⁰⁾ = √λ·I, and W⁽⁰⁾ = 0. Per labeled sample, with the
residual e = y − Wᵀa of the current weights:

1. rank-one update R ← chol(RᵀR + aaᵀ) by m Givens rotations (eq. (15)): row k of R and the work vector v
   (starting at a) are rotated with c = r_kk/r, s = v_k/r, r = hypot(r_kk, v_k), so the diagonal stays
   positive (Remark 1) and v_k becomes 0. The rotations run through BLAS ``drot`` on the flat array;
2. since B⁽ᵏ⁾ = a eᵀ is rank one (eq. (9)), ΔW = (K⁻¹a) eᵀ and W += ΔW (eq. (10)). The forward solve
   Lc = a (eq. (13)) is a by-product of the rotations: c is the first column of the rotation product,
   c_k = s_k ∏_{j<k} c_j (from G [aᵀ; R] = [0; R'] follows a = R'ᵀ c), so only the backward
   substitution R u = c (eq. (14), BLAS ``dtrsv``) is solved. No matrix is inverted.

Cost O(m²) per sample; the factor takes 8m² bytes.

**Forgetting** (Algorithm 2, μ = ``forgetting``): P⁽ᵏ⁾ = μP⁽ᵏ⁻¹⁾ + aaᵀ, L = chol(P + λI), with the ridge
λI *not* decaying. μ(P + λI) + aaᵀ = (P' + λI) − (1 − μ)λI: the ridge lost per step is full rank, so no
O(m²) update keeps it exactly. Here:

* every sample the factor is scaled by √μ and updated by rank one as above, so it is the *exact* factor of
  P⁽ᵏ⁾ + μ^s λI, s = samples since the last restoration;
* every T = ``refactor_every`` samples the lost ridge δ = (1 − μ^s)λ is put back in square-root form:
  chol(RᵀR + δI) is the R of the QR factorisation of [R; √δ·I] (LAPACK ``dtpqrt``, triangular-pentagonal
  QR, O(m³)), and the weights follow from the same orthogonal factor H (H[R; √δI] = [R'; 0]): from
  R'ᵀR'W' = RᵀRW follows R'W' = (H[RW; 0])_top (``dtpmqrt``), one backward substitution.

So the factor is always chol(P⁽ᵏ⁾ + ρλI) with ρ = μ^s ∈ [μ^(T−1), 1] (ρ = 1, i.e. Algorithm 2 exactly,
right after each restoration), and W is always the matching weighted ridge solution W = (P + ρλI)⁻¹Q,
Q = Σ μ^(k−i) a_i y_iᵀ: with K̃ = μK̃_prev + aaᵀ the rank-one ΔW of Algorithm 1 stays exact. Neither P nor Q
is stored, and nothing is re-derived from the squared matrix P + λI, which would square its condition
number (the paper's literal step, re-factorising the explicit P + λI with ``dpotrf``, loses that much
accuracy; docs/benchmarks.md §7 compares both). The √μ scaling is kept in a scalar (R = γR̂) so that no
step rescales an m×m array. T = 50 (default) amortises the O(m³) restoration over 50 labels and keeps
the ridge in [μ⁴⁹λ, λ] ≈ [0.61λ, λ] for μ = 0.99; T = 1 restores it after every sample.
"""

from __future__ import annotations

import math
from functools import cache
from types import ModuleType
from typing import Literal

import numpy as np

from edgedrift import kernels
from edgedrift.base import Estimator
from edgedrift.learners.base import MAX_SQNORM
from edgedrift.models.losses import FloatArray

_PREDICT_CHUNK = 4096
#: Default ``enh_rms`` without forgetting (Algorithm 1) and with it (Algorithm 2); see the module docstring.
ENH_RMS_STATIC = 0.2
ENH_RMS_FORGETTING = 0.01
_QR_BLOCK = 32


def scipy_linalg() -> tuple[ModuleType, ModuleType]:
    """scipy's BLAS and LAPACK wrappers, imported on first use: the other edge learners need no scipy,
    so it is the ``bls`` extra (``pip install 'edgedrift-core[bls]'``)."""
    try:
        from scipy.linalg import blas, lapack
    except ImportError as exc:
        raise ImportError(
            "OnlineBLS (strategy 'online-bls') needs scipy: pip install 'edgedrift-core[bls]'"
        ) from exc
    return blas, lapack


@cache
def _drot_capsule() -> object | None:
    """The capsule of scipy's Cython BLAS ``drot``: the routine ``scipy.linalg.blas.drot`` calls, for the
    compiled Givens loop (:func:`edgedrift.kernels` ``givens_update``); None where a scipy does not export
    it (the Python loop then runs)."""
    try:
        from scipy.linalg import cython_blas

        capsule: object = cython_blas.__pyx_capi__["drot"]
    except (ImportError, AttributeError, KeyError):
        return None
    return capsule


class OnlineBLS(Estimator):
    """Online broad learning system: random broad features, exact ridge weights by Givens rank-one updates.

    ``predict_one`` returns the class with the largest score aᵀW (ties: the class seen first) and 0.0
    before any label was learned. ``predict_proba_one`` returns ``{class: p}`` with the scores clipped at 0
    and normalised (uniform when all are ≤ 0): BLS scores are regression outputs, not calibrated
    probabilities.

    Parameters
    ----------
    n_features
        Number of features d.
    n1, n2
        Feature nodes per group and number of feature-node groups (eq. 1).
    n3, n4
        Enhancement nodes per group and number of enhancement groups (eq. 2).
    lam
        The ridge λ > 0 of the output weights.
    forgetting
        μ in (0, 1] of Algorithm 2; None: Algorithm 1 (no forgetting).
    seed
        Seed of the random feature and enhancement weights.
    x_mean, x_scale
        A frozen input map x̃ = (x − x_mean)/x_scale (None: offset 0, scale 1); :meth:`fit_scaler` sets
        both from unlabeled rows.
    enh_rms
        RMS of the enhancement pre-activation under the input model; None (default): ``ENH_RMS_STATIC``
        (0.2) without forgetting, ``ENH_RMS_FORGETTING`` (0.01) with it (see the module docstring).
    refactor_every
        T: the decayed ridge is restored every T labels (forgetting only).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(300, 2))
    >>> y = np.where((X[:, 0] - 0.5) * (X[:, 1] - 0.5) > 0, 1.0, -1.0)  # not linearly separable
    >>> bls = OnlineBLS(2, n3=100, forgetting=0.99, enh_rms=0.2, seed=0)  # non-linear enhancement nodes
    >>> hits = 0
    >>> for x, label in zip(X, y):
    ...     hits += int(bls.predict_one(x) == label)
    ...     bls.learn_one(x, label)
    >>> round(hits / len(y), 2)
    0.9
    >>> sorted(bls.predict_proba_one(np.array([0.9, 0.9])))
    [-1.0, 1.0]
    """

    task: Literal["classification"] = "classification"

    def __init__(
        self,
        n_features: int,
        n1: int = 10,
        n2: int = 10,
        n3: int = 1000,
        n4: int = 1,
        lam: float = 1e-8,
        forgetting: float | None = None,
        seed: int = 0,
        x_mean: FloatArray | None = None,
        x_scale: FloatArray | None = None,
        enh_rms: float | None = None,
        refactor_every: int = 50,
    ) -> None:
        if min(n_features, n1, n2, n3, n4) < 1:
            raise ValueError("n_features, n1, n2, n3 and n4 must be >= 1")
        if not lam > 0.0:
            raise ValueError("lam must be > 0")
        if forgetting is not None and not 0.0 < forgetting <= 1.0:
            raise ValueError("forgetting must be in (0, 1]")
        if refactor_every < 1:
            raise ValueError("refactor_every must be >= 1")
        self.n_features = n_features
        self.n1, self.n2, self.n3, self.n4 = n1, n2, n3, n4
        self.lam = lam
        self.forgetting = forgetting
        self.seed = seed
        self.refactor_every = refactor_every
        scipy_linalg()  # fail at construction, with the remedy, when scipy is missing
        self.n_feature_nodes = n1 * n2
        self.m = n1 * n2 + n3 * n4
        if enh_rms is None:
            enh_rms = ENH_RMS_STATIC if forgetting is None else ENH_RMS_FORGETTING
        if not enh_rms > 0.0:
            raise ValueError("enh_rms must be > 0")
        self.enh_rms = enh_rms
        enh_scale = enh_rms / math.sqrt((self.n_feature_nodes * (n_features + 3) / 9.0 + 1.0) / 3.0)
        self.enh_scale = enh_scale
        self.n_learned = 0
        self.n_skipped = 0
        self.x_mean: FloatArray | None = None
        self.x_scale: FloatArray | None = None
        self.set_scaler(x_mean, x_scale)
        rng = np.random.default_rng(seed)
        p, q = self.n_feature_nodes, n3 * n4
        # Groups side by side: columns [i·n1, (i+1)·n1) are W_fi, columns [j·n3, (j+1)·n3) are W_ej.
        self.W_f: FloatArray = rng.uniform(-1.0, 1.0, (n_features, p))
        self.b_f: FloatArray = rng.uniform(-1.0, 1.0, p)
        self.W_e: FloatArray = rng.uniform(-1.0, 1.0, (p, q)) * enh_scale
        self.b_e: FloatArray = rng.uniform(-1.0, 1.0, q) * enh_scale
        m = self.m
        # R = Lᵀ (C order, upper) is the transpose view of an F-order buffer that LAPACK/BLAS use in place.
        self._L: FloatArray = np.zeros((m, m), order="F")
        self._a: FloatArray = np.empty(m)
        self._v: FloatArray = np.empty(m)
        self._c: FloatArray = np.empty(m)
        self._xs: FloatArray = np.empty(n_features)
        self.reset()

    # ----------------------------------------------------------------------------------------- state

    @property
    def R(self) -> FloatArray:
        """The current upper Cholesky factor R = Lᵀ of K (a copy, scaled out of its internal form)."""
        return np.triu(self._L.T) * self._gamma

    @property
    def K(self) -> FloatArray:
        """K = RᵀR, the matrix the factor currently represents (for checks; O(m³))."""
        R = self.R
        return R.T @ R

    def reset(self) -> None:
        """Forget everything learned (classes, factor, weights); keep the random features and the scaler."""
        m = self.m
        self._L.fill(0.0)
        self._L.reshape(-1, order="F")[:: m + 1] = math.sqrt(self.lam)
        self._gamma = 1.0
        self._ridge = self.lam
        self.classes: list[float] = []
        self._class_index: dict[float, int] = {}
        self.W: FloatArray = np.zeros((m, 0))
        self.n_learned = 0
        self.n_skipped = 0

    @property
    def memory_bytes(self) -> int:
        """Bytes of all arrays held (factor, W, random weights, scaler, work buffers)."""
        arrays = [self._L, self._a, self._v, self._c, self._xs, self.W, self.W_f, self.b_f, self.W_e]
        arrays += [x for x in (self.b_e, self.x_mean, self.x_scale) if x is not None]
        return int(sum(x.nbytes for x in arrays))

    # --------------------------------------------------------------------------------------- scaling

    def set_scaler(self, x_mean: FloatArray | None, x_scale: FloatArray | None) -> None:
        """Freeze the input map x̃ = (x − x_mean)/x_scale (None for either: offset 0 / scale 1)."""
        if self.n_learned:
            raise RuntimeError("the input scaler must be set before the first learn_one")
        d = self.n_features
        if x_mean is None and x_scale is None:
            self.x_mean = self.x_scale = None
            return
        mean = np.zeros(d) if x_mean is None else np.array(x_mean, dtype=np.float64).reshape(d)
        scale = np.ones(d) if x_scale is None else np.array(x_scale, dtype=np.float64).reshape(d)
        if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(scale)) and np.all(scale != 0.0)):
            raise ValueError("x_mean must be finite and x_scale finite and non-zero")
        self.x_mean, self.x_scale = mean, scale

    def fit_scaler(self, X: FloatArray, method: Literal["minmax", "zscore"] = "minmax") -> None:
        """Freeze a per-feature affine map fitted on unlabeled rows X: min-max to [0, 1] or z-score.

        Constant features get scale 1. Must be called before learning (it changes the broad features).
        """
        X = np.asarray(X, dtype=np.float64).reshape(-1, self.n_features)
        if len(X) == 0:
            raise ValueError("fit_scaler needs at least one row")
        if method == "minmax":
            lo, hi = X.min(axis=0), X.max(axis=0)
            span = hi - lo
            self.set_scaler(lo, np.where(span > 0.0, span, 1.0))
        elif method == "zscore":
            sd = X.std(axis=0)
            self.set_scaler(X.mean(axis=0), np.where(sd > 0.0, sd, 1.0))
        else:
            raise ValueError(f"unknown scaler method {method!r}")

    # ---------------------------------------------------------------------------------- broad features

    def features(self, x: FloatArray) -> FloatArray:
        """The broad feature vector a = [z, h] of one sample (eqs (1)-(3)), as a new array."""
        return self._features(np.asarray(x, dtype=np.float64)).copy()

    def _features(self, x: FloatArray) -> FloatArray:
        """a into the reused buffer ``self._a``."""
        xs = x
        if self.x_mean is not None and self.x_scale is not None:
            xs = self._xs
            np.subtract(x, self.x_mean, out=xs)
            xs /= self.x_scale
        a, p = self._a, self.n_feature_nodes
        z, h = a[:p], a[p:]
        np.matmul(xs, self.W_f, out=z)
        z += self.b_f
        np.matmul(z, self.W_e, out=h)
        h += self.b_e
        np.tanh(h, out=h)
        return a

    def features_many(self, X: FloatArray) -> FloatArray:
        """Broad features of a batch, one row per sample."""
        X = np.asarray(X, dtype=np.float64).reshape(-1, self.n_features)
        if self.x_mean is not None and self.x_scale is not None:
            X = (X - self.x_mean) / self.x_scale
        Z = X @ self.W_f + self.b_f
        H = np.tanh(Z @ self.W_e + self.b_e)
        return np.hstack([Z, H])

    # ------------------------------------------------------------------------------------- prediction

    def score_one(self, x: FloatArray) -> FloatArray:
        """The output scores aᵀW, one per class in ``self.classes`` order."""
        a = self._features(np.asarray(x, dtype=np.float64))
        return np.asarray(a @ self.W, dtype=np.float64)

    def predict_one(self, x: FloatArray) -> float:
        """The label with the largest score (0.0 before any label was learned)."""
        if not self.classes:
            return 0.0
        return self.classes[int(np.argmax(self.score_one(x)))]

    def predict_proba_one(self, x: FloatArray) -> dict[float, float]:
        """``{class: p}``: scores clipped at 0 and normalised (uniform if all ≤ 0); {} before any label."""
        if not self.classes:
            return {}
        s = np.maximum(self.score_one(x), 0.0)
        total = float(s.sum())
        if total > 0.0:
            return {c: float(v) / total for c, v in zip(self.classes, s, strict=True)}
        return {c: 1.0 / len(self.classes) for c in self.classes}

    def predict_many(self, X: FloatArray) -> FloatArray:
        """``predict_one`` for every row of X (vectorised in chunks)."""
        X = np.asarray(X, dtype=np.float64).reshape(-1, self.n_features)
        if not self.classes:
            return np.zeros(len(X))
        labels = np.asarray(self.classes, dtype=np.float64)
        out = np.empty(len(X))
        for start in range(0, len(X), _PREDICT_CHUNK):
            stop = start + _PREDICT_CHUNK
            out[start:stop] = labels[np.argmax(self.features_many(X[start:stop]) @ self.W, axis=1)]
        return out

    # --------------------------------------------------------------------------------------- learning

    def _class_column(self, y: float) -> int:
        j = self._class_index.get(y)
        if j is None:
            j = len(self.classes)
            self.classes.append(y)
            self._class_index[y] = j
            self.W = np.ascontiguousarray(np.hstack([self.W, np.zeros((self.m, 1))]))
        return j

    def learn_one(self, x: FloatArray, y: float) -> None:
        """Algorithm 1 (or 2 with ``forgetting``) on one labeled sample; prediction happens outside.

        A sample whose label is not finite, or whose broad features or residual have a squared norm
        above ``MAX_SQNORM`` (e.g. x = 1e308), is skipped and counted in ``n_skipped`` (and in
        ``n_learned``, which counts every sample received): the factor and weights could not stay finite.
        """
        y = float(y)
        a = self._features(np.asarray(x, dtype=np.float64))
        if not (math.isfinite(y) and float(a @ a) <= MAX_SQNORM and self._moderate(a @ self.W)):
            self.n_skipped += 1
            self.n_learned += 1
            if self.forgetting is not None and self.n_learned % self.refactor_every == 0:
                self._restore_ridge()
            return
        j = self._class_column(y)
        e = -(a @ self.W)
        e[j] += 1.0
        v = self._v
        mu = self.forgetting
        if mu is None:
            v[:] = a
        else:
            self._gamma *= math.sqrt(mu)
            np.multiply(a, 1.0 / self._gamma, out=v)
            self._ridge *= mu
        self._rank_one_update(v)
        u = scipy_linalg()[0].dtrsv(self._L, self._c, 1, 0, 1, 1, 0, 1)
        u *= 1.0 / self._gamma
        self.W += np.outer(u, e)
        self.n_learned += 1
        if mu is not None and self.n_learned % self.refactor_every == 0:
            self._restore_ridge()

    @staticmethod
    def _moderate(v: FloatArray) -> bool:
        """Whether the squared norm of v is finite and at most ``MAX_SQNORM``."""
        return float(v @ v) <= MAX_SQNORM

    def learn_many(self, X: FloatArray, y: FloatArray) -> None:
        """``learn_one`` for every row (in order)."""
        X = np.asarray(X, dtype=np.float64).reshape(-1, self.n_features)
        for xi, yi in zip(X, np.asarray(y, dtype=np.float64).reshape(-1), strict=True):
            self.learn_one(xi, float(yi))

    def _rank_one_update(self, v: FloatArray) -> None:
        """R̂ ← chol(R̂ᵀR̂ + vvᵀ) by Givens rotations (eq. (15)); v is destroyed; self._c ← R̂⁻ᵀv.

        Row k of R̂ is contiguous at offset k·(m+1) of the flat C-order view. Rotation k changes only row
        k and v, so the diagonal is read once into a list and written back at the end. v_k = 0 means the
        identity rotation (c = 1, s = 0), which is skipped.
        """
        m = self.m
        Rf = self._L.reshape(-1, order="F")  # the C-order flat view of R̂ = Lᵀ
        diag = Rf[:: m + 1]
        compiled, drot = kernels.MODULE, _drot_capsule()
        if compiled is not None and drot is not None:  # the loop below in one call: same drot and hypot
            try:
                dgc = np.ascontiguousarray(diag)
                compiled.givens_update(Rf, v, self._c, dgc, drot, math.hypot)
                diag[:] = dgc
                return
            except kernels.LayoutError:  # arrays the kernel does not take: the loop
                pass
        dg = diag.tolist()
        c_out = self._c
        item, hypot, rot = v.item, math.hypot, scipy_linalg()[0].drot
        w0 = 1.0
        off = 1
        for k in range(m - 1):
            vk = item(k)
            if vk == 0.0:
                c_out[k] = 0.0
                off += m + 1
                continue
            rkk = dg[k]
            r = hypot(rkk, vk)
            dg[k] = r
            c, s = rkk / r, vk / r
            c_out[k] = s * w0
            w0 *= c
            rot(Rf, v, c, s, m - k - 1, off, 1, k + 1, 1, 1, 1)
            off += m + 1
        vk = item(m - 1)
        r = hypot(dg[m - 1], vk)
        c_out[m - 1] = vk / r * w0
        dg[m - 1] = r
        diag[:] = dg

    @property
    def ridge(self) -> float:
        """The ridge the factor currently holds: λ·μ^s (= λ right after a restoration, always λ without μ)."""
        return self._ridge

    def _restore_ridge(self) -> None:
        """Put the decayed ridge back, R ← chol(RᵀR + δI) with δ = λ − ridge, by the QR of [R; √δI].

        In the internal scale R̂ (R = γR̂) the stacked matrix is [R̂; (√δ/γ)I]. ``dtpqrt`` returns its R'
        (upper, diagonal of either sign) and the block reflector H; R'W' = (H[R̂W; 0])_top gives the new
        weights (M'W' = MW = Q), solved with R' as it comes out, before the row signs are made positive.
        """
        delta = self.lam - self._ridge
        if delta <= 0.0:
            return
        m, g = self.m, self._gamma
        lapack = scipy_linalg()[1]
        A = np.asfortranarray(self._L.T)  # R̂, upper triangular, zeros below
        B = np.zeros((m, m), order="F")
        B.reshape(-1, order="F")[:: m + 1] = math.sqrt(delta) / g
        Rn, V, T, info = lapack.dtpqrt(m, min(_QR_BLOCK, m), A, B, 1, 1)
        if info != 0:
            raise np.linalg.LinAlgError(f"dtpqrt failed (info={info})")
        if self.classes:
            top = np.asfortranarray(self._L.T @ self.W)
            top, _, info = lapack.dtpmqrt(m, V, T, top, np.zeros_like(top), "L", "T", 1, 1)
            if info != 0:
                raise np.linalg.LinAlgError(f"dtpmqrt failed (info={info})")
            W, info = lapack.dtrtrs(Rn, top, lower=0, trans=0, unitdiag=0, overwrite_b=1)
            if info != 0:
                raise np.linalg.LinAlgError(f"dtrtrs failed (info={info})")
            self.W = np.ascontiguousarray(W)
        # L = R'ᵀ with rows of R' sign-flipped to a positive diagonal (Remark 1) and γ folded in.
        flip = np.where(np.diagonal(Rn) < 0.0, -g, g)
        np.multiply(Rn.T, flip[None, :], out=self._L)
        self._gamma = 1.0
        self._ridge = self.lam

    # ----------------------------------------------------------------------------------------- misc

    def anchor(self, model: object) -> None:
        """No-op: a linear batch model cannot re-anchor broad features."""
