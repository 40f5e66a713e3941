"""The compiled kernels (edgedrift.kernels) against the numpy code in tests: the switch between the two
paths, a count of the compiled calls (a comparison must show that the compiled side ran: a kernel that
quietly fell back would compare the numpy code with itself) and the streams and states the kernel tests
compare."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from edgedrift import kernels
from edgedrift.learners import ForgettingNewton, IncrementalLearner
from edgedrift.models.losses import FloatArray

__all__ = [
    "COMPILED",
    "CountingKernels",
    "both_paths",
    "labeled_stream",
    "learner_state",
    "needs_kernels",
    "task_of",
]


class CountingKernels(ModuleType):
    """``edgedrift._kernels`` with every kernel's calls counted: ``ran`` the calls that returned, ``refused``
    those that raised LayoutError (the caller then ran the numpy code). Installed as ``kernels.MODULE`` by
    the kernel tests; a kernel set on the instance (a test's stand-in) takes precedence."""

    def __init__(self, module: ModuleType | Any) -> None:
        super().__init__("edgedrift._kernels (counted)")
        self.module = module
        self.ran: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.module, name)
        if isinstance(attr, type) or not callable(attr):
            return attr

        def counted(*args: Any) -> Any:
            try:
                outcome = attr(*args)
            except kernels.LayoutError:
                self.refused[name] += 1
                raise
            self.ran[name] += 1
            return outcome

        return counted

    def reset(self) -> None:
        self.ran.clear()
        self.refused.clear()


#: The compiled kernels with their calls counted, or None where they are not built or switched off.
COMPILED = None if kernels.MODULE is None else CountingKernels(kernels.MODULE)
needs_kernels = pytest.mark.skipif(COMPILED is None, reason="edgedrift._kernels not built or switched off")


def both_paths(
    run: Callable[[], Any], monkeypatch: pytest.MonkeyPatch, counting: CountingKernels | None = None
) -> tuple[Any, Any]:
    """``run()`` with the kernels (``counting``, by default :data:`COMPILED`), then with the numpy code;
    asserts that the first run called compiled kernels and that none of them declined its arrays (so the
    comparison is not numpy against numpy)."""
    counting = counting or COMPILED
    assert counting is not None, "both_paths needs the compiled kernels (mark the test needs_kernels)"
    counting.reset()
    monkeypatch.setattr(kernels, "MODULE", counting)
    compiled = run()
    assert counting.ran, "the compiled run called no kernel: it ran the numpy code"
    refused = dict(counting.refused)
    assert not refused, f"kernels declined their arrays (numpy ran instead): {refused}"
    monkeypatch.setattr(kernels, "MODULE", None)
    reference = run()
    monkeypatch.setattr(kernels, "MODULE", COMPILED)
    return compiled, reference


def labeled_stream(n: int, d: int, seed: int, task: str = "classification") -> tuple[FloatArray, FloatArray]:
    """Features on different scales with a flip half-way, a huge row and a NaN row among them."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.geomspace(0.1, 100.0, d)
    score = X / np.geomspace(0.1, 100.0, d) @ rng.normal(size=d)
    y = np.where(score > 0, 1.0, -1.0) if task == "classification" else score + 0.1 * rng.normal(size=n)
    y[n // 2 :] *= -1
    X[n // 3] = 1e200  # skipped for its size
    X[n // 3 + 1, 0] = np.nan  # skipped: not finite
    return X, y


def learner_state(learner: IncrementalLearner) -> dict[str, Any]:
    """A learner's weights, counts, P (forgetting Newton) and standardiser, as copies."""
    state: dict[str, Any] = {"w": learner.w.copy(), "skipped": learner.n_skipped, "n": learner.n_learned}
    if isinstance(learner, ForgettingNewton):
        state["P"] = learner.P.copy()
    if learner.scaler is not None:
        state["mean"], state["var"] = learner.scaler.mean.copy(), learner.scaler.var.copy()
        state["scaler_n"] = learner.scaler.n
    return state


def task_of(name: str) -> str:
    """The task of a learner configuration named for its loss ("... squared ..." learners regress)."""
    return "regression" if name.endswith(" squared") or "squared no" in name else "classification"
