"""Shrub Ensembles (Buschjäger, Hess, Morik, AAAI 2022) on the edge: a weighted set of ≤ M shrubs.

The model is f(x) = Σᵢ wᵢ·hᵢ(x), hᵢ(x) the class-probability vector of shrub i. The weights solve the
paper's objective min_w Σₜ ℓ(f(xₜ), yₜ) s.t. ‖w‖₀ ≤ M, w ≥ 0, Σw = 1 by proximal gradient descent on the
loss of a sliding window 𝓑 of B labelled samples, w ← 𝓟(w − α∇_w L_𝓑(w)) (Algorithm 1), with the MSE
loss ℓ = (1/C)‖f(x) − y‖² on one-hot y as in the paper's reference code.

In EdgeDrift the cloud trains the shrubs (``edgedrift.training.shrub.train_shrub``) on the edge loop's
window when a policy asks for a recompute; the loop hands each one to :meth:`ShrubEnsemble.anchor`,
which runs Algorithm 1's lines 6-12: append the tree with weight 0, take ``burnin_steps + 1`` proximal
gradient steps on the window, prune zero weights. Between shrubs the ensemble keeps its own window (the
paper keeps 𝓑 on the device) and, with ``update_every`` > 0, takes one proximal step every that many
labels. Only numpy is used here: this module runs on edges. The trees live in a
:class:`~.packed_forest.PackedForest`.

The window is a preallocated ring of B slots, not :mod:`edgedrift.window`'s ring buffer: the per-tree
class probabilities of every window row are cached (the paper's memory term 2·B·(M+1)) and the one-hot
labels kept, both addressed by the row's slot, the features are float32 (the shrubs compare float32),
and the loss is a sum over the rows, so neither their order, timestamps nor evicted copies are needed. A
label costs one descent of x through the live trees (reused from the preceding ``predict_one(x)``), a
gradient step two (M+1)×(B·C) matrix-vector products, and a new tree one descent of the window.

The module is over 500 lines because the ring, its probability cache, the classes and the optimiser
address the same slots; split apart, each would have to keep the others' bookkeeping in step.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from edgedrift.base import Estimator
from edgedrift.learners.packed_forest import PackedForest
from edgedrift.learners.simplex import prox_sparse_simplex_inplace
from edgedrift.models.losses import FloatArray
from edgedrift.models.tree import SHRUB_KIND, validate_tree_document

__all__ = ["PAPER_MAX_DEPTH", "PAPER_MAX_TREES", "PAPER_WINDOW", "ShrubEnsemble"]

#: M, the ensemble size limit of the authors' reference setting.
PAPER_MAX_TREES = 32
#: B, the window of labels each shrub is trained on and the weights are fitted on (reference setting).
PAPER_WINDOW = 32
#: The shrubs' depth limit. The reference grows full trees; on B = 32 rows that is at most 63 nodes
#: either way, and a limit keeps :meth:`ShrubEnsemble.memory_bound` finite.
PAPER_MAX_DEPTH = 8

StepRule = float | Literal["adaptive", "per-class"]
_STEP_RULES = ("adaptive", "per-class")
_LOSSES = ("mse", "cross-entropy")


class ShrubEnsemble(Estimator):
    """Shrub Ensemble: ≤ M shrubs with weights on the simplex, trained by proximal gradient on a window.

    ``step`` is α: a float (constant), ``"adaptive"``: α = 1/(T+1) with T the number of trees including a new
    one (the reference code's rule), or ``"per-class"`` (the default): α = C/(2(T+1)), the same for two
    classes. The gradient below averages over the C outputs, so with C classes it is C/2 times smaller than
    with two, and at α = 1/(T+1) a new shrub that fits the window far better than the others still gets almost
    no weight: the slides' "Behaviour" condition (a tree right on the whole window enters the ensemble) needs
    α > C/(2m) at this gradient scale, which 1/(T+1) misses by C/2 (docs/benchmarks.md, "Shrub Ensembles
    against its paper and river's trees"). ``rho`` replaces it by the rule of the paper's experiments: λ₂ =
    M(2−ρ)/(ρC), α = 1/(M+λ₂), and the step adds the shrinkage −2αλ₂w. The factor 1 − 2αλ₂ is negative when ρ
    < 2/(C+1) (−0.2 at ρ = 0.5, C = 2): every step then reverses the order of the weights, and the parity of
    the number of steps matters. Each proximal step is w ← 𝓟(w − α·dir) with dir_i = (1/(n·C)) Σ_{j,k}
    P_i[j,k]·G[j,k] over the n ≤ B window rows, G = 2(f − onehot) (``"mse"``) or softmax(f) − onehot
    (``"cross-entropy"``), and 𝓟 = :func:`~edgedrift.learners.simplex.prox_sparse_simplex` (Algorithm 1, lines
    8-12).

    A new shrub (:meth:`add_shrub` / :meth:`anchor`) enters with weight 0 and takes part in all
    ``burnin_steps + 1`` steps (as in the reference code); zero weights are pruned after them. The window
    holds exactly B rows (the reference code keeps B+1, an off-by-one).

    Labels are arbitrary floats; the classes are the sorted union of the shrubs' classes and the labels
    seen. Prediction is the argmax of f(x) (ties to the smaller label); with no trees it is the window's
    majority label (its label frequencies as probabilities), or 0.0 before any label or shrub. Features
    are compared as float32, like the shrub documents; a labeled sample with a non-finite label or a
    feature that is not finite as float32 (NaN, ±inf, |x| > 3.4e38) is skipped and counted in
    ``n_skipped`` (and in ``n_learned``, the labeled samples received), so the window stays finite.

    Defaults follow the authors' reference setting (their ShrubsClassifier): M = 32 shrubs, a window of B = 32
    labels, α = 1/(m+1) for two classes (C/(2(m+1)) for C, above), burn-in 5 and weight steps only when a
    shrub arrives (Algorithm 1 takes its step when a shrub is added). The former M = 8, B = 256 with a step
    every 16 labels trailed river's adaptive Hoeffding tree on ELEC2: a 256-label window averages over ELEC2's
    short regimes and gives few, blunt shrubs (docs/benchmarks.md, "Shrub Ensembles against its paper and
    river's trees"). With α = 1/(m+1) and M = 1 a new shrub never displaces the old one: that needs α·(dir_old
    − dir_new) > 1, and the difference is at most 4/C.

    Parameters
    ----------
    max_trees
        M, the largest number of shrubs kept.
    window
        B, the number of labeled rows the weights are fitted on.
    step
        α: a positive float, ``"adaptive"`` for 1/(T+1) or ``"per-class"`` for C/(2(T+1)).
    burnin_steps
        Extra proximal steps when a shrub arrives.
    update_every
        Labels between two proximal steps (0: steps only when a shrub arrives).
    loss
        ``"mse"`` or ``"cross-entropy"`` of f(x) against the one-hot label.
    rho
        None, or ρ in (0, 1) for the rule of the paper's experiments (replaces ``step``).

    Examples
    --------
    The cloud's shrubs arrive through :meth:`anchor` (here trained in process, as the cloud does):

    >>> import numpy as np
    >>> from edgedrift.training.shrub import train_shrub
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(600, 2))
    >>> y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    >>> ensemble = ShrubEnsemble(max_trees=4, window=100)
    >>> for start in range(0, 500, 100):
    ...     ensemble.learn_many(X[start : start + 100], y[start : start + 100])
    ...     ensemble.anchor(train_shrub(X[start : start + 100], y[start : start + 100], "classification"))
    >>> ensemble.n_trees, round(float(ensemble.weights.sum()), 6)
    (4, 1.0)
    >>> float(np.mean(ensemble.predict_many(X[500:]) == y[500:]))
    0.97
    >>> {c: round(p, 3) for c, p in ensemble.predict_proba_one(X[500]).items()}
    {-1.0: 0.005, 1.0: 0.995}
    """

    task: Literal["classification"] = "classification"

    def __init__(
        self,
        max_trees: int = PAPER_MAX_TREES,
        window: int = PAPER_WINDOW,
        step: StepRule = "per-class",
        burnin_steps: int = 5,
        update_every: int = 0,
        loss: str = "mse",
        rho: float | None = None,
    ) -> None:
        if max_trees < 1:
            raise ValueError(f"max_trees must be >= 1, got {max_trees}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if isinstance(step, str):
            if step not in _STEP_RULES:
                raise ValueError(f"step must be a positive float or one of {_STEP_RULES}, got {step!r}")
        elif not (step > 0 and math.isfinite(step)):
            raise ValueError(f"step must be a positive float or one of {_STEP_RULES}, got {step!r}")
        if burnin_steps < 0 or update_every < 0:
            raise ValueError("burnin_steps and update_every must be >= 0")
        if loss not in _LOSSES:
            raise ValueError(f"loss must be one of {_LOSSES}, got {loss!r}")
        if rho is not None and not 0.0 < rho < 1.0:
            raise ValueError(f"rho must be in (0, 1), got {rho}")
        self.max_trees = max_trees
        self.window = window
        self.step = step
        self.burnin_steps = burnin_steps
        self.update_every = update_every
        self.loss = loss
        self.rho = rho
        self.reset()

    def reset(self) -> None:
        """Forget everything learned: no trees, no classes, an empty window (hyper-parameters stay)."""
        self.n_learned = 0
        self.n_skipped = 0
        self.n_features: int | None = None
        self._classes: list[float] = []
        self._m = 0
        self._size = 0
        self._pos = 0
        self._since = 0
        self._version = 0
        K, B = self.max_trees + 1, self.window
        self._forest = PackedForest(K)
        self._w = np.zeros(K)
        self._dir = np.zeros(K)
        self._X = np.zeros((0, 0), dtype=np.float32)
        self._yi = np.zeros(B, dtype=np.int32)
        self._Y = np.zeros(0)
        self._P = np.zeros((K, 0))
        self._f = np.zeros(0)
        self._G = np.zeros(0)
        self._last_x = np.zeros(0, dtype=np.float32)
        self._last_p = np.zeros((0, 0))
        self._last_version = -1

    @property
    def n_trees(self) -> int:
        return self._m

    @property
    def n_classes(self) -> int:
        return len(self._classes)

    @property
    def classes(self) -> FloatArray:
        """The class labels, sorted: the column order of :meth:`predict_proba_many`."""
        return np.asarray(self._classes, dtype=np.float64)

    @property
    def weights(self) -> FloatArray:
        """A copy of the live trees' weights (≥ 0, summing to 1 whenever there is a tree)."""
        return self._w[: self._m].copy()

    @property
    def tree_ids(self) -> NDArray[np.int64]:
        """Insertion number (0, 1, …) of every live tree, in the order of :attr:`weights`."""
        return self._forest.ids[: self._m].copy()

    @property
    def window_size(self) -> int:
        return self._size

    @property
    def memory_bytes(self) -> int:
        """Bytes of every array the ensemble holds: trees, weights, window, probability cache, buffers.

        All are allocated for M+1 trees, B rows and the largest tree seen, so this is at most
        :meth:`memory_bound` for the largest node count (2^(D+1) − 1 for shrubs of depth ≤ D).
        """
        arrays: tuple[NDArray[Any], ...] = (
            self._w, self._dir, self._X, self._yi, self._Y, self._P, self._f, self._G, self._last_x,
            self._last_p, *self._forest.arrays,
        )  # fmt: skip
        return int(sum(a.nbytes for a in arrays))

    @staticmethod
    def memory_bound(max_trees: int, window: int, n_features: int, n_classes: int, max_nodes: int) -> int:
        """Upper bound of :attr:`memory_bytes`: (M+1) trees of ≤ ``max_nodes`` nodes, B window rows.

        Per tree slot 40 bytes (weight, id, depth, direction, node offset) and per node 24 + 8C bytes
        (feature, threshold, first child, class probabilities); per window row 4d (float32 features)
        + 4 (label) + 8C·(M+4) bytes (one-hot label, the cached probabilities of M+1 trees, f and G);
        plus the last prediction's 4d + 8C(M+1) bytes. The paper's memory O(dB + 2·B·(M+1)) is the
        window part for C = 2.
        """
        K, C = max_trees + 1, n_classes
        trees = K * (40 + max_nodes * (24 + 8 * C))
        rows = window * (4 * n_features + 4 + 8 * C * (K + 3))
        return trees + rows + 4 * n_features + 8 * C * K

    def _ensure_features(self, d: int) -> None:
        if self.n_features is None:
            self.n_features = d
            self._X = np.zeros((self.window, d), dtype=np.float32)
            self._last_x = np.zeros(d, dtype=np.float32)
        elif d != self.n_features:
            raise ValueError(f"expected {self.n_features} features, got {d}")

    def _class_index(self, label: float) -> int:
        """Index of ``label`` in the sorted classes, adding it (and a probability column) if new."""
        j = bisect.bisect_left(self._classes, label)
        if j < len(self._classes) and self._classes[j] == label:
            return j
        if not math.isfinite(label):
            raise ValueError(f"labels must be finite, got {label}")
        C, K, B = len(self._classes), self.max_trees + 1, self.window
        self._classes.insert(j, label)
        self._forest.add_class(j)
        self._P = np.insert(self._P.reshape(K, B, C), j, 0.0, axis=2).reshape(K, B * (C + 1))
        self._Y = np.insert(self._Y.reshape(B, C), j, 0.0, axis=1).reshape(B * (C + 1))
        self._yi[self._yi >= j] += 1
        self._f = np.zeros(B * (C + 1))
        self._G = np.zeros(B * (C + 1))
        self._last_p = np.zeros((K, C + 1))
        self._version += 1
        return j

    def _proba_one_trees(self, x32: NDArray[np.float32]) -> FloatArray:
        """(m, C) per-tree probabilities of one row, remembered for a following learn_one(x)."""
        m = self._m
        if self._last_version == self._version and np.array_equal(x32, self._last_x):
            return self._last_p[:m]
        self._forest.proba_one_into(x32, m, self._last_p[:m])
        self._last_x[:] = x32
        self._last_version = self._version
        return self._last_p[:m]

    @staticmethod
    def _as_row(x: ArrayLike) -> NDArray[np.float32]:
        return np.asarray(x, dtype=np.float64).astype(np.float32).reshape(-1)

    def _no_tree_proba(self) -> FloatArray:
        C = len(self._classes)
        if self._size == 0:
            return np.full(C, 1.0 / C) if C else np.zeros(0)
        counts = np.bincount(self._yi[: self._size], minlength=C).astype(np.float64)
        out: FloatArray = counts / self._size
        return out

    def _proba_one(self, x: ArrayLike) -> FloatArray:
        """f(x) = Σ wᵢ hᵢ(x) as an array in the order of :attr:`classes`."""
        if self._m == 0:
            return self._no_tree_proba()
        x32 = self._as_row(x)
        self._ensure_features(x32.size)
        out: FloatArray = self._w[: self._m] @ self._proba_one_trees(x32)
        return out

    def predict_proba_one(self, x: ArrayLike) -> dict[float, float]:
        """``{class: p}`` with f(x) = Σ wᵢ hᵢ(x) (the window's label frequencies while there is no tree);
        {} before any label or shrub."""
        return {c: float(p) for c, p in zip(self._classes, self._proba_one(x), strict=True)}

    def predict_one(self, x: ArrayLike) -> float:
        """The most probable class of x (ties to the smaller label)."""
        if not self._classes:
            return 0.0
        return self._classes[int(np.argmax(self._proba_one(x)))]

    def predict_proba_many(self, X: ArrayLike) -> FloatArray:
        """(n, C) probabilities of :meth:`predict_proba_one`, columns in the order of :attr:`classes`; all
        trees and rows descended together."""
        X32 = np.atleast_2d(np.asarray(X, dtype=np.float64)).astype(np.float32)
        if self._m == 0:
            return np.tile(self._no_tree_proba(), (X32.shape[0], 1))
        self._ensure_features(X32.shape[1])
        out: FloatArray = np.einsum("i,inc->nc", self._w[: self._m], self._forest.proba(X32, self._m))
        return out

    def predict_many(self, X: ArrayLike) -> FloatArray:
        """Labels of the rows of X."""
        P = self.predict_proba_many(X)
        if not self._classes:
            return np.zeros(P.shape[0])
        out: FloatArray = self.classes[np.argmax(P, axis=1)]
        return out

    def learn_one(self, x: ArrayLike, y: float) -> None:
        """Append (x, y) to the window; every ``update_every`` labels, one proximal gradient step."""
        x32 = self._as_row(x)
        self._ensure_features(x32.size)
        if not (math.isfinite(y) and np.isfinite(x32).all()):
            self.n_skipped += 1
            self.n_learned += 1
            return
        ci = self._class_index(float(y))
        C, s, m = len(self._classes), self._pos, self._m
        self._X[s] = x32
        self._yi[s] = ci
        self._Y[s * C : (s + 1) * C] = 0.0
        self._Y[s * C + ci] = 1.0
        if m:
            self._P[:m, s * C : (s + 1) * C] = self._proba_one_trees(x32)
        self._advance(1)
        self.n_learned += 1
        self._since += 1
        if self.update_every and self._since >= self.update_every:
            self._since = 0
            self._update(1)

    def learn_many(self, X: ArrayLike, y: ArrayLike) -> None:
        """The same as :meth:`learn_one` row by row, with the trees applied to the rows between two steps
        in one vectorised descent."""
        X32 = np.atleast_2d(np.asarray(X, dtype=np.float64)).astype(np.float32)
        labels = np.asarray(y, dtype=np.float64).reshape(-1)
        if X32.shape[0] != labels.size:
            raise ValueError(f"X has {X32.shape[0]} rows but y has {labels.size} labels")
        ok = np.isfinite(labels) & np.isfinite(X32).all(axis=1)
        if not ok.all():
            n_bad = labels.size - int(np.count_nonzero(ok))
            self.n_skipped += n_bad
            self.n_learned += n_bad
            X32, labels = X32[ok], labels[ok]
        if labels.size == 0:
            return
        self._ensure_features(X32.shape[1])
        for label in np.unique(labels):
            self._class_index(float(label))
        i = 0
        while i < labels.size:
            chunk = labels.size - i
            if self.update_every:
                chunk = min(chunk, self.update_every - self._since)
            self._push(X32[i : i + chunk], labels[i : i + chunk])
            i += chunk
            self.n_learned += chunk
            self._since += chunk
            if self.update_every and self._since >= self.update_every:
                self._since = 0
                self._update(1)

    def _push(self, X32: NDArray[np.float32], labels: FloatArray) -> None:
        """Write rows into the ring (only the last B matter), with their cached tree probabilities."""
        X32, labels = X32[-self.window :], labels[-self.window :]
        k, C, m, B = labels.size, len(self._classes), self._m, self.window
        slots = (self._pos + np.arange(k)) % B
        ci = np.searchsorted(np.asarray(self._classes), labels)
        self._X[slots] = X32
        self._yi[slots] = ci
        Y = self._Y.reshape(B, C)
        Y[slots] = 0.0
        Y[slots, ci] = 1.0
        if m:
            self._P[:m].reshape(m, B, C)[:, slots] = self._forest.proba(X32, m)
        self._advance(k)

    def _advance(self, k: int) -> None:
        self._pos = (self._pos + k) % self.window
        self._size = min(self._size + k, self.window)

    def anchor(self, model: Any) -> None:
        """The edge loop's hook after a recompute: add the returned shrub (a ShrubModel-like object with
        ``.document``, or a document dict). Models of any other kind (e.g. linear) are ignored."""
        doc = model if isinstance(model, dict) else getattr(model, "document", None)
        if doc is None and hasattr(model, "to_document"):
            doc = model.to_document()
        if isinstance(doc, dict) and doc.get("kind") == SHRUB_KIND:
            self.add_shrub(doc)

    def add_shrub(self, shrub: Any) -> None:
        """Algorithm 1, lines 6-12: append the shrub with weight 0, ``burnin_steps + 1`` proximal gradient
        steps on the window, prune zero weights. With an empty window (no gradient) it enters with weight
        1/(m+1) and the others are scaled by m/(m+1) before the prox."""
        doc: dict[str, Any] = shrub if isinstance(shrub, dict) else shrub.document
        slot = self._insert(doc)
        self._w[slot] = 0.0
        self._m += 1
        if self._size == 0:
            self._w[: self._m] *= (self._m - 1) / self._m
            self._w[slot] = 1.0 / self._m
            self._prox_and_prune()
            return
        C = len(self._classes)
        self._P[slot, : self._size * C] = self._forest.proba(self._X[: self._size], 1, slot).reshape(-1)
        self._update(self.burnin_steps + 1)

    def load(self, shrubs: Sequence[Any], weights: ArrayLike) -> None:
        """Replace the trees and weights (e.g. an ensemble shipped to the device); the window stays.

        ``weights`` must be ≥ 0 and sum to 1 (within 1e-9), one per shrub, at most M shrubs; zero weights
        are pruned.
        """
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        if len(shrubs) != w.size or w.size > self.max_trees:
            raise ValueError(f"need one weight per shrub and at most {self.max_trees} shrubs")
        if w.size and (np.any(w < 0) or abs(w.sum() - 1.0) > 1e-9):
            raise ValueError("weights must be >= 0 and sum to 1")
        self._m = 0
        self._version += 1
        for shrub, wi in zip(shrubs, w, strict=True):
            slot = self._insert(shrub if isinstance(shrub, dict) else shrub.document)
            self._w[slot] = wi
            self._m += 1
        C = len(self._classes)
        if self._m and self._size:
            P = self._forest.proba(self._X[: self._size], self._m)
            self._P[: self._m, : self._size * C] = P.reshape(self._m, -1)
        self._prune()

    def _insert(self, doc: dict[str, Any]) -> int:
        """Parse and validate a classification shrub into slot m (not yet counted); returns the slot."""
        validate_tree_document(doc)
        if doc["task"] != "classification":
            raise ValueError("a Shrub Ensemble needs classification shrubs")
        self._ensure_features(int(doc["n_features"]))
        cols = [self._class_index(float(c)) for c in doc["classes"]]
        slot = self._m
        self._forest.write(slot, doc, cols)
        self._version += 1
        return slot

    def _step_size(self, C: int) -> tuple[float, float]:
        """(α, λ₂) for the current number of trees (which includes a new one) and C classes."""
        if self.rho is not None:
            lam = self.max_trees * (2.0 - self.rho) / self.rho / C
            return 1.0 / (self.max_trees + lam), lam
        if self.step == "adaptive":
            return 1.0 / (self._m + 1.0), 0.0
        if self.step == "per-class":
            return 0.5 * C / (self._m + 1.0), 0.0
        return float(self.step), 0.0

    def _update(self, n_steps: int) -> None:
        """``n_steps`` proximal gradient steps w ← 𝓟(w − α·dir − 2αλ₂w) on the window, then prune."""
        m, C, n = self._m, len(self._classes), self._size
        if m == 0 or n == 0:
            return
        nc = n * C
        alpha, lam = self._step_size(C)
        P, w, f, G, d = self._P[:m, :nc], self._w[:m], self._f[:nc], self._G[:nc], self._dir[:m]
        Y = self._Y[:nc]
        for _ in range(n_steps):
            np.dot(w, P, out=f)
            if self.loss == "mse":
                np.subtract(f, Y, out=G)
                G *= 2.0
            else:
                F = f.reshape(n, C)
                E = np.exp(F - F.max(axis=1, keepdims=True))
                E /= E.sum(axis=1, keepdims=True)
                np.subtract(E.reshape(-1), Y, out=G)
            np.dot(P, G, out=d)
            if lam:
                w *= 1.0 - 2.0 * alpha * lam
            w -= (alpha / nc) * d
            prox_sparse_simplex_inplace(w, self.max_trees)
        self._prune()

    def _prox_and_prune(self) -> None:
        m = self._m
        prox_sparse_simplex_inplace(self._w[:m], self.max_trees)
        self._prune()

    def _prune(self) -> None:
        """Algorithm 1, line 12: drop every tree whose weight is exactly 0 (compacting the slots)."""
        m = self._m
        keep = np.flatnonzero(self._w[:m] != 0.0)
        if keep.size == m:
            return
        k = keep.size
        self._w[:k] = self._w[keep]
        self._forest.compact(keep)
        self._P[:k] = self._P[keep]
        self._w[k:] = 0.0
        self._m = k
        self._version += 1
