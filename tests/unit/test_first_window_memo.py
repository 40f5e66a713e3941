"""The evaluator's memo of first-window tunings (``make_context``): the runs of one label offset share the
tuned C and the learners' first-window searches, which give what a fresh search gives; another offset's
first window gets its own."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import edgedrift.strategies.retuned as retuned
import edgedrift.strategies.tuning as tuning
import edgedrift_eval.strategies as evaluator_strategies
from edgedrift.data import sine1plus
from edgedrift.strategies import Context, make_learner
from edgedrift.strategies.retuned import first_window_params
from edgedrift_eval.protocol import Protocol
from edgedrift_eval.runner import RunSpec, run_one
from edgedrift_eval.strategies import make_context


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls = [0]
    original = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _window(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X0 = rng.normal(size=(200, 3))
    return X0, np.where(X0[:, 0] - 0.5 * X0[:, 1] > 0, 1.0, -1.0)


def test_contexts_of_one_first_window_share_c_and_the_tunings(monkeypatch: pytest.MonkeyPatch) -> None:
    c_calls = _counting(monkeypatch, evaluator_strategies, "tune_C")
    one_calls = _counting(monkeypatch, tuning, "tune_learner")
    grid_calls = _counting(monkeypatch, retuned, "grid_scores")
    X0, y0 = _window(seed=11)
    first = make_context(X0, y0, "classification", 200)
    make_learner("newton", first)
    all_params = first_window_params("rmsprop", first)
    assert (c_calls[0], one_calls[0], grid_calls[0]) == (1, 1, 1)

    again = make_context(X0.copy(), y0.copy(), "classification", 200)  # another run of the same offset
    assert again.C == first.C and again.learner_params == {}  # a run reports only what it used
    make_learner("newton", again)
    assert first_window_params("rmsprop", again) == all_params
    assert (c_calls[0], one_calls[0], grid_calls[0]) == (1, 1, 1)
    assert again.learner_params == first.learner_params

    fresh = Context(3, "classification", "logistic", 200, first.C, first.recompute, X0, y0)  # not shared
    assert tuning.tune_learner("newton", fresh) == again.learner_params["newton"]
    assert first_window_params("rmsprop", fresh) == all_params

    other = make_context(*_window(seed=12), "classification", 200)  # another offset's first window
    make_learner("newton", other)
    assert (c_calls[0], one_calls[0]) == (2, 3)


def test_runs_give_the_same_rows_with_the_tunings_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = sine1plus(concept_length=1500, n_concepts=2, seed=3)
    protocol = Protocol(window=1000)
    spec = RunSpec("newton-tuned", None, 4)
    first = run_one(stream, protocol, spec, curves=True)
    grid_calls = _counting(monkeypatch, retuned, "grid_scores")
    second = run_one(stream, protocol, spec, curves=True)
    assert grid_calls[0] == 0  # the second run took the first's search
    assert first.predictions is not None and second.predictions is not None
    np.testing.assert_array_equal(first.predictions, second.predictions)
    assert first.learner_params == second.learner_params and first.C == second.C
    assert first.metrics["accuracy"] > 0.6
