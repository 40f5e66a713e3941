"""Quantiles of χ² and χ without scipy: the DRUiD thresholds T_α (Algorithm 1, Section 4.3).

The edge needs only two quantile functions, so it does not load ``scipy.stats`` (tens of megabytes of
resident memory) for them. The regularised incomplete gamma functions P(a, x) and Q(a, x) = 1 − P are
evaluated by their series and continued fraction (Numerical Recipes, §6.2), and the quantile is found
by safeguarded Newton steps from the Wilson–Hilferty guess, on Q when α > ½ so the upper tail keeps its
relative precision.
"""

from __future__ import annotations

import math
from functools import lru_cache

_EPS = 1e-16
_TINY = 1e-300
_MAX_ITER = 1000


def _gamma_series(a: float, x: float) -> float:
    """P(a, x) by its power series (converges fast for x < a + 1)."""
    ap, term = a, 1.0 / a
    total = term
    for _ in range(_MAX_ITER):
        ap += 1.0
        term *= x / ap
        total += term
        if abs(term) < abs(total) * _EPS:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _gamma_fraction(a: float, x: float) -> float:
    """Q(a, x) by its continued fraction, modified Lentz (converges fast for x ≥ a + 1)."""
    b = x + 1.0 - a
    c = 1.0 / _TINY
    d = 1.0 / b
    h = d
    for i in range(1, _MAX_ITER):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = _TINY if abs(d) < _TINY else d
        c = b + an / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def _normal_quantile_guess(p: float) -> float:
    """Standard normal p-quantile to about 5e-4 (Abramowitz & Stegun 26.2.23): only a starting point."""
    t = math.sqrt(-2.0 * math.log(min(p, 1.0 - p)))
    z = t - (2.515517 + t * (0.802853 + t * 0.010328)) / (
        1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308))
    )
    return z if p > 0.5 else -z


def gamma_p(a: float, x: float) -> float:
    """The regularised lower incomplete gamma function P(a, x)."""
    if x <= 0.0:
        return 0.0
    return _gamma_series(a, x) if x < a + 1.0 else 1.0 - _gamma_fraction(a, x)


def gamma_q(a: float, x: float) -> float:
    """The regularised upper incomplete gamma function Q(a, x) = 1 − P(a, x)."""
    if x <= 0.0:
        return 1.0
    return 1.0 - _gamma_series(a, x) if x < a + 1.0 else _gamma_fraction(a, x)


@lru_cache(maxsize=256)
def chi2_ppf(alpha: float, df: float) -> float:
    """α-quantile of χ²_df, α in (0, 1), df > 0 (cached: the monitors ask for few distinct values)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError("alpha must be in (0, 1)")
    if not df > 0.0:
        raise ValueError("df must be > 0")
    a = 0.5 * df
    upper = alpha > 0.5
    target = 1.0 - alpha if upper else alpha
    z = _normal_quantile_guess(alpha)
    t = 2.0 / (9.0 * df)
    x = max(0.5 * df * (1.0 - t + z * math.sqrt(t)) ** 3, 1e-3)  # Wilson–Hilferty, on the γ scale (x/2)
    lo, hi = 0.0, math.inf
    for _ in range(200):
        # Both forms increase with x.
        err = target - gamma_q(a, x) if upper else gamma_p(a, x) - target
        if err > 0.0:
            hi = x
        else:
            lo = x
        log_pdf = (a - 1.0) * math.log(x) - x - math.lgamma(a)
        step = err / math.exp(log_pdf) if log_pdf > -700.0 else math.inf
        new = x - step
        if not lo < new < hi:  # Newton left the bracket: bisect (or expand upwards)
            new = 0.5 * (lo + hi) if math.isfinite(hi) else 2.0 * x
        if abs(new - x) <= 1e-15 * x:
            x = new
            break
        x = new
    return 2.0 * x


def chi_ppf(alpha: float, df: float) -> float:
    """α-quantile of χ_df (the square root of the χ²_df quantile)."""
    return math.sqrt(chi2_ppf(alpha, df))
