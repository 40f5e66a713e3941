"""Online-BLS update speed and accuracy of the weights at m = 1100 (n1 = n2 = 10, n3 = 1000, n4 = 1).

Binary task: the first samples of the 20-feature rotating Hyperplane (``edgedrift.data.hyperplane``,
min-max scaled on its first 1000 rows), λ = 1e-8 (paper default). One core (thread variables are set
before numpy is imported). Per-sample update times, all with the same broad features and one-hot W:

* (a) ``OnlineBLS.learn_one``: Givens rank-one update of the factor, forward solve from the rotations,
  one backward ``dtrsv`` (the learner as shipped);
* (a2) the learner's step and then both triangular solves by ``dtrsv`` (eqs (13)-(14) literally) for
  weights of its own: the learner keeps its factor private, so (a2) costs (a) plus the two solves;
* (b) "w/o EOUS": K += aaᵀ and a fresh ``dpotrf`` of K every sample, then the two solves;
* (c) inverse-based: Sherman-Morrison on K⁻¹ (K⁻¹ ← K⁻¹ − ggᵀ/(1 + aᵀg), g = K⁻¹a; BLAS dsymv + dsyr),
  as inverse-based incremental BLS (I-BLS / RI-BLS style) methods do, starting from K⁻¹ = I/λ;
* (f) ``OnlineBLS(forgetting=0.99)``: Algorithm 2 with √μ scaling of the factor and the ridge restored
  in square-root form every ``refactor_every`` samples (the mean includes the restorations);
* (f1) Algorithm 2 literally: P ← μP + aaᵀ, Q ← μQ + ayᵀ, ``dpotrf`` of P + λI and W = K⁻¹Q by
  ``dpotrs`` every sample (for ``--n-refactor`` samples).

Error vs the batch ridge solution after the first ``--n-refactor`` samples (all methods) and after ``--n``
samples: W_ref solves min ‖AW − Y‖² + λ‖W‖² by least squares on the stacked [A; √λ I] (SVD, backward
stable, unlike the normal equations), and the errors are ‖W − W_ref‖/‖W_ref‖ (Frobenius), the relative
difference of the scores on 200 fresh samples, and the relative normal-equation residual
‖(AᵀA + λI)W − AᵀY‖/‖AᵀY‖ (Theorem 1's quantity).

    python bench/online_bls.py [--n 300] [--n-refactor 20] [--lam 1e-8] [--json out/bls/speed.json]
    python bench/online_bls.py --quick       # smoke run: 30 samples, 5 for the re-factorising methods
"""

from __future__ import annotations

import os

from edgedrift_harness.results import write_json

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from scipy.linalg.blas import dsymv, dsyr, dtrsv
from scipy.linalg.lapack import dpotrf, dpotrs

from edgedrift.data import hyperplane
from edgedrift.learners.online_bls import OnlineBLS


class Method:
    """A weight-update rule on precomputed broad features a and one-hot targets (column j)."""

    name = ""

    def __init__(self, m: int, c: int, lam: float) -> None:
        self.W = np.zeros((m, c))

    def update(self, a: np.ndarray, j: int) -> None:
        raise NotImplementedError


class GivensTwoSolves:
    """(a2): the learner's own step (``OnlineBLS.learn_one``: features, Givens factor update, its forward
    solve from the rotations and one backward solve), then L c = a and Lᵀ u = c by two dtrsv calls on the
    updated factor for this method's own weights. The learner exposes its factor only as a copy (``R``),
    taken outside the timed part; the time is therefore the learner's step plus the two solves."""

    name = "(a2) Givens + 2 triangular solves"

    def __init__(self, model: OnlineBLS, c: int) -> None:
        self.bls = model
        self.W = np.zeros((model.m, c))

    def learn(self, x: np.ndarray, y: float, a: np.ndarray, j: int) -> float:
        """Seconds spent in the learner's step and the two solves (the factor copy not counted)."""
        t = time.perf_counter()
        e = -(a @ self.W)
        e[j] += 1.0
        self.bls.learn_one(x, y)
        spent = time.perf_counter() - t
        L = self.bls.R.T  # lower factor, K = LLᵀ (Fortran order, as dtrsv wants it)
        t = time.perf_counter()
        z = dtrsv(L, a, 1, 0, 1, 0, 0, 0)
        u = dtrsv(L, z, 1, 0, 1, 1, 0, 1)
        self.W += np.outer(u, e)
        return spent + time.perf_counter() - t


class Refactor(Method):
    """(b) w/o EOUS: K += aaᵀ, K = LLᵀ by dpotrf every sample, two triangular solves."""

    name = "(b) refactorise every sample (w/o EOUS)"

    def __init__(self, m: int, c: int, lam: float) -> None:
        super().__init__(m, c, lam)
        self.K = np.asfortranarray(lam * np.eye(m))
        self.L = np.zeros((m, m), order="F")

    def update(self, a: np.ndarray, j: int) -> None:
        e = -(a @ self.W)
        e[j] += 1.0
        dsyr(1.0, a, 1, 1, 0, len(a), self.K, 1)
        self.L[:] = self.K
        L, info = dpotrf(self.L, 1, 1, 1)
        if info != 0:
            raise np.linalg.LinAlgError(f"dpotrf info={info}")
        z = dtrsv(L, a, 1, 0, 1, 0, 0, 0)
        u = dtrsv(L, z, 1, 0, 1, 1, 0, 1)
        self.W += np.outer(u, e)


class ShermanMorrison(Method):
    """(c) inverse-based: K⁻¹ by Sherman-Morrison, ΔW = K⁻¹_new a eᵀ = g eᵀ/(1 + aᵀg)."""

    name = "(c) Sherman-Morrison on K⁻¹"

    def __init__(self, m: int, c: int, lam: float) -> None:
        super().__init__(m, c, lam)
        self.Kinv = np.asfortranarray(np.eye(m) / lam)

    def update(self, a: np.ndarray, j: int) -> None:
        e = -(a @ self.W)
        e[j] += 1.0
        g = dsymv(1.0, self.Kinv, a, lower=1)
        denom = 1.0 + float(a @ g)
        dsyr(-1.0 / denom, g, 1, 1, 0, len(a), self.Kinv, 1)
        self.W += np.outer(g / denom, e)


class LiteralForgetting(Method):
    """(f1) Algorithm 2 as written: P and Q with forgetting, a fresh dpotrf of P + λI, W = dpotrs(Q)."""

    name = "(f1) Algorithm 2 literally (dpotrf of P + λI every sample)"

    def __init__(self, m: int, c: int, lam: float, mu: float) -> None:
        super().__init__(m, c, lam)
        self.lam, self.mu = lam, mu
        self.P = np.zeros((m, m), order="F")
        self.Q = np.zeros((m, c), order="F")
        self.L = np.zeros((m, m), order="F")

    def update(self, a: np.ndarray, j: int) -> None:
        self.P *= self.mu
        dsyr(1.0, a, 1, 1, 0, len(a), self.P, 1)
        self.Q *= self.mu
        self.Q[:, j] += a
        self.L[:] = self.P
        self.L.reshape(-1, order="F")[:: len(a) + 1] += self.lam
        L, info = dpotrf(self.L, 1, 1, 1)
        if info != 0:
            raise np.linalg.LinAlgError(f"dpotrf info={info}")
        W, info = dpotrs(L, self.Q, 1, 0)
        self.W = np.ascontiguousarray(W)


def timed(fn: Callable[[int], None], n: int) -> np.ndarray:
    out = np.empty(n)
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out[i] = time.perf_counter() - t
    return out * 1e3


def reference(A: np.ndarray, Y: np.ndarray, lam: float, weights: np.ndarray | None = None) -> np.ndarray:
    """argmin Σ wᵢ‖aᵢᵀW − yᵢ‖² + λ‖W‖² by least squares on [√w A; √λ I] (SVD)."""
    sw = np.ones(len(A)) if weights is None else np.sqrt(weights)
    m = A.shape[1]
    M = np.vstack([A * sw[:, None], math.sqrt(lam) * np.eye(m)])
    rhs = np.vstack([Y * sw[:, None], np.zeros((m, Y.shape[1]))])
    return np.asarray(np.linalg.lstsq(M, rhs, rcond=None)[0])


def errors(
    W: np.ndarray,
    A: np.ndarray,
    Y: np.ndarray,
    lam: float,
    A_new: np.ndarray,
    weights: np.ndarray | None = None,
) -> dict[str, float]:
    W_ref = reference(A, Y, lam, weights)
    wts = np.ones(len(A)) if weights is None else weights
    K = (A.T * wts) @ A + lam * np.eye(A.shape[1])
    rhs = (A.T * wts) @ Y
    return {
        "w_rel": float(np.linalg.norm(W - W_ref) / np.linalg.norm(W_ref)),
        "score_rel": float(np.linalg.norm(A_new @ (W - W_ref)) / np.linalg.norm(A_new @ W_ref)),
        "normal_residual": float(np.linalg.norm(K @ W - rhs) / np.linalg.norm(rhs)),
    }


def stats(ms: np.ndarray) -> dict[str, float]:
    return {
        "median_ms": float(np.median(ms)),
        "p90_ms": float(np.percentile(ms, 90)),
        "mean_ms": float(ms.mean()),
        "max_ms": float(ms.max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, help="samples for (a), (a2), (c) and (f) (default 300; quick 30)")
    parser.add_argument("--n-refactor", type=int, help="samples for (b) and (f1) (default 20; quick 5)")
    parser.add_argument("--quick", action="store_true", help="smoke run (writes no JSON unless --json)")
    parser.add_argument("--lam", type=float, default=1e-8)
    parser.add_argument("--forgetting", type=float, default=0.99)
    parser.add_argument("--refactor-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="where to write the results (default out/bls/speed.json)")
    args = parser.parse_args()
    args.n = args.n or (30 if args.quick else 300)
    args.n_refactor = args.n_refactor or (5 if args.quick else 20)
    if args.json is None and not args.quick:
        args.json = "out/bls/speed.json"
    n, nb, lam = args.n, args.n_refactor, args.lam

    stream = hyperplane(n=max(n, 1000) + 200, n_features=20, noise=0.01, mag_change=0.005, seed=args.seed)
    X, y = stream.X, stream.y
    model = OnlineBLS(20, lam=lam, seed=args.seed)
    model.fit_scaler(X[:1000])
    m = model.m
    A_all = model.features_many(X)
    A_new = A_all[-200:]
    classes = [float(y[0]), -float(y[0])]  # the learner's order: first label seen first
    J = np.array([classes.index(float(v)) for v in y])
    Y_all = np.eye(2)[J]
    print(f"m = {m}, λ = {lam:g}, d = 20, {n} samples ((b): {nb}); one core")

    results: dict[str, Any] = {"m": m, "lam": lam, "n": n, "n_refactor": nb}
    timings: dict[str, np.ndarray] = {}
    weights_at: dict[str, dict[int, np.ndarray]] = {}

    # (a) the learner: learn_one including the broad features of x.
    ms = np.empty(n)
    snap: dict[int, np.ndarray] = {}
    for i in range(n):
        t = time.perf_counter()
        model.learn_one(X[i], float(y[i]))
        ms[i] = (time.perf_counter() - t) * 1e3
        if i + 1 == nb:
            snap[nb] = model.W.copy()
    snap[n] = model.W.copy()
    name_a = "(a) OnlineBLS.learn_one (Givens, EOUS)"
    timings[name_a], weights_at[name_a] = ms, snap
    t = time.perf_counter()
    for i in range(200):
        model.predict_one(X[i])
    results["predict_one_ms"] = (time.perf_counter() - t) / 200 * 1e3

    # (a2) on a second learner with the same random features and scaler as (a).
    twin = OnlineBLS(20, lam=lam, seed=args.seed)
    twin.fit_scaler(X[:1000])
    a2 = GivensTwoSolves(twin, 2)
    ms = np.empty(n)
    snap = {}
    for i in range(n):
        ms[i] = a2.learn(X[i], float(y[i]), A_all[i], int(J[i])) * 1e3
        if i + 1 == nb:
            snap[nb] = a2.W.copy()
    snap[n] = a2.W.copy()
    timings[a2.name], weights_at[a2.name] = ms, snap

    for cls, count in ((ShermanMorrison, n), (Refactor, nb)):
        meth = cls(m, 2, lam)
        snap = {}

        def step(i: int, meth: Method = meth) -> None:
            meth.update(A_all[i], int(J[i]))

        ms = np.empty(count)
        for i in range(count):
            t = time.perf_counter()
            step(i)
            ms[i] = (time.perf_counter() - t) * 1e3
            if i + 1 == nb:
                snap[nb] = meth.W.copy()
        snap[count] = meth.W.copy()
        timings[cls.name], weights_at[cls.name] = ms, snap

    # (f) forgetting variant.
    fmodel = OnlineBLS(
        20, lam=lam, seed=args.seed, forgetting=args.forgetting, refactor_every=args.refactor_every
    )
    fmodel.fit_scaler(X[:1000])
    ms = timed(lambda i: fmodel.learn_one(X[i], float(y[i])), n)
    name_f = f"(f) OnlineBLS(forgetting={args.forgetting:g}), refactor every {args.refactor_every}"
    timings[name_f] = ms

    literal = LiteralForgetting(m, 2, lam, args.forgetting)
    ms = timed(lambda i: literal.update(A_all[i], int(J[i])), nb)
    timings[literal.name] = ms

    base = float(np.median(timings[name_a]))
    print("\n| method | samples | median ms | p90 ms | mean ms | max ms | median / (a) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    results["timing"] = {}
    for name, ms in timings.items():
        s = stats(ms)
        s["ratio_vs_a"] = s["median_ms"] / base
        results["timing"][name] = s
        print(
            f"| {name} | {len(ms)} | {s['median_ms']:.3f} | {s['p90_ms']:.3f} | {s['mean_ms']:.3f} | "
            f"{s['max_ms']:.2f} | {s['ratio_vs_a']:.2f} |"
        )
    print(
        f"\npredict_one: {results['predict_one_ms']:.3f} ms; learner memory {model.memory_bytes / 1e6:.1f} MB"
    )

    print("\nError vs the batch ridge solution (least squares on [A; √λI]):")
    print(
        "| method | after samples | ‖W−W_ref‖/‖W_ref‖ | score rel. diff (200 fresh) | normal-eq. residual |"
    )
    print("|---|---:|---:|---:|---:|")
    results["errors"] = {}
    for name, snaps in weights_at.items():
        for k, W in sorted(snaps.items()):
            err = errors(W, A_all[:k], Y_all[:k], lam, A_new)
            results["errors"][f"{name} @ {k}"] = err
            print(
                f"| {name} | {k} | {err['w_rel']:.2e} | {err['score_rel']:.2e} | "
                f"{err['normal_residual']:.2e} |"
            )
    mu = args.forgetting
    wts = mu ** np.arange(n - 1, -1, -1)
    s_steps = n % args.refactor_every
    err = errors(fmodel.W, A_all[:n], Y_all[:n], lam * mu**s_steps, A_new, wts)
    results["errors"][f"{name_f} @ {n}"] = err
    print(
        f"| {name_f} (ref: weights μ^(k−i), ridge μ^{s_steps}·λ) | {n} | {err['w_rel']:.2e} | "
        f"{err['score_rel']:.2e} | {err['normal_residual']:.2e} |"
    )
    err = errors(fmodel.W, A_all[:n], Y_all[:n], lam, A_new, wts)
    results["errors"][f"{name_f} @ {n} vs ridge λ"] = err
    print(
        f"| {name_f} (ref: weights μ^(k−i), ridge λ) | {n} | {err['w_rel']:.2e} | "
        f"{err['score_rel']:.2e} | {err['normal_residual']:.2e} |"
    )
    wts = mu ** np.arange(nb - 1, -1, -1)
    err = errors(literal.W, A_all[:nb], Y_all[:nb], lam, A_new, wts)
    results["errors"][f"{literal.name} @ {nb}"] = err
    print(
        f"| {literal.name} (ref: weights μ^(k−i), ridge λ) | {nb} | {err['w_rel']:.2e} | "
        f"{err['score_rel']:.2e} | {err['normal_residual']:.2e} |"
    )
    if args.json:
        path = Path(args.json)
        write_json(path, results, indent=1)
        print(f"\nwritten {path}")


if __name__ == "__main__":
    main()
