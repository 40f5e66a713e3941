"""The range guard: a glitch is flagged and forgotten, a sustained shift becomes the new normal, and the
rows a refit needs are held only while something was flagged recently (a gateway has a guard per device)."""

from __future__ import annotations

import numpy as np

from edgedrift.guard import RangeGuard

D = 3


def fitted(patience: int = 5) -> RangeGuard:
    rng = np.random.default_rng(0)
    return RangeGuard(threshold=10.0, patience=patience).fit(rng.normal(size=(200, D)))


def test_a_fitted_guard_holds_no_refit_rows_until_something_is_flagged() -> None:
    guard = fitted()
    assert guard._rows.shape == (0, D) and guard._ys.size == 0
    for _ in range(50):
        assert not guard.check(np.zeros(D))
    assert guard._ys.size == 0, "clean samples allocate nothing"


def test_a_glitch_is_flagged_then_its_rows_are_released() -> None:
    guard = fitted(patience=5)
    assert guard.check(np.full(D, 1e6))
    assert guard._ys.size == 10, "2 * patience rows kept while the glitch is recent"
    for _ in range(10):
        assert not guard.check(np.zeros(D))
    assert guard._ys.size == 0 and guard._kept == 0, "released once the flag left the window"
    assert guard.refits == 0 and guard.n_flagged == 1 and guard.check(np.full(D, 1e6))


def test_a_sustained_shift_refits_the_guard_on_the_new_regime() -> None:
    guard = fitted(patience=5)
    rng = np.random.default_rng(1)
    shifted = 1000.0 + rng.normal(size=(5, D))
    flags = [guard.check(x) for x in shifted]
    assert flags == [True] * 5 and guard.refits == 1
    assert guard._ys.size == 0, "the refit consumed the kept rows"
    assert not guard.check(np.full(D, 1000.0)), "the new regime is accepted"
    assert guard.check(np.zeros(D)), "and the old one is now outside"
