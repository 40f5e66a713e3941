"""Recompute triggers: the bound monitors (DRUiD, PredSign) and the baselines."""

from edgedrift.monitors.base import Monitor, NeverMonitor, PeriodicMonitor
from edgedrift.monitors.druid import DruidMonitor, DruidPaperMonitor, chi_scale_mle
from edgedrift.monitors.error_driven import ErrorDrivenMonitor
from edgedrift.monitors.gradient import BoundMonitor, DeltaG
from edgedrift.monitors.predsign import PredSignMonitor
from edgedrift.monitors.rebalance import RebalanceMonitor

__all__ = [
    "BoundMonitor",
    "DeltaG",
    "DruidMonitor",
    "DruidPaperMonitor",
    "ErrorDrivenMonitor",
    "Monitor",
    "NeverMonitor",
    "PeriodicMonitor",
    "PredSignMonitor",
    "RebalanceMonitor",
    "chi_scale_mle",
]
