"""Every strategy's parameter has an explicit default inside its grid, and None means that default."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pytest

from edgedrift.data import sine1plus
from edgedrift.state import dumps
from edgedrift.strategies import STRATEGIES, Context, Strategy
from edgedrift.training.linear import LinearTrainer
from edgedrift.training.retune import HistoryRetuner

PARAMETRISED = sorted(name for name, s in STRATEGIES.items() if s.param is not None)


def structure(obj: object) -> tuple[Any, dict[str, tuple[str, tuple[int, ...]]]]:
    """The snapshot's object tree (classes, scalar attributes) and the dtype and shape of every array.

    Array contents are left out: freshly built windows hold uninitialised buffers.
    """
    with np.load(io.BytesIO(dumps(obj)), allow_pickle=False) as npz:
        doc = json.loads(npz["__state__"].tobytes())
        arrays = {k: (str(npz[k].dtype), npz[k].shape) for k in npz.files if k != "__state__"}
    return doc["root"], arrays


@pytest.mark.parametrize("name", PARAMETRISED)
def test_default_lies_in_the_grid(name: str) -> None:
    s = STRATEGIES[name]
    assert s.default is not None and s.grid
    assert min(s.grid) <= s.default <= max(s.grid)


def test_a_default_exactly_when_there_is_a_param() -> None:
    for s in STRATEGIES.values():
        assert (s.param is None) == (s.default is None), s.name
    with pytest.raises(ValueError, match="default"):
        Strategy("x", "x", lambda ctx, v: None, "p", (1.0,))  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize("name", PARAMETRISED)
def test_building_with_none_equals_building_with_the_default(name: str) -> None:
    s = sine1plus(d=2, concept_length=200, n_concepts=1, seed=0)
    ctx = Context(
        2, "classification", "logistic", 50, 10.0, LinearTrainer("logistic", 10.0), s.X[:50], s.y[:50]
    )
    ctx.retune = lambda channel, learner: HistoryRetuner(
        channel, learner, ctx.recompute, "logistic", "classification"
    )
    strategy = STRATEGIES[name]
    with_none = strategy.build(ctx, None)
    with_default = strategy.build(ctx, strategy.default)
    assert structure(with_none) == structure(with_default)
    other = max(strategy.grid, key=lambda v: v != strategy.default)
    assert structure(strategy.build(ctx, other)) != structure(with_default)
