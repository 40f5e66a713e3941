"""Named strategies: a monitor, an incremental learner and a prediction policy around the one EdgeLoop.

The offline evaluator and the edge agent both build their loop here, from a :class:`Context` (the
stream's shape, the batch trainer — in-process for the evaluator, the cloud over HTTP for the agent —
and the first window's labeled data) and one value of the strategy's trade-off parameter, so a deployed
run and a replay with the same parameters make the same predictions and the same recomputes.

* :mod:`~edgedrift.strategies.catalogue`: :data:`STRATEGIES` and :class:`Strategy`;
* :mod:`~edgedrift.strategies.tuning`: the learners a strategy names and their first-window tuning
  (C and every learner hyper-parameter that is not a documented default are chosen on the first
  window only; the scored part of the stream is never looked at);
* :mod:`~edgedrift.strategies.train_spec`: :class:`TrainSpec`, what a recompute asks the cloud for;
* :mod:`~edgedrift.strategies.context`: :class:`Context`.

Examples
--------
>>> from edgedrift.strategies import STRATEGIES
>>> [name for name, s in STRATEGIES.items() if s.edgedrift][:3]
['druid', 'druid-rmsprop', 'newton']
>>> STRATEGIES["shrub-ensemble"].train
TrainSpec(learner='shrub', params={'max_depth': 8}, rebalance='none', return_base=False)
"""

# The catalogue of built-in and entry-point strategies (group edgedrift.strategies), by name.
from edgedrift.adapters.entry_points import get_strategy, strategy_catalogue
from edgedrift.loop import Runner
from edgedrift.strategies.catalogue import (
    ADWIN_DELTA,
    ADWIN_GRID,
    DDM_GRID,
    DDM_LEVEL,
    DRUID_GRID,
    EDDM_GRID,
    EDDM_LEVEL,
    STRATEGIES,
    Build,
    Strategy,
)
from edgedrift.strategies.context import Context
from edgedrift.strategies.train_spec import LINEAR, LOSS_LEARNER, REBALANCE_TREE, SHRUB, TrainSpec
from edgedrift.strategies.tuning import (
    LEARNERS,
    LearnerFactory,
    make_learner,
    prequential_score,
    tune_learner,
)

__all__ = [
    "ADWIN_DELTA",
    "ADWIN_GRID",
    "DDM_GRID",
    "DDM_LEVEL",
    "DRUID_GRID",
    "EDDM_GRID",
    "EDDM_LEVEL",
    "LEARNERS",
    "LINEAR",
    "LOSS_LEARNER",
    "REBALANCE_TREE",
    "SHRUB",
    "STRATEGIES",
    "Build",
    "Context",
    "LearnerFactory",
    "Runner",
    "Strategy",
    "TrainSpec",
    "get_strategy",
    "make_learner",
    "prequential_score",
    "strategy_catalogue",
    "tune_learner",
]
