"""Adapters to the ecosystem: river learners and detectors, scikit-learn models, ONNX, entry points.

* :mod:`~edgedrift.adapters.river_learner`: any river classifier or regressor as the edge learner;
* :mod:`~edgedrift.adapters.river_monitor`: any ``river.drift`` detector instance as a monitor;
* :mod:`~edgedrift.adapters.river_strategies`: both as named strategies (needs the ``river`` extra);
* :mod:`~edgedrift.adapters.river_compat`: the other way round, EdgeDrift's learners as river estimators;
* :mod:`~edgedrift.adapters.river_spec`: a river model's class and parameters, for checkpoints;
* :mod:`~edgedrift.adapters.builders`: a strategy from your own learner or monitor;
* :mod:`~edgedrift.adapters.entry_points`: strategies registered by other packages, by name;
* :mod:`~edgedrift.adapters.sklearn`: linear models and shrubs to and from scikit-learn estimators;
* :mod:`~edgedrift.adapters.onnx`: ONNX export (the ``onnx`` extra).

Importing this package imports neither river nor scikit-learn: each adapter imports its library when used.
"""

from edgedrift.adapters.builders import learner_strategy, monitor_strategy
from edgedrift.adapters.entry_points import GROUP, StrategyCatalogue, get_strategy, strategy_catalogue
from edgedrift.adapters.river_learner import RiverLearner
from edgedrift.adapters.river_monitor import RiverDriftMonitor

__all__ = [
    "GROUP",
    "RiverDriftMonitor",
    "RiverLearner",
    "StrategyCatalogue",
    "get_strategy",
    "learner_strategy",
    "monitor_strategy",
    "strategy_catalogue",
]
