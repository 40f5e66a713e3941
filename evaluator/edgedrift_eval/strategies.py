"""Strategies the evaluator compares: EdgeDrift's own and the paper's (from :mod:`edgedrift.strategies`,
the same builders the edge agent uses), plus the river peers and the evaluator's first-window tuning."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from edgedrift.adapters.entry_points import strategy_catalogue
from edgedrift.models.losses import FloatArray, Task
from edgedrift.strategies import LEARNERS, Context, Runner, Strategy, TrainSpec, make_learner
from edgedrift.training.linear import LinearTrainer, tune_C
from edgedrift.training.recompute import spec_trainer
from edgedrift.training.retune import HistoryRetuner

__all__ = [
    "LEARNERS",
    "STRATEGIES",
    "Context",
    "Runner",
    "Strategy",
    "expand",
    "make_context",
    "make_learner",
    "spec_trainer",
]

#: The built-in strategies and those registered under the ``edgedrift.strategies`` entry points.
STRATEGIES = strategy_catalogue()


def make_context(
    X0: FloatArray,
    y0: FloatArray,
    task: Task,
    window_labels: int,
    loss: str | None = None,
    C: float | None = None,
    train: TrainSpec | None = None,
    n_classes: int = 2,
) -> Context:
    """Tune C on the first window's labeled samples (blocked CV over a wide grid) and build a Context.

    ``train`` is the strategy's recompute spec: linear models train with :class:`LinearTrainer`, other
    learners (shrubs, rebalancing) through the cloud's own entry point (:func:`spec_trainer`), the first
    model without rebalancing. Re-tuning strategies get the cloud's search in process
    (:class:`~edgedrift.training.retune.HistoryRetuner`). ``n_classes`` ≥ 3: the labels are the codes
    0..C−1 and every batch model is one-vs-rest.

    The tuned C and the learners' first-window tunings are remembered per first window (its labels, the
    stream's shape) in this process: a sweep builds a context per run, and the runs of one label offset
    would repeat the same searches (with 40 classes tune_C alone is about a CPU second per run).
    """
    loss = loss or ("logistic" if task == "classification" else "squared")
    classes = n_classes if task == "classification" and n_classes > 2 else None
    trainer = LinearTrainer(loss=loss, n_classes=classes)
    key = _first_window_key(X0, y0, task, window_labels, loss, n_classes)
    if C is None:
        C = _remembered(_TUNED_C, key, lambda: tune_C(X0, y0, trainer).best_C)
    ctx = Context(X0.shape[1], task, loss, window_labels, C, trainer.with_C(C), X0, y0, n_classes=n_classes)
    ctx.tuned = _remembered(_TUNINGS, (key, C), dict)
    batch = trainer.with_C(C)
    ctx.retune = lambda channel, learner: HistoryRetuner(
        channel, learner, batch, loss, task, window_labels=window_labels
    )
    if train is not None and train.learner is not None:
        ctx.recompute = spec_trainer(train, task, n_classes=classes)
        ctx.initial = spec_trainer(TrainSpec(train.learner, train.params), task, "initial", n_classes=classes)
    return ctx


def expand(names: list[str]) -> list[str]:
    """Resolve group names: ``river`` = river peers, ``peers`` = paper baselines, ``all``."""
    from edgedrift_eval.peers import RIVER_PEERS

    groups = {
        "river": list(RIVER_PEERS),
        "edgedrift": [s.name for s in STRATEGIES.values() if s.edgedrift],
        "all": list(STRATEGIES) + list(RIVER_PEERS),
    }
    out: list[str] = []
    for name in names:
        for item in groups.get(name, [name]):
            if item not in STRATEGIES and item not in RIVER_PEERS:
                known = sorted([*STRATEGIES, *RIVER_PEERS, *groups])
                raise ValueError(f"unknown strategy {item!r}; known: {', '.join(known)}")
            if item not in out:
                out.append(item)
    return out


#: How many first windows (label offsets of a sweep) a process remembers the tunings of.
_REMEMBERED = 32
_TUNED_C: OrderedDict[bytes, float] = OrderedDict()
_TUNINGS: OrderedDict[tuple[bytes, float], dict[str, dict[str, float]]] = OrderedDict()
_K = TypeVar("_K")
_V = TypeVar("_V")


def _first_window_key(
    X0: FloatArray, y0: FloatArray, task: Task, window_labels: int, loss: str, n_classes: int
) -> bytes:
    """A digest of everything a first-window tuning depends on: the labels and the stream's shape."""
    h = hashlib.sha256(repr((X0.shape, str(X0.dtype), task, window_labels, loss, n_classes)).encode())
    h.update(np.ascontiguousarray(X0).tobytes())
    h.update(np.ascontiguousarray(y0).tobytes())
    return h.digest()


def _remembered(memo: OrderedDict[_K, _V], key: _K, make: Callable[[], _V]) -> _V:
    """``memo[key]``, made by ``make()`` when new; the least recently used entries beyond
    :data:`_REMEMBERED` are dropped."""
    if key not in memo:
        memo[key] = make()
    memo.move_to_end(key)
    while len(memo) > _REMEMBERED:
        memo.popitem(last=False)
    return memo[key]
