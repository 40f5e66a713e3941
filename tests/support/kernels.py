"""The compiled kernels (edgedrift.kernels) against the numpy code in tests: the switch between the two
paths and the streams and states the kernel tests compare."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from edgedrift import kernels
from edgedrift.learners import ForgettingNewton, IncrementalLearner
from edgedrift.models.losses import FloatArray

__all__ = ["COMPILED", "both_paths", "labeled_stream", "learner_state", "needs_kernels", "task_of"]

COMPILED = kernels.MODULE
needs_kernels = pytest.mark.skipif(COMPILED is None, reason="edgedrift._kernels not built")


def both_paths(run: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """``run()`` with the kernels, then with the numpy code."""
    compiled = run()
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
