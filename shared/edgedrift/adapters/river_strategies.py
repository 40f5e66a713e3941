"""river learners and detectors as named strategies (the ``river`` extra).

:func:`river_learner_strategy` makes any river classifier or regressor the edge learner (re-anchored by
every recompute, see :mod:`edgedrift.adapters.river_learner`), :func:`river_detector_strategy` any
``river.drift`` detector instance the recompute trigger. edgedrift-core registers four of them under the
entry-point group ``edgedrift.strategies``, so the agent and the evaluator know them by name:

* ``river-logreg``: ``StandardScaler | LogisticRegression`` predicts, DRUiD (α) re-anchors it (warm start);
* ``river-hoeffding``: ``HoeffdingTreeClassifier`` predicts, DRUiD (α) resets it and replays the window;
* ``river-page-hinkley``: the batch model predicts, ``PageHinkley(mode="up")`` on its error recomputes
  on the newest 30 labels (its ``min_instances``; see :mod:`edgedrift.adapters.river_monitor` for why
  not the whole window);
* ``river-kswin``: the same with ``KSWIN(alpha=1e-4, seed=0)`` (seeded, so a replay makes the same
  recomputes; river's α = 0.005 raises false alarms on a 0/1 error stream) and its ``stat_size`` of 30.

This module imports river at the top: without the extra, loading these entries fails and the catalogue
(:mod:`edgedrift.adapters.entry_points`) says so when one is asked for.

Examples
--------
>>> from river import drift
>>> s = river_detector_strategy("adwin-001", "ADWIN at delta 0.01", drift.ADWIN(delta=0.01))
>>> s.name, s.classification_only
('adwin-001', False)
"""

from __future__ import annotations

from typing import Any

from river import drift, linear_model, preprocessing, tree

from edgedrift.adapters.builders import MonitorFactory, druid_monitor, learner_strategy, monitor_strategy
from edgedrift.adapters.river_learner import RiverLearner
from edgedrift.adapters.river_monitor import RiverDriftMonitor
from edgedrift.strategies.catalogue import Strategy

__all__ = [
    "river_detector_strategy",
    "river_hoeffding",
    "river_kswin",
    "river_learner_strategy",
    "river_logreg",
    "river_page_hinkley",
]


def river_learner_strategy(
    name: str,
    description: str,
    model: Any,
    monitor: MonitorFactory = druid_monitor,
    classification_only: bool = False,
) -> Strategy:
    """``model`` (an untrained river estimator, cloned per stream) predicts; ``monitor`` re-anchors it."""
    return learner_strategy(
        name,
        description,
        lambda ctx: RiverLearner(model, ctx.n_features, ctx.task, ctx.window_labels),
        monitor,
        classification_only=classification_only,
    )


def river_detector_strategy(name: str, description: str, detector: Any, last: int | None = None) -> Strategy:
    """The batch model predicts; a fresh clone of ``detector`` watches its error and calls recomputes on
    the window (or its newest ``last`` samples)."""
    return monitor_strategy(name, description, lambda ctx: RiverDriftMonitor(detector, last))


river_logreg = river_learner_strategy(
    "river-logreg",
    "river StandardScaler | LogisticRegression as the edge learner, warm-started by DRUiD's recomputes",
    preprocessing.StandardScaler() | linear_model.LogisticRegression(),
    classification_only=True,
)
river_hoeffding = river_learner_strategy(
    "river-hoeffding",
    "river HoeffdingTreeClassifier as the edge learner, reset and replayed on DRUiD's recomputes",
    tree.HoeffdingTreeClassifier(),
    classification_only=True,
)
river_page_hinkley = river_detector_strategy(
    "river-page-hinkley",
    "river PageHinkley (mode up) on the batch model's error; a drift recomputes on the newest 30 labels",
    drift.PageHinkley(mode="up"),
    last=30,
)
river_kswin = river_detector_strategy(
    "river-kswin",
    "river KSWIN (alpha 1e-4, seed 0) on the batch model's error; a drift recomputes on the newest 30 labels",
    drift.KSWIN(alpha=1e-4, seed=0),
    last=30,
)
